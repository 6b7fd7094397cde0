"""The SQLite adapter of the webhook port (``sink/webhooks/port.py``), and its outbox.

One process owns the file, so the webhooks live in an exact in-process cache beside their
table: the cache changes inside the writer's transaction that changes the table (the writer
runs one write at a time), so every event committed after a webhook's creation is matched
against it, and none before. ``queue`` runs inside the transactions that insert events or
store mail: with no webhook it returns at once (the ingest path pays one attribute read);
otherwise it writes the delivery rows in that same transaction, leased to this process's
worker (HELD_MAX of a webhook at most), and hands those to the worker once the commit
is durable (``handed``, from ``SQLiteStore._committed``): a first attempt needs no
transaction of its own. The worker keeps the cap of 8 attempts in flight per webhook, so a
stream's deliveries are handed over as they are written (HELD_MAX of a webhook at most;
what is not handed over wakes the worker to take it). Their delivered attempts are written
by the delivery child, on its own connection (``record_delivered``): the writer that takes
the mail never sees them. Other settles waiting together are written as one (the writer's
shared batch), and each leases the next due deliveries of its webhook to the worker in that
commit (``_refill``). Leases are cleared at open, as the process that held them is gone (a
handed-over delivery's lasts until the worker settles it: HELD_UNTIL); and when the worker
starts (``resume``) every pending delivery is due at once, a retry's schedule included.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from sink import event_shapes
from sink.errors import StorageError
from sink.event_ids import EventIds
from sink.logs import warn
from sink.storage.base import Event, Incoming
from sink.storage.sqlite.writer import note
from sink.webhooks.model import (
    Attempt,
    Delivery,
    DeliveryState,
    Due,
    LiveEvent,
    Outcome,
    Webhook,
    deliveries_for,
    failed_event,
    late,
    new_delivery_id,
    reports_a_failure,
)
from sink.webhooks.port import IN_FLIGHT_MAX, LEASE_S, NextDue
from sink.webhooks.rows import (
    LISTING,
    WEBHOOK_COLUMNS,
    attempt_from,
    due_from,
    webhook_from,
    webhook_values,
)

Transaction = Callable[[Callable[[sqlite3.Connection], Any]], Any]  # Writer.transaction
Shared = Callable[[Callable[[sqlite3.Connection, list[Any]], None], Any], Any]  # Writer.shared
Read = Callable[[str, Sequence[Any]], Any]  # SQLiteStore._read (awaitable rows)
InsertEvents = Callable[[sqlite3.Connection, Iterable[Event]], None]

_LISTING = LISTING.replace("{P1}", "?").replace("{P2}", "?")

# Deliveries handed over in their commit are leased to this process's worker until it settles
# them (one process owns the file: open frees every lease), as they may wait there for their
# webhook's cap (IN_FLIGHT_MAX attempts in flight, kept by the worker); HELD_MAX of a webhook
# at most (the rest wait here, pending, for a round to take them).
HELD_UNTIL = 1e12
HELD_MAX = 1024
_REFILL_MAX = 256  # leased by one refill


class Delivered(NamedTuple):
    """A delivered attempt the delivery child writes itself (``record_delivered``)."""

    delivery_id: str
    attempt: int
    status_code: int
    at: float


def record_delivered(db: sqlite3.Connection, batch: list[Delivered]) -> set[str]:
    """Write delivered attempts in one transaction of ``db`` (the delivery child's own
    connection to the store's file): the ids written. One whose row changed meanwhile (a
    410 ended it, its attempt was made again) is not: the server settles those."""
    outcomes = [
        Outcome(d.delivery_id, d.attempt, d.at, d.status_code, None, DeliveryState.DELIVERED)
        for d in batch
    ]
    db.execute("BEGIN IMMEDIATE")
    try:
        written = write_attempts(db, outcomes, ended_too=False)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return {row["delivery_id"] for row, _, _ in written}


Written = tuple[Any, Outcome, bool]  # (the delivery's row, the attempt as written, ended)


def write_attempts(
    db: sqlite3.Connection, outcomes: list[Outcome], ended_too: bool
) -> list[Written]:
    """Inside a transaction of ``db``: write each attempt whose
    delivery still waits for it (its row pending, at the attempt before it) and settle the
    row; the rows written, with the attempt as written and whether a 410 had ended the
    delivery while it was in flight (``ended_too``: such an attempt is written as ``late``
    says; otherwise it is left, as any other whose row changed)."""
    ids = [o.delivery_id for o in outcomes]
    marks = ",".join("?" * len(ids))
    reading = db.cursor()
    reading.row_factory = sqlite3.Row  # (whatever the connection's: the child's, the writer's)
    rows = {
        r["delivery_id"]: r
        for r in reading.execute(
            "SELECT seq, delivery_id, webhook_id, attempts, state, run_id "
            f"FROM webhook_deliveries WHERE delivery_id IN ({marks})",
            ids,
        ).fetchall()
    }
    written: list[Written] = []
    for outcome in outcomes:
        row = rows.pop(outcome.delivery_id, None)
        if row is None or row["attempts"] + 1 != outcome.attempt:
            continue  # settled already (its lease ran out and another attempt was made)
        ended = row["state"] == "failed"  # by a 410 while this attempt was in flight
        if row["state"] != "pending" and not (ended and ended_too):
            continue
        written.append((row, late(outcome) if ended else outcome, ended))
    db.executemany(
        "INSERT INTO webhook_attempts (delivery_seq, attempt, webhook_id, state, "
        "status_code, error, at, next_attempt_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                row["seq"],
                made.attempt,
                row["webhook_id"],
                made.state.value,
                made.status_code,
                made.error,
                made.at,
                made.next_attempt_at,
            )
            for row, made, _ in written
        ],
    )
    db.executemany(
        "UPDATE webhook_deliveries SET state = ?, attempts = ?, lease_until = 0, "
        "next_attempt_at = COALESCE(?, next_attempt_at) WHERE seq = ?",
        [
            (made.state.value, made.attempt, made.next_attempt_at, row["seq"])
            for row, made, _ in written
        ],
    )
    return written


class SQLiteWebhooks:
    def __init__(
        self,
        transaction: Transaction,
        shared: Shared,
        read: Read,
        insert_events: InsertEvents,
        path: str,
    ) -> None:
        self._transaction = transaction
        self._shared = shared
        self._read = read
        self._insert_events = insert_events
        self._ids = EventIds()  # keyed by the store's signing key at open
        self._hooks: dict[str, Webhook] = {}  # the exact cache (see the module docstring)
        # Deliveries leased to the worker, by webhook: kept by the writer's thread as it
        # leases (hand-off, take_due) and settles, and by the loop as the delivery child says
        # it wrote some (``recorded``); made exact again from the table at every take_due.
        # Under ``_lock``.
        self._leased: dict[str, int] = {}
        self._lock = threading.Lock()
        # Webhooks with due deliveries HELD_MAX kept back (a settle then refills at once).
        self._backlog: set[str] = set()
        self._refills: set[asyncio.Task[None]] = set()  # (kept: not GC'd)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.wake: Callable[[], None] | None = None  # the delivery worker's, once it runs
        self.hand: Callable[[list[Due]], None] | None = None  # the worker's: attempt these now
        self.refills = True  # a settle leases its webhook's next due deliveries (_refill)
        self.settle_soon: Callable[[Due, Outcome], bool] | None = None  # the child writes them
        self.child_db: str | None = path  # the delivery child writes delivered attempts here

    async def open(self, signing_key: bytes) -> None:
        """At the store's open: load the cache, free the leases of the process before."""
        self._ids = EventIds(signing_key)
        self._loop = asyncio.get_running_loop()

        def work(db: sqlite3.Connection) -> None:
            rows = db.execute(f"SELECT {WEBHOOK_COLUMNS} FROM webhooks ORDER BY created_at, rowid")
            self._hooks = {w.webhook_id: w for w in map(webhook_from, rows.fetchall())}
            db.execute("UPDATE webhook_deliveries SET lease_until = 0 WHERE lease_until > 0")

        await self._transaction(work)

    # -- the outbox, inside the writer's transactions -----------------------------------

    def queue_events(self, db: sqlite3.Connection, events: list[Event]) -> None:
        """Stored run events (with their row ids): their deliveries, in the same transaction."""
        if self._hooks and events:
            self._queue(db, event_shapes.of_events(events, self._ids), events[0].at)

    def queue_mail(self, db: sqlite3.Connection, items: list[Incoming]) -> None:
        """Stored mail: its message events' deliveries, in the same transaction."""
        if self._hooks:
            for item in items:
                self._queue(db, event_shapes.of_incoming(item, self._ids), item.received_at)

    def _queue(self, db: sqlite3.Connection, events: list[LiveEvent], now: float) -> None:
        added = deliveries_for(list(self._hooks.values()), events, now)
        if not added:
            return
        handed = self._hand_off(db, added) if self.hand is not None else []
        _insert_deliveries(db, added, {d.delivery_id: d.lease_until for d in handed})
        note(db, handed)  # to the worker once this commit is durable (SQLiteStore._committed)
        if self.hand is None or self._left_unhanded(added, handed):
            self._wake_soon()

    def _left_unhanded(self, added: list[Delivery], handed: list[Due]) -> bool:
        """Deliveries not handed over that nothing held will bring: a webhook holding HELD_MAX
        gets its next ones as the worker settles (``_refill``) or the child writes
        (``recorded`` wakes the worker) what it holds, so the worker needs no round (a
        transaction and two reads) per commit while a stream of mail keeps it full."""
        if len(handed) == len(added):
            return False
        taken = {d.delivery_id for d in handed}
        with self._lock:
            return any(
                self._leased.get(d.webhook_id, 0) <= 0 for d in added if d.delivery_id not in taken
            )

    def _hand_off(self, db: sqlite3.Connection, added: list[Delivery]) -> list[Due]:
        """Lease new deliveries to this process's worker in the transaction that writes them
        (HELD_MAX of a webhook at most; the worker keeps the cap): their first attempt needs
        no transaction of its own."""
        lease_until = HELD_UNTIL
        leased = self._leased
        handed: list[Due] = []
        for d in added:
            hook = self._hooks[d.webhook_id]
            with self._lock:
                if leased.get(hook.webhook_id, 0) >= HELD_MAX:
                    self._backlog.add(hook.webhook_id)
                    continue
                leased[hook.webhook_id] = leased.get(hook.webhook_id, 0) + 1
            handed.append(
                Due(
                    d.delivery_id,
                    d.webhook_id,
                    hook.url,
                    hook.secret,
                    d.event_id,
                    d.type,
                    d.run_id,
                    d.body,
                    1,
                    lease_until,
                )
            )
        return handed

    def handed(self, dues: list[Due]) -> None:
        """After the commit that leased them: the worker makes their first attempts now."""
        if self.hand is not None:
            self.hand(dues)

    def _wake_soon(self) -> None:
        # From the writer's thread. The worker's next take_due queues behind this write.
        if self._loop is not None and self.wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody to wake
                self._loop.call_soon_threadsafe(self.wake)

    # -- the port --------------------------------------------------------------------------

    async def create_webhook(self, webhook: Webhook) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.execute(
                f"INSERT INTO webhooks ({WEBHOOK_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                webhook_values(webhook),
            )
            self._hooks[webhook.webhook_id] = webhook

        try:
            await self._transaction(work)
        except BaseException:
            self._hooks.pop(webhook.webhook_id, None)
            raise

    async def webhooks(self) -> list[Webhook]:
        return list(self._hooks.values())

    async def webhook(self, webhook_id: str) -> Webhook | None:
        return self._hooks.get(webhook_id)

    async def delete_webhook(self, webhook_id: str) -> bool:
        def work(db: sqlite3.Connection) -> bool:
            gone = db.execute("DELETE FROM webhooks WHERE webhook_id = ?", (webhook_id,)).rowcount
            db.execute("DELETE FROM webhook_deliveries WHERE webhook_id = ?", (webhook_id,))
            db.execute("DELETE FROM webhook_attempts WHERE webhook_id = ?", (webhook_id,))
            self._hooks.pop(webhook_id, None)
            return bool(gone)

        return bool(await self._transaction(work))

    async def deliveries(
        self, webhook_id: str, before: tuple[float, int, int] | None, limit: int
    ) -> list[Attempt]:
        sql = _LISTING
        params: list[Any] = [webhook_id, webhook_id]
        if before is not None:
            sql += " WHERE (k1, k2, k3) < (?, ?, ?)"
            params += list(before)
        sql += " ORDER BY k1 DESC, k2 DESC, k3 DESC LIMIT ?"
        rows = await self._read(sql, [*params, limit])
        return [attempt_from(r) for r in rows]

    async def enqueue_ping(self, webhook_id: str, now: float) -> str | None:
        if webhook_id not in self._hooks:
            return None
        delivery_id = new_delivery_id()
        live = event_shapes.ping(self._ids, delivery_id, webhook_id, now)
        delivery = Delivery(delivery_id, webhook_id, live.id, live.type, None, live.body(), now)

        def work(db: sqlite3.Connection) -> None:
            _insert_deliveries(db, [delivery])

        await self._transaction(work)
        if self.wake is not None:
            self.wake()
        return delivery_id

    async def resume(self, now: float) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.execute(_RESUME_ATTEMPTS, (now,))
            db.execute(
                "UPDATE webhook_deliveries SET next_attempt_at = ? "
                "WHERE state = 'pending' AND next_attempt_at > ?",
                (now, now),
            )

        await self._transaction(work)

    async def reclaim(self, now: float) -> int:
        return 0  # one process owns the file: open freed the leases of the one before

    async def take_due(self, now: float, limit: int) -> list[Due]:
        def work(db: sqlite3.Connection) -> list[Due]:
            leased = dict(
                db.execute(
                    "SELECT webhook_id, COUNT(*) FROM webhook_deliveries "
                    "WHERE state = 'pending' AND lease_until > ? GROUP BY +webhook_id",
                    (now,),
                ).fetchall()
            )
            rows = db.execute(_DUE, (now, IN_FLIGHT_MAX, limit)).fetchall()
            taken: list[Due] = []
            for row in rows:
                hook = row["webhook_id"]
                if len(taken) >= limit or leased.get(hook, 0) >= IN_FLIGHT_MAX:
                    continue
                leased[hook] = leased.get(hook, 0) + 1
                taken.append(due_from(row, now + LEASE_S))
            with self._lock:
                self._leased = leased
            for hook, n in leased.items():
                if n >= IN_FLIGHT_MAX:
                    self._backlog.add(hook)  # (there may be more due than it took)
            db.executemany(
                "UPDATE webhook_deliveries SET lease_until = ? WHERE delivery_id = ?",
                [(d.lease_until, d.delivery_id) for d in taken],
            )
            return taken

        result: list[Due] = await self._transaction(work)
        return result

    async def settle(self, outcome: Outcome) -> None:
        # Shared: the settles waiting beside it are written by one _settle_rows (one statement
        # per table), as group commit does for mail.
        await self._shared(self._settle_rows, outcome)

    def recorded(self, dues: list[Due], now: float) -> None:
        """The delivery child wrote these (``record_delivered``): their leases are gone; a
        webhook whose due deliveries HELD_MAX kept back gets them now (``_refill``)."""
        backlog: set[str] = set()
        with self._lock:
            for due in dues:
                hook_id = due.webhook_id
                self._leased[hook_id] = max(0, self._leased.get(hook_id, 0) - 1)
                if hook_id in self._backlog:
                    backlog.add(hook_id)
        if backlog:
            task = asyncio.ensure_future(self._refill_now(backlog, now))
            self._refills.add(task)
            task.add_done_callback(self._refills.discard)

    async def _refill_now(self, hook_ids: set[str], now: float) -> None:
        def work(db: sqlite3.Connection) -> None:
            for hook_id in hook_ids:
                self._refill(db, hook_id, now)

        try:
            await self._transaction(work)
        except StorageError as exc:  # a round takes them instead
            warn("webhook_refill_failed", error=type(exc).__name__)
            if self.wake is not None:
                self.wake()

    def _settle_rows(self, db: sqlite3.Connection, outcomes: list[Outcome]) -> None:
        """Write the attempts, and free their leases."""
        freed: dict[str, float] = {}  # webhooks with a lease freed: when (their clock)
        for row, made, ended in write_attempts(db, outcomes, ended_too=True):
            hook_id = row["webhook_id"]
            with self._lock:
                self._leased[hook_id] = max(0, self._leased.get(hook_id, 0) - 1)
            freed[hook_id] = max(made.at, freed.get(hook_id, made.at))
            if made.disable or made.state is DeliveryState.FAILED:
                self._ended(db, row, made, ended)  # failed or gone: more to record
        if self.hand is not None:
            for hook_id, now in freed.items():
                self._refill(db, hook_id, now)

    def _refill(self, db: sqlite3.Connection, hook_id: str, now: float) -> None:
        """Lease what of this webhook is due, up to what it may hold (HELD_MAX, _REFILL_MAX at
        a time), to this process's worker once this commit is durable (as the hand-off of new
        deliveries; the worker keeps the cap)."""
        hook = self._hooks.get(hook_id)
        room = min(_REFILL_MAX, HELD_MAX - self._leased.get(hook_id, 0))
        if hook is None or hook.disabled_at is not None or room <= 0:
            return
        rows = db.execute(_DUE_OF_ONE, (hook_id, now, room)).fetchall()
        if len(rows) < room:
            self._backlog.discard(hook_id)  # all it had due is in flight now
        if not rows:
            return
        lease_until = HELD_UNTIL
        dues = [
            Due(
                r["delivery_id"],
                hook_id,
                hook.url,
                hook.secret,
                r["event_id"],
                r["type"],
                r["run_id"],
                r["body"],
                int(r["attempts"]) + 1,
                lease_until,
            )
            for r in rows
        ]
        db.executemany(
            "UPDATE webhook_deliveries SET lease_until = ? WHERE delivery_id = ?",
            [(lease_until, d.delivery_id) for d in dues],
        )
        with self._lock:
            self._leased[hook_id] = self._leased.get(hook_id, 0) + len(dues)
        note(db, dues)

    def _ended(self, db: sqlite3.Connection, row: Any, made: Outcome, ended: bool) -> None:
        """A delivery failed: its webhook disabled (410), its run told (webhook_failed) unless
        a 410 had ended it already."""
        hook_id = row["webhook_id"]
        if made.disable:
            db.execute(
                "UPDATE webhooks SET disabled_at = ? WHERE webhook_id = ?", (made.at, hook_id)
            )
            db.execute(_END_ATTEMPTS, (hook_id,))
            db.execute(
                "UPDATE webhook_deliveries SET state = 'failed' "
                "WHERE webhook_id = ? AND state = 'pending'",
                (hook_id,),
            )
            hook = self._hooks.get(hook_id)
            if hook is not None:
                self._hooks[hook_id] = _disabled(hook, made.at)
        if made.state is DeliveryState.FAILED and row["run_id"] is not None and not ended:
            # The rest of the row (the body above all) is read only here: few settles fail.
            rest = db.execute(
                "SELECT event_id, type, body, created_at FROM webhook_deliveries WHERE seq = ?",
                (row["seq"],),
            ).fetchone()
            delivery = Delivery(
                row["delivery_id"],
                hook_id,
                rest["event_id"],
                rest["type"],
                row["run_id"],
                rest["body"],
                rest["created_at"],
            )
            if not reports_a_failure(delivery):
                self._insert_events(db, [failed_event(delivery, made)])

    async def next_due(self, now: float) -> NextDue:
        rows = await self._read(_NEXT_DUE, (now, IN_FLIGHT_MAX))
        return NextDue(*(None if v is None else float(v) for v in rows[0]))

    async def pending_count(self) -> int:
        rows = await self._read(
            "SELECT COUNT(*) FROM webhook_deliveries WHERE state = 'pending'", ()
        )
        return int(rows[0][0])

    async def prune(self, before: float) -> int:
        def work(db: sqlite3.Connection) -> int:
            old = "SELECT seq FROM webhook_deliveries WHERE state <> 'pending' AND created_at < ?"
            db.execute(f"DELETE FROM webhook_attempts WHERE delivery_seq IN ({old})", (before,))
            gone = db.execute(
                "DELETE FROM webhook_deliveries WHERE state <> 'pending' AND created_at < ?",
                (before,),
            ).rowcount
            return int(gone)

        result: int = await self._transaction(work)
        return result


