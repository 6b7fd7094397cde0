"""The SQLite adapter (the embedded default): aiosqlite for reads, one writer thread.

Concurrency is explicit: every write is one whole transaction run on the writer's
thread (``writer.py``), and one reader connection reads beside it (WAL lets
it read while the writer writes). Concurrent SMTP deliveries are batched into one
commit (group commit) before their 250s, and agent writes share commits too. WAL with
``synchronous=FULL``.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiosqlite

from sink.envelope import NearMiss
from sink.errors import StorageError
from sink.inbox import Claim, Delivery, Inbox
from sink.nearmiss import LiveAddress, NearIndex
from sink.storage.base import (
    CreateOutcome,
    CreateResult,
    Event,
    InboxReport,
    Incoming,
    NewInbox,
    Route,
    StoredMessage,
)
from sink.storage.routecache import RouteCache
from sink.storage.rows import (
    LIVE_ADDRESSES,
    EventFields,
    accepted_fields,
    claimed_event,
    delivery_from_row,
    expired_event,
    inbox_from_row,
    inbox_values,
    json_strings,
    late_fields,
    live_from_row,
    match_json_or_none,
    message_values,
    near_miss_fields,
    route_from_row,
    stored_message_from_row,
)
from sink.storage.sqlite.fts import INDEXED_UPTO, Indexer
from sink.storage.sqlite.mail import SQLiteMail
from sink.storage.sqlite.migrate import prepare
from sink.storage.sqlite.retention import persist_expiry, release
from sink.storage.sqlite.runs import DELIVERY_SELECT, SQLiteRuns
from sink.storage.sqlite.webhooks import SQLiteWebhooks
from sink.storage.sqlite.writer import (
    CONNECTION_PRAGMAS,
    NotingConnection,
    Row,
    Writer,
    all_rows,
    insert_event_fields,
    insert_events,
)
from sink.vocabulary import Reason, State
from sink.webhooks.model import Due

_PROBE_TRUSTED_S = 1.0


_INBOX_SELECT = """
SELECT i.*, d.seq AS ev_seq, d.claim_id AS ev_claim_id, d.claim_run_id AS ev_claim_run_id,
       d.claimed_at AS ev_claimed_at, m.subject AS ev_subject, m.from_addr AS ev_from,
       m.received_at AS ev_received_at
