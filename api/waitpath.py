"""The wait endpoint, and the lean path that answers it in front of the whole app.

Thousands of long-polls wait at once (issue 13), and what a parked request holds, it holds
for the whole wait. Through Starlette that was a dozen coroutine frames (the UI's gate, the
edge middleware, Starlette's error and exception middlewares, the router, the route, its
wrappers) and a second task listening for the client to leave. ``WaitPath`` sits in front
of the app and answers ``POST /v1/inboxes/{inbox_id}/wait`` (the table's ``WAIT``,
``api/endpoints.py``) itself with the edge's own functions (``api/middleware.py``: trace
ids, the token and its scope, the safe headers, the access log line and the latency
metric) and the app's error replies (``api/errors.py``), then ``WaitEndpoint.answer``,
which the Starlette route calls too; a hang-up cancels the wait through the protocol
(``api/hangup.py``), with no task of its own.

Requests it does not take go to the app unchanged, and the edge handles them as it handles
everything: other paths and methods, a browser session (the UI's gate turns it into a
token), a body without a Content-Length or over the cap (413), a target over 8 KiB (414), a
head over 16 KiB (431), and a request that came past the connection cap (503: the spare
connections are for health checks, never a parked wait).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.datastructures import Headers, QueryParams
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api import hangup
from api.auth import Authority, grant_of
from api.connections import (
    MAX_HEAD_BYTES,
    MAX_TARGET_BYTES,
    OVERFLOW_SCOPE_KEY,
    LongPollGate,
    head_bytes,
)
from api.context import KEY as CONTEXT
from api.context import RequestContext, context_of
from api.endpoints import WAIT
from api.errors import error_response, runsink_error, unexpected_error
from api.inputs import model, named_run, parse_json
from api.middleware import BODY_TOO_LARGE, MAX_BODY_BYTES, authorise, begin, outgoing, record
from api.replies import envelope_response
from sink import ids, scopes
from sink.agent import Agent, WaitRequest, wait_call
from sink.errors import NotFound, RequestTooLarge, RunsinkError
from sink.guidance import Call
from sink.metrics import Metrics

ROUTE = WAIT.path
_PATH = compile_path(ROUTE)[0]


class WaitEndpoint:
    """``POST /v1/inboxes/{inbox_id}/wait``: the route's logic, for both ways in."""

    def __init__(
        self, agent: Agent, metrics: Metrics, authority: Authority, gate: LongPollGate
    ) -> None:
        self._agent = agent
        self._metrics = metrics
        self._authority = authority
        self._gate = gate

    async def answer(
        self,
        scope: MutableMapping[str, Any],
        receive: Receive,
        inbox_id: str,
        body: Callable[[], Awaitable[bytes]],
    ) -> Response:
        """The answer; refusals raise (RunsinkError, ValidationError) for the caller to map."""
        if not ids.INBOX_ID.fullmatch(inbox_id):
            raise NotFound(f"no inbox {inbox_id[:64]!r}")
        context = context_of(scope)
        context.note(inbox_id=inbox_id)
        wait = self._request(scope, context, await body())
        _forget_headers(scope)
        gate = self._gate
        # An omitted timeout_s long-polls (the policy's long_poll_max_s).
        long_poll = wait.timeout_s is None or wait.timeout_s > 0
        if long_poll and not gate.enter():
            # Repeat this very wait.
            return long_poll_refused(gate, self._metrics, wait_call(inbox_id, wait))
        envelope = None
        try:
            work = self._agent.wait(inbox_id, wait, context.explicit_trace)
            # Noted only now (a parked wait holds nothing more): an error names this call.
            context.call = wait_call(inbox_id, wait)
            if hangup.listening(scope):  # in this task: no frame nor task of its own
                with hangup.Hangup(scope) as hung:
                    envelope = await work
                if hung.heard:
                    envelope = None
            else:
                envelope = await hangup.watched(receive, work)
        finally:
            if long_poll:
                gate.leave()
        if envelope is None:
            # The client went away: the long-poll ended, nothing was recorded for it.
            return Response(status_code=499)
        return envelope_response(envelope, scope)

    def _request(
        self, scope: MutableMapping[str, Any], context: RequestContext, raw: bytes
    ) -> WaitRequest:
        """The wait asked for (in a function of its own: the body, its JSON and the wire
        model are garbage before the wait parks)."""
        from api.schemas import WaitIn  # the wire models load late (api/warmup.py)
        from api.views import wait_request

        given = model(WaitIn, parse_json(raw, required=False))
        headers = Headers(scope=scope)
        query = QueryParams(scope.get("query_string", b""))
        run_id = named_run(given.run_id, headers.get("x-run-id"), query.get("run_id"))
        context.note(run_id=run_id)
        if run_id is not None:
            # A run the caller names must be within its token's scope.
            self._authority.check_run(grant_of(scope), scopes.WAIT, run_id)
        return wait_request(given, run_id)


