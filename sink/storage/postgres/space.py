"""Whether PostgreSQL can still grow its files: the space probe and the gate it opens.

A full disk (or a full tablespace) fails only the writes that need a new page: an UPDATE
that fits its page, and so ``SELECT 1`` or a heartbeat row, goes on working, and so may
a small INSERT. ``probe`` makes PostgreSQL extend a file on purpose (a TRUNCATE gives
``space_probe`` a new, empty file; one INSERT must then allocate its first page), so it
fails exactly when the store cannot grow. WAL is elsewhere as PostgreSQL has it; only the
data files are tested.

``SpaceGate``: once a write failed for want of space, new mail and new inboxes are refused
(``StoreFull``: SMTP 452 4.3.1, the API provider trouble) until a probe succeeds again. At
most one probe a second runs for the gate, whoever asks; ``/readyz`` probes too, and its
success opens the gate. Nothing needs a restart when space is freed.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from sink.errors import StoreFull

PROBE_EVERY_S = 1.0
DISK_FULL = "53100"  # SQLSTATE disk_full


async def probe(db: Any, replica_id: str) -> None:
    """Inside a transaction: fails with disk_full when the database's files cannot grow."""
    await db.execute("TRUNCATE space_probe")
    await db.execute(
        "INSERT INTO space_probe (replica_id, at)"
        " VALUES ($1, extract(epoch FROM clock_timestamp()))",
        replica_id,
    )


class SpaceGate:
    def __init__(self, run_probe: Callable[[], Awaitable[None]]) -> None:
        self._run_probe = run_probe
        self._full = False
        self._probed_at = -PROBE_EVERY_S

    @property
    def full(self) -> bool:
        return self._full

    def filled(self) -> None:
        """A write failed for want of space."""
        self._full = True

    def freed(self) -> None:
        """A probe (or any write that needed space) succeeded."""
        self._full = False

    async def admit(self) -> None:
        """Return if the store has space (as far as we know); else raise ``StoreFull``."""
        if not self._full:
            return
        now = time.monotonic()
        if now - self._probed_at < PROBE_EVERY_S:
            raise StoreFull("the database has no space left; writes resume once it has")
        self._probed_at = now
        try:
            await self._run_probe()
        except StoreFull:
            self.filled()
            raise
        self.freed()