FROM inboxes i
LEFT JOIN deliveries d ON d.message_id = i.evidence_message_id
LEFT JOIN messages m ON m.message_pk = d.message_pk
"""

# When the inbox's evidence was last claimed (-1: never): near misses from before it were
# told with that evidence's wait and are no news to a wait for the next message.
_LAST_CLAIM = (
    "SELECT COALESCE(MAX(claimed_at), -1) FROM deliveries "
    "WHERE inbox_id = ? AND claim_id IS NOT NULL"
)
# The run's latest release: the type a literal, so that the partial index of
# sql/010_released_index.sql (WHERE type = 'run_released') serves it.
_RELEASED_AT = "SELECT MAX(at) FROM events WHERE run_id = ? AND type = 'run_released'"


def _probe_commit(db: sqlite3.Connection) -> None:
    # A row in and out again: the commit writes pages to the WAL (an empty transaction
    # writes nothing), and leaves the data as it was.
    row = db.execute(
        "INSERT INTO unrouted (rcpt, mail_from, received_at, size) VALUES ('', '', 0, 0)"
    ).lastrowid
    db.execute("DELETE FROM unrouted WHERE id = ?", (row,))


class SQLiteStore:
    def __init__(self, path: Path, on_events: Callable[[list[Event]], None] | None = None) -> None:
        self._path = path
        # on_events: every event recorded, once its commit is durable (live events).
        self._on_events = on_events
        self._writer = Writer(path, self._committed)
        self._reader: aiosqlite.Connection | None = None
        # Every RCPT asks for a route; this process is the only writer, so it knows each
        # moment a route changes (an inbox expires) and forgets it right after that commit.
        self._routes = RouteCache()
        # The live inboxes' local parts, for near misses: loaded at open, then kept by this
        # process's own commits (it is the only writer), like the routes.
        self._near = NearIndex()
        self._committed_at = -_PROBE_TRUSTED_S  # when ping last saw a commit succeed
        # The search index follows the commits in batches (fts.py).
        self.indexer = Indexer(self._writer)
        # Caught mail and search (mail.py), the web UI's run index (runs.py).
        self.mail = SQLiteMail(self._read, self._writer, self.indexer)
        self.runs = SQLiteRuns(self._read)
        # Webhooks and their outbox, written in the transactions of the events they carry.
        self.webhooks = SQLiteWebhooks(
            self._writer.transaction, self._writer.shared, self._read, insert_events, str(path)
        )

    # -- lifecycle ---------------------------------------------------------------

    async def open(self) -> None:
        try:
            await self._writer.open(self._prepare)
            self._reader = await aiosqlite.connect(self._path, isolation_level=None)
            self._reader.row_factory = sqlite3.Row
            for pragma in CONNECTION_PRAGMAS:
                await self._reader.execute(pragma)
            for row in await self._reader.execute_fetchall(LIVE_ADDRESSES):
                self._near.add(live_from_row(row))
            await self.webhooks.open(await self.signing_key())
        except (sqlite3.Error, OSError, StorageError) as exc:
            raise StorageError(f"cannot open the store at {self._path}: {exc}") from exc

    def _committed(self, notes: list[Any]) -> None:
        """A commit is durable: its events go live, its handed-off deliveries go out."""
        events = [n for n in notes if isinstance(n, Event)]
        if events and self._on_events is not None:
            self._on_events(events)
        handed = [n for n in notes if isinstance(n, Due)]
        if handed:
            self.webhooks.handed(handed)

    def _prepare(self, db: sqlite3.Connection) -> None:
        prepare(db)
        if isinstance(db, NotingConnection):
            db.outbox = self.webhooks

    async def close(self) -> None:
        await self.indexer.close()
        if self._reader is not None:
            await self._reader.close()
            self._reader = None
        await self._writer.close()

    # -- plumbing ----------------------------------------------------------------

    @property
    def _rdb(self) -> aiosqlite.Connection:
        if self._reader is None:
            raise StorageError("the store is closed")
        return self._reader

    async def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        try:
            return list(await self._rdb.execute_fetchall(sql, params))
        except sqlite3.Error as exc:
            raise StorageError(f"read failed: {exc}") from exc

    # -- inboxes -----------------------------------------------------------------

    async def ping(self) -> None:
        """Raise ``StorageError`` unless the store can read and commit (a full disk fails).

        A commit is the honest test: reads go on working on a full disk. A success is
        trusted for a second, so a caller polling readiness costs at most one small commit
        (sharing a group commit) per second; a failure is probed again at the next call.
        """
        await self._read("SELECT 1")
        now = time.monotonic()
        if now - self._committed_at < _PROBE_TRUSTED_S:
            return
        await self._writer.transaction(_probe_commit)
        self._committed_at = now

    async def create_inbox(self, new: NewInbox, event: Event) -> CreateResult:
        def work(db: sqlite3.Connection) -> CreateResult:
            inbox = new.inbox
            rows = list(
                all_rows(
                    db,
                    "SELECT request_json, inbox_id FROM idempotency WHERE key = ?",
                    (new.idempotency_key,),
                )
            )
            if rows:
                existing = _load_inbox(db, rows[0]["inbox_id"])
                # Once the key's inbox has expired, only inboxes_per_purpose judges the key.
                if existing is not None:
                    current = existing.effective(inbox.created_at)
                    if current.state is not State.EXPIRED:
                        if rows[0]["request_json"] != new.request_json:
                            return CreateResult(CreateOutcome.CONFLICT)
                        return CreateResult(CreateOutcome.REPLAYED, existing)
            count = _count(db, inbox.run_id, inbox.purpose)
            if count >= new.inboxes_per_purpose:
                return CreateResult(CreateOutcome.FORBIDDEN, count=count)
            db.execute(
                """INSERT INTO inboxes (inbox_id, run_id, purpose, local_part, address, policy,
                       created_at, expires_at, poll_budget, polls_used, cursor_seq, state,
                       match_json, trace_id, evidence_release_at, last_change_reason,
                       created_with)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 'created', ?, ?, ?, 'created', ?)""",
                inbox_values(new),
            )
            db.execute(
                """INSERT INTO idempotency (key, request_json, inbox_id) VALUES (?, ?, ?)
                   ON CONFLICT (key) DO UPDATE SET inbox_id = excluded.inbox_id,
                       request_json = excluded.request_json""",
                (new.idempotency_key, new.request_json, inbox.inbox_id),
            )
            insert_events(db, [event])
            return CreateResult(CreateOutcome.CREATED, inbox)

        result = await self._writer.transaction(work)
        if result.outcome == CreateOutcome.CREATED:
            inbox = new.inbox
            self._near.add(
                LiveAddress(
                    inbox.inbox_id, inbox.run_id, inbox.address, inbox.created_at, inbox.expires_at
                )
            )
        return result

    async def load_inbox(self, inbox_id: str) -> Inbox | None:
        rows = await self._read(_INBOX_SELECT + " WHERE i.inbox_id = ?", (inbox_id,))
        return inbox_from_row(rows[0]) if rows else None

    async def count_inboxes(self, run_id: str, purpose: str) -> int:
        rows = await self._read(
            "SELECT COUNT(*) FROM inboxes WHERE run_id = ? AND purpose = ?", (run_id, purpose)
        )
        return int(rows[0][0])

    async def route(self, local_part: str) -> Route | None:
        cached = self._routes.get(local_part)
        if cached is not None:
            return cached
        rows = await self._read(
            "SELECT inbox_id, run_id, policy, expires_at, state FROM inboxes WHERE local_part = ?",
            (local_part,),
        )
        if not rows:
            return None  # misses are not cached: an address is only ever created, not reused
        route = route_from_row(rows[0])
        self._routes.remember(local_part, route)
        return route

    async def save_poll(self, before: Inbox, after: Inbox, event: Event) -> bool:
        def work(db: sqlite3.Connection) -> bool:
            cur = db.execute(
                """UPDATE inboxes SET polls_used = ?, next_poll_at = ?, cursor_seq = ?, state = ?,
                       reason = ?, evidence_message_id = ?, last_poll_at = ?,
                       last_poll_latency_ms = ?, expired_at = ?, last_error = ?,
                       last_change_reason = CASE WHEN state != ? THEN ? ELSE last_change_reason END,
                       wait_match_json = ?, rescan_seq = ?
                   WHERE inbox_id = ? AND polls_used = ? AND state != 'expired'""",
                (
                    after.polls_used,
                    after.next_poll_at,
                    after.cursor_seq,
                    after.state.value,
                    after.reason,
                    after.evidence.message_id if after.evidence else None,
                    after.last_poll_at,
                    after.last_poll_latency_ms,
                    after.expired_at,
                    after.last_error,
                    after.state.value,
                    after.reason or "evidence_found",
                    match_json_or_none(after.wait_match),
                    after.rescan_seq,
                    after.inbox_id,
                    before.polls_used,
                ),
            )
            if cur.rowcount != 1:
                return False
            events = [event]
            if after.state is State.EXPIRED:
                events.append(expired_event(after))
            insert_events(db, events)
            return True

        saved = await self._writer.transaction(work)
        if saved and after.state is State.EXPIRED:
            self._ended([after.inbox_id])
        return saved

    async def expire(self, inbox: Inbox, retention_s: int) -> None:
        def work(db: sqlite3.Connection) -> None:
            persist_expiry(db, inbox, retention_s)

        await self._writer.transaction(work)
        self._ended([inbox.inbox_id])

    async def expire_due(self, now: float, limit: int) -> list[Inbox]:
        rows = await self._read(
            _INBOX_SELECT + " WHERE i.state != 'expired' AND i.expires_at <= ? LIMIT ?",
            (now, limit),
        )
        return [inbox_from_row(row) for row in rows]

    async def set_last_error(self, inbox_id: str, code: str | None) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.execute("UPDATE inboxes SET last_error = ? WHERE inbox_id = ?", (code, inbox_id))

        await self._writer.transaction(work)

    # -- messages ----------------------------------------------------------------

    def _ended(self, inbox_ids: list[str]) -> None:
        """Inboxes that just expired (or were released): no route, no near misses any more."""
        self._routes.forget(inbox_ids)
        self._near.remove(inbox_ids)

    async def save_message(self, incoming: Incoming) -> None:
        if incoming.caught_id is not None:
            found = self._near.find(incoming.unrouted, incoming.received_at)
            incoming = replace(incoming, near_misses=tuple(found))
        # Concurrent deliveries (and agent writes) share a commit, and the deliveries side by
        # side in it one write: see writer.py.
        await self._writer.shared(_insert_batch, incoming)
        self.indexer.delivered()

    async def near_misses(self, inbox_id: str, limit: int) -> list[NearMiss]:
        rows = await self._read(
            "SELECT address, received_at, distance FROM near_misses WHERE inbox_id = ? "
            f"AND received_at > ({_LAST_CLAIM}) ORDER BY received_at DESC, id DESC LIMIT ?",
            (inbox_id, inbox_id, limit),
        )
        return [NearMiss(r["address"], r["received_at"], r["distance"]) for r in rows]

    async def deliveries_after(self, inbox_id: str, after_seq: int, limit: int) -> list[Delivery]:
        rows = await self._read(
            DELIVERY_SELECT + " WHERE d.inbox_id = ? AND d.seq > ? ORDER BY d.seq LIMIT ?",
            (inbox_id, after_seq, limit),
        )
        return [delivery_from_row(row) for row in rows]

    async def delivery(self, message_id: str) -> Delivery | None:
        rows = await self._read(DELIVERY_SELECT + " WHERE d.message_id = ?", (message_id,))
        return delivery_from_row(rows[0]) if rows else None

    async def raw(self, message_id: str) -> bytes | None:
        rows = await self._read(
            """SELECT m.raw FROM deliveries d JOIN messages m ON m.message_pk = d.message_pk
               JOIN inboxes i ON i.inbox_id = d.inbox_id
               WHERE d.message_id = ? AND i.released_at IS NULL""",
            (message_id,),
        )
        if not rows or rows[0]["raw"] is None:
            return None
        return bytes(rows[0]["raw"])

    async def message(self, message_id: str) -> StoredMessage | None:
        rows = await self._read(
            """SELECT d.seq, d.message_id, d.inbox_id, m.subject, m.from_addr, m.received_at,
                      m.size, d.claim_id, d.claim_run_id, d.claimed_at, d.rcpt_json,
                      CASE WHEN i.released_at IS NULL THEN m.raw END AS raw,
                      CASE WHEN i.released_at IS NULL THEN m.analysis END AS analysis,
                      m.mail_from, m.to_json, m.cc_json, m.date, i.run_id, m.auth_user,
                      COALESCE(i.released_at, m.released_at) AS released_at
               FROM deliveries d JOIN messages m ON m.message_pk = d.message_pk
               JOIN inboxes i ON i.inbox_id = d.inbox_id
               WHERE d.message_id = ?""",
            (message_id,),
        )
        if not rows:
            return None
        return stored_message_from_row(rows[0])

    async def keep_analysis(
        self, message_id: str, analysis: str, replacing: str | None = None
    ) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.execute(
                """UPDATE messages SET analysis = ?
                   WHERE message_pk = (SELECT message_pk FROM deliveries WHERE message_id = ?)
                     AND raw IS NOT NULL AND analysis IS ?""",
                (analysis, message_id, replacing),
            )

        await self._writer.transaction(work)

    async def claim(self, delivery: Delivery, claim: Claim, after: Inbox) -> Claim:
        def work(db: sqlite3.Connection) -> Claim:
            cur = db.execute(
                """UPDATE deliveries SET claim_id = ?, claim_run_id = ?, claimed_at = ?
                   WHERE message_id = ? AND claim_id IS NULL""",
                (claim.claim_id, claim.run_id, claim.claimed_at, claim.message_id),
            )
            if cur.rowcount != 1:
                rows = list(
                    all_rows(
                        db,
                        "SELECT claim_id, claim_run_id, claimed_at FROM deliveries "
                        "WHERE message_id = ?",
                        (claim.message_id,),
                    )
                )
                row = rows[0]
                return Claim(row[0], claim.message_id, row[1], row[2])
            db.execute(
                """UPDATE inboxes SET state = 'received', reason = NULL, evidence_message_id = ?,
                       cursor_seq = MAX(cursor_seq, ?),
                       last_change_reason = CASE WHEN state != 'received' THEN 'claimed'
                                                 ELSE last_change_reason END
                   WHERE inbox_id = ? AND state != 'expired'""",
                (claim.message_id, delivery.seq, delivery.inbox_id),
            )
            insert_events(
                db,
                [claimed_event(claim, delivery.inbox_id)],
            )
            return claim

        return await self._writer.transaction(work)

    # -- release and retention ---------------------------------------------------

    async def release_run(self, run_id: str, now: float) -> list[str]:
        def work(db: sqlite3.Connection) -> list[str]:
            rows = list(
                all_rows(
                    db, _INBOX_SELECT + " WHERE i.run_id = ? AND i.released_at IS NULL", (run_id,)
                )
            )
            inboxes = [inbox_from_row(row) for row in rows]
            for inbox in inboxes:
                if inbox.effective(now).state is not State.EXPIRED:
                    persist_expiry(db, inbox.expire(Reason.LEASE, now), 0, cause="released")
                else:
                    persist_expiry(db, inbox.effective(now), 0)
            release(db, [i.inbox_id for i in inboxes], now, {i.inbox_id: run_id for i in inboxes})
            return [i.inbox_id for i in inboxes]

        released = await self._writer.transaction(work)
        self._ended(released)
        return released

    async def release_due(self, now: float, limit: int) -> int:
        return await self._release_where(
            "i.evidence_release_at <= ? ORDER BY i.evidence_release_at", (now,), now, limit
        )

    async def release_oldest_expired(self, now: float, limit: int) -> int:
        # Released-eligible: the lease is over (or the inbox expired); oldest lease end first.
        return await self._release_where(
            "(i.state = 'expired' OR i.expires_at <= ?) "
            "ORDER BY COALESCE(i.expired_at, i.expires_at)",
            (now,),
            now,
            limit,
        )

    async def _release_where(
        self, where: str, params: tuple[Any, ...], now: float, limit: int
    ) -> int:
        def work(db: sqlite3.Connection) -> list[str]:
            rows = list(
                all_rows(
                    db,
                    f"{_INBOX_SELECT} WHERE i.released_at IS NULL AND {where} LIMIT ?",
                    (*params, limit),
                )
            )
            inboxes = [inbox_from_row(row) for row in rows]
            for inbox in inboxes:
                persist_expiry(db, inbox.effective(now), 0)
            release(db, [i.inbox_id for i in inboxes], now, {i.inbox_id: i.run_id for i in inboxes})
            return [i.inbox_id for i in inboxes]

        released = await self._writer.transaction(work)
        self._ended(released)
        if released:
            await self._writer.statement("PRAGMA incremental_vacuum")
        return len(released)

    async def used_bytes(self) -> int:
        """Bytes in use (pages minus free pages): what --max-store-mb caps."""
        rows = await self._read(
            "SELECT (SELECT page_count FROM pragma_page_count())"
            " - (SELECT freelist_count FROM pragma_freelist_count()),"
            " (SELECT page_size FROM pragma_page_size())"
        )
        return int(rows[0][0]) * int(rows[0][1])

    # -- reports -----------------------------------------------------------------

    async def add_events(self, events: list[Event]) -> None:
        def work(db: sqlite3.Connection) -> None:
            insert_events(db, events)

        await self._writer.transaction(work)

    async def run_report(self, run_id: str) -> tuple[list[InboxReport], list[Event]]:
        rows = await self._read(
            _INBOX_SELECT + " WHERE i.run_id = ? ORDER BY i.created_at, i.inbox_id", (run_id,)
        )
        reports = []
        for row in rows:
            accepted = await self._read(
                "SELECT message_id FROM deliveries WHERE inbox_id = ? AND claim_id IS NOT NULL "
                "ORDER BY claimed_at DESC LIMIT 1",
                (row["inbox_id"],),
            )
            reports.append(
                InboxReport(
                    inbox=inbox_from_row(row),
                    accepted_message_id=accepted[0][0] if accepted else None,
                    last_change_reason=row["last_change_reason"],
                    evidence_release_at=row["released_at"] or row["evidence_release_at"],
                )
            )
        event_rows = await self._read(
            "SELECT run_id, type, at, inbox_id, message_id, detail_json FROM events "
            "WHERE run_id = ? ORDER BY at, id LIMIT 10000",
            (run_id,),
        )
        events = [Event(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])) for r in event_rows]
        return reports, events

    async def run_released_at(self, run_id: str) -> float | None:
        rows = await self._read(_RELEASED_AT, (run_id,))
        return None if rows[0][0] is None else float(rows[0][0])

    async def signing_key(self) -> bytes:
        fresh = secrets.token_bytes(32)

        def work(db: sqlite3.Connection) -> bytes:
            db.execute(
                "INSERT INTO server_keys (name, key) VALUES ('run_tokens', ?) "
                "ON CONFLICT (name) DO NOTHING",
                (fresh,),
            )
            row = db.execute("SELECT key FROM server_keys WHERE name = 'run_tokens'").fetchone()
            return bytes(row[0])

        return await self._writer.transaction(work)


# -- row mapping and statements (run inside a transaction) -----------------------


def _load_inbox(db: sqlite3.Connection, inbox_id: str) -> Inbox | None:
    rows = list(all_rows(db, _INBOX_SELECT + " WHERE i.inbox_id = ?", (inbox_id,)))
    return inbox_from_row(rows[0]) if rows else None


def _count(db: sqlite3.Connection, run_id: str, purpose: str) -> int:
    rows = list(
        all_rows(
            db, "SELECT COUNT(*) FROM inboxes WHERE run_id = ? AND purpose = ?", (run_id, purpose)
        )
    )
    return int(rows[0][0])


def _insert_batch(db: sqlite3.Connection, items: list[Incoming]) -> None:
    # Never at or below the index's watermark, even when the newest message was deleted:
    # the indexer would pass a message_pk used again.
    rows = list(
        all_rows(
            db,
            f"SELECT MAX(COALESCE((SELECT MAX(message_pk) FROM messages), 0), ({INDEXED_UPTO}))",
        )
    )
    pk = int(rows[0][0])
    messages: list[tuple[Any, ...]] = []
    deliveries: list[tuple[Any, ...]] = []
    caught: list[tuple[Any, ...]] = []
    near: list[tuple[Any, ...]] = []
    events: list[EventFields] = []  # built as Events once, with their row ids
    for item in items:
        size = len(item.raw)
        if item.deliveries or item.caught_id:
            pk += 1
            messages.append(message_values(pk, item, size))
            for d in item.deliveries:
                deliveries.append((d.message_id, d.inbox_id, pk, json_strings(d.rcpts)))
                events.append(accepted_fields(d, item.received_at, size))
            if item.caught_id:
                caught.append((item.caught_id, pk, json_strings(item.unrouted), item.caught_until))
            for found in item.near_misses:
                near.append((found.inbox_id, found.address, item.received_at, found.distance))
                events.append(near_miss_fields(found, item.received_at))
        events.extend(late_fields(item.late, item.received_at, size))
    if messages:
        db.executemany(
            "INSERT INTO messages (message_pk, raw, size, subject, from_addr, to_json, cc_json, "
            "date, mail_from, received_at, auth_user) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            messages,
        )
        db.executemany(
            "INSERT INTO deliveries (message_id, inbox_id, message_pk, rcpt_json) "
            "VALUES (?, ?, ?, ?)",
            deliveries,
        )
        db.executemany(
            "INSERT INTO caught (caught_id, message_pk, rcpt_json, expires_at) VALUES (?, ?, ?, ?)",
            caught,
        )
        db.executemany(
            "INSERT INTO near_misses (inbox_id, address, received_at, distance) "
            "VALUES (?, ?, ?, ?)",
            near,
        )
    if events:
        insert_event_fields(db, events)
    outbox: SQLiteWebhooks | None = getattr(db, "outbox", None)
    if outbox is not None:
        outbox.queue_mail(db, items)
