"""How an endpoint is documented: the words of its OpenAPI operation, as plain data.

An endpoint's row (``api/endpoints.py``) carries a ``Doc``: its operationId, summary,
parameters, request body, answers and error statuses. Wire models are named, never
imported (``Body("CreateInboxIn", ...)``, ``json_reply("CreatedOut", ...)``): the names
are resolved in ``api/schemas.py`` when ``/openapi.json`` is first asked
(``api/openapi.py``), so the table costs no pydantic at start-up. The fragments the
operations share (path ids, the calling run, trace headers, the error examples) are here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sink import ids
from sink.scopes import Access, Op

Fragment = Mapping[str, Any]
"""A piece of OpenAPI 3.1, as written in the document."""


@dataclass(frozen=True, slots=True)
class Body:
    """The request body: a wire model of ``api/schemas.py`` by name, with an example."""

    schema: str
    example: Fragment
    required: bool = True

    def fragment(self) -> dict[str, Any]:
        return {
            "required": self.required,
            "content": {"application/json": {"schema": ref(self.schema), "example": self.example}},
        }


@dataclass(frozen=True, slots=True)
class Doc:
    """An endpoint's OpenAPI operation.

    ``answers`` are its successful (and endpoint-specific) responses by status; ``refusal``
    adds the 403 of a call that names a run; ``errors`` the shared error statuses, each
    with its example (``errors()``); 401 and 403 also follow from the row's scope.
    """

    operation_id: str
    summary: str
    answers: Mapping[str, Fragment]
    errors: tuple[str, ...] = ()
    parameters: tuple[Fragment, ...] = ()
    body: Body | None = None
    description: str | None = None
    refusal: bool = False

    def operation(self, op: Op | None) -> dict[str, Any]:
        """The OpenAPI operation of an endpoint whose scope operation is ``op``: a token's
        401 and a scope's 403 follow from it (an open endpoint has neither; one any token
        may call, no 403), whether the row names them or not."""
        codes = set(self.errors)
        if op is not None:
            codes.add("401")
            if op.access is not Access.ANY and not self.refusal:
                codes.add("403")
        operation: dict[str, Any] = {"operationId": self.operation_id, "summary": self.summary}
        if self.description is not None:
            operation["description"] = self.description
        if self.parameters:
            operation["parameters"] = list(self.parameters)
        if self.body is not None:
            operation["requestBody"] = self.body.fragment()
        operation["responses"] = {
            **self.answers,
            **(REFUSAL if self.refusal else {}),
            **errors(*sorted(codes)),
        }
        return operation


@dataclass(frozen=True, slots=True)
class Unlisted:
    """An endpoint deliberately absent from ``/openapi.json``, and why (it is documented
    elsewhere: the Mailpit-compatible API, the web UI's pages, the MCP transport)."""

    why: str
    elsewhere: tuple[str, ...] = field(default=())


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def json_reply(name: str, description: str, example: Any = None) -> dict[str, Any]:
    """A JSON answer of the wire model ``name``."""
    media: dict[str, Any] = {"schema": ref(name)}
    if example is not None:
        media["example"] = example
    return {"description": description, "content": {"application/json": media}}


def text_reply(description: str, media_type: str) -> dict[str, Any]:
    """An answer that is a string of ``media_type`` (raw mail, metrics, a stream)."""
    return {"description": description, "content": {media_type: {"schema": {"type": "string"}}}}


def empty_reply(description: str) -> dict[str, Any]:
    return {"description": description}


# -- errors ---------------------------------------------------------------------------------

_ERRORS = {
    "400": "invalid_cursor or unknown_policy",
    "401": "unauthorized (when the server has tokens: a missing, wrong or expired one)",
    "403": "forbidden_scope: the token's scope does not allow this; details.needed names one "
    "that would",
    "404": "not_found",
    "409": "idempotency_key_conflict or policy_forbids",
    "410": "evidence_released",
    "413": "the request body is too large",
    "422": "invalid_request",
    "503": (
        "provider_timeout, provider_error, circuit_open, or over_capacity (too many connections "
        "or waits in progress), with Retry-After"
    ),
}

_ERROR_EXAMPLES = {
    "400": ("invalid_cursor", "cursor is not one this server issued"),
    "401": ("unauthorized", "wrong bearer token"),
    "403": ("forbidden_scope", "this token's scope (runs:team-a-*) does not allow report"),
    "404": ("not_found", "no inbox 'ib_abcdefghijklmnopqrst'"),
    "409": ("policy_forbids", "policy 'ci' allows 3 inbox(es) per purpose for a run"),
    "410": ("evidence_released", "message msg_...: its body was released"),
    "413": ("invalid_request", "the request body is over 1048576 bytes"),
    "422": ("invalid_request", "run_id: String should match pattern '^[A-Za-z0-9._:-]{1,128}$'"),
    "503": ("provider_timeout", "the store did not answer wait within 2s"),
}

_TROUBLE = {
    "status": "retryable",
    "reason": "provider_timeout",
    "next_action": "wait_then_retry",
    "retry_after": 1.0,
    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
}


def errors(*codes: str) -> dict[str, Any]:
    """The shared error answers of ``codes``, each with an example."""
    responses = {}
    for code in codes:
        error, message = _ERROR_EXAMPLES[code]
        details = {"needed": "runs:team-b-7"} if code == "403" else {}
        example: dict[str, Any] = {"error": {"code": error, "message": message, "details": details}}
        if code == "503":  # provider trouble says what to do, as an envelope would
            example = {**_TROUBLE, **example}
            responses[code] = {
                "description": _ERRORS[code] + "; provider trouble is a TroubleOut",
                "content": {
                    "application/json": {
                        "schema": {"anyOf": [ref("TroubleOut"), ref("ErrorOut")]},
                        "example": example,
                    }
                },
            }
            continue
        responses[code] = json_reply("ErrorOut", _ERRORS[code], example)
    return responses


# 403 on a call that names a run: wrong_run (an envelope refusal) when the named run does
# not own the inbox or message, forbidden_scope when the token may not do it.
REFUSAL = {
    "403": {
        "description": "wrong_run (RefusalOut): the named run does not own this; or "
        "forbidden_scope (ErrorOut): the token's scope does not allow this call",
        "content": {
            "application/json": {
                "schema": {"anyOf": [ref("RefusalOut"), ref("ErrorOut")]},
                "example": {
                    "status": "blocked",
                    "reason": "wrong_run",
                    "next_action": "stop",
                    "retry_after": None,
                    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
                    "error": {
                        "code": "wrong_run",
                        "message": "run 'x' does not own this inbox",
                        "details": {},
                    },
                },
            }
        },
    },
}

# -- answers and parameters several endpoints share ------------------------------------------

ENVELOPE_EXAMPLE = {
    "state": "waiting",
    "status": "retryable",
    "next_action": "wait_for_message",
    "reason": "evidence_not_found",
    "inbox_id": "ib_abcdefghijklmnopqrst",
    "run_id": "ci-1842",
    "purpose": "signup-check",
    "address": "rabcdefghijklmnopqrst@sink.test",
    "expires_at": "2026-10-21T02:30:00.000Z",
    "attempt": 3,
    "remaining_attempts": 9,
    "retry_after": 2.0,
    "next_poll_at": "2026-10-21T02:21:02.000Z",
    "cursor": "c1_aWJfYWJjZGVmZ2hpamtsbW5vcHFyc3QuMA",
    "message": None,
    "claim": None,
    "last_error": None,
    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
}


def envelope(description: str) -> dict[str, Any]:
    """The 200 of an envelope answer."""
    return {"200": json_reply("EnvelopeOut", description, ENVELOPE_EXAMPLE)}


RAW_MESSAGE = {"200": text_reply("the raw message", "message/rfc822")}

# Attachment types served as declared (inert in a browser); every other one is octet-stream.
DOWNLOAD_TYPES = sorted(
    {
        "application/octet-stream",
        "application/pdf",
        "application/zip",
        "application/gzip",
        "application/json",
        "text/plain",
        "text/csv",
        "text/calendar",
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "image/bmp",
        "audio/mpeg",
        "audio/ogg",
        "video/mp4",
        "video/webm",
    }
)

ATTACHMENT_SUMMARY = "Download one attachment (index is 0-based into `attachments`)"
ATTACHMENT_DESCRIPTION = (
    "Always `Content-Disposition: attachment` with a safe filename (no control, "
    "bidi or zero-width characters, raw or percent-encoded) and "
    "`X-Content-Type-Options: nosniff`. Types a browser would run or render "
    "(HTML, SVG, XML, JavaScript, anything unknown) are served as "
    "`application/octet-stream`."
)
ATTACHMENT = {
    "200": {
        "description": "the attachment's decoded bytes",
        "headers": {
            "Content-Disposition": {"schema": {"type": "string", "pattern": "^attachment;"}}
        },
        "content": {
            kind: {"schema": {"type": "string", "format": "binary"}} for kind in DOWNLOAD_TYPES
        },
    }
}


def _calling_run(name: str, where: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": False,
        "description": description,
        "schema": {"type": "string", "pattern": ids.anchored(ids.RUN_ID)},
    }


RUN_HEADER = _calling_run(
    "X-Run-Id",
    "header",
    "The calling run; a run that does not own the resource gets 403 wrong_run.",
)
RUN_QUERY = _calling_run(
    "run_id", "query", "The calling run, as X-Run-Id (naming it both ways differently is 422)."
)
CALLING_RUN = (RUN_HEADER, RUN_QUERY)
TRACE_HEADERS = (
    {"name": "traceparent", "in": "header", "required": False, "schema": {"type": "string"}},
    {"name": "X-Trace-Id", "in": "header", "required": False, "schema": {"type": "string"}},
)


def _path_id(name: str, pattern: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": pattern},
    }


INBOX = _path_id("inbox_id", ids.anchored(ids.INBOX_ID))
MESSAGE = _path_id("message_id", ids.anchored(ids.MESSAGE_ID))
RUN = _path_id("run_id", ids.anchored(ids.RUN_ID))
CAUGHT = _path_id("caught_id", ids.anchored(ids.CAUGHT_ID))
WEBHOOK = _path_id("webhook_id", "^wh_[a-z0-9]{1,64}$")
ATTACHMENT_INDEX = {
    "name": "index",
    "in": "path",
    "required": True,
    "schema": {"type": "integer", "minimum": 0},
}
LIMIT = {
    "name": "limit",
    "in": "query",
    "required": False,
    "schema": {"type": "integer", "minimum": 1, "maximum": 500},
}
CURSOR = {
    "name": "cursor",
    "in": "query",
    "required": False,
    "schema": {"type": "string", "maxLength": 128},
}


# -- webhooks ---------------------------------------------------------------------------------

WEBHOOK_SCOPES = (
    "Scopes: admin any webhook; a runs:<glob> token one whose run_id its glob matches or whose "
    "run_glob starts with the glob's text before its first `*` (and sees only such: any other "
    "is 403 to it); read and run tokens look but never change."
)
WEBHOOK_EXAMPLE = {
    "webhook_id": "wh_pm2xq6mtzzgn6vqhk4wdjnyx",
    "url": "http://127.0.0.1:9000/hooks",
    "events": ["message", "inbox", "run_event"],
    "run_id": "ci-1842",
    "run_glob": None,
    "description": "signup flow",
    "created_at": "2026-10-21T02:20:00.000Z",
    "disabled_at": None,
}
DELIVERIES_EXAMPLE = {
    "deliveries": [
        {
            "delivery_id": "dlv_3od5kfag4udxxju2l6q2tb5z",
            "event_id": "ev_5f1c0a9e2b7d4c8e9f0a1b2c",
            "type": "message",
            "attempt": 2,
            "state": "pending",
            "status_code": 500,
            "error": "http_500",
            "at": "2026-10-21T02:21:01.000Z",
            "next_attempt_at": "2026-10-21T02:21:06.000Z",
        }
    ],
    "next_cursor": None,
    "has_more": False,
}
