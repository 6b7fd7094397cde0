"""The SQLite adapter (the embedded default): aiosqlite for reads, one writer thread.

Concurrency is explicit: every write is one whole transaction run on the writer's
thread (``sqlite_writer.py``), and one reader connection reads beside it (WAL lets
it read while the writer writes). Concurrent SMTP deliveries are batched into one
commit (group commit) before their 250s, and agent writes share commits too. WAL with
``synchronous=FULL``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any

import aiosqlite

from sink.envelope import NearMiss
from sink.errors import StorageError
from sink.inbox import Claim, Delivery, Inbox
from sink.logs import warn
from sink.message import search_fields
from sink.nearmiss import LiveAddress, NearIndex
from sink.search import Query, Text, folded, fts_any, fts_expression, texts_match
from sink.storage.base import (
    CaughtMessage,
    CreateOutcome,
    CreateResult,
    Deleted,
    Event,
    InboxReport,
    Incoming,
    Listed,
    NewInbox,
    Route,
    RunSummary,
    StoredMessage,
)
from sink.storage.routecache import RouteCache
from sink.storage.rows import (
    LIVE_ADDRESSES,
    accepted_event,
    caught_from_row,
    claimed_event,
    delivery_from_row,
    expired_event,
    inbox_from_row,
    json_strings,
    late_events,
    listed_from_row,
    live_from_row,
    match_json_or_none,
    near_miss_event,
)
from sink.storage.sqlite_webhooks import SQLiteWebhooks
from sink.storage.sqlite_writer import CONNECTION_PRAGMAS, NotingConnection, Writer, note
from sink.vocabulary import Reason, State

_PROBE_TRUSTED_S = 1.0

Row = sqlite3.Row


_INBOX_SELECT = """
SELECT i.*, d.seq AS ev_seq, d.claim_id AS ev_claim_id, d.claim_run_id AS ev_claim_run_id,
       d.claimed_at AS ev_claimed_at, m.subject AS ev_subject, m.from_addr AS ev_from,
       m.received_at AS ev_received_at
FROM inboxes i
LEFT JOIN deliveries d ON d.message_id = i.evidence_message_id
LEFT JOIN messages m ON m.message_pk = d.message_pk
"""

_DELIVERY_SELECT = """
SELECT d.seq, d.message_id, d.inbox_id, m.subject, m.from_addr, m.received_at, m.size,
       d.claim_id, d.claim_run_id, d.claimed_at
FROM deliveries d JOIN messages m ON m.message_pk = d.message_pk
"""


# When the inbox's evidence was last claimed (-1: never): near misses from before it were
# told with that evidence's wait and are no news to a wait for the next message.
_LAST_CLAIM = (
    "SELECT COALESCE(MAX(claimed_at), -1) FROM deliveries "
    "WHERE inbox_id = ? AND claim_id IS NOT NULL"
)

_SERVER_KEYS_TABLE = """
CREATE TABLE IF NOT EXISTS server_keys (
    name TEXT PRIMARY KEY,
    key  BLOB NOT NULL
)"""


def _migrations() -> list[tuple[int, str]]:
    folder = resources.files("sink.storage") / "sql"
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            found.append((int(entry.name.split("_", 1)[0]), entry.read_text(encoding="utf-8")))
    return sorted(found)


def _probe_commit(db: sqlite3.Connection) -> None:
    # A row in and out again: the commit writes pages to the WAL (an empty transaction
    # writes nothing), and leaves the data as it was.
    row = db.execute(
        "INSERT INTO unrouted (rcpt, mail_from, received_at, size) VALUES ('', '', 0, 0)"
    ).lastrowid
    db.execute("DELETE FROM unrouted WHERE id = ?", (row,))


def _prepare(db: sqlite3.Connection) -> None:
    """On the writer's connection, once: file format, WAL, then the pending migrations."""
    db.execute("PRAGMA auto_vacuum = INCREMENTAL")  # only takes effect on a new file
    db.execute("PRAGMA journal_mode = WAL")
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    for number, script in _migrations():
        if number > version:
            db.executescript(
                f"BEGIN IMMEDIATE;\n{script}\nPRAGMA user_version = {number};\nCOMMIT;"
            )
    # Outside the numbered migrations on purpose: the table is independent of the mail
    # schema, and being idempotent it cannot collide with a migration added beside it.
    db.execute(_SERVER_KEYS_TABLE)
    # The search index's text of the mail indexed before schema v4 goes back in, by batches
    # (a stop in between resumes where it was).
    while True:
        db.execute("BEGIN IMMEDIATE")
        try:
            done = _refold(db, 1000)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if done:
            break
    # Mail not yet in the search index (stored before v2, or just before a stop) goes in now.
    while True:
        db.execute("BEGIN IMMEDIATE")
        try:
            _, more = _index_pending(db, 1000)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if not more:
            break


# Messages above it are not indexed yet (schema v3: a watermark, not an index that every
# delivery's commit would write a page of).
_INDEXED_UPTO = "SELECT indexed_upto FROM index_state"

# Small batches while deliveries go on: the indexer's transactions queue with their commits
# in the one writer, and a delivery should never wait behind a long one. Larger ones when
# ingest is quiet, and for a search that waits for the index anyway. Per ~4 KB message (schema
# v4, bench/ingest.py's index column and batches timed alone): 126-132 µs of CPU in batches
# of 32, 114-118 in 64, 105-107 in 256: the FTS5 segment each commit writes and merges, and
# the listing's one statement, cost less per message in a larger batch. A batch of 64 takes
# some 7 ms; one of 256 holds about 10 MB more while it runs. A batch stops at
# _INDEX_BATCH_BYTES of mail too, at least one message: a delivery arriving meanwhile waits
# for no more than that.
_INDEX_BATCH = 64
_INDEX_BATCH_IDLE = 256
_INDEX_BATCH_BYTES = 1024 * 1024
# The index catches up in the background once deliveries pause this long, or at once when
# this many wait: parsing a body and its FTS5 insert cost a third of storing it, and none
# of that may slow the 250s of a busy moment. A search catches up first, whatever waits:
# the backlog bounds that wait (about 100 µs a ~4 KB message on one core, 1.6 s in all).
_INDEX_QUIET_S = 0.5
_INDEX_BACKLOG = 16384


