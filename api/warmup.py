"""The wire models load right after the first HTTP answer: not before ready, not on an API call.

pydantic, ``api/schemas.py`` and ``api/views.py`` are about 90 ms of imports (a quarter of
start-up, issue 22) that nothing up to ``/readyz`` needs. Once the first request has been
answered (usually the readiness probe), they are imported on the event loop, then the
validators of a CI job's first calls are built (pydantic builds a model's on its first use:
``defer_build``), one step per turn of the loop so that a request arriving meanwhile waits
for one step at most. On the loop rather than in a thread: an import holds the GIL either
way, and importing pydantic from two threads at once can meet a half-initialised module.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable

from starlette.types import ASGIApp, Receive, Scope, Send

WIRE_MODULES = ("api.views",)  # imports api.schemas, and pydantic with it
# Create an inbox, wait, read, claim, and an error: the models of a CI job's first calls.
FIRST_MODELS = ("CreateInboxIn", "CreatedOut", "WaitIn", "MessageOut", "ClaimIn", "ErrorOut")


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
    """Import the wire modules now; build the first calls' validators in later turns."""
    for name in WIRE_MODULES:
        importlib.import_module(name)
    asyncio.get_running_loop().call_soon(_build, FIRST_MODELS)


def _build(names: tuple[str, ...]) -> None:
    from api import schemas

    getattr(schemas, names[0]).model_rebuild()
    if len(names) > 1:
        asyncio.get_running_loop().call_soon(_build, names[1:])
