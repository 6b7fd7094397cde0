"""Every HTTP endpoint, declared once: method, path, handler, scope operation, documentation.

One row per endpoint (``TABLE`` below). Everything else is derived from it:

- the Starlette routes (``routes()``, for ``create_app``), in the table's order;
- the scope check (``find``: ``api/auth.py`` asks it for the operation of ``sink/scopes.py``
  a request needs, and ``api/calls.py`` for the MCP tool it corresponds to);
- the OpenAPI paths (``api/openapi.py``), as Starlette's ``SchemaGenerator`` derives its
  schema from routes; a row that is ``Unlisted`` says why it is not in the document.

A handler is named (``"api.agent:create_inbox"``), not imported: the modules the handlers
stand on (``api/auth.py``, ``api/calls.py``, ``api/waitpath.py``) read this table, so it
imports no handler; a row's wire models are names too (``api/apidoc.py``), so reading it
costs no pydantic. ``routes()`` resolves the handlers when the app is built; a test
(``tests/test_endpoints.py``) resolves every one.

The run an operation on a run's evidence is about (``Access.RUN``) comes from its path's
first id, whose owner is looked up (an inbox, a message, or the run itself), else from the
body (``create``). ``op=None`` is an open endpoint: no token at all.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from starlette.routing import BaseRoute, Route, compile_path

from api import apidoc as d
from api.apidoc import Body, Doc, Unlisted
from sink import ids, scopes
from sink.scopes import Op
from sink.vocabulary import Tool


@dataclass(frozen=True, slots=True)
class Endpoint:
    method: str
    """GET (which answers HEAD too, as Starlette's routes do), POST or DELETE."""
    path: str
    """Starlette's path template: ``/v1/inboxes/{inbox_id}``."""
    handler: str
    """``module:name``: a request -> response function, or an ASGI app instance."""
    op: Op | None
    """The operation a token's scope must allow (``sink/scopes.py``); None: open."""
    doc: Doc | Unlisted
    tool: Tool | None = None
    """The MCP tool the endpoint corresponds to (an answer's ``next_tool``, ``api/calls.py``)."""

    @property
    def methods(self) -> frozenset[str]:
        return frozenset({self.method, "HEAD"} if self.method == "GET" else {self.method})

    @property
    def owner(self) -> str | None:
        """Where the run of a run operation comes from: ``inbox``, ``message``, ``run`` (its
        path's first id) or ``body``; None for the other operations."""
        if self.op is None or self.op.access is not scopes.Access.RUN:
            return None
        first = next(iter(compile_path(self.path)[2]), None)
        if first is None:
            return "body"
        if first not in _OWNERS:
            raise ValueError(f"{self.path}: a run operation's first id is one of {list(_OWNERS)}")
        return _OWNERS[first]


_OWNERS = {"inbox_id": "inbox", "message_id": "message", "run_id": "run"}


def _get(
    path: str, handler: str, op: Op | None, doc: Doc | Unlisted, tool: Tool | None = None
) -> Endpoint:
    return Endpoint("GET", path, handler, op, doc, tool)


def _post(
    path: str, handler: str, op: Op | None, doc: Doc | Unlisted, tool: Tool | None = None
) -> Endpoint:
    return Endpoint("POST", path, handler, op, doc, tool)


def _delete(path: str, handler: str, op: Op | None, doc: Doc | Unlisted) -> Endpoint:
    return Endpoint("DELETE", path, handler, op, doc)


_AGENT = "api.agent:"
_SERVICE = "api.service:"
_BOX = "api.mailbox:"
_PIT = "api.mailpit:"
_HOOK = "api.webhooks:"
_UI = "api.ui.pages:"

_MAILPIT = Unlisted("Mailpit's API v1 (compatible subset)", ("docs/mailpit-compat.md",))
PAGE = Unlisted("a page of the web UI", ("README.md",))
"""The web UI's pages and forms (its sign-in gate, ``api/ui/access.py``, knows them by it)."""

WAIT = _post(
    "/v1/inboxes/{inbox_id}/wait",
    _AGENT + "wait_for_message",
    scopes.WAIT,
    Doc(
        "wait_for_message",
        "Long-poll for a matching message beyond the cursor (spends one poll)",
        parameters=(d.INBOX, *d.CALLING_RUN, *d.TRACE_HEADERS),
        body=Body(
            "WaitIn", {"timeout_s": 30, "match": {"subject_contains": "reset"}}, required=False
        ),
        answers=d.envelope(
            "waiting, received, expired, too_early, circuit_open or provider trouble"
        ),
        refusal=True,
        errors=("400", "401", "404", "413", "422", "503"),
    ),
    Tool.WAIT_FOR_MESSAGE,
)
"""The wait: the lean path in front of the app (``api/waitpath.py``) answers most of them."""

TABLE: tuple[Endpoint, ...] = (
    # -- inboxes ------------------------------------------------------------------------------
    _post(
        "/v1/inboxes",
        _AGENT + "create_inbox",
        scopes.CREATE,
        Doc(
            "create_inbox",
            "Create (or replay) a leased inbox for one run and purpose",
            parameters=(
                {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": False,
                    "description": "Default: purpose:run_id. Same key + same body replays.",
                    "schema": {"type": "string", "pattern": ids.anchored(ids.IDEMPOTENCY_KEY)},
                },
                *d.TRACE_HEADERS,
            ),
            body=Body(
                "CreateInboxIn",
                {
                    "run_id": "ci-1842",
                    "purpose": "signup-check",
                    "match": {"subject_contains": "confirm"},
                },
            ),
            answers={
                "201": d.json_reply(
                    "CreatedOut", "created; `capped` names the values the policy lowered"
                ),
                "200": d.json_reply(
                    "CreatedOut", "replay of a live inbox (Idempotent-Replayed: true)"
                ),
            },
            errors=("400", "401", "403", "409", "413", "422"),
        ),
        Tool.CREATE_INBOX,
    ),
    _get(
        "/v1/inboxes/{inbox_id}",
        _AGENT + "get_inbox",
        scopes.GET,
        Doc(
            "get_inbox",
            "The envelope as of now (spends no budget, never scans)",
            parameters=(d.INBOX, *d.TRACE_HEADERS),
            answers=d.envelope("the inbox's envelope"),
            errors=("401", "403", "404"),
        ),
        # No tool of its own: a wait is how an agent looks at the inbox.
        Tool.WAIT_FOR_MESSAGE,
    ),
    WAIT,
    _get(
        "/v1/inboxes/{inbox_id}/messages",
        _AGENT + "list_messages",
        scopes.LIST,
        Doc(
            "list_messages",
            "The inbox's deliveries after a cursor, oldest first",
            parameters=(
                d.INBOX,
                *d.CALLING_RUN,
                {"name": "after", "in": "query", "required": False, "schema": {"type": "string"}},
                d.LIMIT,
            ),
            answers={"200": d.json_reply("MessageListOut", "a page of messages")},
            refusal=True,
            errors=("400", "401", "404", "422"),
        ),
    ),
    # -- messages -----------------------------------------------------------------------------
    _get(
        "/v1/messages/{message_id}",
        _AGENT + "read_message",
        scopes.READ_MESSAGE,
        Doc(
            "read_message",
            "Read a message (consumes nothing)",
            parameters=(d.MESSAGE, *d.CALLING_RUN, *d.TRACE_HEADERS),
            answers={
                "200": d.json_reply("MessageOut", "the message; bodies are null after release")
            },
            refusal=True,
            errors=("401", "404", "422", "503"),
        ),
        Tool.READ_MESSAGE,
    ),
    _get(
        "/v1/messages/{message_id}/raw",
        _AGENT + "raw_message",
        scopes.READ_MESSAGE,
        Doc(
            "raw_message",
            "The exact bytes received (after dot-unstuffing)",
            parameters=(d.MESSAGE, *d.CALLING_RUN),
            answers=d.RAW_MESSAGE,
            refusal=True,
            errors=("401", "404", "410", "422", "503"),
        ),
        Tool.READ_MESSAGE,
    ),
    _get(
        "/v1/messages/{message_id}/attachments/{index}",
        _AGENT + "attachment",
        scopes.READ_MESSAGE,
        Doc(
            "download_attachment",
            d.ATTACHMENT_SUMMARY,
            description=d.ATTACHMENT_DESCRIPTION,
            parameters=(d.MESSAGE, d.ATTACHMENT_INDEX, *d.CALLING_RUN),
            answers=d.ATTACHMENT,
            refusal=True,
            errors=("401", "404", "410", "422", "503"),
        ),
        Tool.READ_MESSAGE,
    ),
    _post(
        "/v1/messages/{message_id}/claim",
        _AGENT + "claim_message",
        scopes.CLAIM,
        Doc(
            "claim_message",
            "Consume a message once, for its run",
            parameters=(d.MESSAGE, *d.TRACE_HEADERS),
            body=Body("ClaimIn", {"run_id": "ci-1842"}),
            answers={
                "200": d.json_reply("EnvelopeOut", "claimed, or already claimed by this run"),
                "409": {
                    "description": "claimed_by_other_run (RefusalOut) or lease_expired",
                    "content": {
                        "application/json": {
                            "schema": {"oneOf": [d.ref("RefusalOut"), d.ref("EnvelopeOut")]}
                        }
                    },
                },
            },
            refusal=True,
            errors=("401", "404", "413", "422"),
        ),
        Tool.CLAIM_MESSAGE,
    ),
    # -- runs ---------------------------------------------------------------------------------
    _get(
        "/v1/runs/{run_id}",
        _AGENT + "run_report",
        scopes.REPORT,
        Doc(
            "get_run_report",
            "The run's inboxes and its ordered event log",
            parameters=(d.RUN,),
            answers={"200": d.json_reply("RunReportOut", "the run report")},
            errors=("401", "403", "404", "422"),
        ),
        Tool.GET_RUN_REPORT,
    ),
    _delete(
        "/v1/runs/{run_id}",
        _AGENT + "release_run",
        scopes.RELEASE,
        Doc(
            "release_run",
            "Release the run's evidence now (idempotent)",
            parameters=(d.RUN,),
            answers={"204": d.empty_reply("released")},
            errors=("401", "403", "422"),
        ),
    ),
    _post(
        "/v1/runs/{run_id}/token",
        _AGENT + "mint_run_token",
        scopes.MINT,
        Doc(
            "mint_run_token",
            "Mint a token limited to this run, until its last lease ends",
            description=(
                "The token reaches this run only: its inboxes, mail, report and release, "
                "over HTTP and MCP. It ends with the run's last live lease, or ttl_s from "
                "now if sooner; a run with no live inbox gets the lease an inbox created "
                "now would get. A run token cannot mint another."
            ),
            parameters=(d.RUN, *d.TRACE_HEADERS),
            body=Body("RunTokenIn", {"ttl_s": 600}, required=False),
            answers={
                "201": d.json_reply(
                    "RunTokenOut",
                    "the run token (keep it secret: it is shown once)",
                    {
                        "token": "rt2.Y2ktMTg0Mg.1792548900000.1792549800000.(signature)",
                        "run_id": "ci-1842",
                        "expires_at": "2026-10-21T02:30:00.000Z",
                    },
                ),
            },
            errors=("401", "403", "413", "422"),
        ),
    ),
    # -- the whole mailbox: caught mail and search --------------------------------------------
    _get(
        "/v1/unrouted",
        _BOX + "list_caught",
        scopes.READ_ALL,
        Doc(
            "list_unrouted",
            "Caught mail (any recipient without a live inbox), newest first",
            parameters=(d.LIMIT, d.CURSOR),
            answers={"200": d.json_reply("UnroutedOut", "caught mail")},
            errors=("400", "401", "422"),
        ),
    ),
    _get(
        "/v1/unrouted/{caught_id}",
        _BOX + "read_caught",
        scopes.READ_ALL,
        Doc(
            "read_unrouted",
            "One caught mail, parsed as a message is (no claim)",
            parameters=(d.CAUGHT,),
            answers={"200": d.json_reply("CaughtMessageOut", "the caught mail")},
            errors=("401", "404"),
        ),
    ),
    _get(
        "/v1/unrouted/{caught_id}/attachments/{index}",
        _BOX + "caught_attachment",
        scopes.READ_ALL,
        Doc(
            "download_unrouted_attachment",
            d.ATTACHMENT_SUMMARY,
            description=d.ATTACHMENT_DESCRIPTION,
            parameters=(d.CAUGHT, d.ATTACHMENT_INDEX),
            answers=d.ATTACHMENT,
            errors=("401", "404", "410", "422", "503"),
        ),
    ),
    _get(
        "/v1/unrouted/{caught_id}/raw",
        _BOX + "raw_caught",
        scopes.READ_ALL,
        Doc(
            "raw_unrouted",
            "The exact bytes of one caught mail",
            parameters=(d.CAUGHT,),
            answers=d.RAW_MESSAGE,
            errors=("401", "404"),
        ),
    ),
    _get(
        "/v1/messages",
        _BOX + "search",
        scopes.SEARCH,
        Doc(
            "search_messages",
            "Search evidence and caught mail, newest first",
            description=(
                "Terms (ANDed, case-insensitive, literal substrings of 3+ characters): "
                'words, "phrases", to:, from:, subject:, run:, inbox:, is:caught, '
                "is:claimed, is:unclaimed, has:attachment, before:, after:, larger:, "
                "smaller:; -term negates. With X-Run-Id: only that run's inboxes."
            ),
            parameters=(
                {
                    "name": "query",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "string", "maxLength": 512},
                },
                d.LIMIT,
                d.CURSOR,
                *d.CALLING_RUN,
            ),
            answers={"200": d.json_reply("SearchOut", "the matching messages")},
            errors=("400", "401", "403", "422"),
        ),
        Tool.FIND_MAIL,
    ),
    # -- live events --------------------------------------------------------------------------
    _get(
        "/v1/events",
        "api.live:events",
        scopes.EVENTS,
        Doc(
            "live_events",
            "Live events: a Server-Sent Events stream (the web UI reads it too)",
            description=(
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
            parameters=(
                {
                    "name": "run_id",
                    "in": "query",
                    "required": False,
                    "description": "Only this run's events (caught mail has no run).",
                    "schema": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"},
                },
                {
                    **d.RUN_HEADER,
                    "description": "Only this run's events, as ?run_id= (both, differently: 422).",
                },
                {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string"},
                },
            ),
            answers={
                "200": d.text_reply(
                    "the stream (it does not end until the client leaves)", "text/event-stream"
                )
            },
            errors=("401", "403", "422"),
        ),
    ),
    # -- webhooks -----------------------------------------------------------------------------
    _post(
        "/v1/webhooks",
        _HOOK + "create_webhook",
        scopes.WEBHOOK_CHANGE,
        Doc(
            "create_webhook",
            "Create a webhook: live events POSTed to a URL, signed (Standard Webhooks)",
            description=(
                "Without run_id or run_glob: every run's events (and caught mail's for an "
                "admin's). The answer's secret (whsec_ + base64) is shown only here. "
                + d.WEBHOOK_SCOPES
            ),
            body=Body("WebhookIn", {"url": "http://127.0.0.1:9000/hooks", "run_id": "ci-1842"}),
            answers={
                "201": d.json_reply(
                    "CreatedWebhookOut",
                    "created; keep the secret to verify deliveries",
                    {**d.WEBHOOK_EXAMPLE, "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
                )
            },
            errors=("401", "403", "413", "422"),
        ),
    ),
    _get(
        "/v1/webhooks",
        _HOOK + "list_webhooks",
        scopes.WEBHOOKS,
        Doc(
            "list_webhooks",
            "The webhooks this token may see (never their secrets)",
            answers={
                "200": d.json_reply(
                    "WebhookListOut", "the webhooks", {"webhooks": [d.WEBHOOK_EXAMPLE]}
                )
            },
            errors=("401",),
        ),
    ),
    _get(
        "/v1/webhooks/{webhook_id}",
        _HOOK + "get_webhook",
        scopes.WEBHOOKS,
        Doc(
            "get_webhook",
            "One webhook (never its secret)",
            parameters=(d.WEBHOOK,),
            answers={"200": d.json_reply("WebhookOut", "the webhook", d.WEBHOOK_EXAMPLE)},
            errors=("401", "404"),
        ),
    ),
    _delete(
        "/v1/webhooks/{webhook_id}",
        _HOOK + "delete_webhook",
        scopes.WEBHOOK_CHANGE,
        Doc(
            "delete_webhook",
            "Delete a webhook and its deliveries: nothing more is sent",
            parameters=(d.WEBHOOK,),
            answers={"204": d.empty_reply("deleted")},
            errors=("401", "403", "404"),
        ),
    ),
    _get(
        "/v1/webhooks/{webhook_id}/deliveries",
        _HOOK + "list_deliveries",
        scopes.WEBHOOKS,
        Doc(
            "list_webhook_deliveries",
            "The webhook's delivery attempts, one row per attempt, newest first",
            parameters=(d.WEBHOOK, d.CURSOR, d.LIMIT),
            answers={
                "200": d.json_reply("DeliveryListOut", "a page of attempts", d.DELIVERIES_EXAMPLE)
            },
            errors=("400", "401", "404", "422"),
        ),
    ),
    _post(
        "/v1/webhooks/{webhook_id}/test",
        _HOOK + "test_webhook",
        scopes.WEBHOOK_CHANGE,
        Doc(
            "test_webhook",
            "Send the webhook a ping event now (409 webhook_disabled after a 410)",
            parameters=(d.WEBHOOK,),
            answers={
                "202": d.json_reply(
                    "PingOut", "queued", {"delivery_id": "dlv_3od5kfag4udxxju2l6q2tb5z"}
                )
            },
            errors=("401", "403", "404", "409"),
        ),
    ),
    # -- faults -------------------------------------------------------------------------------
    _post(
        "/v1/faults",
        _SERVICE + "add_fault",
        scopes.ADMINISTER,
        Doc(
            "add_fault",
            "Inject a fault (only with --enable-faults)",
            body=Body(
                "FaultIn", {"target": "wait", "mode": "timeout", "count": 2, "run_id": "ci-1842"}
            ),
            answers={"201": d.json_reply("FaultOut", "the fault")},
            errors=("401", "403", "404", "413", "422"),
        ),
    ),
    _get(
        "/v1/faults",
        _SERVICE + "list_faults",
        scopes.READ_ALL,
        Doc(
            "list_faults",
            "The injected faults",
            answers={"200": d.json_reply("FaultListOut", "the faults")},
            errors=("401", "403", "404"),
        ),
    ),
    _delete(
        "/v1/faults",
        _SERVICE + "clear_faults",
        scopes.ADMINISTER,
        Doc(
            "clear_faults",
            "Clear every injected fault",
            answers={"204": d.empty_reply("cleared")},
            errors=("401", "403", "404"),
        ),
    ),
    # -- the service --------------------------------------------------------------------------
    _get(
        "/healthz",
        _SERVICE + "healthz",
        None,
        Doc("healthz", "Liveness", answers={"200": d.json_reply("HealthOut", "alive")}),
    ),
    _get(
        "/readyz",
        _SERVICE + "readyz",
        None,
        Doc(
            "readyz",
            "Readiness (the store can commit)",
            answers={
                "200": d.json_reply("ReadyOut", "ready"),
                "503": d.json_reply(
                    "ReadyOut", "not ready", {"status": "unavailable", "store": "unavailable"}
                ),
            },
        ),
    ),
    _get(
        "/metrics",
        _SERVICE + "metrics",
        scopes.READ_ALL,
        Doc(
            "metrics",
            "Prometheus metrics",
            answers={"200": d.text_reply("text exposition format", "text/plain")},
        ),
    ),
    _get(
        "/openapi.json",
        _SERVICE + "openapi",
        scopes.ANY,
        Doc(
            "openapi",
            "This document",
            answers={
                "200": {
                    "description": "OpenAPI 3.1",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                }
            },
        ),
    ),
    # -- MCP (Streamable HTTP): the same tools as ``runsink mcp`` -----------------------------
    *(
        Endpoint(
            method,
            "/mcp",
            "api.mcp_route:ENDPOINT",
            scopes.ANY,
            Unlisted("the MCP Streamable HTTP transport: tools/list describes its tools"),
        )
        for method in ("GET", "POST", "DELETE")
    ),
    # -- Mailpit's API v1 (contract v2) -------------------------------------------------------
    _get("/api/v1/messages", _PIT + "list_messages", scopes.READ_ALL, _MAILPIT),
    _delete("/api/v1/messages", _PIT + "delete_messages", scopes.ADMINISTER, _MAILPIT),
    _get("/api/v1/search", _PIT + "search", scopes.READ_ALL, _MAILPIT),
    _get("/api/v1/message/{id}", _PIT + "get_message", scopes.READ_ALL, _MAILPIT),
    _get("/api/v1/message/{id}/raw", _PIT + "get_raw", scopes.READ_ALL, _MAILPIT),
    _get("/api/v1/message/{id}/headers", _PIT + "get_headers", scopes.READ_ALL, _MAILPIT),
    _get("/api/v1/message/{id}/part/{part_id}", _PIT + "get_part", scopes.READ_ALL, _MAILPIT),
    _get("/api/v1/info", _PIT + "info", scopes.READ_ALL, _MAILPIT),
    _get("/view/{name}", _PIT + "view", scopes.READ_ALL, _MAILPIT),
    # -- the web UI (its sign-in gate, api/ui/access.py, turns a session into the token) ------
    _get("/", _UI + "runs", scopes.READ_ALL, PAGE),
    _get("/runs/{run_id}", _UI + "run", scopes.READ_ALL, PAGE),
    _get("/inboxes/{inbox_id}", _UI + "inbox", scopes.READ_ALL, PAGE),
    _get("/messages/{message_id}", _UI + "message", scopes.READ_ALL, PAGE),
    _get("/messages/{message_id}/body.html", _UI + "message_html", scopes.READ_ALL, PAGE),
    _get("/caught", _UI + "caught", scopes.READ_ALL, PAGE),
    _get("/search", _UI + "search", scopes.READ_ALL, PAGE),
    _get("/signin", _UI + "signin_form", scopes.READ_ALL, PAGE),
    _post("/signin", _UI + "signin", scopes.ADMINISTER, PAGE),
    _post("/signout", _UI + "signout", scopes.ADMINISTER, PAGE),
)

OPEN_PATHS = tuple(e.path for e in TABLE if e.op is None)
"""Paths that need no token at all."""

FORM_PATHS = tuple(e.path for e in TABLE if e.method == "POST" and e.doc == PAGE)
"""The web UI's own form posts (urlencoded, same origin: ``api/local_safety.py``)."""


def is_page(method: str, path: str) -> bool:
    """Is this request for a page of the web UI (a browser without a session signs in first)?"""
    found = find(method, path)
    return found is not None and found.endpoint.doc == PAGE


# -- derived: the Starlette routes ---------------------------------------------------------------


def resolve(endpoint: Endpoint) -> Any:
    """The handler a row names."""
    module, _, name = endpoint.handler.partition(":")
    return getattr(importlib.import_module(module), name)


def routes(paths: frozenset[str] | None = None) -> list[BaseRoute]:
    """Starlette's routes, in the table's order (only those of ``paths``, when given)."""
    return [
        Route(e.path, resolve(e), methods=[e.method])
        for e in TABLE
        if paths is None or e.path in paths
    ]


# -- derived: which endpoint a request is (the scope check, the MCP call) ---------------------


@dataclass(frozen=True, slots=True)
class Found:
    endpoint: Endpoint
    params: Mapping[str, str]
    owner: str | None
    """``Endpoint.owner``, worked out once."""

    @property
    def first(self) -> str | None:
        """The path's first id (an inbox, message or run), if it has one."""
        return next(iter(self.params.values()), None)


def find(method: str, path: str) -> Found | None:
    """The endpoint a request is for, as Starlette's router would pick it (a path with a
    trailing slash is the one it redirects to); None: no endpoint takes it."""
    found = _find(method, path)
    if found is None and len(path) > 1 and path.endswith("/"):
        found = _find(method, path[:-1])
    return found


def _find(method: str, path: str) -> Found | None:
    for endpoint, pattern, owner in _index().get(method, ()):
        matched = pattern.match(path)
        if matched is not None:
            return Found(endpoint, matched.groupdict(), owner)
    return None


_Entry = tuple[Endpoint, re.Pattern[str], str | None]


@cache
def _index() -> dict[str, list[_Entry]]:
    """The rows by method, with what a path is matched against (worked out once)."""
    index: dict[str, list[_Entry]] = {}
    for e in TABLE:
        entry = (e, compile_path(e.path)[0], e.owner)
        for method in sorted(e.methods):
            index.setdefault(method, []).append(entry)
    return index
