"""The fleet-wide circuit breaker: the rules of ``sink/breaker.py``, kept by the database.

Each move is one conditional UPDATE on the breaker's row (``breakers``, one per run, inbox
and operation), so replicas never disagree and exactly one of them takes the half-open
probe. Times are the database's clock (``_DB_NOW``). The guard (``sink/guard.py``) uses it
as its ``FleetBreakers``; the sweeper forgets the rows nobody touched for an hour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sink.breaker import (
    ALLOWED,
    MIN_RETRY_AFTER_S,
    Admission,
    BreakerKey,
    BreakerSettings,
    BreakerState,
    Transition,
    refused,
)
from sink.storage.postgres.driver import Database

if TYPE_CHECKING:
    from sink.storage.postgres.driver import Connection

_DB_NOW = "extract(epoch FROM clock_timestamp())::double precision"


class PostgresBreakers:
    """Breaker state shared by every replica of one database (``FleetBreakers``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def breaker_admit(
        self, key: BreakerKey, base_cooldown_s: float, hold_s: float
    ) -> Admission:
        """May a call go to the provider now? May take the fleet's one half-open probe."""
        row = await self._db.fetch(
            "breaker_admit",
            f"SELECT state, opened_at, cooldown_s, probe_until, {_DB_NOW} AS now"
            " FROM breakers WHERE run_id = $1 AND inbox_id = $2 AND operation = $3",
            *key,
        )
        if not row or row[0]["state"] == "closed":
            return ALLOWED
        state, opened_at, cooldown_s, _, now = row[0]
        if state == "open":
            left = opened_at + cooldown_s - now
            if left > 0:
                return refused(min(left, cooldown_s))

        async def work(db: Connection) -> str | None:
            moved: str | None = await db.fetchval(
                f"""WITH old AS (
                        SELECT state FROM breakers
                        WHERE run_id = $1 AND inbox_id = $2 AND operation = $3 FOR UPDATE)
                    UPDATE breakers b SET state = 'half_open', probe_until = {_DB_NOW} + $4,
                                          touched_at = {_DB_NOW}
                    FROM old
                    WHERE b.run_id = $1 AND b.inbox_id = $2 AND b.operation = $3
                      AND ((b.state = 'open' AND b.opened_at + b.cooldown_s <= {_DB_NOW})
                           OR (b.state = 'half_open'
                               AND (b.probe_until IS NULL OR b.probe_until <= {_DB_NOW})))
                    RETURNING old.state""",
                *key,
                hold_s,
            )
            return moved

        moved = await self._db.transaction("breaker_admit", work)
        if moved is None:
            return refused(base_cooldown_s)  # another call (on any replica) is the probe
        transition = (
            Transition(BreakerState.OPEN, BreakerState.HALF_OPEN) if moved == "open" else None
        )
        return Admission(allowed=True, probe=True, retry_after=None, transition=transition)

    async def breaker_success(self, key: BreakerKey) -> Transition | None:
        """The provider answered: a breaker that is not open settles (its row goes)."""

        rows = await self._db.fetch(
            "breaker_success",
            "DELETE FROM breakers WHERE run_id = $1 AND inbox_id = $2 AND operation = $3"
            " AND state <> 'open' RETURNING state",
            *key,
        )
        if rows and rows[0][0] == "half_open":
            return Transition(BreakerState.HALF_OPEN, BreakerState.CLOSED)
        return None

    async def breaker_failure(
        self, key: BreakerKey, settings: BreakerSettings
    ) -> Transition | None:
        """The provider failed (or the caller named the wrong run): count it; maybe open."""

        async def work(db: Connection) -> tuple[str, str, float] | None:
            await db.execute(
                f"""INSERT INTO breakers (run_id, inbox_id, operation, state, failures,
                                          cooldown_s, touched_at)
                    VALUES ($1, $2, $3, 'closed', 0, $4, {_DB_NOW})
                    ON CONFLICT DO NOTHING""",
                *key,
                settings.cooldown_s,
            )
            row = await db.fetchrow(
                f"""WITH old AS (
                        SELECT state FROM breakers
                        WHERE run_id = $1 AND inbox_id = $2 AND operation = $3 FOR UPDATE)
                    UPDATE breakers b SET
                        failures = b.failures + 1,
                        cooldown_s = CASE WHEN b.state = 'half_open'
                                          THEN LEAST(b.cooldown_s * 2, $5) ELSE b.cooldown_s END,
                        state = CASE WHEN b.state = 'half_open' OR b.failures + 1 >= $4
                                     THEN 'open' ELSE b.state END,
                        opened_at = CASE WHEN b.state = 'half_open' OR b.failures + 1 >= $4
                                         THEN {_DB_NOW} ELSE b.opened_at END,
                        probe_until = NULL,
                        touched_at = {_DB_NOW}
                    FROM old
                    WHERE b.run_id = $1 AND b.inbox_id = $2 AND b.operation = $3
                      AND b.state <> 'open'
                    RETURNING old.state, b.state, b.cooldown_s""",
                *key,
                settings.failure_threshold,
                settings.cooldown_max_s,
            )
            return None if row is None else (row[0], row[1], float(row[2]))

        moved = await self._db.transaction("breaker_failure", work)
        if moved is None or moved[0] == moved[1]:
            return None  # a straggler while open, or still under the threshold
        return Transition(BreakerState(moved[0]), BreakerState(moved[1]), moved[2])

    async def breaker_abandon(self, key: BreakerKey) -> None:
        """The probe was cancelled without an answer: the next call may probe at once."""

        await self._db.fetch(
            "breaker_abandon",
            "UPDATE breakers SET probe_until = NULL WHERE run_id = $1 AND inbox_id = $2"
            " AND operation = $3 AND state = 'half_open' RETURNING 1",
            *key,
        )

    async def breaker_cooldown_left(self, key: BreakerKey) -> float | None:
        rows = await self._db.fetch(
            "breaker_cooldown_left",
            f"SELECT opened_at + cooldown_s - {_DB_NOW} FROM breakers"
            " WHERE run_id = $1 AND inbox_id = $2 AND operation = $3 AND state <> 'closed'",
            *key,
        )
        if not rows or rows[0][0] is None:
            return None
        return max(MIN_RETRY_AFTER_S, float(rows[0][0]))

    async def forget_breakers(self, untouched_s: float) -> int:
        """Rows nobody touched for ``untouched_s``: their inboxes' leases are long over."""

        async def work(db: Connection) -> int:
            status = await db.execute(
                f"DELETE FROM breakers WHERE touched_at < {_DB_NOW} - $1", untouched_s
            )
            return int(status.split()[-1])

        return await self._db.transaction("forget_breakers", work)