def _index_pending(db: sqlite3.Connection, limit: int = _INDEX_BATCH) -> tuple[int, bool]:
    """Put up to ``limit`` stored messages (up to ``_INDEX_BATCH_BYTES`` of them, but one
    at least) into the listing and the full-text index: how many, and whether more may wait.

    Both are kept out of the delivery's own commit (inside a transaction of their own):
    the listing's indexes and FTS5's segment per commit cost more than storing the
    mail, so the 250 waits for neither, and many messages indexed at once cost far less
    than one by one. Whatever reads the listing catches up first (``_index_caught_up``).
    """
    # One statement per table for the whole batch. The bodies are read one at a time: a
    # batch of large messages must not sit in memory at once.
    rows = _all(
        db,
        "SELECT message_pk, subject, from_addr, mail_from, size FROM messages "
        f"WHERE message_pk > ({_INDEXED_UPTO}) ORDER BY message_pk LIMIT ?",
        (limit,),
    )
    if not rows:
        return 0, False
    more = len(rows) == limit
    taken = 0
    for end, row in enumerate(rows):
        taken += row["size"]
        if taken > _INDEX_BATCH_BYTES and end > 0:
            del rows[end:]
            more = True
            break
    attached = _index_texts(db, rows)
    # The entries in the listing, in the order they were stored: message by message, its
    # deliveries, then its caught mail. The message's own row is not written again: what
    # search filters on (size, date, attachments) is copied into the listing, and indexed there.
    pks = ",".join(str(row["message_pk"]) for row in rows)
    with_attachment = ",".join(str(pk) for pk in attached)
    db.execute(
        "INSERT INTO listing (id, message_pk, inbox_id, run_id, size, received_at, "
        "has_attachment) "
        "SELECT e.id, e.message_pk, e.inbox_id, e.run_id, m.size, m.received_at, "
        f"e.message_pk IN ({with_attachment}) FROM ("
        "SELECT d.message_id AS id, d.message_pk, d.inbox_id, i.run_id, 0 AS kind, d.seq "
        "FROM deliveries d JOIN inboxes i ON i.inbox_id = d.inbox_id "
        f"WHERE d.message_pk IN ({pks}) "
        "UNION ALL SELECT caught_id, message_pk, NULL, NULL, 1, 0 FROM caught "
        f"WHERE message_pk IN ({pks})"
        ") e JOIN messages m ON m.message_pk = e.message_pk ORDER BY e.message_pk, e.kind, e.seq"
    )
    db.execute("UPDATE index_state SET indexed_upto = ?", (rows[-1]["message_pk"],))
    return len(rows), more


def _index_texts(db: sqlite3.Connection, rows: list[sqlite3.Row]) -> list[int]:
    """Put these messages' text (``message_pk``, ``subject``, ``from_addr``, ``mail_from``,
    in message_pk order) into the full-text index, folded (``sink.search.folded``); the
    message_pks of those with attachments. Each body is read and parsed in turn."""
    first, last = rows[0]["message_pk"], rows[-1]["message_pk"]
    rcpts: dict[int, list[str]] = {}
    for pk, listed in db.execute(
        "SELECT message_pk, rcpt_json FROM deliveries WHERE message_pk BETWEEN ? AND ? "
        "UNION ALL SELECT message_pk, rcpt_json FROM caught WHERE message_pk BETWEEN ? AND ?",
        (first, last, first, last),
    ).fetchall():
        rcpts.setdefault(pk, []).extend(json.loads(listed))
    texts: list[tuple[Any, ...]] = []
    attached: list[int] = []
    for row in rows:
        pk = row["message_pk"]
        to = " ".join(rcpts.get(pk, ()))
        body = db.execute("SELECT raw FROM messages WHERE message_pk = ?", (pk,)).fetchone()
        if body is not None and body[0] is not None:
            found = search_fields(bytes(body[0]))
            text = (
                found.subject,
                found.body,
                f"{found.sender} {row['mail_from']}",
                f"{found.recipients} {to}",
            )
            if found.has_attachment:
                attached.append(pk)
        else:  # released before it was indexed: its metadata only
            text = (row["subject"], "", f"{row['from_addr']} {row['mail_from']}", to)
        texts.append((pk, *(folded(column) for column in text)))
    db.executemany(
        "INSERT INTO message_text (rowid, subject, body, sender, rcpts) VALUES (?, ?, ?, ?, ?)",
        texts,
    )
    return attached


def _refold(db: sqlite3.Connection, limit: int) -> bool:
    """Schema v4 rebuilt the full-text index (folded text, no token positions): put back the
    text of up to ``limit`` of the messages indexed before it, newest first. True once none
    is left (``index_state.refold_upto``, the highest message_pk still to do, is then 0)."""
    upto = int(db.execute("SELECT refold_upto FROM index_state").fetchone()[0])
    if upto == 0:  # done (every store opened since v4): nothing to write
        return True
    rows = _all(
        db,
        "SELECT message_pk, subject, from_addr, mail_from FROM messages "
        "WHERE message_pk <= ? ORDER BY message_pk DESC LIMIT ?",
        (upto, limit),
    )
    if rows:
        rows.reverse()
        _index_texts(db, rows)
    upto = rows[0]["message_pk"] - 1 if len(rows) == limit else 0
    db.execute("UPDATE index_state SET refold_upto = ?", (upto,))
    return upto == 0


