"""The PostgreSQL adapter of the webhook port (``sink/webhooks/port.py``), shared by replicas.

The outbox is written by a trigger on ``events`` (migration ``011_webhooks.sql``), in the
statement that inserts the events, so in their transaction, matched against the webhooks
that transaction sees; it NOTIFYs ``db h``, which wakes every replica's worker. A delivery
row names its events row and kind; the replica that first takes it makes its id and body
from that row (``sink/event_shapes.py``, the live event's own shape) and keeps them.

The hand-off (migration ``014_hand_over.sql``): this replica's own event inserts (the mail
batch, run events) mark their statement (``handing``) when an enabled webhook may want their
runs; the trigger then leaves the NOTIFY to ``_hand_over``, which this replica runs next in
the same transaction: one statement leasing the new deliveries to its own worker, within the
cap fleet-wide, their ids and bodies made from the rows just written; after COMMIT
(``handed_over``) the worker attempts them at once, with no round of its own. A webhook
locked by another transaction (a take, a refill, a hand-off) is waited for (migration 016);
what the cap keeps back is leased by the settle that frees a slot (a refill, below).
While no enabled webhook exists, event inserts are the statements they were without
webhooks.

Taking is ``FOR UPDATE SKIP LOCKED`` on the webhooks with something due: one replica at a
time leases a webhook's deliveries, at most ``IN_FLIGHT_MAX`` leased per webhook fleet-wide,
each until ``LEASE_S`` from now, in the name of the taking worker's presence key. A worker
holds its presence lock (a session advisory lock on a connection of its own) while it runs,
so the leases of a replica that dies lose their holder's lock when its connection closes:
any replica's ``reclaim`` (each worker round, once a second: a read of the locks, and of the
pending rows only when a holder seen at the last look went) or ``resume`` (a worker
starting: every pending row against the locks) frees them at once, not at the end of the
lease, which remains the bound for a replica alive but stuck (and for one that lived less
than a second between two looks of every other worker). A worker starting also makes every
pending delivery of the fleet due at once (``resume``): after a restart each gets an attempt
within seconds.

Settles (migration ``015_settle_delivered.sql``): delivered attempts are written together,
one call for many (``settle_soon``: within ``SETTLE_SOON_S``, or at once when 8 wait, as all
of a webhook's in-flight attempts may; an attempt made in the server is written at once when
alone, else with those waiting, its settle returning once they are written). Until then each
keeps its lease, so the cap holds fleet-wide; the write frees them and, with their webhooks
locked, leases what of those webhooks is due to this worker (a refill), so deliveries the cap
kept back from a commit's hand-off wake nobody. A retry's or a failure's settle is its own
transaction, as before, and wakes the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeAlias

from asyncpg import Record

from sink import event_shapes
from sink.errors import StorageError
from sink.event_ids import EventIds
from sink.logs import warn
from sink.storage.base import Delivered, Event, Incoming
from sink.storage.postgres.feed import CAUGHT, EVENT_SELECT
from sink.webhooks.model import (
    Attempt,
    Delivery,
    DeliveryState,
    Due,
    LiveEvent,
    Outcome,
    Webhook,
    failed_event,
    glob_regex,
    late,
    new_delivery_id,
    reports_a_failure,
)
from sink.webhooks.port import IN_FLIGHT_MAX, LEASE_S, NextDue
from sink.webhooks.rows import WEBHOOK_COLUMNS, attempt_from, webhook_from, webhook_values

if TYPE_CHECKING:  # the driver's classes are generic only in its stubs
    from asyncpg import Connection as _Connection
    from asyncpg.pool import PoolConnectionProxy

    Connection: TypeAlias = _Connection[Record] | PoolConnectionProxy[Record]

Transaction = Callable[[str, Callable[["Connection"], Awaitable[Any]]], Awaitable[Any]]
Connect = Callable[[], Awaitable["_Connection[Record]"]]  # a connection of its own
Fetch = Callable[..., Awaitable[list[Record]]]  # (what, sql, *args)
InsertEvents = Callable[["Connection", Iterable[Event]], Awaitable[None]]

# As sink/webhooks/rows.py's LISTING, with the row and kind an id is made from when the
# delivery has not been taken yet (so has no event_id of its own).
_LISTING = """
SELECT * FROM (
    SELECT d.delivery_id, d.event_id, d.kind AS type, d.event_row, a.attempt, a.state,
           a.status_code, a.error, a.at, a.next_attempt_at, d.run_id,
           a.at AS k1, d.seq AS k2, a.attempt AS k3
    FROM webhook_attempts a JOIN webhook_deliveries d ON d.seq = a.delivery_seq
    WHERE a.webhook_id = $1
    UNION ALL
    SELECT d.delivery_id, d.event_id, d.kind, d.event_row, 1, d.state, NULL, NULL,
           d.created_at, CASE WHEN d.state = 'pending' THEN d.next_attempt_at END, d.run_id,
           d.created_at, d.seq, 0
    FROM webhook_deliveries d WHERE d.webhook_id = $1 AND d.attempts = 0
) rows
"""
_SELECT_HOOKS = f"SELECT {WEBHOOK_COLUMNS} FROM webhooks"

# Webhooks with something due and room under their cap, locked: another replica taking at the
# same moment skips them (a commit handing its deliveries over waits: so one at its cap is not
# locked for nothing; its settles refill it).
_DUE_HOOKS = f"""
SELECT w.webhook_id, w.url, w.secret FROM webhooks w
WHERE w.disabled_at IS NULL AND EXISTS (
    SELECT 1 FROM webhook_deliveries d WHERE d.webhook_id = w.webhook_id AND d.state = 'pending'
      AND d.next_attempt_at <= $1 AND d.lease_until <= $1)
  AND (SELECT COUNT(*) FROM webhook_deliveries l WHERE l.webhook_id = w.webhook_id
       AND l.state = 'pending' AND l.lease_until > $1) < {IN_FLIGHT_MAX}
