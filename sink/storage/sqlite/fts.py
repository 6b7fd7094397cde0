"""The search index on SQLite: FTS5 over each message's folded text, and the listing.

Both follow the commits in batches, out of the delivery's own commit (``Indexer``): the
listing's indexes and FTS5's segment per commit cost more than storing the mail, so the 250
waits for neither, and many messages indexed at once cost far less than one by one.
Whatever reads the listing catches up first. Text terms become FTS5 expressions of
trigrams (``fts_expression``); the query language itself is ``sink/search.py``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from functools import partial
from typing import Any

from sink.errors import StorageError
from sink.logs import warn
from sink.message import search_fields
from sink.search import Text, folded
from sink.storage.sqlite.writer import Writer, all_rows

# Messages above it are not indexed yet (schema v3: a watermark, not an index that every
# delivery's commit would write a page of).
INDEXED_UPTO = "SELECT indexed_upto FROM index_state"

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


def index_pending(db: sqlite3.Connection, limit: int = _INDEX_BATCH) -> tuple[int, bool]:
    """Put up to ``limit`` stored messages (up to ``_INDEX_BATCH_BYTES`` of them, but one
    at least) into the listing and the full-text index: how many, and whether more may wait.

    Both are kept out of the delivery's own commit (inside a transaction of their own):
    the listing's indexes and FTS5's segment per commit cost more than storing the
    mail, so the 250 waits for neither, and many messages indexed at once cost far less
    than one by one. Whatever reads the listing catches up first (``Indexer.caught_up``).
    """
    # One statement per table for the whole batch. The bodies are read one at a time: a
    # batch of large messages must not sit in memory at once.
    rows = all_rows(
        db,
        "SELECT message_pk, subject, from_addr, mail_from, size FROM messages "
        f"WHERE message_pk > ({INDEXED_UPTO}) ORDER BY message_pk LIMIT ?",
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


def refold(db: sqlite3.Connection, limit: int) -> bool:
    """Schema v4 rebuilt the full-text index (folded text, no token positions): put back the
    text of up to ``limit`` of the messages indexed before it, newest first. True once none
    is left (``index_state.refold_upto``, the highest message_pk still to do, is then 0)."""
    upto = int(db.execute("SELECT refold_upto FROM index_state").fetchone()[0])
    if upto == 0:  # done (every store opened since v4): nothing to write
        return True
    rows = all_rows(
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


class Indexer:
    """Keeps the listing and the full-text index up with the commits, in batches."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer
        self._pending = True  # there may be mail not yet indexed
        self._pending_count = 0  # deliveries since the index last caught up
        self._last_delivery = 0.0  # loop time of the last delivery's commit
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def delivered(self) -> None:
        """A delivery committed: index it once deliveries pause (or the backlog is large)."""
        self._pending = True
        self._pending_count += 1
        self._last_delivery = asyncio.get_running_loop().time()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._behind(), name="search-indexer")

    async def close(self) -> None:
        if self._task is not None:
            # What it leaves is indexed at the next open.
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, StorageError):
                await self._task
            self._task = None

    async def _behind(self) -> None:
        """Index what the commits stored once deliveries pause, many per transaction."""
        loop = asyncio.get_running_loop()
        try:
            while self._pending:
                # Not a synchronisation: a pause until ingest is quiet (or the backlog is
                # large), so that indexing neither competes with deliveries nor runs per
                # message: one index transaction (one FTS5 segment, one fsync) covers many.
                # One batch at a time, looking again before each: deliveries that resume
                # find the writer free within one batch, not after the whole backlog.
                quiet_at = self._last_delivery + _INDEX_QUIET_S
                quiet = loop.time() >= quiet_at
                if self._pending_count < _INDEX_BACKLOG and not quiet:
                    await asyncio.sleep(quiet_at - loop.time())
                    continue
                async with self._lock:
                    await self._batch(_INDEX_BATCH_IDLE if quiet else _INDEX_BATCH)
        except StorageError as exc:  # the next search (or the next open) indexes it
            warn("search_index_deferred", error=type(exc).__name__)

    async def _batch(self, limit: int) -> bool:
        """Index one batch (under the index lock); True when nothing was left behind it."""
        if not self._pending:
            return True
        # Cleared first: a delivery committed while the batch runs sets it again.
        self._pending = False
        try:
            indexed, more = await self._writer.transaction(partial(index_pending, limit=limit))
        except BaseException:
            self._pending = True
            raise
        self._pending_count = max(0, self._pending_count - indexed)
        if more:
            self._pending = True
            return False
        self._pending_count = 0
        return True

    async def caught_up(self) -> None:
        """Read-your-writes: mail answered 250 before a search is in the index it reads."""
        async with self._lock:
            while not await self._batch(_INDEX_BATCH_IDLE):
                pass


def fts_expression(texts: tuple[Text, ...]) -> str:
    """The texts ANDed as an FTS5 MATCH expression that finds every document holding them:
    each text's trigrams, in its columns. It may find more (the trigrams apart, or in two of
    the columns): the caller keeps only the documents that hold each text whole (``instr``
    over the folded columns; see ``mail.py``'s ``_holding``)."""
    return " AND ".join(_fts_term(t) for t in texts)


def fts_any(texts: tuple[Text, ...]) -> str:
    """The texts ORed: used for the negated ones (``NOT (a OR b)``), checked as above."""
    return " OR ".join(_fts_term(t) for t in texts)


def trigrams(needle: str) -> list[str]:
    """Enough 3-character pieces of ``needle`` to cover every character of it, each once:
    one every 3 characters and the last one (an index without positions answers each as a
    separate token; ``instr`` then checks the whole)."""
    if len(needle) < 3:  # refused by parse_query; FTS5 finds nothing for it
        return [needle]
    starts = [*range(0, len(needle) - 2, 3), len(needle) - 3]
    return list(dict.fromkeys(needle[i : i + 3] for i in starts))


def _fts_term(text: Text) -> str:
    # FTS5 strings: double quotes doubled; nothing inside is syntax (no *, ^, NEAR).
    grams = " AND ".join(
        '"' + gram.replace('"', '""') + '"' for gram in trigrams(folded(text.value))
    )
    if len(text.columns) == 1:
        return f"{text.columns[0]} : ({grams})"
    return "{" + " ".join(text.columns) + "} : (" + grams + ")"
