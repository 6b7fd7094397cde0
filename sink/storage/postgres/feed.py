"""Live events on PostgreSQL: every replica's events, in the order the database committed them.

Every statement that inserts event rows NOTIFYs their ids once it commits (migration
``005_live_events.sql``: ``db v <id,id,...>``, or ``db v *`` when the list would not fit a
payload), and PostgreSQL delivers notifications in commit order. The listener's connection
hands them here; this feed reads those rows (joined to the message for a ``message``
event's subject, which no payload carries) and publishes them to the hub, in that order.
Caught mail has a row too (type ``caught``, no run; migration ``006_caught_events.sql``):
its ``message`` event (``caught: true``) reaches the readers of every run, never a run's.
A replica's own events take the same path as everyone else's, so every replica's stream
shows one order, each event once: a poll that another replica's mail answered comes after
that mail, and a claim made after seeing that poll comes after the poll, whichever
replicas were involved. (With SQLite the store's commit hook and ingest publish instead.)

While the listener is away nothing is announced, so the feed keeps the highest id it has
seen and the ids below it it has not (``gaps``: a transaction that took an id earlier may
commit later); on reconnect it catches up from the table: ``id > high OR id IN gaps``. A
catch-up too large to replay (``CATCH_UP_MAX`` events) tells the readers to resynchronise
instead (the hub's ``resync`` event), never a silent gap. Caught-up events follow what was
published before the outage; the outage's events reach
the stream late, but they reach it.
While nobody listens (the hub is unheard) no row is read at all: the ids in the payloads
keep the position.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from typing import Any, Protocol

from sink.logs import warn
from sink.storage.base import Event, LiveTarget

FETCH_S = 5.0  # a read that takes longer drops the connection: the reconnect catches up
GAP_TTL_S = 120.0  # a transaction that took an id and has not committed in this long won't
GAPS_MAX = 10_000
PAGE = 1000
CATCH_UP_MAX = 20 * PAGE
CAUGHT = "caught"  # the type of caught mail's event row (run_id NULL)

_COLUMNS = """
SELECT e.id, e.run_id, e.type, e.at, e.inbox_id, e.message_id, e.detail_json,
       m.subject, m.received_at
FROM events e
LEFT JOIN deliveries d ON e.type = 'message_accepted' AND d.message_id = e.message_id
LEFT JOIN caught c ON e.type = 'caught' AND c.caught_id = e.message_id
LEFT JOIN messages m ON m.message_key = COALESCE(d.message_key, c.message_key)
"""
EVENT_SELECT = _COLUMNS  # an events row with what its live events need (webhooks.py too)
_ANNOUNCED = _COLUMNS + " WHERE e.id = ANY($1::bigint[]) ORDER BY e.id"
_UNSEEN = _COLUMNS + " WHERE e.id > $1 OR e.id = ANY($2::bigint[]) ORDER BY e.id LIMIT $3"


class Querying(Protocol):
    """The listener's connection (asyncpg), as far as the feed uses it."""

    # asyncpg's own signatures (its ``timeout`` keyword), hence ASYNC109.
    async def fetch(self, query: str, *args: Any, timeout: float | None = None) -> list[Any]: ...  # noqa: ASYNC109

    async def fetchval(self, query: str, *args: Any, timeout: float | None = None) -> Any: ...  # noqa: ASYNC109