# The oldest due deliveries that each webhook's cap (IN_FLIGHT_MAX leased) leaves room for:
# a webhook with a backlog at its cap must not fill the window and hold back the others'.
_DUE = """
WITH leased AS (
    SELECT webhook_id, COUNT(*) AS n FROM webhook_deliveries
    WHERE state = 'pending' AND lease_until > ?1 GROUP BY +webhook_id
)
SELECT r.* FROM (
    SELECT d.*, w.url, w.secret, row_number() OVER (
        PARTITION BY d.webhook_id ORDER BY d.next_attempt_at, d.seq) AS rn
    FROM webhook_deliveries d JOIN webhooks w ON w.webhook_id = d.webhook_id
    WHERE d.state = 'pending' AND d.next_attempt_at <= ?1 AND d.lease_until <= ?1
      AND w.disabled_at IS NULL
) r LEFT JOIN leased l ON l.webhook_id = r.webhook_id
WHERE r.rn <= ?2 - COALESCE(l.n, 0) ORDER BY r.next_attempt_at, r.seq LIMIT ?3
"""

# One webhook's due deliveries, oldest first, read through the partial index of pending rows
# (``+webhook_id``: the index by webhook would walk its settled history too).
_DUE_OF_ONE = (
    "SELECT delivery_id, event_id, type, run_id, body, attempts FROM webhook_deliveries "
    "WHERE state = 'pending' AND next_attempt_at <= ?2 AND lease_until <= ?2 "
    "AND +webhook_id = ?1 ORDER BY next_attempt_at, seq LIMIT ?3"
)