ORDER BY (SELECT MIN(next_attempt_at) FROM webhook_deliveries d
          WHERE d.webhook_id = w.webhook_id AND d.state = 'pending')
LIMIT $2
FOR UPDATE OF w SKIP LOCKED
"""

# Their due deliveries, up to the in-flight cap less what is leased already.
_DUE = f"""
WITH leased AS (
    SELECT webhook_id, COUNT(*) AS n FROM webhook_deliveries
    WHERE webhook_id = ANY($2::text[]) AND state = 'pending' AND lease_until > $1
    GROUP BY webhook_id
), ranked AS (
    SELECT d.*, row_number() OVER (PARTITION BY d.webhook_id
                                   ORDER BY d.next_attempt_at, d.seq) AS rn
    FROM webhook_deliveries d
    WHERE d.webhook_id = ANY($2::text[]) AND d.state = 'pending' AND d.next_attempt_at <= $1
      AND d.lease_until <= $1
)
SELECT r.* FROM ranked r LEFT JOIN leased l ON l.webhook_id = r.webhook_id
WHERE r.rn <= {IN_FLIGHT_MAX} - COALESCE(l.n, 0)
ORDER BY r.next_attempt_at, r.seq
LIMIT $3
"""

SETTLE_SOON_S = 0.1  # a delivered attempt is written this late at most, with the others

# Delivered attempts, written together (migration 015): those it could not settle (s_missed:
# settled already, or ended by a 410 meanwhile) and, with a cap, what it leased to refill
# their webhooks.
_SETTLE_DELIVERED = (
    "SELECT * FROM runsink_settle_delivered($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
)

# An attempt that did not fail the delivery, recorded unless settled already (its lease ran
# out and another attempt was made): the delivery's row and the attempt's in one statement.
_SETTLED = """
WITH d AS (
    UPDATE webhook_deliveries SET state = $3, attempts = $2, lease_until = 0,
        next_attempt_at = COALESCE($4, next_attempt_at),
        event_id = COALESCE(event_id, $8), body = COALESCE(body, $9)
    WHERE delivery_id = $1 AND state = 'pending' AND attempts = $2 - 1
    RETURNING seq, webhook_id
)
INSERT INTO webhook_attempts (delivery_seq, attempt, webhook_id, state, status_code, error, at,
                              next_attempt_at)
SELECT seq, $2, webhook_id, $3, $5, $6, $7, $4 FROM d
RETURNING delivery_seq
"""

# A 410 disabled the webhook: its deliveries waiting for a retry will get none, so their
# newest attempt rows say failed (no next_attempt_at) instead of pending for ever.
_END_ATTEMPTS = """
UPDATE webhook_attempts a SET state = 'failed', next_attempt_at = NULL
WHERE a.webhook_id = $1 AND a.state = 'pending' AND EXISTS (
    SELECT 1 FROM webhook_deliveries d
    WHERE d.seq = a.delivery_seq AND d.attempts = a.attempt AND d.state = 'pending')