class EventFeed:
    def __init__(self, target: LiveTarget) -> None:
        self._target = target
        self._high: int | None = None  # the highest event id seen (None: not yet known)
        self._gaps: dict[int, float] = {}  # unseen ids below _high -> when first missed
        self._wanted: set[int] = set()  # announced ids, to read
        self._scan = False  # read every unseen id (a "v *" announcement)
        self.work = asyncio.Event()  # set when pull() has something to do

    def announced(self, ids: str) -> None:
        """From the listener's callback (never awaits): rows with these ids committed."""
        if ids == "*":
            self._scan = True
            self.work.set()
            return
        numbers = [int(n) for n in ids.split(",") if n.isdigit()]
        if not self._target.heard():
            self._seen(numbers)  # nobody to show them to: only the position moves
            return
        self._wanted.update(numbers)
        self.work.set()

    @property
    def pending(self) -> bool:
        return bool(self._wanted or self._scan)

    async def pull(self, connection: Querying) -> None:
        """On the listener's connection: read and publish what was announced."""
        self.work.clear()
        try:
            if self._scan:
                self._scan = False
                await self._catch_up(connection)
            if self._wanted:
                wanted = sorted(self._wanted)
                rows = await connection.fetch(_ANNOUNCED, wanted, timeout=FETCH_S)
                self._wanted.difference_update(wanted)
                self._publish(rows)
        except BaseException:
            # Not read: the catch-up after the reconnect finds them among the gaps.
            self._gaps.update((n, time.monotonic()) for n in self._wanted)
            self._wanted.clear()
            raise

    async def reconnected(self, connection: Querying) -> None:
        """The listener is back: catch up on what was committed while it was away."""
        self._wanted.clear()
        self._scan = False
        if self._high is None or not self._target.heard():
            # Nobody to replay it to: start from here.
            self._high = int(await connection.fetchval("SELECT COALESCE(MAX(id), 0) FROM events"))
            self._gaps.clear()
            return
        await self._catch_up(connection)

    async def _catch_up(self, connection: Querying) -> None:
        if self._high is None:
            return
        for _ in range(CATCH_UP_MAX // PAGE):
            self._forget_old_gaps()
            rows = await connection.fetch(
                _UNSEEN, self._high, sorted(self._gaps), PAGE, timeout=FETCH_S
            )
            self._publish(rows)
            if len(rows) < PAGE:
                return
        # Too much to replay as live: readers reload their state instead.
        self._target.lost()
        self._high = int(await connection.fetchval("SELECT COALESCE(MAX(id), 0) FROM events"))
        self._gaps.clear()

    def _publish(self, rows: list[Any]) -> None:
        self._seen(int(r["id"]) for r in rows)
        if not self._target.heard():
            return
        for r in rows:
            try:
                self._publish_one(r)
            except Exception as exc:  # one bad row must not stop the feed (nor its reconnects)
                warn("live_event_skipped", event_id=int(r["id"]), error=type(exc).__name__)

    def _publish_one(self, r: Any) -> None:
        if r["type"] == CAUGHT:
            # Caught mail: no run, no run_event; gone already (deleted), nothing to show.
            if r["subject"] is not None:
                self._target.caught(r["message_id"], r["subject"], float(r["received_at"]))
            return
        event = Event(
            run_id=r["run_id"],
            type=r["type"],
            at=float(r["at"]),
            inbox_id=r["inbox_id"],
            message_id=r["message_id"],
            detail=json.loads(r["detail_json"]),
            seq=int(r["id"]),
        )
        self._target.record([event])
        if event.type == "message_accepted" and r["subject"] is not None:
            if event.inbox_id is None or event.message_id is None:
                raise ValueError("a message_accepted event without its inbox or message")
            self._target.delivered(
                event.message_id,
                event.inbox_id,
                event.run_id,
                r["subject"],
                float(r["received_at"]),
            )

    # -- the position -------------------------------------------------------------------

    def _seen(self, ids: Iterable[int]) -> None:
        now = time.monotonic()
        for n in sorted(ids):
            if self._high is None:
                self._high = n
            elif n > self._high:
                # Ids between were taken by transactions not (yet) seen to commit.
                self._gaps.update((m, now) for m in range(max(self._high + 1, n - GAPS_MAX), n))
                self._high = n
            else:
                self._gaps.pop(n, None)
        if len(self._gaps) > GAPS_MAX:
            for n in sorted(self._gaps)[: len(self._gaps) - GAPS_MAX]:
                del self._gaps[n]

    def _forget_old_gaps(self) -> None:
        cutoff = time.monotonic() - GAP_TTL_S
        for n in [n for n, at in self._gaps.items() if at < cutoff]:
            del self._gaps[n]
