"""Caught mail, search and deletes on PostgreSQL: the ``CaughtMail`` and ``SearchIndex`` ports.

The same observable behaviour as SQLite's (``sqlite/mail.py``), for a fleet of replicas:

- The listing (every delivery and every caught mail, newest first) and the caught rows
  are written by the delivering transaction itself (``batch.py``'s ``_BATCH_INSERT``):
  plain rows, cheap beside the message. Mail answered 250 by any replica is listed.
- The search text (``message_text``: subject, body, sender, recipients, case-folded) and
  ``has_attachment`` need a MIME walk: an indexer fills them after the commit, in batches,
  once deliveries pause (as in SQLite), so the 250 waits for neither. Any replica indexes
  any pending message: the background indexer skips rows another replica is indexing,
  and a reader (search, count, one entry) first indexes what was pending when it asked,
  waiting for rows being indexed elsewhere. Mail answered 250 before a search is found.
- Text terms are literal substrings: ``LIKE '%word%'`` over the case-folded text, answered
  by pg_trgm's trigram indexes where the extension exists (migration 003), otherwise by
  reading texts newest first. Every query has a LIMIT; lists page by the listing's seq.
- Deletes lock the messages they touch (in ``message_pk`` order, as releases and the
  indexers do: ``lock_messages``) before deciding which bodies nothing needs any more, so
  replicas deleting and releasing at once never deadlock, never keep or drop a body
  wrongly, and a second delete of one entry finds it gone (0 deleted, no error).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sink.errors import StorageError
from sink.logs import warn
from sink.message import search_fields
from sink.search import Query, Text, folded
from sink.storage.base import CaughtMessage, Deleted, Listed
from sink.storage.postgres.driver import Database, Record
from sink.storage.rows import caught_from_row, listed_from_row

if TYPE_CHECKING:
    from sink.storage.postgres.driver import Connection

# As in sqlite/fts.py: small batches, indexed once deliveries pause this long (or at once when
# this many wait), so that indexing neither competes with deliveries nor runs per message.
_INDEX_BATCH = 32
_INDEX_QUIET_S = 0.5
_INDEX_BACKLOG = 4096
_DELETE_BATCH = 500

_COLUMNS = {"subject": "t.subject", "body": "t.body", "sender": "t.sender", "rcpts": "t.rcpts"}

_LISTED_FROM = """
SELECT v.seq, v.id, m.message_pk, v.inbox_id, v.run_id, m.subject, m.from_addr, m.to_json,
       m.cc_json, m.mail_from, m.received_at, m.size, m.has_attachment,
       COALESCE(d.rcpt_json, c.rcpt_json) AS rcpt_json, d.claim_id,
       (m.raw IS NULL OR i.released_at IS NOT NULL) AS released
