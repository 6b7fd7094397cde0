"""The OpenAPI 3.1 document, generated from the wire models (JSON Schema 2020-12)."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from api import schemas as s
from api.live import DOWNLOAD_TYPES
from sink import __version__, ids

_MODELS: list[type[BaseModel]] = [
    s.CreateInboxIn,
    s.WaitIn,
    s.ClaimIn,
    s.FaultIn,
    s.RunTokenIn,
    s.RunTokenOut,
    s.EnvelopeOut,
    s.CreatedOut,
    s.ErrorOut,
    s.RefusalOut,
    s.TroubleOut,
    s.MessageListOut,
    s.MessageOut,
    s.RunReportOut,
    s.UnroutedOut,
    s.CaughtMessageOut,
    s.SearchOut,
    s.FaultOut,
    s.FaultListOut,
    s.HealthOut,
    s.ReadyOut,
]

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


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(name: str, description: str, example: Any = None) -> dict[str, Any]:
    media: dict[str, Any] = {"schema": _ref(name)}
    if example is not None:
        media["example"] = example
    return {"description": description, "content": {"application/json": media}}


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


def _errors(*codes: str) -> dict[str, Any]:
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
                        "schema": {"anyOf": [_ref("TroubleOut"), _ref("ErrorOut")]},
                        "example": example,
                    }
                },
            }
            continue
        responses[code] = _json("ErrorOut", _ERRORS[code], example)
    return responses


_TROUBLE = {
    "status": "retryable",
    "reason": "provider_timeout",
    "next_action": "wait_then_retry",
    "retry_after": 1.0,
    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
}


def _body(name: str, example: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {
        "required": required,
        "content": {"application/json": {"schema": _ref(name), "example": example}},
    }


_ENVELOPE_EXAMPLE = {
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


def _calling_run(name: str, where: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": False,
        "description": description,
        "schema": {"type": "string", "pattern": ids.anchored(ids.RUN_ID)},
    }


_RUN_HEADER = _calling_run(
    "X-Run-Id",
    "header",
    "The calling run; a run that does not own the resource gets 403 wrong_run.",
)
_RUN_QUERY = _calling_run(
    "run_id", "query", "The calling run, as X-Run-Id (naming it both ways differently is 422)."
)
_TRACE_HEADERS = [
    {"name": "traceparent", "in": "header", "required": False, "schema": {"type": "string"}},
    {"name": "X-Trace-Id", "in": "header", "required": False, "schema": {"type": "string"}},
]


def _path_id(name: str, pattern: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": pattern},
    }


_INBOX = _path_id("inbox_id", ids.anchored(ids.INBOX_ID))
_MESSAGE = _path_id("message_id", ids.anchored(ids.MESSAGE_ID))
_RUN = _path_id("run_id", ids.anchored(ids.RUN_ID))
_CAUGHT = _path_id("caught_id", ids.anchored(ids.CAUGHT_ID))
_ATTACHMENT_INDEX = {
    "name": "index",
    "in": "path",
    "required": True,
    "schema": {"type": "integer", "minimum": 0},
}


def _attachment_download(
    operation_id: str, parameters: list[dict[str, Any]], refusal: dict[str, Any]
) -> dict[str, Any]:
    """``GET .../attachments/{index}``: the same download for evidence and caught mail."""
    return {
        "operationId": operation_id,
        "summary": "Download one attachment (index is 0-based into `attachments`)",
        "description": (
            "Always `Content-Disposition: attachment` with a safe filename (no control, "
            "bidi or zero-width characters, raw or percent-encoded) and "
            "`X-Content-Type-Options: nosniff`. Types a browser would run or render "
            "(HTML, SVG, XML, JavaScript, anything unknown) are served as "
            "`application/octet-stream`."
        ),
        "parameters": parameters,
        "responses": {
            "200": {
                "description": "the attachment's decoded bytes",
                "headers": {
                    "Content-Disposition": {"schema": {"type": "string", "pattern": "^attachment;"}}
                },
                "content": {
                    kind: {"schema": {"type": "string", "format": "binary"}}
                    for kind in DOWNLOAD_TYPES
                },
            },
            **refusal,
            **_errors("401", "404", "410", "422", "503"),
        },
    }


_LIMIT = {
    "name": "limit",
    "in": "query",
    "required": False,
    "schema": {"type": "integer", "minimum": 1, "maximum": 500},
}
_CURSOR = {
    "name": "cursor",
    "in": "query",
    "required": False,
    "schema": {"type": "string", "maxLength": 128},
}


def _envelope(description: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    responses = {"200": _json("EnvelopeOut", description, _ENVELOPE_EXAMPLE)}
    responses.update(extra or {})
    return responses


def _paths() -> dict[str, Any]:
    # 403 on a call that names a run: wrong_run (an envelope refusal) when the named run
    # does not own the inbox or message, forbidden_scope when the token may not do it.
    refusal = {
        "403": {
            "description": "wrong_run (RefusalOut): the named run does not own this; or "
            "forbidden_scope (ErrorOut): the token's scope does not allow this call",
            "content": {
                "application/json": {
                    "schema": {"anyOf": [_ref("RefusalOut"), _ref("ErrorOut")]},
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
    return {
        "/v1/inboxes": {
            "post": {
                "operationId": "create_inbox",
                "summary": "Create (or replay) a leased inbox for one run and purpose",
                "parameters": [
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "required": False,
                        "description": "Default: purpose:run_id. Same key + same body replays.",
                        "schema": {"type": "string", "pattern": ids.anchored(ids.IDEMPOTENCY_KEY)},
                    },
                    *_TRACE_HEADERS,
                ],
                "requestBody": _body(
                    "CreateInboxIn",
                    {
                        "run_id": "ci-1842",
                        "purpose": "signup-check",
                        "match": {"subject_contains": "confirm"},
                    },
                ),
                "responses": {
                    "201": _json(
                        "CreatedOut", "created; `capped` names the values the policy lowered"
                    ),
                    "200": _json(
                        "CreatedOut", "replay of a live inbox (Idempotent-Replayed: true)"
                    ),
                    **_errors("400", "401", "403", "409", "413", "422"),
                },
            }
        },
        "/v1/inboxes/{inbox_id}": {
            "get": {
                "operationId": "get_inbox",
                "summary": "The envelope as of now (spends no budget, never scans)",
                "parameters": [_INBOX, *_TRACE_HEADERS],
                "responses": _envelope("the inbox's envelope", _errors("401", "403", "404")),
            }
        },
        "/v1/inboxes/{inbox_id}/wait": {
            "post": {
                "operationId": "wait_for_message",
                "summary": "Long-poll for a matching message beyond the cursor (spends one poll)",
                "parameters": [_INBOX, _RUN_HEADER, _RUN_QUERY, *_TRACE_HEADERS],
                "requestBody": _body(
                    "WaitIn",
                    {"timeout_s": 30, "match": {"subject_contains": "reset"}},
                    required=False,
                ),
                "responses": _envelope(
                    "waiting, received, expired, too_early, circuit_open or provider trouble",
                    {**refusal, **_errors("400", "401", "404", "413", "422", "503")},
                ),
            }
        },
        "/v1/inboxes/{inbox_id}/messages": {
            "get": {
                "operationId": "list_messages",
                "summary": "The inbox's deliveries after a cursor, oldest first",
                "parameters": [
                    _INBOX,
                    _RUN_HEADER,
                    _RUN_QUERY,
                    {
                        "name": "after",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string"},
                    },
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 1, "maximum": 500},
                    },
                ],
                "responses": {
                    "200": _json("MessageListOut", "a page of messages"),
                    **refusal,
                    **_errors("400", "401", "404", "422"),
                },
            }
        },
        "/v1/messages/{message_id}": {
            "get": {
                "operationId": "read_message",
                "summary": "Read a message (consumes nothing)",
                "parameters": [_MESSAGE, _RUN_HEADER, _RUN_QUERY, *_TRACE_HEADERS],
                "responses": {
                    "200": _json("MessageOut", "the message; bodies are null after release"),
                    **refusal,
                    **_errors("401", "404", "422", "503"),
                },
            }
        },
        "/v1/messages/{message_id}/raw": {
            "get": {
                "operationId": "raw_message",
                "summary": "The exact bytes received (after dot-unstuffing)",
                "parameters": [_MESSAGE, _RUN_HEADER, _RUN_QUERY],
                "responses": {
                    "200": {
                        "description": "the raw message",
                        "content": {"message/rfc822": {"schema": {"type": "string"}}},
                    },
                    **refusal,
                    **_errors("401", "404", "410", "422", "503"),
                },
            }
        },
        "/v1/messages/{message_id}/attachments/{index}": {
            "get": _attachment_download(
                "download_attachment",
                [_MESSAGE, _ATTACHMENT_INDEX, _RUN_HEADER, _RUN_QUERY],
                refusal,
            )
        },
        "/v1/messages/{message_id}/claim": {
            "post": {
                "operationId": "claim_message",
                "summary": "Consume a message once, for its run",
                "parameters": [_MESSAGE, *_TRACE_HEADERS],
                "requestBody": _body(
                    "ClaimIn",
                    {"run_id": "ci-1842"},
                ),
                "responses": {
                    "200": _json("EnvelopeOut", "claimed, or already claimed by this run"),
                    "409": {
                        "description": "claimed_by_other_run (RefusalOut) or lease_expired",
                        "content": {
                            "application/json": {
                                "schema": {"oneOf": [_ref("RefusalOut"), _ref("EnvelopeOut")]}
                            }
                        },
                    },
                    **refusal,
                    **_errors("401", "404", "413", "422"),
                },
            }
        },
        "/v1/runs/{run_id}": {
            "get": {
                "operationId": "get_run_report",
                "summary": "The run's inboxes and its ordered event log",
                "parameters": [_RUN],
                "responses": {
                    "200": _json("RunReportOut", "the run report"),
                    **_errors("401", "403", "404", "422"),
                },
            },
            "delete": {
                "operationId": "release_run",
                "summary": "Release the run's evidence now (idempotent)",
                "parameters": [_RUN],
                "responses": {"204": {"description": "released"}, **_errors("401", "403", "422")},
            },
        },
        "/v1/runs/{run_id}/token": {
            "post": {
                "operationId": "mint_run_token",
                "summary": "Mint a token limited to this run, until its last lease ends",
                "description": (
                    "The token reaches this run only: its inboxes, mail, report and release, "
                    "over HTTP and MCP. It ends with the run's last live lease, or ttl_s from "
                    "now if sooner; a run with no live inbox gets the lease an inbox created "
                    "now would get. A run token cannot mint another."
                ),
                "parameters": [_RUN, *_TRACE_HEADERS],
                "requestBody": _body("RunTokenIn", {"ttl_s": 600}, required=False),
                "responses": {
                    "201": _json(
                        "RunTokenOut",
                        "the run token (keep it secret: it is shown once)",
                        {
                            "token": "rt1.Y2ktMTg0Mg.1792549800000.(signature)",
                            "run_id": "ci-1842",
                            "expires_at": "2026-10-21T02:30:00.000Z",
                        },
                    ),
                    **_errors("401", "403", "413", "422"),
                },
            }
        },
        "/v1/unrouted": {
            "get": {
                "operationId": "list_unrouted",
                "summary": "Caught mail (any recipient without a live inbox), newest first",
                "parameters": [_LIMIT, _CURSOR],
                "responses": {
                    "200": _json("UnroutedOut", "caught mail"),
                    **_errors("400", "401", "422"),
                },
            }
        },
        "/v1/unrouted/{caught_id}": {
            "get": {
                "operationId": "read_unrouted",
                "summary": "One caught mail, parsed as a message is (no claim)",
                "parameters": [_CAUGHT],
                "responses": {
                    "200": _json("CaughtMessageOut", "the caught mail"),
                    **_errors("401", "404"),
                },
            }
        },
        "/v1/unrouted/{caught_id}/attachments/{index}": {
            "get": _attachment_download(
                "download_unrouted_attachment", [_CAUGHT, _ATTACHMENT_INDEX], {}
            )
        },
        "/v1/unrouted/{caught_id}/raw": {
            "get": {
                "operationId": "raw_unrouted",
                "summary": "The exact bytes of one caught mail",
                "parameters": [_CAUGHT],
                "responses": {
                    "200": {
                        "description": "the raw message",
                        "content": {"message/rfc822": {"schema": {"type": "string"}}},
                    },
                    **_errors("401", "404"),
                },
            }
        },
        "/v1/messages": {
            "get": {
                "operationId": "search_messages",
                "summary": "Search evidence and caught mail, newest first",
                "description": (
                    "Terms (ANDed, case-insensitive, literal substrings of 3+ characters): "
                    'words, "phrases", to:, from:, subject:, run:, inbox:, is:caught, '
                    "is:claimed, is:unclaimed, has:attachment, before:, after:, larger:, "
                    "smaller:; -term negates. With X-Run-Id: only that run's inboxes."
                ),
                "parameters": [
                    {
                        "name": "query",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string", "maxLength": 512},
                    },
                    _LIMIT,
                    _CURSOR,
                    _RUN_HEADER,
                    _RUN_QUERY,
                ],
                "responses": {
                    "200": _json("SearchOut", "the matching messages"),
                    **_errors("400", "401", "403", "422"),
                },
            }
        },
        "/v1/events": {
            "get": {
                "operationId": "live_events",
                "summary": "Live events: a Server-Sent Events stream (the web UI reads it too)",
                "description": (
                    "One JSON object per `data:` line; the SSE `event:` field is the type: "
                    "`message` `{message_id, inbox_id, run_id, caught, subject, received_at}` "
                    "(sent only after the message's 250), `inbox` `{inbox_id, run_id, state, "
                    "reason}` after every event that may change an inbox's state, `run_event` "
                    "(an entry of the run report, plus its `run_id`), and `resync` "
                    "`{last_event_id}` when events were missed (an unknown or too old "
                    "`Last-Event-ID`, or a reader that fell more than 65536 events behind): "
                    "reload your state. Every event has an `id:` to resume from with "
                    "`Last-Event-ID` (the last 10 minutes are kept). A comment line every 15 s."
                ),
                "parameters": [
                    {
                        "name": "run_id",
                        "in": "query",
                        "required": False,
                        "description": "Only this run's events (caught mail has no run).",
                        "schema": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"},
                    },
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "the stream (it does not end until the client leaves)",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    **_errors("401", "422"),
                },
            }
        },
        "/v1/faults": {
            "post": {
                "operationId": "add_fault",
                "summary": "Inject a fault (only with --enable-faults)",
                "requestBody": _body(
                    "FaultIn",
                    {"target": "wait", "mode": "timeout", "count": 2, "run_id": "ci-1842"},
                ),
                "responses": {
                    "201": _json("FaultOut", "the fault"),
                    **_errors("401", "403", "404", "413", "422"),
                },
            },
            "get": {
                "operationId": "list_faults",
                "summary": "The injected faults",
                "responses": {
                    "200": _json("FaultListOut", "the faults"),
                    **_errors("401", "403", "404"),
                },
            },
            "delete": {
                "operationId": "clear_faults",
                "summary": "Clear every injected fault",
                "responses": {"204": {"description": "cleared"}, **_errors("401", "403", "404")},
            },
        },
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "summary": "Liveness",
                "responses": {"200": _json("HealthOut", "alive")},
            }
        },
        "/readyz": {
            "get": {
                "operationId": "readyz",
                "summary": "Readiness (the store can commit)",
                "responses": {
                    "200": _json("ReadyOut", "ready"),
                    "503": _json(
                        "ReadyOut", "not ready", {"status": "unavailable", "store": "unavailable"}
                    ),
                },
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics",
                "responses": {
                    "200": {
                        "description": "text exposition format",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document",
                "responses": {
                    "200": {
                        "description": "OpenAPI 3.1",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            }
        },
    }


def openapi_document() -> dict[str, Any]:
    """The document, a fresh copy each call: callers (schemathesis, say) may change theirs."""
    return copy.deepcopy(_document())


@cache
def _document() -> dict[str, Any]:
    _, definitions = models_json_schema(
        [
            (model, "serialization" if model.__name__.endswith("Out") else "validation")
            for model in _MODELS
        ],
        ref_template="#/components/schemas/{model}",
    )
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "runsink",
            "version": __version__,
            "description": (
                "An SMTP sink with run-scoped, leased inboxes. Every agent-facing answer is an "
                "envelope with an explicit state, status and next_action."
            ),
        },
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "paths": _paths(),
        "components": {
            "schemas": definitions.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
