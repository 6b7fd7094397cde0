"""Each inbox's one wait in progress, fleet-wide (``PollSlots``): replicas sharing the
database take an inbox's wait slot with one conditional UPDATE, so two waits at once on two
replicas: one is too early. (One process alone keeps this in memory: ``LongPolls``.)

Slots are leases, not evidence: losing one in a crash costs nothing (it lapses at its
time), so they go through the store's pool with ``synchronous_commit`` off.
"""

from __future__ import annotations

from collections.abc import Callable

import asyncpg

from sink.inbox import Inbox
from sink.storage.postgres.driver import translated

# One statement: the conditional take, and what the inbox held when it was refused (a
# concurrent winner's own take is not visible to it: then "retry at once" is the answer).
_TAKE_POLL_SLOT = """
WITH cur AS (
    SELECT poll_until, next_poll_at FROM inboxes WHERE inbox_id = $1
), took AS (
    UPDATE inboxes SET poll_until = $3
    WHERE inbox_id = $1 AND polls_used = $2 AND state <> 'expired'
      AND (poll_until IS NULL OR poll_until <= $4)
      AND (next_poll_at IS NULL OR next_poll_at <= $4)
    RETURNING inbox_id
)
SELECT EXISTS (SELECT 1 FROM took) AS taken, cur.poll_until, cur.next_poll_at FROM cur
"""


class PostgresPollSlots:
    def __init__(self, pool: Callable[[], asyncpg.Pool]) -> None:
        self._pool = pool  # the store's leases pool (raises once the store is closed)

    async def take_poll_slot(self, inbox: Inbox, now: float, until: float) -> float | None:
        """Take the inbox's one wait-in-progress slot, fleet-wide, until ``until``.

        None: taken (free it with ``free_poll_slot``, or record the poll). Otherwise the
        moment to try again: another replica's wait holds the slot, or it is before
        ``next_poll_at``, or a poll was recorded since ``inbox`` was read.
        """
        async with translated("take_poll_slot"):
            row = await self._pool().fetchrow(
                _TAKE_POLL_SLOT, inbox.inbox_id, inbox.polls_used, until, now, timeout=30
            )
        if row is None or row["taken"]:
            return None if row is not None else now
        times = [t for t in (row["poll_until"], row["next_poll_at"]) if t]
        return float(max([now, *times]))

    async def free_poll_slot(self, inbox_id: str, until: float) -> None:
        """A wait that took the slot ends without recording a poll (cancelled, failed)."""
        async with translated("free_poll_slot"):
            await self._pool().execute(
                "UPDATE inboxes SET poll_until = NULL WHERE inbox_id = $1 AND poll_until = $2",
                inbox_id,
                until,
                timeout=30,
            )
