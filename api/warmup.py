"""The wire models load right after the first HTTP answer: not before ready, not on an API call.

pydantic, ``api/schemas.py`` and ``api/views.py`` are about 90 ms of imports (a quarter of
start-up, issue 22) that nothing up to ``/readyz`` needs. Once the first request has been
answered (usually the readiness probe), they are imported on the event loop, so the first
API call (creating an inbox) finds them loaded. On the loop rather than in a thread: an
import holds the GIL either way, and importing pydantic from two threads at once can meet a
half-initialised module.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable

from starlette.types import ASGIApp, Receive, Scope, Send

WIRE_MODULES = ("api.views",)  # imports api.schemas, and pydantic with it


class LoadWireAfterFirstAnswer:
    """ASGI 3 (give uvicorn ``interface="asgi3"``: ``__call__`` is not a coroutine function,
    so that after the first request it adds no frame of its own to a parked wait)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._loaded = False

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if self._loaded:
            return self.app(scope, receive, send)
        return self._first(scope, receive, send)

    async def _first(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            if not self._loaded:
                self._loaded = True
                asyncio.get_running_loop().call_soon(load_wire)


def load_wire() -> None:
    for name in WIRE_MODULES:
        importlib.import_module(name)