"""

# When the earliest pending delivery is due, and the earliest not held back by its webhook's
# cap (IN_FLIGHT_MAX leased at $1: its unleased ones wait for one of its attempts to end).
_NEXT_DUE = f"""
SELECT MIN(GREATEST(next_attempt_at, lease_until)),
       MIN(GREATEST(next_attempt_at, lease_until)) FILTER (
           WHERE lease_until > $1 OR webhook_id NOT IN (
               SELECT webhook_id FROM webhook_deliveries
               WHERE state = 'pending' AND lease_until > $1
               GROUP BY webhook_id HAVING COUNT(*) >= {IN_FLIGHT_MAX}))
FROM webhook_deliveries WHERE state = 'pending'
"""

# The presence locks' first key: (PRESENCE, holder) is held by the worker named holder.
_PRESENCE = zlib.crc32(b"runsink:webhook-presence") & 0x7FFFFFFF

# The holders alive: the presence locks held in this database.
_ALIVE = f"""
SELECT objid::bigint FROM pg_locks
WHERE locktype = 'advisory' AND classid::bigint = {_PRESENCE} AND objsubid = 2 AND granted
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""

# Leases whose holder is gone: no session in this database holds its presence lock (a worker
# starting: every pending row is read), or one of these holders' (seen gone since the last
# look: read only when a replica went).
_RECLAIM = f"""
WITH freed AS (
    UPDATE webhook_deliveries SET lease_until = 0
    WHERE state = 'pending' AND lease_until > $1 AND lease_holder IS NOT NULL
      AND lease_holder NOT IN ({_ALIVE})
    RETURNING 1
)
SELECT COUNT(*) FROM freed
"""
_RECLAIM_OF = """
WITH freed AS (
    UPDATE webhook_deliveries SET lease_until = 0
    WHERE state = 'pending' AND lease_until > $1 AND lease_holder = ANY($2::int[])
    RETURNING 1
)
SELECT COUNT(*) FROM freed
"""

# A worker starts: every pending delivery is due now, and the newest attempt row of one
# waiting for its retry says so too (its listed next_attempt_at).
_RESUME_ATTEMPTS = """
UPDATE webhook_attempts a SET next_attempt_at = $1
FROM webhook_deliveries d
WHERE d.state = 'pending' AND d.next_attempt_at > $1
  AND a.delivery_seq = d.seq AND a.attempt = d.attempts
"""
_RESUME = (
    "UPDATE webhook_deliveries SET next_attempt_at = $1 "
    "WHERE state = 'pending' AND next_attempt_at > $1"
)

_EVENT_ROWS = EVENT_SELECT + " WHERE e.id = ANY($1::bigint[])"


def handing(runs: str) -> str:
    """Three columns for a statement that inserts events of the runs in the array ``runs`` (a
    parameter) in its CTE ``e`` (``RETURNING id``): whether an enabled webhook exists; whether
    one may want these runs' events (then the trigger leaves their deliveries to
    ``_hand_over``, run next); the events' row ids, in the order of their rows."""
    return (
        "(SELECT TRUE FROM webhooks WHERE disabled_at IS NULL LIMIT 1) IS NOT NULL, "
        "(SELECT set_config('runsink.hand', 'on', true) FROM webhooks WHERE disabled_at IS NULL"
        f" AND (run_id IS NULL OR run_id = ANY ({runs})) LIMIT 1) IS NOT NULL, "
        "(SELECT array_agg(id ORDER BY id) FROM e)"
    )


# What an events row just written makes its live events of: a run's event (with, for a
# message_accepted row, the mail and its delivery), or caught mail (no event).
Source: TypeAlias = tuple[Event | None, Incoming | None, Delivered | None]

# The deliveries the events statement before it wrote that the cap lets this replica lease,
# leased to it (migration 014), with their webhook's url and secret.
_HAND_OVER = f"SELECT * FROM runsink_hand_over($1, {IN_FLIGHT_MAX}, $2, $3)"


# The deliveries a transaction handed over, to the worker once it commits (``handed_over``).
_HANDED: ContextVar[list[Due] | None] = ContextVar("runsink_pg_handed", default=None)


@contextlib.contextmanager
def handed_over() -> Iterator[list[Due]]:
    """Collect what this task's transaction hands over (``_hand_over``) until it ends."""
    handed: list[Due] = []
    token = _HANDED.set(handed)
    try:
        yield handed
    finally:
        _HANDED.reset(token)