def _all(db: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> list[Row]:
    return list(db.execute(sql, params).fetchall())


class SQLiteStore:
    def __init__(self, path: Path, on_events: Callable[[list[Event]], None] | None = None) -> None:
        self._path = path
        # on_events: every event recorded, once its commit is durable (live events).
        self._writer = Writer(path, on_events)
        self._reader: aiosqlite.Connection | None = None
        # Every RCPT asks for a route; this process is the only writer, so it knows each
        # moment a route changes (an inbox expires) and forgets it right after that commit.
        self._routes = RouteCache()
        # The live inboxes' local parts, for near misses: loaded at open, then kept by this
        # process's own commits (it is the only writer), like the routes.
        self._near = NearIndex()
        self._committed_at = -_PROBE_TRUSTED_S  # when ping last saw a commit succeed
        # The search index follows the commits in batches (see _index_pending).
        self._unindexed = True  # there may be mail not yet indexed
        self._unindexed_count = 0  # deliveries since the index last caught up
        self._last_delivery = 0.0  # loop time of the last delivery's commit
        self._indexer: asyncio.Task[None] | None = None
        self._index_lock = asyncio.Lock()
        # Webhooks and their outbox, written in the transactions of the events they carry.
        self.webhooks = SQLiteWebhooks(self._writer.transaction, self._read, _insert_events)

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

    def _prepare(self, db: sqlite3.Connection) -> None:
        _prepare(db)
        if isinstance(db, NotingConnection):
            db.outbox = self.webhooks

    async def close(self) -> None:
        if self._indexer is not None:
            # What it leaves is indexed at the next open.
            self._indexer.cancel()
            with contextlib.suppress(asyncio.CancelledError, StorageError):
                await self._indexer
            self._indexer = None
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
                _all(
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
                (
                    inbox.inbox_id,
                    inbox.run_id,
                    inbox.purpose,
                    new.local_part,
                    inbox.address,
                    inbox.policy_name,
                    inbox.created_at,
                    inbox.expires_at,
                    inbox.poll_budget,
                    json.dumps(inbox.match.as_dict()),
                    inbox.trace_id,
                    inbox.expires_at + new.retention_s,
                    inbox.created_with,
                ),
            )
            db.execute(
                """INSERT INTO idempotency (key, request_json, inbox_id) VALUES (?, ?, ?)
                   ON CONFLICT (key) DO UPDATE SET inbox_id = excluded.inbox_id,
                       request_json = excluded.request_json""",
                (new.idempotency_key, new.request_json, inbox.inbox_id),
            )
            _insert_events(db, [event])
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
        row = rows[0]
        route = Route(
            row["inbox_id"],
            row["run_id"],
            row["policy"],
            row["expires_at"],
            row["state"] == "expired",
        )
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
            _insert_events(db, events)
            return True

        saved = await self._writer.transaction(work)
        if saved and after.state is State.EXPIRED:
            self._ended([after.inbox_id])
        return saved

    async def expire(self, inbox: Inbox, retention_s: int) -> None:
        def work(db: sqlite3.Connection) -> None:
            _persist_expiry(db, inbox, retention_s)

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
        # side in it one write: see sqlite_writer.py.
        await self._writer.shared(_insert_batch, incoming)
        self._unindexed = True
        self._unindexed_count += 1
        self._last_delivery = asyncio.get_running_loop().time()
        if self._indexer is None or self._indexer.done():
            self._indexer = asyncio.create_task(self._index_behind(), name="search-indexer")

    async def _index_behind(self) -> None:
        """Index what the commits stored once deliveries pause, many per transaction."""
        loop = asyncio.get_running_loop()
        try:
            while self._unindexed:
                # Not a synchronisation: a pause until ingest is quiet (or the backlog is
                # large), so that indexing neither competes with deliveries nor runs per
                # message: one index transaction (one FTS5 segment, one fsync) covers many.
                # One batch at a time, looking again before each: deliveries that resume
                # find the writer free within one batch, not after the whole backlog.
                quiet_at = self._last_delivery + _INDEX_QUIET_S
                quiet = loop.time() >= quiet_at
                if self._unindexed_count < _INDEX_BACKLOG and not quiet:
                    await asyncio.sleep(quiet_at - loop.time())
                    continue
                async with self._index_lock:
                    await self._index_batch(_INDEX_BATCH_IDLE if quiet else _INDEX_BATCH)
        except StorageError as exc:  # the next search (or the next open) indexes it
            warn("search_index_deferred", error=type(exc).__name__)

    async def _index_batch(self, limit: int) -> bool:
        """Index one batch (under the index lock); True when nothing was left behind it."""
        if not self._unindexed:
            return True
        # Cleared first: a delivery committed while the batch runs sets it again.
        self._unindexed = False
        try:
            indexed, more = await self._writer.transaction(partial(_index_pending, limit=limit))
        except BaseException:
            self._unindexed = True
            raise
        self._unindexed_count = max(0, self._unindexed_count - indexed)
        if more:
            self._unindexed = True
            return False
        self._unindexed_count = 0
        return True

    async def _index_caught_up(self) -> None:
        """Read-your-writes: mail answered 250 before a search is in the index it reads."""
        async with self._index_lock:
            while not await self._index_batch(_INDEX_BATCH_IDLE):
                pass

    async def near_misses(self, inbox_id: str, limit: int) -> list[NearMiss]:
        rows = await self._read(
            "SELECT address, received_at, distance FROM near_misses WHERE inbox_id = ? "
            f"AND received_at > ({_LAST_CLAIM}) ORDER BY received_at DESC, id DESC LIMIT ?",
            (inbox_id, inbox_id, limit),
        )
        return [NearMiss(r["address"], r["received_at"], r["distance"]) for r in rows]

    async def deliveries_after(self, inbox_id: str, after_seq: int, limit: int) -> list[Delivery]:
        rows = await self._read(
            _DELIVERY_SELECT + " WHERE d.inbox_id = ? AND d.seq > ? ORDER BY d.seq LIMIT ?",
            (inbox_id, after_seq, limit),
        )
        return [delivery_from_row(row) for row in rows]

    async def delivery(self, message_id: str) -> Delivery | None:
        rows = await self._read(_DELIVERY_SELECT + " WHERE d.message_id = ?", (message_id,))
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
        row = rows[0]
        return StoredMessage(
            delivery=delivery_from_row(row),
            run_id=row["run_id"],
            raw=None if row["raw"] is None else bytes(row["raw"]),
            mail_from=row["mail_from"],
            rcpts=tuple(json.loads(row["rcpt_json"])),
            to=tuple(json.loads(row["to_json"])),
            cc=tuple(json.loads(row["cc_json"])),
            date=row["date"],
            released_at=row["released_at"],
            analysis=row["analysis"],
            auth_user=row["auth_user"],
        )

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
                    _all(
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
            _insert_events(
                db,
                [claimed_event(claim, delivery.inbox_id)],
            )
            return claim

        return await self._writer.transaction(work)

    # -- release and retention ---------------------------------------------------

    async def release_run(self, run_id: str, now: float) -> list[str]:
        def work(db: sqlite3.Connection) -> list[str]:
            rows = list(
                _all(db, _INBOX_SELECT + " WHERE i.run_id = ? AND i.released_at IS NULL", (run_id,))
            )
            inboxes = [inbox_from_row(row) for row in rows]
            for inbox in inboxes:
                if inbox.effective(now).state is not State.EXPIRED:
                    _persist_expiry(db, inbox.expire(Reason.LEASE, now), 0, cause="released")
                else:
                    _persist_expiry(db, inbox.effective(now), 0)
            _release(db, [i.inbox_id for i in inboxes], now, {i.inbox_id: run_id for i in inboxes})
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
                _all(
                    db,
                    f"{_INBOX_SELECT} WHERE i.released_at IS NULL AND {where} LIMIT ?",
                    (*params, limit),
                )
            )
            inboxes = [inbox_from_row(row) for row in rows]
            for inbox in inboxes:
                _persist_expiry(db, inbox.effective(now), 0)
            _release(
                db, [i.inbox_id for i in inboxes], now, {i.inbox_id: i.run_id for i in inboxes}
            )
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
            _insert_events(db, events)

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

    # -- caught mail (v2) ----------------------------------------------------------

    async def caught_page(self, before: tuple[int, int] | None, limit: int) -> list[Listed]:
        await self._index_caught_up()
        sql = _LISTED_SELECT + " WHERE v.inbox_id IS NULL"
        params: list[Any] = []
        if before is not None:
            sql += " AND v.seq < ?"
            params.append(before[1])
        rows = await self._read(sql + " ORDER BY v.seq DESC LIMIT ?", (*params, limit))
        return [listed_from_row(row) for row in rows]

    async def caught_message(self, caught_id: str) -> CaughtMessage | None:
        await self._index_caught_up()
        rows = await self._read(
            _LISTED_SELECT.replace(
                "SELECT ",
                "SELECT m.raw AS raw_body, m.date, m.auth_user, c.expires_at AS caught_until, ",
                1,
            )
            + " WHERE v.id = ? AND v.inbox_id IS NULL",
            (caught_id,),
        )
        if not rows:
            return None
        return caught_from_row(rows[0])

    async def expire_caught(self, now: float, limit: int) -> int:
        # The sweeper asks every second: the index is caught up (below) only when some
        # caught mail is due, not at each turn, which would index in the middle of ingest.
        if not await self._read("SELECT 1 FROM caught WHERE expires_at <= ? LIMIT 1", (now,)):
            return 0
        return await self._delete_caught(
            "WHERE expires_at <= ? ORDER BY expires_at", (now,), limit, now
        )

    async def drop_oldest_caught(self, now: float, limit: int) -> int:
        return await self._delete_caught("ORDER BY message_pk", (), limit, now)

    async def _delete_caught(
        self, where: str, params: tuple[Any, ...], limit: int, now: float
    ) -> int:
        def work(db: sqlite3.Connection) -> int:
            rows = _all(db, f"SELECT caught_id FROM caught {where} LIMIT ?", (*params, limit))
            return _delete_entries(db, [row[0] for row in rows], now)

        await self._index_caught_up()  # deletes go through the listing
        deleted = await self._writer.transaction(work)
        if deleted:
            await self._writer.statement("PRAGMA incremental_vacuum")
        return deleted

    # -- search and the listing (v2) --------------------------------------------------

    async def search(
        self,
        query: Query,
        run_scope: str | None,
        before: tuple[int, int] | None,
        limit: int,
        offset: int = 0,
    ) -> list[Listed]:
        await self._index_caught_up()
        narrowing = await self._narrowing(query, run_scope)
        if narrowing is not None:
            found = await self._few_first(query, run_scope, before, offset + limit, narrowing)
            return found[offset:]
        if not query.positive_texts:
            sql, params = _search_sql(query, run_scope, before)
            rows = await self._read(sql + " LIMIT ? OFFSET ?", (*params, limit, offset))
            return [listed_from_row(row) for row in rows]
        found = await self._text_first(query, run_scope, before, offset + limit)
        return found[offset:]

    async def count(self, query: Query, run_scope: str | None, cap: int) -> int:
        await self._index_caught_up()
        narrowing = await self._narrowing(query, run_scope)
        if narrowing is not None:
            return len(await self._few_first(query, run_scope, None, cap, narrowing))
        if not query.positive_texts:
            sql, params = _search_sql(query, run_scope, None)
            rows = await self._read(f"SELECT COUNT(*) FROM ({sql} LIMIT ?)", (*params, cap))
            return int(rows[0][0])
        return len(await self._text_first(query, run_scope, None, cap))

    async def _narrowing(self, query: Query, run_scope: str | None) -> Narrowing | None:
        """A condition that at most ``_NARROW_MAX`` entries pass, found by its own index (the
        caller's run, run:, inbox:, is:claimed, has:attachment, sizes, dates): it then drives."""
        options = [] if run_scope is None else [_narrowing_for("run", run_scope)]
        options += [_narrowing_for(f.kind, f.value) for f in query.filters if not f.negated]
        for option in options:
            if option is None:
                continue
            sql, params = option
            rows = await self._read(
                f"SELECT COUNT(*) FROM ({sql} LIMIT ?)", (*params, _NARROW_MAX + 1)
            )
            if int(rows[0][0]) <= _NARROW_MAX:
                return option
        return None

    async def _few_first(
        self,
        query: Query,
        run_scope: str | None,
        before: tuple[int, int] | None,
        want: int,
        narrowing: Narrowing,
    ) -> list[Listed]:
        """The few entries the narrowing condition selects drive, newest first, 200 at a time:
        the other filters apply in SQL, text terms on the index's own copy of each text (read
        by rowid, matched literally)."""
        sql, params = narrowing
        seqs = sorted((row[0] for row in await self._read(sql, params)), reverse=True)
        if before is not None:
            seqs = [seq for seq in seqs if seq < before[1]]
        filters_only = Query((), query.filters)
        found: list[Listed] = []
        for start in range(0, len(seqs), 200):
            sql, params = _search_sql(filters_only, run_scope, None, seqs=seqs[start : start + 200])
            entries = [listed_from_row(row) for row in await self._read(sql, params)]
            if query.texts and entries:
                pks = sorted({e.position[0] for e in entries})
                documents = {
                    row[0]: {"subject": row[1], "body": row[2], "sender": row[3], "rcpts": row[4]}
                    for row in await self._read(
                        "SELECT rowid, subject, body, sender, rcpts FROM message_text "
                        f"WHERE rowid IN ({','.join('?' * len(pks))})",
                        pks,
                    )
                }
                entries = [
                    e
                    for e in entries
                    if texts_match(query.texts, documents.get(e.position[0], {}), e.released)
                ]
            found += entries
            if len(found) >= want:
                break
        return found[:want]

    async def _bodiless_matches(self, query: Query, entries: list[Listed]) -> set[int]:
        """Of the released entries' messages, those the positive texts match without a body
        (released evidence keeps its metadata, not its text, even while the same message's
        caught mail keeps the body)."""
        pks = sorted({e.position[0] for e in entries if e.released})
        if not pks:
            return set()
        texts = tuple(
            replace(t, columns=tuple(c for c in t.columns if c != "body"))
            for t in query.positive_texts
        )
        if any(not t.columns for t in texts):
            return set()  # a text only a body could hold
        holding, held = _holding(texts, every=True)
        rows = await self._read(
            f"SELECT rowid FROM message_text WHERE rowid IN ({','.join('?' * len(pks))}) "
            f"AND {holding}",
            (*pks, *held),
        )
        return {row[0] for row in rows}

    async def _text_first(
        self, query: Query, run_scope: str | None, before: tuple[int, int] | None, want: int
    ) -> list[Listed]:
        """The full-text index drives: its rowids (message_pks) newest first, in growing
        batches, each batch then filtered through the listing. Never a scan of bodies."""
        expression = fts_expression(query.positive_texts)
        holding, held = _holding(query.positive_texts, every=True)
        unwanted = fts_any(query.negative_texts) if query.negative_texts else None
        holding_unwanted, held_unwanted = _holding(query.negative_texts, every=False)
        upper = before[0] + 1 if before is not None else 1 << 62
        batch = 64
        found: list[Listed] = []
        while len(found) < want:
            pks = [
                row[0]
                for row in await self._read(
                    "SELECT rowid FROM message_text WHERE message_text MATCH ? "
                    f"AND {holding} AND rowid < ? ORDER BY rowid DESC LIMIT ?",
                    (expression, *held, upper, batch),
                )
            ]
            if not pks:
                break
            kept = pks
            if unwanted is not None:
                # Negated texts: one look at the index over this batch's rowid range (FTS5's
                # own NOT cannot stop early when walking newest first).
                # (A rowid range makes FTS5 slower than a newest-first walk with a LIMIT: at
                # most one row per rowid of the range.)
                excluded = {
                    row[0]
                    for row in await self._read(
                        "SELECT rowid FROM message_text WHERE message_text MATCH ? "
                        f"AND {holding_unwanted} AND rowid <= ? ORDER BY rowid DESC LIMIT ?",
                        (unwanted, *held_unwanted, pks[0], pks[0] - pks[-1] + 1),
                    )
                }
                kept = [pk for pk in pks if pk not in excluded]
            if kept:
                sql, params = _search_sql(query, run_scope, None, among=kept)
                entries = [listed_from_row(row) for row in await self._read(sql, params)]
                bodiless = await self._bodiless_matches(query, entries)
                for listed in entries:
                    if listed.released and listed.position[0] not in bodiless:
                        continue  # it matched through a body this entry no longer has
                    if before is None or listed.position < before:
                        found.append(listed)
            if len(pks) < batch:
                break
            upper = pks[-1]
            batch = min(batch * 4, 4096)
        return found[:want]

    async def listed(self, entry_id: str) -> Listed | None:
        await self._index_caught_up()
        rows = await self._read(_LISTED_SELECT + " WHERE v.id = ?", (entry_id,))
        return listed_from_row(rows[0]) if rows else None

    async def listed_raw(self, entry_id: str) -> bytes | None:
        await self._index_caught_up()
        rows = await self._read(
            """SELECT m.raw FROM listing v JOIN messages m ON m.message_pk = v.message_pk
               LEFT JOIN inboxes i ON i.inbox_id = v.inbox_id
               WHERE v.id = ? AND i.released_at IS NULL""",
            (entry_id,),
        )
        if not rows or rows[0][0] is None:
            return None
        return bytes(rows[0][0])

    async def delete_listed(self, ids: list[str] | None, now: float) -> Deleted:
        def work(db: sqlite3.Connection) -> Deleted:
            if ids is None:
                rows = _all(
                    db,
                    """SELECT v.id FROM listing v LEFT JOIN inboxes i ON i.inbox_id = v.inbox_id
                       WHERE v.inbox_id IS NULL OR i.state = 'expired' OR i.expires_at <= ?
                          OR i.released_at IS NOT NULL""",
                    (now,),
                )
                return Deleted(_delete_entries(db, [row[0] for row in rows], now))
            live: list[str] = []
            for chunk in _chunks(ids, 500):
                marks = ",".join("?" * len(chunk))
                live += [
                    row[0]
                    for row in _all(
                        db,
                        f"""SELECT v.id FROM listing v JOIN inboxes i ON i.inbox_id = v.inbox_id
                            WHERE v.id IN ({marks}) AND i.state != 'expired'
                              AND i.expires_at > ? AND i.released_at IS NULL""",
                        (*chunk, now),
                    )
                ]
            if live:
                return Deleted(0, tuple(live))
            return Deleted(_delete_entries(db, list(ids), now))

        await self._index_caught_up()  # the listing must hold everything answered 250
        outcome = await self._writer.transaction(work)
        if outcome.deleted:
            await self._writer.statement("PRAGMA incremental_vacuum")
        return outcome

    # -- the run index (RunIndex: read-only views for the web UI) -------------------

    async def recent_runs(
        self,
        now: float,
        limit: int,
        before: tuple[float, str] | None = None,
        run_contains: str | None = None,
        purpose: str | None = None,
    ) -> list[RunSummary]:
        where: list[str] = []
        params: list[Any] = []
        if run_contains:
            where.append("instr(lower(run_id), lower(?)) > 0")
            params.append(run_contains)
        if purpose:
            where.append("run_id IN (SELECT run_id FROM inboxes WHERE purpose = ?)")
            params.append(purpose)
        having = ""
        if before is not None:
            having = "HAVING started < ? OR (started = ? AND run_id < ?)"
            params.extend([before[0], before[0], before[1]])
        rows = await self._read(
            f"""WITH page AS (
                    SELECT run_id, MIN(created_at) AS started FROM inboxes
                    {"WHERE " + " AND ".join(where) if where else ""}
                    GROUP BY run_id {having}
                    ORDER BY started DESC, run_id DESC LIMIT ?)
                SELECT p.run_id, p.started,
                    (SELECT group_concat(purpose, ' ') FROM (SELECT DISTINCT purpose
                        FROM inboxes WHERE run_id = p.run_id)) AS purposes,
                    (SELECT json_group_object(st, n) FROM (
                        SELECT CASE WHEN state != 'expired' AND expires_at <= ? THEN 'expired'
                               ELSE state END AS st, COUNT(*) AS n
                        FROM inboxes WHERE run_id = p.run_id GROUP BY st)) AS states,
                    (SELECT COUNT(*) FROM deliveries d JOIN inboxes i ON i.inbox_id = d.inbox_id
                        WHERE i.run_id = p.run_id) AS messages,
                    (SELECT COUNT(d.claim_id) FROM deliveries d
                        JOIN inboxes i ON i.inbox_id = d.inbox_id
                        WHERE i.run_id = p.run_id) AS claims,
                    e.type AS last_event, e.at AS last_event_at
                FROM page p
                LEFT JOIN events e ON e.id = (SELECT id FROM events WHERE run_id = p.run_id
                                              ORDER BY at DESC, id DESC LIMIT 1)
                ORDER BY p.started DESC, p.run_id DESC""",
            (*params, limit, now),
        )
        return [
            RunSummary(
                run_id=r["run_id"],
                started_at=r["started"],
                purposes=tuple((r["purposes"] or "").split()),
                states={str(k): int(v) for k, v in json.loads(r["states"] or "{}").items()},
                messages=int(r["messages"]),
                claims=int(r["claims"]),
                last_event=r["last_event"],
                last_event_at=r["last_event_at"],
            )
            for r in rows
        ]

    async def run_deliveries(self, run_id: str, limit: int) -> list[Delivery]:
        rows = await self._read(
            _DELIVERY_SELECT + " WHERE d.inbox_id IN (SELECT inbox_id FROM inboxes WHERE "
            "run_id = ?) ORDER BY d.seq DESC LIMIT ?",
            (run_id, limit),
        )
        return [delivery_from_row(row) for row in rows]


# -- row mapping and statements (run inside a transaction) -----------------------


def _load_inbox(db: sqlite3.Connection, inbox_id: str) -> Inbox | None:
    rows = list(_all(db, _INBOX_SELECT + " WHERE i.inbox_id = ?", (inbox_id,)))
    return inbox_from_row(rows[0]) if rows else None


def _count(db: sqlite3.Connection, run_id: str, purpose: str) -> int:
    rows = list(
        _all(db, "SELECT COUNT(*) FROM inboxes WHERE run_id = ? AND purpose = ?", (run_id, purpose))
    )
    return int(rows[0][0])


def _persist_expiry(
    db: sqlite3.Connection, inbox: Inbox, retention_s: int, cause: str | None = None
) -> None:
    if inbox.state is not State.EXPIRED:
        return
    at = inbox.expired_at if inbox.expired_at is not None else inbox.expires_at
    cur = db.execute(
        """UPDATE inboxes SET state = 'expired', reason = ?, expired_at = ?,
               evidence_release_at = MIN(evidence_release_at, ?),
               last_change_reason = ?
           WHERE inbox_id = ? AND state != 'expired'""",
        (
            inbox.reason,
            at,
            at + retention_s if retention_s else 1e18,
            cause or inbox.reason,
            inbox.inbox_id,
        ),
    )
    if cur.rowcount == 1:
        _insert_events(db, [expired_event(inbox, cause)])


def _release(
    db: sqlite3.Connection, inbox_ids: list[str], now: float, runs: dict[str, str]
) -> None:
    if not inbox_ids:
        return
    db.executemany(
        "UPDATE inboxes SET released_at = ?, evidence_release_at = ? "
        "WHERE inbox_id = ? AND released_at IS NULL",
        [(now, now, inbox_id) for inbox_id in inbox_ids],
    )
    # A message stored once for several inboxes (and caught mail) keeps its body until every
    # one is released.
    pks: set[int] = set()
    for inbox_id in inbox_ids:
        pks.update(
            row[0]
            for row in db.execute(
                "SELECT message_pk FROM deliveries WHERE inbox_id = ?", (inbox_id,)
            ).fetchall()
        )
    _drop_unneeded_bodies(db, sorted(pks), now)
    _insert_events(
        db, [Event(run_id=runs[i], type="released", at=now, inbox_id=i) for i in inbox_ids]
    )


def _insert_events(db: sqlite3.Connection, events: Iterable[Event]) -> None:
    recorded = list(events)
    db.executemany(
        "INSERT INTO events (run_id, inbox_id, message_id, at, type, detail_json) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [
            (e.run_id, e.inbox_id, e.message_id, e.at, e.type, json.dumps(e.detail))
            for e in recorded
        ],
    )
    # One writer connection: the rows just inserted took consecutive ids up to the last one.
    last = int(db.execute("SELECT last_insert_rowid()").fetchone()[0])
    first = last - len(recorded) + 1
    stored = [replace(e, seq=first + n) for n, e in enumerate(recorded)]
    note(db, stored)
    outbox: SQLiteWebhooks | None = getattr(db, "outbox", None)
    if outbox is not None:
        outbox.queue_events(db, stored)


