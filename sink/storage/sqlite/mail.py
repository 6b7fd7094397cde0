"""Caught mail, search and deletes on SQLite: the ``CaughtMail`` and ``SearchIndex`` ports.

The listing (every delivery and every caught mail, newest first) and the full-text index
follow the commits (``fts.py``); every read here first catches them up, so mail answered
250 before a search is found. A search is driven by whichever is smallest: a condition that
few entries pass (``_narrowing``), else the full-text index newest first, else the listing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from sink.search import Query, Text, folded, texts_match
from sink.storage.base import CaughtMessage, Deleted, Listed
from sink.storage.rows import caught_from_row, listed_from_row
from sink.storage.sqlite.fts import INDEXED_UPTO, Indexer, fts_any, fts_expression
from sink.storage.sqlite.writer import Row, Writer, all_rows

Read = Callable[[str, Sequence[Any]], Awaitable[list[Row]]]


class SQLiteMail:
    """The v2 mail ports over the SQLite store's reader and writer (``SQLiteStore.mail``)."""

    def __init__(self, read: Read, writer: Writer, indexer: Indexer) -> None:
        self._read = read
        self._writer = writer
        self._indexer = indexer

    # -- caught mail (v2) ----------------------------------------------------------

    async def caught_page(self, before: tuple[int, int] | None, limit: int) -> list[Listed]:
        await self._indexer.caught_up()
        sql = _LISTED_SELECT + " WHERE v.inbox_id IS NULL"
        params: list[Any] = []
        if before is not None:
            sql += " AND v.seq < ?"
            params.append(before[1])
        rows = await self._read(sql + " ORDER BY v.seq DESC LIMIT ?", (*params, limit))
        return [listed_from_row(row) for row in rows]

    async def caught_message(self, caught_id: str) -> CaughtMessage | None:
        await self._indexer.caught_up()
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
            rows = all_rows(db, f"SELECT caught_id FROM caught {where} LIMIT ?", (*params, limit))
            return delete_entries(db, [row[0] for row in rows], now)

        await self._indexer.caught_up()  # deletes go through the listing
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
        await self._indexer.caught_up()
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
        await self._indexer.caught_up()
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
        await self._indexer.caught_up()
        rows = await self._read(_LISTED_SELECT + " WHERE v.id = ?", (entry_id,))
        return listed_from_row(rows[0]) if rows else None

    async def listed_raw(self, entry_id: str) -> bytes | None:
        await self._indexer.caught_up()
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
                rows = all_rows(
                    db,
                    """SELECT v.id FROM listing v LEFT JOIN inboxes i ON i.inbox_id = v.inbox_id
                       WHERE v.inbox_id IS NULL OR i.state = 'expired' OR i.expires_at <= ?
                          OR i.released_at IS NOT NULL""",
                    (now,),
                )
                return Deleted(delete_entries(db, [row[0] for row in rows], now))
            live: list[str] = []
            for chunk in _chunks(ids, 500):
                marks = ",".join("?" * len(chunk))
                live += [
                    row[0]
                    for row in all_rows(
                        db,
                        f"""SELECT v.id FROM listing v JOIN inboxes i ON i.inbox_id = v.inbox_id
                            WHERE v.id IN ({marks}) AND i.state != 'expired'
                              AND i.expires_at > ? AND i.released_at IS NULL""",
                        (*chunk, now),
                    )
                ]
            if live:
                return Deleted(0, tuple(live))
            return Deleted(delete_entries(db, list(ids), now))

        await self._indexer.caught_up()  # the listing must hold everything answered 250
        outcome = await self._writer.transaction(work)
        if outcome.deleted:
            await self._writer.statement("PRAGMA incremental_vacuum")
        return outcome


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


def delete_entries(db: sqlite3.Connection, ids: list[str], now: float) -> int:
    """Take entries off the listing (and caught mail off the store); bodies no use needs go."""
    deleted = 0
    pks: set[int] = set()
    for chunk in _chunks(ids, 500):
        marks = ",".join("?" * len(chunk))
        pks.update(
            row[0]
            for row in all_rows(db, f"SELECT message_pk FROM listing WHERE id IN ({marks})", chunk)
        )
        deleted += db.execute(f"DELETE FROM listing WHERE id IN ({marks})", chunk).rowcount
        db.execute(f"DELETE FROM caught WHERE caught_id IN ({marks})", chunk)
    drop_unneeded_bodies(db, sorted(pks), now)
    return deleted


def drop_unneeded_bodies(db: sqlite3.Connection, pks: list[int], now: float) -> None:
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
                 AND (d.message_pk > ({INDEXED_UPTO})
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
