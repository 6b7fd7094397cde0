"""The ``/mcp`` route, with the MCP SDK imported and started on its first request.

The SDK is the largest thing runsink imports (about half its start-up time and a third of
its idle memory), and most servers never see an MCP client. So the route starts as this
stand-in: the first request imports ``api/mcp.py``, starts its session manager in a task
of its own (the SDK's task group must be entered and left by one task), and hands every
request to it from then on. ``running()`` stops that task when the server stops.

The composition root (``api/cli.py``) makes one ``LazyMcp`` and gives it to ``create_app``,
which keeps it in the application's state; the table's ``/mcp`` rows name ``ENDPOINT``,
which hands each request to it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import error_response
from api.state import state_of

if TYPE_CHECKING:
    from api.mcp import McpEndpoint


class LazyMcp:
    """``/mcp``: the SDK's endpoint once a request needs it."""

    def __init__(self) -> None:
        self._app: ASGIApp | None = None
        self._starting = asyncio.Lock()
        self._stop = asyncio.Event()
        self._sessions: asyncio.Task[None] | None = None  # the session manager's own task

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self._app or await self._start()
        await app(scope, receive, send)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """While the server serves; on the way out, stop the SDK if a request started it."""
        try:
            yield
        finally:
            self._stop.set()
            if self._sessions is not None:
                await self._sessions

    async def _start(self) -> ASGIApp:
        async with self._starting:
            if self._app is not None:
                return self._app
            if self._stop.is_set():
                raise RuntimeError("the server is stopping")
            from api.mcp import McpEndpoint

            endpoint = McpEndpoint()
            ready = asyncio.Event()
            self._sessions = asyncio.create_task(self._serve(endpoint, ready), name="mcp")
            readied = asyncio.create_task(ready.wait())
            await asyncio.wait({self._sessions, readied}, return_when=asyncio.FIRST_COMPLETED)
            readied.cancel()
            if self._sessions.done():
                self._sessions.result()  # the manager failed to start: raise why
                raise RuntimeError("the MCP session manager stopped at once")
            self._app = endpoint.app
            return self._app

    async def _serve(self, endpoint: McpEndpoint, ready: asyncio.Event) -> None:
        async with endpoint.running():
            ready.set()
            await self._stop.wait()


class _Endpoint:
    """The ``/mcp`` route's endpoint: the application's ``LazyMcp``, when it has one."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        mcp = state_of(scope).mcp
        if mcp is None:
            response = error_response(404, "not_found", "this server does not serve /mcp")
            await response(scope, receive, send)
            return
        await mcp(scope, receive, send)


ENDPOINT = _Endpoint()