def _insert_batch(db: sqlite3.Connection, items: list[Incoming]) -> None:
    # Never at or below the index's watermark, even when the newest message was deleted:
    # the indexer would pass a message_pk used again.
    rows = list(
        _all(
            db,
            f"SELECT MAX(COALESCE((SELECT MAX(message_pk) FROM messages), 0), ({_INDEXED_UPTO}))",
        )
    )
    pk = int(rows[0][0])
    messages: list[tuple[Any, ...]] = []
    deliveries: list[tuple[Any, ...]] = []
    caught: list[tuple[Any, ...]] = []
    near: list[tuple[Any, ...]] = []
    events: list[Event] = []
    for item in items:
        size = len(item.raw)
        if item.deliveries or item.caught_id:
            pk += 1
            s = item.summary
            messages.append(
                (
                    pk,
                    item.raw,
                    size,
                    s.subject,
                    s.from_addr,
                    json_strings(s.to),
                    json_strings(s.cc),
                    s.date,
                    item.mail_from,
                    item.received_at,
                    item.auth_user,
                )
            )
            for d in item.deliveries:
                deliveries.append((d.message_id, d.inbox_id, pk, json_strings(d.rcpts)))
                events.append(accepted_event(d, item.received_at, size))
            if item.caught_id:
                caught.append((item.caught_id, pk, json_strings(item.unrouted), item.caught_until))
            for found in item.near_misses:
                near.append((found.inbox_id, found.address, item.received_at, found.distance))
                events.append(near_miss_event(found, item.received_at))
        events.extend(late_events(item.late, item.received_at, size))
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
        _insert_events(db, events)
    outbox: SQLiteWebhooks | None = getattr(db, "outbox", None)
    if outbox is not None:
        outbox.queue_mail(db, items)


