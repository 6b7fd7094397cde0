"""One pure ASGI middleware for what every request shares.

Trace ids (W3C ``traceparent`` or ``X-Trace-Id``), the bearer token and its scope
(``api/auth.py`` decides; the request's ``Grant`` is kept for the routes), a request
body cap, safe default headers, the access log line and the latency metric. Pure
ASGI rather than ``BaseHTTPMiddleware``, so long-polls stream and cancel cleanly.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any

from starlette.datastructures import Headers, MutableHeaders, QueryParams
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.auth import API_FAILURES_PER_MINUTE, Authority, Refused, Throttled
from api.calls import route_call
from api.connections import MAX_HEAD_BYTES, MAX_TARGET_BYTES, OVERFLOW_SCOPE_KEY, head_bytes
from api.context import KEY as CONTEXT
from api.context import RequestContext
from api.endpoints import OPEN_PATHS
from api.errors import error_response, runsink_error
from sink import clock, ids
from sink.errors import RunsinkError
from sink.logs import log
from sink.metrics import Metrics
from sink.tokens import OPEN

MAX_BODY_BYTES = 1024 * 1024
BODY_TOO_LARGE = f"the request body is over {MAX_BODY_BYTES} bytes"  # 413, however it came

# W3C Trace Context: version-trace_id-parent_id-flags, lowercase hex; a later version may
# add fields after another "-" (https://www.w3.org/TR/trace-context/#traceparent-header).
_TRACEPARENT = re.compile(
    r"(?P<version>[0-9a-f]{2})-(?P<trace>[0-9a-f]{32})-(?P<parent>[0-9a-f]{16})-[0-9a-f]{2}"
    r"(?P<more>-.*)?"
)
_TRACE_ID = re.compile(r"[A-Za-z0-9-]{1,64}")
_SAFE_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
    (b"cache-control", b"no-store"),
]


def explicit_trace(headers: Headers) -> str | None:
    """The caller's trace: traceparent first, then X-Trace-Id.

    A header that is present but malformed starts a new trace (it is not silently
    replaced by the inbox's); no header at all returns None, and an inbox call then
    continues the inbox's trace.
    """
    parent = headers.get("traceparent")
    if parent is not None:
        trace = _w3c_trace(parent.strip())
        if trace is not None:
            return trace
    given = headers.get("x-trace-id")
    if given is not None and _TRACE_ID.fullmatch(given):
        return given
    if parent is not None or given is not None:
        return ids.new_trace_id()
    return None


def _w3c_trace(traceparent: str) -> str | None:
    """The trace id of a valid ``traceparent``, else None (W3C: ignore an invalid one)."""
    found = _TRACEPARENT.fullmatch(traceparent)
    if found is None or found["version"] == "ff":
        return None
    if found["version"] == "00" and found["more"] is not None:
        return None  # version 00 has exactly four fields
    if found["trace"] == "0" * 32 or found["parent"] == "0" * 16:
        return None
    return found["trace"]


class BodyTooLarge(Exception):
    pass


class EdgeMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics, authority: Authority | None) -> None:
        # authority None: an app with no token checks at all (the UI's sign-in page and static
        # files, which must answer before anyone has signed in).
        self.app = app
        self.metrics = metrics
        self.authority = authority

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = Headers(scope=scope)
        context = begin(headers)
        scope[CONTEXT] = context
        status_seen = {"status": 500}

        overflow = bool(scope.get(OVERFLOW_SCOPE_KEY))

        async def send_wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_seen["status"] = message["status"]
                outgoing(message, context.trace)
                if overflow:  # past the cap: this connection is not kept for another request
                    MutableHeaders(scope=message)["connection"] = "close"
            await send(message)

        path: str = scope["path"]
        try:
            early = _early_refusal(scope, path, overflow)
            if early is not None:
                reason, response = early
                self.metrics.refused("http", reason)
                await response(scope, receive, send_wrapped)
                return
            if self.authority is not None and path not in OPEN_PATHS:
                refusal = await self._authorise(scope, headers, context)
                if refusal is not None:
                    await refusal(scope, receive, send_wrapped)
                    return
            length = headers.get("content-length")
            if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
                call = route_call(scope, None)
                response = error_response(413, "invalid_request", BODY_TOO_LARGE, call=call)
                await response(scope, receive, send_wrapped)
                return
            await self.app(scope, _capped(receive), send_wrapped)
        finally:
            record(
                self.metrics,
                scope["method"],
                _route_template(scope),
                status_seen["status"],
                time.perf_counter() - started,
                context,
            )

    async def _authorise(
        self, scope: Scope, headers: Headers, context: RequestContext
    ) -> Response | None:
        assert self.authority is not None
        return await authorise(self.authority, scope, headers, context)


def target_bytes(scope: Scope) -> int:
    """The request target's length as it came: the path and the query."""
    query = scope["query_string"]
    return len(scope.get("raw_path") or b"") + (len(query) + 1 if query else 0)


def oversized(scope: Scope) -> bool:
    """A target over 8 KiB or a head over 16 KiB: answered 414 or 431 by the edge, before
    any other rule (as the connection answers those too long for its buffer)."""
    return target_bytes(scope) > MAX_TARGET_BYTES or head_bytes(scope) > MAX_HEAD_BYTES


def _early_refusal(scope: Scope, path: str, overflow: bool) -> tuple[str, Response] | None:
    """(metric reason, answer) for a request refused before the app sees it: one that came
    past the connection cap (health checks aside), a head or a target too long."""
    if overflow and path not in OPEN_PATHS:
        # A connection past the cap, read only so that health checks still answer.
        message = "too many open connections; retry shortly"
        return "over_capacity", _closing(503, "over_capacity", message, {"Retry-After": "1"})
    if target_bytes(scope) > MAX_TARGET_BYTES:
        # Longer targets than h11's buffer are answered in api/connections.py.
        message = f"the request target is over {MAX_TARGET_BYTES} bytes"
        return "uri_too_long", _closing(414, "uri_too_long", message)
    if head_bytes(scope) > MAX_HEAD_BYTES:
        # The whole head, its target included (a long target is 414 above). h11 refuses a
        # head over its buffer only while it is incomplete; one that arrives whole in a
        # single read is measured here (api/connections.py).
        message = f"the request head is over {MAX_HEAD_BYTES} bytes"
        return "header_too_large", _closing(431, "header_too_large", message)
    return None


def _closing(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> Response:
    """An error answer after which the connection closes."""
    return error_response(status, code, message, headers={**(headers or {}), "Connection": "close"})


def begin(headers: Headers) -> RequestContext:
    """A request's context: its trace, the caller's own or a new one."""
    explicit = explicit_trace(headers)
    return RequestContext(explicit, explicit or ids.new_trace_id())


def outgoing(message: Message, trace: str) -> None:
    """What every answer carries: its trace, and the safe default headers."""
    out = MutableHeaders(scope=message)
    out["x-trace-id"] = trace
    for name, value in _SAFE_HEADERS:
        if name.decode() not in out:
            out.raw.append((name, value))


def record(
    metrics: Metrics,
    method: str,
    route: str,
    status: int,
    elapsed: float,
    context: RequestContext,
) -> None:
    """The latency metric and the access log line of one answered request."""
    metrics.http(route, method, status, elapsed)
    log(
        "http_request",
        method=method,
        route=route,
        status=status,
        latency_ms=round(elapsed * 1000, 3),
        trace_id=context.trace,
        run_id=context.run_id,
        inbox_id=context.inbox_id,
        message_id=context.message_id,
        auth=_token_name(context),
    )


async def authorise(
    authority: Authority, scope: Scope, headers: Headers, context: RequestContext
) -> Response | None:
    """The refusal (401, 403) for a request its token does not allow, else None (and the
    request's grant noted in its context)."""
    client = scope.get("client")
    grant = authority.grant_for(headers, clock.now(), client[0] if client else "")
    if isinstance(grant, Refused):
        return _unauthorized(grant)
    if isinstance(grant, Throttled):
        wait_s = max(1, math.ceil(grant.retry_after_s))
        message = (
            f"more than {API_FAILURES_PER_MINUTE} wrong bearer tokens a minute came from this "
            f"address; retry in {wait_s} s with a valid token"
        )
        return error_response(
            429, "too_many_failures", message, headers={"Retry-After": str(wait_s)}
        )
    query_run = QueryParams(scope.get("query_string", b"")).get("run_id")
    try:
        ended = await authority.released(grant)
        if ended is not None:
            return _unauthorized(ended)
        context.grant = grant
        await authority.check_route(grant, scope["method"], scope["path"], query_run)
    except RunsinkError as exc:
        return runsink_error(Request(scope), exc)
    return None


def _unauthorized(refused: Refused) -> Response:
    return error_response(
        401, "unauthorized", refused.message, headers={"WWW-Authenticate": "Bearer"}
    )


def _token_name(context: RequestContext) -> str | None:
    """The access log names the token's entry (never the token); nothing on an open server."""
    grant = context.grant
    return None if grant is None or grant is OPEN else grant.name


def _capped(receive: Receive) -> Receive:
    seen = 0

    async def wrapped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > MAX_BODY_BYTES:
                raise BodyTooLarge()
        return message

    return wrapped


def _route_template(scope: Scope) -> str:
    route: Any = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"
