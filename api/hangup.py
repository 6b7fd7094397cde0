"""A waiting request hears its client hang up, without a task of its own.

An ASGI application learns that its client left only from ``receive()``, which blocks: a
long-poll listening for it while it waits took a second task (and its frames) per wait,
a good part of what a parked wait cost (issue 13). Our HTTP protocol
(``api/connections.py``) marks each request's scope with ``KEY``; a wait arms it with a
``Hangup`` naming the task that runs the request; if the connection is lost before the
answer is complete, the protocol cancels that task. The wait then ends as it always has
when its client went away: cancelled where it stood (its ``finally`` blocks unregister
the waiter and hand back the inbox's slot), nothing recorded, no answer (nobody is there
to read one); the request is logged with status 499.

Under another server (no mark in the scope) a watcher task reads ``receive()`` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, MutableMapping
from typing import Any, Final, TypeVar

from starlette.types import Receive

T = TypeVar("T")

KEY: Final = "runsink.hangup"


class _Listening:
    """The protocol's mark: it will tell a ``Hangup`` armed in this scope."""

    __slots__ = ()


LISTENING: Final = _Listening()


class Hangup:
    """Armed around a wait, in the request's own task: ``with Hangup(scope) as hung: ...``.

    A hang-up cancels the task; ``__exit__`` takes that cancellation back (it is ours, and
    nobody else asked for one too) and ``hung.heard`` says the client is gone.
    """

    __slots__ = ("heard", "scope", "task")

    def __init__(self, scope: MutableMapping[str, Any]) -> None:
        task = asyncio.current_task()
        assert task is not None, "a request runs in a task"
        self.scope = scope
        self.task = task
        self.heard = False

    def __enter__(self) -> Hangup:
        self.scope[KEY] = self
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> bool:
        self.scope[KEY] = LISTENING
        if not self.heard:
            return False
        if kind is None or issubclass(kind, asyncio.CancelledError):
            # Ours (or swallowed by the work): take it back, unless a shutdown asked too.
            return self.task.uncancel() == 0 and kind is not None
        return False

    def hear(self) -> None:
        if not self.heard:
            self.heard = True
            self.task.cancel()


def mark(scope: MutableMapping[str, Any]) -> None:
    """The protocol made this request: it will call ``lost`` if its connection is lost."""
    scope.setdefault(KEY, LISTENING)


def listening(scope: MutableMapping[str, Any]) -> bool:
    """Whether the server tells this request of a hang-up (else: ``watched``)."""
    return scope.get(KEY) is LISTENING


def lost(scope: MutableMapping[str, Any]) -> None:
    """The protocol lost the request's connection before its answer was complete."""
    hangup = scope.get(KEY)
    if isinstance(hangup, Hangup):
        hangup.hear()


async def unless_gone(
    scope: MutableMapping[str, Any], receive: Receive, work: Coroutine[Any, Any, T]
) -> T | None:
    """``work``'s result, or None if the client hung up first (``work`` is then cancelled).

    ``api/waitpath.py`` spells this out inline (one coroutine frame less per parked wait).
    """
    if not listening(scope):
        return await watched(receive, work)
    result = None
    with Hangup(scope) as hung:
        result = await work
    return None if hung.heard else result


async def watched(receive: Receive, work: Coroutine[Any, Any, T]) -> T | None:
    """The portable way: ``work`` in a task, and this one reading ``receive()``."""
    running = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_until_disconnect(receive))
    try:
        await asyncio.wait({running, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not running.done():
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await running
    if running.cancelled():
        return None
    return running.result()


async def _until_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