def long_poll_refused(gate: LongPollGate, metrics: Metrics, call: Call | None) -> Response:
    """503 ``over_capacity`` for a wait past the long-poll cap, on either way in (this
    route, or ``wait_for_message`` at ``/mcp``): both hold an HTTP connection alike."""
    metrics.refused("http", "too_many_long_polls")
    return error_response(
        503,
        "over_capacity",
        f"{gate.limit} waits are already in progress; retry shortly",
        headers={"Retry-After": "1"},
        call=call,
    )


_CLOSE = (b"connection", b"close")


def _forget_headers(scope: MutableMapping[str, Any]) -> None:
    """Everything the request's headers decide is decided (trace, token, run): a parked wait
    keeps only what its answer still reads (uvicorn looks for ``Connection: close``), not
    the list, its tuples and its bytes (about 600 bytes)."""
    headers = scope.get("headers")
    if headers:
        scope["headers"] = [_CLOSE] if _CLOSE in headers else []


class WaitPath:
    """In front of the app: waits answered here, everything else passed on."""

    def __init__(
        self, app: ASGIApp, endpoint: WaitEndpoint, metrics: Metrics, authority: Authority
    ) -> None:
        self.app = app
        self._endpoint = endpoint
        self._metrics = metrics
        self._authority = authority

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # One frame for the whole edge: it stays in memory while the wait is parked.
        found = None
        if scope["type"] == "http" and scope["method"] == "POST":
            found = _PATH.match(scope["path"])
        headers = Headers(scope=scope)
        if found is None or not self._takes(scope, headers):
            await self.app(scope, receive, send)
            return
        inbox_id, found = found.group("inbox_id"), None
        started = time.perf_counter()
        context = begin(headers)
        scope[CONTEXT] = context
        status = 500
        try:
            try:
                response = await authorise(self._authority, scope, headers, context)
                del headers  # the parked wait keeps no view of the headers (_forget_headers)
                if response is None:
                    body = _Body(receive).read
                    response = await self._endpoint.answer(scope, receive, inbox_id, body)
            except _ClientGone:
                response = Response(status_code=499)
            except RunsinkError as exc:
                response = runsink_error(Request(scope), exc)
            except Exception as exc:  # a ValidationError (not imported at start-up) is a 422
                response = unexpected_error(Request(scope), exc)
            status = response.status_code
            if status != 499:  # nobody is there to read it

                async def send_traced(message: Message) -> None:
                    if message["type"] == "http.response.start":
                        outgoing(message, context.trace)
                    await send(message)

                await response(scope, receive, send_traced)
        finally:
            record(self._metrics, "POST", ROUTE, status, time.perf_counter() - started, context)

    def _takes(self, scope: Scope, headers: Headers) -> bool:
        if scope.get(OVERFLOW_SCOPE_KEY):
            return False  # past the connection cap: the edge keeps it for health checks (503)
        if head_bytes(scope) > MAX_HEAD_BYTES:
            return False  # the edge answers 431
        if self._authority.keyring.configured and "authorization" not in headers:
            return False  # perhaps a browser session: the UI's gate knows those
        length = headers.get("content-length")
        if length is None:
            if "transfer-encoding" in headers:
                return False  # a chunked body: the edge caps it as it arrives
        elif not length.isdigit() or int(length) > MAX_BODY_BYTES:
            return False  # the edge answers 413
        query = scope["query_string"]
        target = len(scope.get("raw_path") or b"") + (len(query) + 1 if query else 0)
        return target <= MAX_TARGET_BYTES  # else the edge answers 414


class _ClientGone(Exception):
    """The client left while its body was on its way."""


class _Body:
    __slots__ = ("_receive",)

    def __init__(self, receive: Receive) -> None:
        self._receive = receive

    async def read(self) -> bytes:
        chunks = bytearray()
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone()
            chunks += message.get("body", b"")
            if len(chunks) > MAX_BODY_BYTES:  # Content-Length said otherwise, or none (chunked)
                raise RequestTooLarge(BODY_TOO_LARGE)
            if not message.get("more_body", False):
                return bytes(chunks)