# When the earliest pending delivery is due, and the earliest not held back by its webhook's
# cap (IN_FLIGHT_MAX leased at ?1: its unleased ones wait for one of its attempts to end).
_NEXT_DUE = """
SELECT MIN(MAX(next_attempt_at, lease_until)),
       MIN(CASE WHEN lease_until > ?1 OR webhook_id NOT IN (
               SELECT webhook_id FROM webhook_deliveries
               WHERE state = 'pending' AND lease_until > ?1
               GROUP BY +webhook_id HAVING COUNT(*) >= ?2)
           THEN MAX(next_attempt_at, lease_until) END)
FROM webhook_deliveries WHERE state = 'pending'
"""

# The worker starts: the newest attempt row of a delivery waiting for its retry says the retry
# is now (its listed next_attempt_at), as the delivery's row does.
_RESUME_ATTEMPTS = """
UPDATE webhook_attempts SET next_attempt_at = ?1
WHERE (delivery_seq, attempt) IN (
    SELECT seq, attempts FROM webhook_deliveries WHERE state = 'pending' AND next_attempt_at > ?1)
"""

# A 410 disabled the webhook: its deliveries waiting for a retry will get none, so their
# newest attempt rows say failed (no next_attempt_at) instead of pending for ever.
_END_ATTEMPTS = (
    "UPDATE webhook_attempts SET state = 'failed', next_attempt_at = NULL "
    "WHERE webhook_id = ? AND state = 'pending' AND EXISTS (SELECT 1 FROM webhook_deliveries d "
    "WHERE d.seq = webhook_attempts.delivery_seq AND d.attempts = webhook_attempts.attempt "
    "AND d.state = 'pending')"
)


def _insert_deliveries(
    db: sqlite3.Connection, deliveries: list[Delivery], leased: dict[str, float] | None = None
) -> None:
    leased = leased or {}
    db.executemany(
        "INSERT INTO webhook_deliveries (delivery_id, webhook_id, event_id, type, run_id, body, "
        "created_at, next_attempt_at, lease_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                d.delivery_id,
                d.webhook_id,
                d.event_id,
                d.type,
                d.run_id,
                d.body,
                d.created_at,
                d.created_at,
                leased.get(d.delivery_id, 0.0),
            )
            for d in deliveries
        ],
    )


def _disabled(hook: Webhook, at: float) -> Webhook:
    return replace(hook, disabled_at=at)
