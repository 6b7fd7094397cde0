"""The sweeper: once a second, what time alone changes in the store.

Leases that ended are persisted as expiries (and their waits answered), evidence past
retention and caught mail past its life are released, and over ``--max-store-mb`` the
oldest caught mail, then the oldest expired evidence, goes. It never blocks ingest, and it
outlives a bad moment of the store (a failed round is a warning; the next second tries
again). Sharing a PostgreSQL database, one replica sweeps at a time.

The runtime (``sink/runtime.py``) starts ``Sweeper.run`` as a task and cancels it at close.
"""

from __future__ import annotations

import asyncio

from sink.clock import Clock
from sink.config import Settings
from sink.logs import warn
from sink.metrics import Metrics
from sink.storage.backend import Backend
from sink.waiters import Waiters

EVERY_S = 1.0
BATCH = 500
BREAKERS_FORGOTTEN_AFTER_S = 3600.0


class Sweeper:
    """Expiry, retention and the size cap, one round a second until ``stopping``."""

    def __init__(
        self,
        backend: Backend,
        waiters: Waiters,
        settings: Settings,
        metrics: Metrics,
        clock: Clock,
    ) -> None:
        self.store = backend.store
        self.mail = backend.mail
        self._turn = backend.sweeper_turn  # replicas sharing a database sweep one at a time
        self._fleet = backend.fleet_breakers  # breakers shared by replicas, in the database
        self.waiters = waiters
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self._over_cap = False  # warned once per stretch over the cap

    async def run(self, stopping: asyncio.Event) -> None:
        """Persist lease expiries, release evidence past retention; never blocks ingest."""
        while not await self.clock.wait(stopping, self.clock.now() + EVERY_S):
            try:
                # Sharing a database, one replica sweeps at a time (the others skip that second).
                async with self._turn() as mine:
                    if mine:
                        await self.sweep_once()
            except Exception as exc:  # the sweeper must outlive a bad moment of the store
                warn("sweep_failed", error=type(exc).__name__)

    async def sweep_once(self) -> None:
        now = self.clock.now()
        for inbox in await self.store.expire_due(now, BATCH):
            expired = inbox.effective(now)
            policy = self.settings.policy(inbox.policy_name)
            await self.store.expire(expired, policy.retention_s)
            self.metrics.expired("lease")
            self.waiters.end([inbox.inbox_id])
        await self.store.release_due(now, BATCH)
        await self.mail.expire_caught(now, BATCH)
        await self._enforce_size_cap(now)
        if self._fleet is not None:
            # Breakers nobody touched for an hour belong to leases long over (as in memory).
            await self._fleet.forget_breakers(BREAKERS_FORGOTTEN_AFTER_S)
        self.metrics.sweeps.inc()

    async def _enforce_size_cap(self, now: float) -> None:
        """Over --max-store-mb: delete the oldest caught mail, then release the oldest
        released-eligible evidence.

        Live evidence is never released for space; the store may stay over the cap
        until leases end (a warning says so).
        """
        if self.settings.max_store_mb is None:
            return
        cap = self.settings.max_store_mb * 1024 * 1024
        while await self.store.used_bytes() > cap:
            # Caught mail goes first (oldest first): it is never evidence.
            # Small steps, the size checked after each: only as much goes as the cap needs.
            if await self.mail.drop_oldest_caught(now, 10):
                continue
            if await self.store.release_oldest_expired(now, 1) == 0:
                if not self._over_cap:
                    used_mb = round(await self.store.used_bytes() / 2**20, 1)
                    warn("store_over_cap", used_mb=used_mb, cap_mb=self.settings.max_store_mb)
                self._over_cap = True
                return
        self._over_cap = False