class PostgresWebhooks:
    def __init__(
        self, transaction: Transaction, fetch: Fetch, insert_events: InsertEvents, connect: Connect
    ) -> None:
        self._transaction = transaction
        self._fetch = fetch
        self._insert_events = insert_events
        self._connect = connect
        # This worker's presence lock, once it runs (resume): its connection, and the key
        # its leases carry (None: no lock held, and leases name no holder).
        self._presence: _Connection[Record] | None = None
        self.holder: int | None = None
        self._alive: set[int] = set()  # the holders alive at the last look (reclaim)
        self._ids = EventIds()  # keyed by the store's signing key at open
        self.wake: Callable[[], None] | None = None  # the delivery worker's, once it runs
        self.hand: Callable[[list[Due]], None] | None = None  # the worker's: attempt these now
        # Whether an enabled webhook may exist: while not, event inserts are exactly what they
        # were without webhooks. Cleared by an insert that found none; set by a webhook made
        # here and by any replica's deliveries ('db h': the trigger found one).
        self._hooked = True
        # What each handed-over delivery in flight carries, written with its settle (a retry
        # sends the same bytes; a failure's run event names the event).
        self._made: dict[str, tuple[str, str]] = {}
        # Delivered attempts not written yet (settle_soon, and settles that joined them); what
        # those settles wait for (their write); the timer that writes them; the writes under way.
        self._soon: list[Outcome] = []
        self._soon_done: asyncio.Future[None] | None = None
        self._soon_timer: asyncio.TimerHandle | None = None
        self._writes: set[asyncio.Task[None]] = set()
        self.settle_soon: Callable[[Due, Outcome], bool] | None = self._settle_soon
        # A delivered attempt's write leases its webhook's next due deliveries (within the cap,
        # fleet-wide) and hands them to the worker (runsink_settle_delivered).
        self.refills = True
        self.child_db: str | None = None  # the delivery child writes nothing here

    def keyed(self, signing_key: bytes) -> None:
        self._ids = EventIds(signing_key)

    async def close(self) -> None:
        """Write the delivered attempts that wait; give up the presence lock (its connection)."""
        if self._soon_timer is not None:
            self._soon_timer.cancel()
            self._soon_timer = None
        if self._soon:
            batch, done = self._soon, self._soon_done
            self._soon, self._soon_done = [], None
            await self._write(batch, done, refill=False)  # (not written: sent after the restart)
        await asyncio.gather(*self._writes, return_exceptions=True)
        await self._let_go()

    async def _let_go(self) -> None:
        """Give up the presence lock (its connection)."""
        presence, self._presence, self.holder = self._presence, None, None
        if presence is not None:
            presence.terminate()

    @property
    def handing_over(self) -> bool:
        """Whether this replica's event inserts ask (``handing``) to hand their deliveries over:
        a worker runs here and an enabled webhook may exist."""
        return self.hand is not None and self._hooked

    async def handing_said(
        self, db: Connection, row: Record | None, sources: Sequence[Source]
    ) -> None:
        """After an events statement with the ``handing`` columns, in its transaction;
        ``sources`` says what each of its events rows is, in the order of the rows."""
        if row is None:
            return
        self._hooked = bool(row[0])
        if row[1]:
            await self._hand_over(db, dict(zip(row[2] or (), sources, strict=False)))

    async def _hand_over(self, db: Connection, sources: dict[int, Source]) -> None:
        """Lease the deliveries the events statement just wrote to this replica's worker
        (within the cap); they go to the worker once the transaction commits (``handed``)."""
        lease_until = time.time() + LEASE_S
        rows = await db.fetch(_HAND_OVER, time.time(), lease_until, self.holder)
        dues: list[Due] = []
        for r in rows:
            source = sources.get(int(r["hand_row"]))
            live = (
                None
                if source is None
                else self._live_of(source, int(r["hand_row"]), r["hand_kind"])
            )
            if live is None:  # never: this transaction wrote the row, and the trigger agrees
                continue
            body = live.body()
            self._made[r["hand_delivery"]] = (live.id, body)
            dues.append(
                Due(
                    r["hand_delivery"],
                    r["hand_webhook"],
                    r["hand_url"],
                    r["hand_secret"],
                    live.id,
                    r["hand_kind"],
                    r["hand_run"],
                    body,
                    1,
                    lease_until,
                )
            )
        handed = _HANDED.get()
        if handed is not None:
            handed.extend(dues)

    def _live_of(self, source: Source, row_id: int, kind: str) -> LiveEvent | None:
        """The live event of this kind that an events row just written makes (as
        ``_made_of`` makes it from the row)."""
        event, item, delivery = source
        if kind == "message" and item is not None:
            subject, at = item.summary.subject, item.received_at
            if delivery is not None:
                return event_shapes.delivered(
                    self._ids, delivery.message_id, delivery.inbox_id, delivery.run_id, subject, at
                )
            if item.caught_id is not None:
                return event_shapes.caught(self._ids, item.caught_id, subject, at)
            return None
        if event is None:
            return None
        return next(
            (e for e in event_shapes.of_event(event, self._ids, row_id) if e.type == kind), None
        )

    def handed(self, dues: list[Due]) -> None:
        """After the commit that leased them: the worker makes their first attempts now."""
        if dues and self.hand is not None:
            self.hand(dues)

    def notified(self) -> None:
        """A replica's commit queued deliveries (``db h``): the worker looks now."""
        self._hooked = True
        if self.wake is not None:
            self.wake()

    async def create_webhook(self, webhook: Webhook) -> None:
        regex = None if webhook.run_glob is None else glob_regex(webhook.run_glob)

        async def work(db: Connection) -> None:
            self._hooked = True
            await db.execute(
                f"INSERT INTO webhooks ({WEBHOOK_COLUMNS}, run_regex) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                *webhook_values(webhook),
                regex,
            )

        await self._transaction("create_webhook", work)

    async def webhooks(self) -> list[Webhook]:
        rows = await self._fetch("webhooks", _SELECT_HOOKS + " ORDER BY created_at, webhook_id")
        return [webhook_from(r) for r in rows]

    async def webhook(self, webhook_id: str) -> Webhook | None:
        rows = await self._fetch("webhook", _SELECT_HOOKS + " WHERE webhook_id = $1", webhook_id)
        return webhook_from(rows[0]) if rows else None

    async def delete_webhook(self, webhook_id: str) -> bool:
        async def work(db: Connection) -> bool:
            gone = await db.fetchval(
                "WITH x AS (DELETE FROM webhooks WHERE webhook_id = $1 RETURNING 1) "
                "SELECT COUNT(*) FROM x",
                webhook_id,
            )
            await db.execute("DELETE FROM webhook_deliveries WHERE webhook_id = $1", webhook_id)
            await db.execute("DELETE FROM webhook_attempts WHERE webhook_id = $1", webhook_id)
            return bool(gone)

        return bool(await self._transaction("delete_webhook", work))

    async def deliveries(
        self, webhook_id: str, before: tuple[float, int, int] | None, limit: int
    ) -> list[Attempt]:
        sql = _LISTING
        args: list[Any] = [webhook_id]
        if before is not None:
            sql += " WHERE (k1, k2, k3) < ($2, $3, $4)"
            args += list(before)
        sql += f" ORDER BY k1 DESC, k2 DESC, k3 DESC LIMIT ${len(args) + 1}"
        rows = await self._fetch("webhook deliveries", sql, *args, limit)
        missing = sorted({int(r["event_row"]) for r in rows if r["event_id"] is None})
        made = await self._live(missing) if missing else {}
        out = []
        for r in rows:
            attempt = attempt_from(r)
            if r["event_id"] is None:
                live = made.get((int(r["event_row"]), r["type"]))
                event_id = live.id if live is not None else ""
                attempt = _with_event_id(attempt, event_id)
            out.append(attempt)
        return out

    async def enqueue_ping(self, webhook_id: str, now: float) -> str | None:
        delivery_id = new_delivery_id()
        live = event_shapes.ping(self._ids, delivery_id, webhook_id, now)

        async def work(db: Connection) -> bool:
            added = await db.fetchval(
                "WITH x AS (INSERT INTO webhook_deliveries (delivery_id, webhook_id, kind, "
                "event_id, body, created_at, next_attempt_at) "
                "SELECT $1, webhook_id, 'ping', $2, $3, $4, $4 FROM webhooks "
                "WHERE webhook_id = $5 RETURNING 1) SELECT COUNT(*) FROM x",
                delivery_id,
                live.id,
                live.body(),
                now,
                webhook_id,
            )
            if added:
                await db.execute("SELECT pg_notify('runsink', 'db h')")
            return bool(added)

        return delivery_id if await self._transaction("enqueue_ping", work) else None

    async def resume(self, now: float) -> None:
        await self._present()

        async def work(db: Connection) -> None:
            self._alive = {int(r[0]) for r in await db.fetch(_ALIVE)}
            await db.fetch(_RECLAIM, now)
            await db.execute(_RESUME_ATTEMPTS, now)
            await db.execute(_RESUME, now)

        await self._transaction("resume", work)

    async def reclaim(self, now: float) -> int:
        # One read of the locks a second; the pending rows only when a holder went since.
        await self._present()
        alive = {int(r[0]) for r in await self._fetch("presence", _ALIVE)}
        gone, self._alive = self._alive - alive, alive
        if not gone:
            return 0
        rows = await self._fetch("reclaim", _RECLAIM_OF, now, sorted(gone))
        return int(rows[0][0])

    async def _present(self) -> None:
        """Hold this worker's presence lock: taken anew (a new key) if its connection was
        lost, as the leases it named may have been freed meanwhile."""
        if self._presence is not None and not self._presence.is_closed():
            return
        await self._let_go()
        connection = await self._connect()
        try:
            while True:
                key = secrets.randbelow(2**31 - 1) + 1
                if await connection.fetchval("SELECT pg_try_advisory_lock($1, $2)", _PRESENCE, key):
                    break
        except BaseException:
            connection.terminate()
            raise
        self._presence, self.holder = connection, key

    async def take_due(self, now: float, limit: int) -> list[Due]:
        async def work(db: Connection) -> list[Due]:
            # Not waiting for the WAL flush: all this writes (leases, ids and bodies made from
            # the events row) is remade by the next take if a database crash loses it; the
            # deliveries stay at least once. Others see the leases at once, as before.
            await db.execute("SET LOCAL synchronous_commit = off")
            hooks = {r["webhook_id"]: r for r in await db.fetch(_DUE_HOOKS, now, limit)}
            if not hooks:
                return []
            rows = await db.fetch(_DUE, now, list(hooks), limit)
            if not rows:
                return []  # their caps are full
            missing = sorted({int(r["event_row"]) for r in rows if r["body"] is None})
            made = await self._live(missing, db) if missing else {}
            lease_until = now + LEASE_S
            taken: list[Due] = []
            made_rows: list[tuple[Any, ...]] = []
            for r in rows:
                event_id, body = r["event_id"], r["body"]
                if body is None:
                    live = made.get((int(r["event_row"]), r["kind"]))
                    if live is None:
                        continue  # its event is gone (caught mail deleted): see below
                    event_id, body = live.id, live.body()
                    made_rows.append((r["seq"], event_id, body))
                hook = hooks[r["webhook_id"]]
                taken.append(
                    Due(
                        r["delivery_id"],
                        r["webhook_id"],
                        hook["url"],
                        hook["secret"],
                        event_id,
                        r["kind"],
                        r["run_id"],
                        body,
                        int(r["attempts"]) + 1,
                        lease_until,
                    )
                )
            gone = [
                r["seq"]
                for r in rows
                if r["body"] is None and (int(r["event_row"]), r["kind"]) not in made
            ]
            if gone:
                await db.execute(
                    "UPDATE webhook_deliveries SET state = 'failed' WHERE seq = ANY($1::bigint[])",
                    gone,
                )
            if made_rows:
                await db.execute(
                    "UPDATE webhook_deliveries d SET event_id = m.event_id, body = m.body "
                    "FROM unnest($1::bigint[], $2::text[], $3::text[]) AS m(seq, event_id, body) "
                    "WHERE d.seq = m.seq",
                    [m[0] for m in made_rows],
                    [m[1] for m in made_rows],
                    [m[2] for m in made_rows],
                )
            await db.execute(
                "UPDATE webhook_deliveries SET lease_until = $1, lease_holder = $3 "
                "WHERE delivery_id = ANY($2::text[])",
                lease_until,
                [d.delivery_id for d in taken],
                self.holder,
            )
            return taken

        result: list[Due] = await self._transaction("take_due", work)
        return result

    def _settle_soon(self, due: Due, outcome: Outcome) -> bool:
        """A delivered attempt: written within SETTLE_SOON_S with the others that end near it
        (one statement per table for them all), or at once when 8 wait (all of a webhook's
        in-flight attempts may: the write refills them). Its lease, the fleet's count of
        in-flight attempts, holds its slot until then: the cap stays exact across replicas."""
        self._queue(outcome)
        return True

    def _queue(self, outcome: Outcome) -> None:
        self._soon.append(outcome)
        if len(self._soon) >= IN_FLIGHT_MAX:
            self._write_soon()
        elif self._soon_timer is None:
            loop = asyncio.get_running_loop()
            self._soon_timer = loop.call_later(SETTLE_SOON_S, self._write_soon)

    def _write_soon(self) -> None:
        if self._soon_timer is not None:
            self._soon_timer.cancel()
            self._soon_timer = None
        if self._soon:
            write = asyncio.create_task(self._write(self._soon, self._soon_done))
            self._soon, self._soon_done = [], None
            self._writes.add(write)
            write.add_done_callback(self._writes.discard)

    async def _write(
        self, outcomes: list[Outcome], done: asyncio.Future[None] | None, refill: bool = True
    ) -> None:
        """Write a batch; ``done`` tells the settles that joined it how it went."""
        try:
            await self._settle_delivered(outcomes, refill)
        except StorageError as exc:
            # Not recorded: when their leases end they are delivered again (at least once).
            warn("webhook_settle_failed", deliveries=len(outcomes), error=type(exc).__name__)
            if done is not None:
                done.set_exception(exc)
                done.exception()  # (told to whoever waits; none may, once cancelled)
            if self.wake is not None:
                self.wake()
            return
        if done is not None:
            done.set_result(None)

    async def _settle_delivered(self, outcomes: list[Outcome], refill: bool = True) -> None:
        """Write delivered attempts (one call, migration 015) and, with ``refill``, hand the
        worker what their webhooks' freed slots leased; those it could not settle one by one."""
        made = [self._made.pop(o.delivery_id, (None, None)) for o in outcomes]
        # (the attempts' clock, or now if later: a delivery written after they ended is due)
        now = max(time.time(), *(o.at for o in outcomes))
        refill = refill and self.hand is not None
        rows = await self._fetch(
            "settle",
            _SETTLE_DELIVERED,
            [o.delivery_id for o in outcomes],
            [o.attempt for o in outcomes],
            [o.status_code for o in outcomes],
            [o.at for o in outcomes],
            [m[0] for m in made],
            [m[1] for m in made],
            now,
            IN_FLIGHT_MAX if refill else 0,
            now + LEASE_S,
            self.holder,
        )
        missed = {r["s_missed"] for r in rows if r["s_missed"] is not None}
        for outcome, (event_id, body) in zip(outcomes, made, strict=True):
            if outcome.delivery_id in missed:
                await self._settle_one(outcome, event_id, body)
        leased = [r for r in rows if r["s_missed"] is None]
        if leased:
            self.handed(await self._refilled(leased, now + LEASE_S))

    async def _refilled(self, rows: list[Record], lease_until: float) -> list[Due]:
        """The deliveries a settle leased, as the worker attempts them: a body not made yet
        is made from its events row (kept, and written with its settle, as a hand-over's); one
        whose event is gone is left to its lease (then take_due fails it)."""
        missing = sorted({int(r["s_row"]) for r in rows if r["s_body"] is None})
        made = await self._live(missing) if missing else {}
        dues: list[Due] = []
        for r in rows:
            event_id, body = r["s_event_id"], r["s_body"]
            if body is None:
                live = made.get((int(r["s_row"]), r["s_kind"]))
                if live is None:
                    continue
                event_id, body = live.id, live.body()
                self._made[r["s_delivery"]] = (event_id, body)
            dues.append(
                Due(
                    r["s_delivery"],
                    r["s_webhook"],
                    r["s_url"],
                    r["s_secret"],
                    event_id,
                    r["s_kind"],
                    r["s_run"],
                    body,
                    int(r["s_attempts"]) + 1,
                    lease_until,
                )
            )
        return dues

    async def settle(self, outcome: Outcome) -> None:
        if outcome.state is DeliveryState.DELIVERED and not outcome.disable:
            # Alone (sparse mail): written now, so whoever lists the deliveries once the
            # receiver answered sees it. Beside delivered attempts that wait (a stream): with
            # them, returning once they are written. Either write refills the freed slot.
            if not self._soon:
                await self._settle_delivered([outcome])
                return
            if self._soon_done is None:
                self._soon_done = asyncio.get_running_loop().create_future()
            done = self._soon_done
            self._queue(outcome)
            await asyncio.shield(done)
            return
        event_id, body = self._made.pop(outcome.delivery_id, (None, None))
        await self._settle_one(outcome, event_id, body)

    async def _settle_one(self, outcome: Outcome, event_id: str | None, body: str | None) -> None:
        # To be retried: one statement (its own transaction, one round trip).
        # Not recorded by it: settled already, or a 410 ended the delivery meanwhile (below).
        # A handed-over delivery's id and body are written with it (take_due makes them else).
        if (
            outcome.state is not DeliveryState.FAILED
            and not outcome.disable
            and await self._fetch(
                "settle",
                _SETTLED,
                outcome.delivery_id,
                outcome.attempt,
                outcome.state.value,
                outcome.next_attempt_at,
                outcome.status_code,
                outcome.error,
                outcome.at,
                event_id,
                body,
            )
        ):
            return

        async def work(db: Connection) -> None:
            if outcome.disable:
                # The webhook's row before the delivery's: two 410s of one webhook (each
                # failing the other's delivery) wait for each other instead of deadlocking.
                await db.execute(
                    "SELECT 1 FROM webhooks WHERE webhook_id = "
                    "(SELECT webhook_id FROM webhook_deliveries WHERE delivery_id = $1) FOR UPDATE",
                    outcome.delivery_id,
                )
            row = await db.fetchrow(
                "SELECT * FROM webhook_deliveries WHERE delivery_id = $1 FOR UPDATE",
                outcome.delivery_id,
            )
            if row is None or row["attempts"] + 1 != outcome.attempt:
                return  # settled already (its lease ran out and another attempt was made)
            ended = row["state"] == "failed"  # by a 410 while this attempt was in flight
            if row["state"] != "pending" and not ended:
                return
            made = late(outcome) if ended else outcome
            await db.execute(
                "INSERT INTO webhook_attempts (delivery_seq, attempt, webhook_id, state, "
                "status_code, error, at, next_attempt_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                row["seq"],
                made.attempt,
                row["webhook_id"],
                made.state.value,
                made.status_code,
                made.error,
                made.at,
                made.next_attempt_at,
            )
            await db.execute(
                "UPDATE webhook_deliveries SET state = $1, attempts = $2, lease_until = 0, "
                "next_attempt_at = COALESCE($3, next_attempt_at), "
                "event_id = COALESCE(event_id, $5), body = COALESCE(body, $6) WHERE seq = $4",
                made.state.value,
                made.attempt,
                made.next_attempt_at,
                row["seq"],
                event_id,
                body,
            )
            if made.disable:
                await db.execute(
                    "UPDATE webhooks SET disabled_at = $1 WHERE webhook_id = $2",
                    made.at,
                    row["webhook_id"],
                )
                await db.execute(_END_ATTEMPTS, row["webhook_id"])
                await db.execute(
                    "UPDATE webhook_deliveries SET state = 'failed' "
                    "WHERE webhook_id = $1 AND state = 'pending'",
                    row["webhook_id"],
                )
            if made.state is DeliveryState.FAILED and row["run_id"] is not None and not ended:
                delivery = Delivery(
                    row["delivery_id"],
                    row["webhook_id"],
                    row["event_id"] or event_id or "",
                    row["kind"],
                    row["run_id"],
                    row["body"] or body or "",
                    float(row["created_at"]),
                )
                if not reports_a_failure(delivery):
                    await self._insert_events(db, [failed_event(delivery, made)])

        await self._transaction("settle", work)

    def recorded(self, dues: list[Due], now: float) -> None:
        pass  # (child_db is None: never called)

    async def next_due(self, now: float) -> NextDue:
        rows = await self._fetch("next_due", _NEXT_DUE, now)
        return NextDue(*(None if v is None else float(v) for v in rows[0]))

    async def pending_count(self) -> int:
        rows = await self._fetch(
            "pending_count", "SELECT COUNT(*) FROM webhook_deliveries WHERE state = 'pending'"
        )
        return int(rows[0][0])

    async def prune(self, before: float) -> int:
        rows = await self._fetch(
            "prune webhook deliveries",
            """WITH d AS (
                   DELETE FROM webhook_deliveries WHERE state <> 'pending' AND created_at < $1
                   RETURNING seq
               ), a AS (
                   DELETE FROM webhook_attempts WHERE delivery_seq IN (SELECT seq FROM d)
               )
               SELECT COUNT(*) FROM d""",
            before,
        )
        return int(rows[0][0])

    async def _live(
        self, event_rows: list[int], db: Connection | None = None
    ) -> dict[tuple[int, str], LiveEvent]:
        """The live events of these events rows, by (row, kind): what a delivery carries."""
        if db is not None:
            rows = await db.fetch(_EVENT_ROWS, event_rows)
        else:
            rows = await self._fetch("webhook events", _EVENT_ROWS, event_rows)
        return self._made_of(rows)

    def _made_of(self, rows: Iterable[Record]) -> dict[tuple[int, str], LiveEvent]:
        """The live events of events rows (EVENT_SELECT's columns), by (row, kind)."""
        made: dict[tuple[int, str], LiveEvent] = {}
        for r in rows:
            row_id = int(r["id"])
            if r["type"] == CAUGHT:
                if r["subject"] is not None:
                    made[(row_id, "message")] = event_shapes.caught(
                        self._ids, r["message_id"], r["subject"], float(r["received_at"])
                    )
                continue
            event = Event(
                r["run_id"],
                r["type"],
                float(r["at"]),
                r["inbox_id"],
                r["message_id"],
                json.loads(r["detail_json"]),
                row_id,
            )
            for live in event_shapes.of_event(event, self._ids, row_id):
                made[(row_id, live.type)] = live
            if event.type == "message_accepted" and r["subject"] is not None:
                made[(row_id, "message")] = event_shapes.delivered(
                    self._ids,
                    r["message_id"],
                    r["inbox_id"],
                    r["run_id"],
                    r["subject"],
                    float(r["received_at"]),
                )
        return made


def _with_event_id(attempt: Attempt, event_id: str) -> Attempt:
    return replace(attempt, event_id=event_id)