# -- the listing, search and deletes (v2) --------------------------------------------------

_NARROW_MAX = 2000  # a condition with at most this many entries drives the search
Narrowing = tuple[str, list[Any]]  # SQL selecting listing seqs, and its parameters


def _narrowing_for(kind: str, value: Any) -> Narrowing | None:
    """The listing entries one (positive) filter selects, by that filter's own index."""
    if kind == "run":
        return "SELECT seq FROM listing WHERE run_id = ?", [value]
    if kind == "inbox":
        return "SELECT seq FROM listing WHERE inbox_id = ?", [value]
    if kind == "is" and value == "caught":
        return "SELECT seq FROM listing WHERE inbox_id IS NULL", []
    if kind == "is" and value == "claimed":
        return (
            "SELECT v.seq FROM deliveries d JOIN listing v ON v.id = d.message_id "
            "WHERE d.claim_id IS NOT NULL",
            [],
        )
    if kind == "has":
        return "SELECT seq FROM listing WHERE has_attachment = 1", []
    column, operator = {
        "larger": ("size", ">"),
        "smaller": ("size", "<"),
        "before": ("received_at", "<"),
        "after": ("received_at", ">"),
    }.get(kind, ("", ""))
    if column:
        return f"SELECT seq FROM listing WHERE {column} {operator} ?", [value]
    return None  # is:unclaimed: most evidence is


