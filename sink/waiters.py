"""Per-inbox wake-ups for long-polls, in process.

The order that loses no wake-up: ``register`` before querying the store, query,
then wait on the returned ``Wakeup``; ingest calls ``wake`` only after its commit.
Always ``unregister`` in a ``finally``. ``end`` tells the waits of an inbox that
it expired (released, or its lease swept) so they answer at once. With PostgreSQL the
store's listener calls ``wake`` and ``end`` for what other replicas commit
(LISTEN/NOTIFY), and ``watched`` tells it which inboxes to catch up on after a reconnect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from sink.deadlines import Deadlines


class Wakeup:
    """One wait's wake-up: set on new mail, or with ``ended`` when its inbox ended.

    One long-poll waits on it at a time, so a flag and a future made only while it waits
    do what an ``asyncio.Event`` (its deque, its future per wait) would: thousands of
    parked long-polls each hold one.
    """

    __slots__ = ("_deadlines", "_future", "_set", "ended")

    def __init__(self, deadlines: Deadlines | None = None) -> None:
        self._set = False
        self._future: asyncio.Future[None] | None = None
        self._deadlines = deadlines
        self.ended = False

    def set(self) -> None:
        self._set = True
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)

    def clear(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        if self._set:
            return
        self._future = asyncio.get_running_loop().create_future()
        try:
            await self._future
        finally:
            self._future = None

    async def wait_for(self, seconds: float) -> bool:
        """Until set (True) or ``seconds`` have passed (False).

        The deadline resolves the future (the waiters' shared ``Deadlines``, else a timer of
        its own): no ``asyncio.timeout`` (its object, its timer, and a task cancellation when
        it fires, for each of thousands of waits timing out together).
        """
        if self._set:
            return True
        if seconds <= 0:
            return False
        loop = asyncio.get_running_loop()
        future = self._future = loop.create_future()
        timer = None
        if self._deadlines is not None:
            self._deadlines.add(future, seconds)
        else:
            timer = loop.call_later(seconds, _expire, future)
        try:
            await future
        finally:
            if timer is not None:
                timer.cancel()
            self._future = None
        return self._set


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Waiters:
    def __init__(self) -> None:
        # An inbox has one wait at a time, almost always: its Wakeup itself, and a set only
        # while it has several (a set per parked long-poll was about 300 bytes).
        self._by_inbox: dict[str, Wakeup | set[Wakeup]] = {}
        self._closing = False
        self._deadlines = Deadlines()

    def register(self, inbox_id: str) -> Wakeup:
        wakeup = Wakeup(self._deadlines)
        if self._closing:
            wakeup.set()
        waiting = self._by_inbox.get(inbox_id)
        if waiting is None:
            self._by_inbox[inbox_id] = wakeup
        elif isinstance(waiting, Wakeup):
            self._by_inbox[inbox_id] = {waiting, wakeup}
        else:
            waiting.add(wakeup)
        return wakeup

    def unregister(self, inbox_id: str, wakeup: Wakeup) -> None:
        waiting = self._by_inbox.get(inbox_id)
        if waiting is None:
            return
        if isinstance(waiting, Wakeup):
            if waiting is wakeup:
                del self._by_inbox[inbox_id]
            return
        waiting.discard(wakeup)
        if len(waiting) == 1:
            self._by_inbox[inbox_id] = next(iter(waiting))
        elif not waiting:
            del self._by_inbox[inbox_id]

    def _of(self, inbox_id: str) -> tuple[Wakeup, ...] | set[Wakeup]:
        waiting = self._by_inbox.get(inbox_id)
        if waiting is None:
            return ()
        return (waiting,) if isinstance(waiting, Wakeup) else waiting

    def wake(self, inbox_ids: Iterable[str]) -> None:
        for inbox_id in inbox_ids:
            for wakeup in self._of(inbox_id):
                wakeup.set()

    def end(self, inbox_ids: Iterable[str]) -> None:
        """The inboxes expired: their waits stop waiting and answer as of now."""
        for inbox_id in inbox_ids:
            for wakeup in self._of(inbox_id):
                wakeup.ended = True
                wakeup.set()

    def close(self) -> None:
        """Shutdown: every wait in progress returns now, with its current envelope."""
        self._closing = True
        for inbox_id in list(self._by_inbox):
            for wakeup in self._of(inbox_id):
                wakeup.set()

    def watched(self) -> list[str]:
        """The inboxes some wait is registered on (for a cross-replica catch-up)."""
        return list(self._by_inbox)

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def active(self) -> int:
        return sum(1 if isinstance(w, Wakeup) else len(w) for w in self._by_inbox.values())
