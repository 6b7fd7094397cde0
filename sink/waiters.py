"""Per-inbox wake-ups for long-polls, in process.

The order that loses no wake-up: ``register`` before querying the store, query,
then wait on the returned event; ingest calls ``wake`` only after its commit.
Always ``unregister`` in a ``finally``. A PostgreSQL LISTEN/NOTIFY version can
replace this class behind the same three methods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class Waiters:
    def __init__(self) -> None:
        self._by_inbox: dict[str, set[asyncio.Event]] = {}
        self._closing = False

    def register(self, inbox_id: str) -> asyncio.Event:
        event = asyncio.Event()
        if self._closing:
            event.set()
        self._by_inbox.setdefault(inbox_id, set()).add(event)
        return event

    def unregister(self, inbox_id: str, event: asyncio.Event) -> None:
        waiting = self._by_inbox.get(inbox_id)
        if waiting is None:
            return
        waiting.discard(event)
        if not waiting:
            del self._by_inbox[inbox_id]

    def wake(self, inbox_ids: Iterable[str]) -> None:
        for inbox_id in inbox_ids:
            for event in self._by_inbox.get(inbox_id, ()):
                event.set()

    def close(self) -> None:
        """Shutdown: every wait in progress returns now, with its current envelope."""
        self._closing = True
        for waiting in self._by_inbox.values():
            for event in waiting:
                event.set()

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def active(self) -> int:
        return sum(len(w) for w in self._by_inbox.values())