_LISTED_COLUMNS = """
SELECT v.seq, v.id, v.message_pk, v.inbox_id, v.run_id, m.subject, m.from_addr, m.to_json,
       m.cc_json, m.mail_from, m.received_at, m.size, v.has_attachment,
       COALESCE(d.rcpt_json, c.rcpt_json) AS rcpt_json, d.claim_id,
       (m.raw IS NULL OR i.released_at IS NOT NULL) AS released
"""
_LISTED_JOINS = """
LEFT JOIN deliveries d ON d.message_id = v.id
LEFT JOIN caught c ON c.caught_id = v.id
LEFT JOIN inboxes i ON i.inbox_id = v.inbox_id
"""
_LISTED_SELECT = (
    _LISTED_COLUMNS
    + "FROM listing v JOIN messages m ON m.message_pk = v.message_pk"
    + _LISTED_JOINS
)
# The full-text index drives: its rowids are message_pks, walked newest first.
_TEXT_FIRST_SELECT = (
    _LISTED_COLUMNS
    + "FROM message_text s CROSS JOIN listing v ON v.message_pk = s.rowid"
    + " JOIN messages m ON m.message_pk = s.rowid"
    + _LISTED_JOINS
)


def _filter_sql(kind: str, value: Any) -> tuple[str, list[Any]]:
    """One filter as SQL over the listing (v), its message (m) and delivery (d)."""
    if kind == "run":
        return "v.run_id IS ?", [value]
    if kind == "inbox":
        return "v.inbox_id IS ?", [value]
    if kind == "is":
        return {
            "caught": ("v.inbox_id IS NULL", []),
            "claimed": ("d.claim_id IS NOT NULL", []),
            "unclaimed": ("(v.inbox_id IS NOT NULL AND d.claim_id IS NULL)", []),
        }[value]
    if kind == "has":
        return "v.has_attachment = 1", []
    if kind == "before":
        return "v.received_at < ?", [value]
    if kind == "after":
        return "v.received_at > ?", [value]
    if kind == "larger":
        return "v.size > ?", [value]
    if kind == "smaller":
        return "v.size < ?", [value]
    raise AssertionError(kind)  # pragma: no cover - sink.search names only these