FROM {listing} v JOIN messages m ON m.message_key = v.message_key
LEFT JOIN deliveries d ON d.message_id = v.id
LEFT JOIN caught c ON c.caught_id = v.id
LEFT JOIN inboxes i ON i.inbox_id = v.inbox_id
"""
_LISTED_SELECT = _LISTED_FROM.format(listing="listing")
# A text term walks this many of the newest entries first: a common word fills its page
# there at once. Beyond them the trigram indexes drive (a rare word's few matches are found
# without reading every text); PostgreSQL's planner cannot tell the two cases apart.
_WALK_FIRST = 2000
_NO_UPPER = 1 << 62


class PostgresMail:
    """The v2 mail ports over the PostgreSQL store's connections (``PostgresStore.mail``)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._indexer: asyncio.Task[None] | None = None
        self._stored_count = 0  # deliveries since the indexer last caught up
        self._last_stored = 0.0
        self._catching_up = asyncio.Lock()
        self.walk_first = _WALK_FIRST  # see _WALK_FIRST (a test lowers it)

    # -- the indexer ---------------------------------------------------------------

    def stored(self) -> None:
        """A delivery committed here: index it (with others) once deliveries pause."""
        loop = asyncio.get_running_loop()
        self._stored_count += 1
        self._last_stored = loop.time()
        if self._indexer is None or self._indexer.done():
            # Kept in self._indexer (a task nobody references may be collected mid-flight).
            self._indexer = asyncio.create_task(self._index_behind(), name="pg-search-indexer")

    async def close(self) -> None:
        if self._indexer is not None:
            # What it leaves is indexed by the next reader or indexer, on any replica.
            self._indexer.cancel()
            with contextlib.suppress(asyncio.CancelledError, StorageError):
                await self._indexer
            self._indexer = None

    async def _index_behind(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._stored_count:
                # Not a synchronisation: a pause until ingest is quiet (or the backlog large),
                # so that one index transaction covers many messages.
                quiet_at = self._last_stored + _INDEX_QUIET_S
                if self._stored_count < _INDEX_BACKLOG and loop.time() < quiet_at:
                    await asyncio.sleep(quiet_at - loop.time())
                    continue
                self._stored_count = 0
                while await self._index_batch(None, wait=False) == _INDEX_BATCH:
                    pass
        except StorageError as exc:  # the next reader (on any replica) indexes it
            warn("search_index_deferred", error=type(exc).__name__)

    async def _caught_up(self) -> None:
        """Read-your-writes across replicas: what was pending when asked is indexed first."""
        rows = await self._db.fetch(
            "search", "SELECT MAX(message_pk) FROM messages WHERE NOT indexed"
        )
        top = rows[0][0]
        if top is None:
            return
        async with self._catching_up:
            while await self._index_batch(int(top), wait=True):
                pass

    async def _index_batch(self, top: int | None, wait: bool) -> int:
        """Index up to ``_INDEX_BATCH`` pending messages (up to ``top``) in one transaction.

        ``wait``: rows another replica is indexing are waited for (then skipped, indexed);
        otherwise they are left to it. Rows are locked in ``message_pk`` order (as deletes
        lock them), so two indexers never deadlock.
        """

        async def work(db: Connection) -> int:
            rows = await db.fetch(
                "SELECT message_pk, message_key, subject, from_addr, mail_from FROM messages "
                "WHERE NOT indexed AND message_pk <= $1 ORDER BY message_pk LIMIT $2 "
                + ("FOR UPDATE" if wait else "FOR UPDATE SKIP LOCKED"),
                top if top is not None else 1 << 62,
                _INDEX_BATCH,
            )
            if rows:
                await _index_rows(db, rows)
            return len(rows)

        return await self._db.transaction("indexing", work)

    # -- caught mail (CaughtMail) ------------------------------------------------------

    async def caught_page(self, before: tuple[int, int] | None, limit: int) -> list[Listed]:
        await self._caught_up()
        rows = await self._db.fetch(
            "caught_page",
            _LISTED_SELECT
            + " WHERE v.inbox_id IS NULL AND v.seq < $1 ORDER BY v.seq DESC LIMIT $2",
            before[1] if before is not None else 1 << 62,
            limit,
        )
        return [listed_from_row(row) for row in rows]

    async def caught_message(self, caught_id: str) -> CaughtMessage | None:
        await self._caught_up()
        rows = await self._db.fetch(
            "caught_message",
            _LISTED_SELECT.replace(
                "SELECT ",
                "SELECT m.raw AS raw_body, m.date, m.auth_user, c.expires_at AS caught_until, ",
                1,
            )
            + " WHERE v.id = $1 AND v.inbox_id IS NULL",
            caught_id,
        )
        if not rows:
            return None
        return caught_from_row(rows[0])

    async def expire_caught(self, now: float, limit: int) -> int:
        return await self._delete_caught(
            "SELECT caught_id FROM caught WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2",
            now,
            limit,
            now=now,
        )

    async def drop_oldest_caught(self, now: float, limit: int) -> int:
        return await self._delete_caught(
            "SELECT c.caught_id FROM listing v JOIN caught c ON c.caught_id = v.id"
            " WHERE v.inbox_id IS NULL ORDER BY v.seq LIMIT $1",
            limit,
            now=now,
        )

    async def _delete_caught(self, select: str, *args: Any, now: float) -> int:
        # No row locks here: locking caught rows before their messages would be the reverse
        # of a delete's order (messages, then caught rows), a deadlock. _delete_entries locks
        # the messages first; what a concurrent delete took meanwhile is then simply gone.
        async def work(db: Connection) -> int:
            ids = [row[0] for row in await db.fetch(select, *args)]
            return await _delete_entries(db, ids, now)

        return await self._db.transaction("deleting caught mail", work)

    # -- search and the listing (SearchIndex) --------------------------------------------

    async def search(
        self,
        query: Query,
        run_scope: str | None,
        before: tuple[int, int] | None,
        limit: int,
        offset: int = 0,
    ) -> list[Listed]:
        await self._caught_up()
        upper = before[1] if before is not None else _NO_UPPER
        if not query.positive_texts:
            return await self._page(query, run_scope, upper, limit, offset)
        want = offset + limit
        found = await self._page(query, run_scope, upper, want, window=self.walk_first)
        if len(found) < want:
            floor = await self._window_floor(upper)
            if floor is not None:
                found += await self._page(query, run_scope, floor, want - len(found))
        return found[offset:]

    async def count(self, query: Query, run_scope: str | None, cap: int) -> int:
        await self._caught_up()
        if not query.positive_texts:
            return await self._count(query, run_scope, _NO_UPPER, cap)
        counted = await self._count(query, run_scope, _NO_UPPER, cap, window=self.walk_first)
        floor = await self._window_floor(_NO_UPPER) if counted < cap else None
        if floor is not None:
            counted += await self._count(query, run_scope, floor, cap - counted)
        return counted

    async def _page(
        self,
        query: Query,
        run_scope: str | None,
        upper: int,
        limit: int,
        offset: int = 0,
        window: int | None = None,
    ) -> list[Listed]:
        sql, params = _search_sql(query, run_scope, upper, window)
        n = len(params)
        rows = await self._db.fetch(
            "search",
            f"{sql} ORDER BY v.seq DESC LIMIT ${n + 1} OFFSET ${n + 2}",
            *params,
            limit,
            offset,
        )
        return [listed_from_row(row) for row in rows]

    async def _count(
        self, query: Query, run_scope: str | None, upper: int, cap: int, window: int | None = None
    ) -> int:
        sql, params = _search_sql(query, run_scope, upper, window)
        rows = await self._db.fetch(
            "count", f"SELECT COUNT(*) FROM ({sql} LIMIT ${len(params) + 1}) x", *params, cap
        )
        return int(rows[0][0])

    async def _window_floor(self, upper: int) -> int | None:
        """The oldest seq of the newest-first walk below ``upper``, or None when the walk
        saw every entry below it."""
        rows = await self._db.fetch(
            "search",
            "SELECT MIN(seq), COUNT(*) FROM (SELECT seq FROM listing WHERE seq < $1 "
            "ORDER BY seq DESC LIMIT $2) x",
            upper,
            self.walk_first,
        )
        floor, seen = rows[0]
        return None if seen < self.walk_first else int(floor)

    async def listed(self, entry_id: str) -> Listed | None:
        await self._caught_up()
        rows = await self._db.fetch("listed", _LISTED_SELECT + " WHERE v.id = $1", entry_id)
        return listed_from_row(rows[0]) if rows else None

    async def listed_raw(self, entry_id: str) -> bytes | None:
        rows = await self._db.fetch(
            "listed_raw",
            """SELECT m.raw FROM listing v JOIN messages m ON m.message_key = v.message_key
               LEFT JOIN inboxes i ON i.inbox_id = v.inbox_id
               WHERE v.id = $1 AND i.released_at IS NULL""",
            entry_id,
        )
        if not rows or rows[0][0] is None:
            return None
        return bytes(rows[0][0])

    async def delete_listed(self, ids: list[str] | None, now: float) -> Deleted:
        if ids is None:
            return Deleted(await self._delete_all_unneeded(now))

        async def work(db: Connection) -> Deleted:
            live = [
                row[0]
                for row in await db.fetch(
                    """SELECT v.id FROM listing v JOIN inboxes i ON i.inbox_id = v.inbox_id
                       WHERE v.id = ANY($1::text[]) AND i.state <> 'expired'
                         AND i.expires_at > $2 AND i.released_at IS NULL
                       ORDER BY v.seq""",
                    ids,
                    now,
                )
            ]
            if live:
                return Deleted(0, tuple(live))
            return Deleted(await _delete_entries(db, ids, now))

        return await self._db.transaction("delete", work)

    async def _delete_all_unneeded(self, now: float) -> int:
        """All caught mail and all mail of expired or released inboxes, a batch per
        transaction (never the whole table in memory)."""

        async def work(db: Connection) -> tuple[int, int]:
            ids = [
                row[0]
                for row in await db.fetch(
                    """SELECT v.id FROM listing v LEFT JOIN inboxes i ON i.inbox_id = v.inbox_id
                       WHERE v.inbox_id IS NULL OR i.state = 'expired' OR i.expires_at <= $1
                          OR i.released_at IS NOT NULL
                       ORDER BY v.seq LIMIT $2""",
                    now,
                    _DELETE_BATCH,
                )
            ]
            return len(ids), await _delete_entries(db, ids, now)

        deleted = 0
        while True:
            found, gone = await self._db.transaction("delete", work)
            deleted += gone
            if found < _DELETE_BATCH:
                return deleted


# -- inside a transaction ------------------------------------------------------------------


async def _index_rows(db: Connection, rows: list[Record]) -> None:
    """The rows' search text and attachment flags, in a few statements; each body is read
    alone (a batch of large messages never sits in memory at once)."""
    keys = [row["message_key"] for row in rows]
    rcpts: dict[str, list[str]] = {key: [] for key in keys}
    for key, listed in await db.fetch(
        "SELECT message_key, rcpt_json FROM deliveries WHERE message_key = ANY($1::text[]) "
        "UNION ALL SELECT message_key, rcpt_json FROM caught WHERE message_key = ANY($1::text[])",
        keys,
    ):
        rcpts[key] += json.loads(listed)
    texts: list[tuple[str, str, str, str]] = []
    attachments: list[bool] = []
    for row in rows:
        key, envelope = row["message_key"], " ".join(rcpts[row["message_key"]])
        raw = await db.fetchval("SELECT raw FROM messages WHERE message_key = $1", key)
        if raw is not None:
            found = await asyncio.to_thread(search_fields, bytes(raw))
            text = (
                found.subject,
                found.body,
                f"{found.sender} {row['mail_from']}",
                f"{found.recipients} {envelope}",
            )
            attachments.append(found.has_attachment)
        else:  # released before it was indexed: its metadata only
            text = (row["subject"], "", f"{row['from_addr']} {row['mail_from']}", envelope)
            attachments.append(False)
        texts.append((_folded(text[0]), _folded(text[1]), _folded(text[2]), _folded(text[3])))
    await db.execute(
        """INSERT INTO message_text (message_key, subject, body, sender, rcpts)
           SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
           ON CONFLICT (message_key) DO UPDATE SET subject = EXCLUDED.subject,
               body = EXCLUDED.body, sender = EXCLUDED.sender, rcpts = EXCLUDED.rcpts""",
        keys,
        *([text[i] for text in texts] for i in range(4)),
    )
    await db.execute(
        """UPDATE messages m SET indexed = true, has_attachment = u.attachment
           FROM unnest($1::text[], $2::bool[]) AS u(message_key, attachment)
           WHERE m.message_key = u.message_key""",
        keys,
        attachments,
    )


def _folded(text: str) -> str:
    # NUL cannot be stored in a PostgreSQL text; it can never be part of a query either.
    return folded(text).replace("\x00", "")


async def _delete_entries(db: Connection, ids: Sequence[str], now: float) -> int:
    """Take entries off the listing (and caught mail off the store); bodies no use needs go."""
    if not ids:
        return 0
    keys = [
        row[0]
        for row in await db.fetch(
            "SELECT DISTINCT message_key FROM listing WHERE id = ANY($1::text[])", list(ids)
        )
    ]
    if not keys:
        return 0
    # The messages first, in one order (the indexers' and releases' order): a concurrent
    # delete or release of one of them then waits, and sees this one's work when it looks.
    await lock_messages(db, "message_key = ANY($1::text[])", keys)
    status = await db.execute("DELETE FROM listing WHERE id = ANY($1::text[])", list(ids))
    await db.execute("DELETE FROM caught WHERE caught_id = ANY($1::text[])", list(ids))
    # Caught mail's live-event row goes with it (migration 006): nothing left to show.
    await db.execute(
        "DELETE FROM events WHERE run_id IS NULL AND message_id = ANY($1::text[])", list(ids)
    )
    await _drop_unneeded_bodies(db, keys, now)
    return int(status.split()[-1])


async def lock_messages(db: Connection, where: str, *args: Any) -> None:
    """Lock the messages ``where`` selects, in ``message_pk`` order: every path that locks
    several messages (deletes, releases, the indexers) takes them in this one order, so no
    two of them can deadlock."""
    await db.execute(f"SELECT 1 FROM messages WHERE {where} ORDER BY message_pk FOR UPDATE", *args)


async def _drop_unneeded_bodies(db: Connection, keys: list[str], now: float) -> None:
    """Each message: gone entirely (its text with it) when nothing refers to it any more;
    its body released when no caught mail and no unreleased, listed delivery needs it.
    Delivery metadata stays for the run reports."""
    await db.execute(
        """DELETE FROM messages m WHERE m.message_key = ANY($1::text[])
             AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_key = m.message_key)
             AND NOT EXISTS (SELECT 1 FROM caught c WHERE c.message_key = m.message_key)""",
        keys,
    )
    await db.execute(
        """UPDATE messages m SET raw = NULL, analysis = NULL, released_at = $2
           WHERE m.message_key = ANY($1::text[]) AND m.raw IS NOT NULL
             AND NOT EXISTS (SELECT 1 FROM caught c WHERE c.message_key = m.message_key)
             AND NOT EXISTS (
                 SELECT 1 FROM deliveries d JOIN inboxes i ON i.inbox_id = d.inbox_id
                 JOIN listing v ON v.id = d.message_id
                 WHERE d.message_key = m.message_key AND i.released_at IS NULL)""",
        keys,
        now,
    )


# -- queries (pure) ----------------------------------------------------------------------


class _Params:
    """Positional parameters ($1, $2, ...) in the order a query names them."""

    def __init__(self) -> None:
        self.values: list[Any] = []

    def __call__(self, value: Any) -> str:
        self.values.append(value)
        return f"${len(self.values)}"


def like_pattern(value: str) -> str:
    """``value`` as a LIKE pattern matching it literally anywhere (case-folded, as the text)."""
    escaped = _folded(value).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _text_sql(text: Text, param: _Params) -> str:
    pattern = param(like_pattern(text.value))
    found = " OR ".join(f"{_COLUMNS[column]} LIKE {pattern}" for column in text.columns)
    if text.negated:
        # Negated: no trigram index helps anyway; a message without text has none of it.
        return f"NOT COALESCE({_unreleased(text, pattern, found)}, false)"
    # Positive: the ORed LIKEs stand alone, so the trigram indexes can answer them (a
    # missing text row is NULL, which WHERE treats as false).
    return _unreleased(text, pattern, found)


def _unreleased(text: Text, pattern: str, found: str) -> str:
    """``found``, with a released body's text left out (SQLite blanks its copy of it):
    (others OR body) AND (others OR body kept), i.e. others OR (body AND kept). Kept for this
    entry: evidence of a released inbox has no body, even while the same message's caught
    mail keeps it."""
    if "body" not in text.columns:
        return f"({found})"
    others = [f"{_COLUMNS[c]} LIKE {pattern}" for c in text.columns if c != "body"]
    kept = "(m.raw IS NOT NULL AND i.released_at IS NULL)"
    return f"({found}) AND ({' OR '.join([*others, kept])})"


def _filter_sql(kind: str, value: Any, negated: bool, param: _Params) -> str:
    """One filter over the listing (v), its message (m) and delivery (d)."""
    if kind in ("run", "inbox"):
        column = f"v.{kind}_id"
        # Caught mail has neither: it is not that run's (nor that inbox's) mail.
        return (
            f"{column} IS DISTINCT FROM {param(value)}" if negated else f"{column} = {param(value)}"
        )
    if kind == "is":
        clause = {
            "caught": "v.inbox_id IS NULL",
            "claimed": "d.claim_id IS NOT NULL",
            "unclaimed": "(v.inbox_id IS NOT NULL AND d.claim_id IS NULL)",
        }[str(value)]
    elif kind == "has":
        clause = "m.has_attachment"
    elif kind in ("before", "after"):
        clause = f"m.received_at {'<' if kind == 'before' else '>'} {param(float(value))}"
    elif kind in ("larger", "smaller"):
        clause = f"m.size {'>' if kind == 'larger' else '<'} {param(int(value))}::bigint"
    else:  # pragma: no cover - sink.search names only these
        raise AssertionError(kind)
    return f"NOT ({clause})" if negated else clause


def _search_sql(
    query: Query, run_scope: str | None, upper: int, window: int | None = None
) -> tuple[str, list[Any]]:
    """The listing entries below seq ``upper`` matching ``query``, unordered (the caller
    orders and limits); with ``window``, among the newest ``window`` entries below it only."""
    param = _Params()
    listing = "listing"
    if window is not None:
        listing = (
            f"(SELECT * FROM listing WHERE seq < {param(upper)} "
            f"ORDER BY seq DESC LIMIT {param(window)})"
        )
    where: list[str] = []
    if run_scope is not None:
        where.append(f"v.run_id = {param(run_scope)}")
    for item in query.filters:
        where.append(_filter_sql(item.kind, item.value, item.negated, param))
    for text in query.texts:
        where.append(_text_sql(text, param))
    if window is None and upper < _NO_UPPER:
        where.append(f"v.seq < {param(upper)}")
    sql = _LISTED_FROM.format(listing=listing)
    if query.texts:
        sql += "LEFT JOIN message_text t ON t.message_key = v.message_key\n"
    if where:
        sql += " WHERE " + " AND ".join(where)
    return sql, param.values
