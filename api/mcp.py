"""MCP over streamable HTTP at ``/mcp``, answered by the Agent in this process.

The tools call the Agent as the HTTP routes do: the same request models
(``api/schemas.py``), the same domain calls, the same wire JSON (``api/views.py``) and
the same error bodies (``api/errors.py``, given the ``/mcp`` request itself), so a tool's
answer equals the HTTP API's JSON for the same call. The endpoint sits behind the
app's middleware: the bearer token, trace ids and the access log apply to it too, and
each tool checks its token's scope as the matching route does (``api/auth.py``): a run
token reaches its one run and nothing else.

Stateless: every tool call is one POST, and nothing the tools do needs a session.
Not JSON-only: on the SDK's SSE path a long-poll that outlasts its deferral window is
kept alive with pings (so a proxy's idle timeout does not cut it), and a client that
goes away cancels the wait, as it does on ``/v1/inboxes/{id}/wait``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from contextlib import AbstractAsyncContextManager
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from api.auth import grant_of
from api.context import context_of
from api.errors import error_response, internal_error, runsink_error, validation_error
from api.mailbox import search_in_scope
from api.schemas import ClaimIn, CreateInboxIn, WaitIn
from api.state import state_of
from api.views import (
    caught_message_out,
    create_request,
    created_out,
    envelope_out,
    message_out,
    run_report_out,
    search_out,
    wait_request,
)
from api.waitpath import long_poll_refused
from sink import scopes
from sink.envelope import Envelope
from sink.errors import InvalidRequest, RunsinkError
from sink.guidance import Call
from sink.mcp.server import Backend, Json, tools_server
from sink.vocabulary import Tool


class McpEndpoint:
    """``/mcp``'s ASGI app and the session manager behind it (run it while serving)."""

    def __init__(self) -> None:
        self._manager = StreamableHTTPSessionManager(
            app=tools_server(_backend_for),
            stateless=True,
            # One Host and Origin rule for every route, /mcp included: api/local_safety.py,
            # in front of the whole app. The SDK's own guard would be a second, different one.
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.app: ASGIApp = _NoGetStream(StreamableHTTPASGIApp(self._manager))

    def running(self) -> AbstractAsyncContextManager[None]:
        """Enter before the first request and leave after the last (once per endpoint)."""
        return self._manager.run()


class _NoGetStream:
    """``GET /mcp`` is 405, as the MCP transport allows ("the server does not offer an SSE
    stream at this endpoint"): a stateless server has nothing to say outside a request, and
    a stream that never speaks would only hold a connection."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
            response = error_response(
                405,
                "method_not_allowed",
                "/mcp offers no GET stream (a stateless server): send tool calls with POST",
                headers={"Allow": "POST, DELETE"},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _backend_for(request: Any) -> Backend:
    if not isinstance(request, Request):
        raise RuntimeError("the /mcp tools are answered only over HTTP")
    return AgentBackend(request)


class AgentBackend:
    """The five calls on this process's Agent, for one ``/mcp`` request."""

    def __init__(self, request: Request) -> None:
        state = state_of(request)
        self._agent = state.agent
        self._request = request
        self._authority = state.authority
        self._grant = grant_of(request.scope)
        self._context = context_of(request.scope)
        self._trace = self._context.explicit_trace

    async def create_inbox(self, body: Json) -> Json:
        self._context.call = Call(Tool.CREATE_INBOX, body)

        async def create() -> Json:
            given = CreateInboxIn.model_validate(body)
            self._note(run_id=given.run_id)
            self._authority.check_run(self._grant, scopes.CREATE, given.run_id)
            created = await self._agent.create(create_request(given), body, None, self._trace)
            self._note_envelope(created.envelope)
            return created_out(created.envelope, created.capped).model_dump(mode="json")

        return await self._answer(create())

    async def wait_for_message(self, inbox_id: str, body: Json) -> Json:
        self._context.call = Call(Tool.WAIT_FOR_MESSAGE, {"inbox_id": inbox_id, **body})

        async def wait() -> Json:
            self._note(inbox_id=inbox_id)
            await self._authority.check_inbox(self._grant, scopes.WAIT, inbox_id)
            given = WaitIn.model_validate(body)
            self._note(run_id=given.run_id)
            if given.run_id is not None:
                self._authority.check_run(self._grant, scopes.WAIT, given.run_id)
            request = wait_request(given, given.run_id)
            # A long-poll here holds its HTTP connection as /v1/inboxes/{id}/wait does: the
            # same cap keeps connections free for short requests.
            state = state_of(self._request)
            long_poll = request.timeout_s is None or request.timeout_s > 0
            if long_poll and not state.long_polls.enter():
                call = self._context.call
                refused = long_poll_refused(state.long_polls, state.runtime.metrics, call)
                return _json_of(refused.body)
            try:
                return self._envelope(await self._agent.wait(inbox_id, request, self._trace))
            finally:
                if long_poll:
                    state.long_polls.leave()

        return await self._answer(wait())

    async def read_message(self, message_id: str, run_id: str | None) -> Json:
        given = (
            {"message_id": message_id}
            if run_id is None
            else {"message_id": message_id, "run_id": run_id}
        )
        self._context.call = Call(Tool.READ_MESSAGE, given)

        async def read() -> Json:
            self._note(run_id=run_id)
            await self._authority.check_message(self._grant, scopes.READ_MESSAGE, message_id)
            if run_id is not None:
                self._authority.check_run(self._grant, scopes.READ_MESSAGE, run_id)
            result = await self._agent.read(message_id, run_id, self._trace, agent=True)
            return message_out(result).model_dump(mode="json")

        return await self._answer(read())

    async def read_caught(self, caught_id: str) -> Json:
        self._context.call = Call(Tool.READ_MESSAGE, {"message_id": caught_id})

        async def read() -> Json:
            # As GET /v1/unrouted/{id}: caught mail needs the read scope.
            await self._authority.check_route(self._grant, "GET", f"/v1/unrouted/{caught_id}", None)
            caught = await state_of(self._request).runtime.mailbox.caught(caught_id)
            withheld = state_of(self._request).runtime.settings.caught_withheld_from_agents
            return caught_message_out(caught, withheld).model_dump(mode="json")

        return await self._answer(read())

    async def claim_message(self, message_id: str, body: Json) -> Json:
        self._context.call = Call(Tool.CLAIM_MESSAGE, {"message_id": message_id, **body})

        async def claim() -> Json:
            given = ClaimIn.model_validate(body)
            if given.run_id is None:
                raise InvalidRequest("run_id: the claiming run is required", {"field": "run_id"})
            self._note(run_id=given.run_id)
            await self._authority.check_message(self._grant, scopes.CLAIM, message_id)
            self._authority.check_run(self._grant, scopes.CLAIM, given.run_id)
            return self._envelope(await self._agent.claim(message_id, given.run_id, self._trace))

        return await self._answer(claim())

    async def get_run_report(self, run_id: str) -> Json:
        self._context.call = Call(Tool.GET_RUN_REPORT, {"run_id": run_id})

        async def report() -> Json:
            self._note(run_id=run_id)
            self._authority.check_run(self._grant, scopes.REPORT, run_id)
            return run_report_out(await self._agent.run_report(run_id)).model_dump(mode="json")

        return await self._answer(report())

    async def find_mail(
        self, query: str, run_id: str | None, limit: int, cursor: str | None
    ) -> Json:
        arguments: Json = {"query": query, "limit": limit}
        if run_id is not None:
            arguments["run_id"] = run_id
        if cursor is not None:
            arguments["cursor"] = cursor
        self._context.call = Call(Tool.FIND_MAIL, arguments)

        async def find() -> Json:
            # As GET /v1/messages: a named run must be in the token's scope.
            self._note(run_id=run_id)
            await self._authority.check_route(self._grant, "GET", "/v1/messages", run_id)
            if run_id is not None:
                self._authority.check_run(self._grant, scopes.SEARCH, run_id)
            runtime = state_of(self._request).runtime
            scope = self._request.scope
            page = await search_in_scope(scope, runtime, query, run_id, cursor, limit, agent=True)
            return search_out(page).model_dump(mode="json")

        return await self._answer(find())

    # -- helpers ---------------------------------------------------------------------

    async def _answer(self, work: Awaitable[Json]) -> Json:
        """The answer, or the HTTP API's error body for what went wrong (never a traceback)."""
        try:
            return await work
        except RunsinkError as exc:
            response = runsink_error(self._request, exc)
        except ValidationError as exc:
            response = validation_error(self._request, exc)
        except Exception as exc:
            response = internal_error(self._request, exc)
        return _json_of(response.body)

    def _envelope(self, envelope: Envelope) -> Json:
        self._note_envelope(envelope)
        return envelope_out(envelope).model_dump(mode="json")

    def _note_envelope(self, envelope: Envelope) -> None:
        # As the routes do: the access log and X-Trace-Id of the /mcp request name them.
        self._context.note(
            run_id=envelope.run_id, inbox_id=envelope.inbox_id, trace_id=envelope.trace_id
        )

    def _note(self, run_id: str | None = None, inbox_id: str | None = None) -> None:
        self._context.note(run_id=run_id, inbox_id=inbox_id)


def _json_of(raw: bytes | memoryview) -> Json:
    body: Json = json.loads(bytes(raw))
    return body