def _holding(texts: tuple[Text, ...], every: bool) -> tuple[str, list[str]]:
    """The condition that a message_text row holds each text (``every``) or any of them,
    whole, in one of its columns: what FTS5's trigrams found, checked (see ``fts_expression``).
    The columns hold folded text, so a case-sensitive ``instr`` of the folded text is exact."""
    clauses: list[str] = []
    params: list[str] = []
    for text in texts:
        needle = folded(text.value)
        clauses.append(
            "(" + " OR ".join(f"instr({column}, ?) > 0" for column in text.columns) + ")"
        )
        params += [needle] * len(text.columns)
    if not clauses:
        return "1", params
    return "(" + (" AND " if every else " OR ").join(clauses) + ")", params


def _search_sql(
    query: Query,
    run_scope: str | None,
    before: tuple[int, int] | None,
    among: Sequence[int] | None = None,
    seqs: Sequence[int] | None = None,
) -> tuple[str, list[Any]]:
    """The listing entries matching ``query``'s filters, newest first (LIMIT left to add).

    The listing drives, by its seq (or its run, inbox or caught index). Text terms are the
    caller's to apply first, through the full-text index: ``among`` is then the message_pks
    it found, and only those are looked at. Negated texts alone are checked here.
    """
    where: list[str] = []
    params: list[Any] = []
    if run_scope is not None:
        where.append("v.run_id = ?")
        params.append(run_scope)
    for item in query.filters:
        clause, values = _filter_sql(item.kind, item.value)
        where.append(f"NOT ({clause})" if item.negated else clause)
        params += values
    if among is not None:  # the full-text index already applied every text term
        where.append(f"v.message_pk IN ({','.join('?' * len(among))})")
        params += among
    elif query.negative_texts:
        holding, held = _holding(query.negative_texts, every=False)
        where.append(
            "v.message_pk NOT IN (SELECT rowid FROM message_text WHERE message_text MATCH ? "
            f"AND {holding})"
        )
        params += [fts_any(query.negative_texts), *held]
    if before is not None:
        where.append("v.seq < ?")
        params.append(before[1])
    if seqs is not None:  # a narrowing's candidates: looked up by key, never a walk
        where.append(f"v.seq IN ({','.join('?' * len(seqs))})")
        params += seqs
    sql = _LISTED_SELECT + (" WHERE " + " AND ".join(where) if where else "")
    return sql + " ORDER BY v.seq DESC", params


def _chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _delete_entries(db: sqlite3.Connection, ids: list[str], now: float) -> int:
    """Take entries off the listing (and caught mail off the store); bodies no use needs go."""
    deleted = 0
    pks: set[int] = set()
    for chunk in _chunks(ids, 500):
        marks = ",".join("?" * len(chunk))
        pks.update(
            row[0]
            for row in _all(db, f"SELECT message_pk FROM listing WHERE id IN ({marks})", chunk)
        )
        deleted += db.execute(f"DELETE FROM listing WHERE id IN ({marks})", chunk).rowcount
        db.execute(f"DELETE FROM caught WHERE caught_id IN ({marks})", chunk)
    _drop_unneeded_bodies(db, sorted(pks), now)
    return deleted


def _drop_unneeded_bodies(db: sqlite3.Connection, pks: list[int], now: float) -> None:
    """For each message: gone entirely when nothing refers to it any more; its body (and the
    index's copy of its text) released when no caught mail and no unreleased, listed
    delivery needs it. Delivery metadata stays for the run reports."""
    for pk in pks:
        if db.execute("SELECT 1 FROM caught WHERE message_pk = ?", (pk,)).fetchone():
            continue
        if not db.execute("SELECT 1 FROM deliveries WHERE message_pk = ?", (pk,)).fetchone():
            db.execute("DELETE FROM messages WHERE message_pk = ?", (pk,))
            db.execute("DELETE FROM message_text WHERE rowid = ?", (pk,))
            continue
        # A delivery not yet in the listing (its message is not indexed yet) is listed as
        # far as its body is concerned: the indexer will list it.
        needed = db.execute(
            f"""SELECT 1 FROM deliveries d JOIN inboxes i ON i.inbox_id = d.inbox_id
               WHERE d.message_pk = ? AND i.released_at IS NULL
                 AND (d.message_pk > ({_INDEXED_UPTO})
                      OR EXISTS (SELECT 1 FROM listing v WHERE v.id = d.message_id))
               LIMIT 1""",
            (pk,),
        ).fetchone()
        if needed:
            continue
        cur = db.execute(
            "UPDATE messages SET raw = NULL, analysis = NULL, released_at = ? "
            "WHERE message_pk = ? "
            "AND raw IS NOT NULL",
            (now, pk),
        )
        if cur.rowcount:
            db.execute("UPDATE message_text SET body = '' WHERE rowid = ?", (pk,))
