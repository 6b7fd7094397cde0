"""All captured mail as one mailbox: caught mail, search, and deletes (contract v2).

Evidence stays the agent's (``sink/agent.py``: wait, read, claim). This is the view a
person, a web UI or a Mailpit client has of everything the sink holds: newest first,
searchable, and deletable where deleting cannot take evidence from a live inbox.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from sink import clock, ids
from sink.errors import EvidenceReleased, InvalidRequest, LiveEvidence, NotFound
from sink.logs import log
from sink.message import ParsedMessage, parse
from sink.scopes import Visibility
from sink.search import (
    BODY,
    SUBJECT,
    Filter,
    Query,
    SearchSyntaxError,
    Text,
    parse_query,
    texts_match,
)
from sink.storage.base import CaughtMail, CaughtMessage, Deleted, Listed, SearchIndex

COUNT_CAP = 10_000  # Mailpit-style totals count matches up to this many


class MailStore(CaughtMail, SearchIndex, Protocol):
    """The two v2 ports, as one adapter implements them."""


_SCAN_BATCH = 500  # rows looked at per store call when a runs: glob filters a search
_SCAN_BATCHES = 20


@dataclass(frozen=True, slots=True)
class Page:
    items: list[Listed]
    next_cursor: str | None  # null when there is nothing older
    has_more: bool


@dataclass(frozen=True, slots=True)
class CaughtRead:
    caught: CaughtMessage
    parsed: ParsedMessage | None


def query_of(text: str | None) -> Query:
    """The parsed query; a query the language refuses is a 422 naming the term."""
    try:
        return parse_query(text or "")
    except SearchSyntaxError as exc:
        raise InvalidRequest(f"query: {exc}", {"field": "query"}) from exc


class Mailbox:
    def __init__(self, store: MailStore) -> None:
        self._store = store
        self.deleted = 0  # entries deleted since start (Mailpit's MessagesDeleted)

    # -- caught mail ------------------------------------------------------------------

    async def caught_page(self, cursor: str | None, limit: int) -> Page:
        before = _position(cursor, "caught")
        rows = await self._store.caught_page(before, limit + 1)
        return _page(rows, limit, "caught")

    async def caught(self, caught_id: str) -> CaughtRead:
        found = await self._caught(caught_id)
        parsed = None if found.raw is None else await asyncio.to_thread(parse, found.raw)
        log("caught_read", message_id=caught_id)
        return CaughtRead(found, parsed)

    async def caught_raw(self, caught_id: str) -> bytes:
        found = await self._caught(caught_id)
        if found.raw is None:  # pragma: no cover - caught mail keeps its body while listed
            raise EvidenceReleased(f"caught mail {caught_id}: its body is gone")
        return found.raw

    async def _caught(self, caught_id: str) -> CaughtMessage:
        found = None
        if ids.CAUGHT_ID.fullmatch(caught_id):
            found = await self._store.caught_message(caught_id)
        if found is None:
            raise NotFound(f"no caught mail {caught_id[:64]!r}")
        return found

    # -- search -------------------------------------------------------------------------

    async def search(
        self, text: str | None, run_scope: str | None, cursor: str | None, limit: int
    ) -> Page:
        return await self.search_query(query_of(text), run_scope, cursor, limit)

    async def search_query(
        self, query: Query, run_scope: str | None, cursor: str | None, limit: int
    ) -> Page:
        """``search`` for a query already parsed (the web UI reads its box its own way)."""
        before = _position(cursor, "search")
        rows = await self._store.search(query, run_scope, before, limit + 1)
        return _page(rows, limit, "search")

    async def search_visible(
        self, text: str | None, visible: Visibility, cursor: str | None, limit: int
    ) -> Page:
        """``search`` limited to what a scope may see: for a ``runs:`` glob, the runs it
        matches and never caught mail."""
        query = query_of(text)
        if visible.run_glob is None:
            return await self.search_query(query, None, cursor, limit)
        no_caught = (Filter("is", "caught", negated=True),)
        query = Query(query.texts, (*query.filters, *no_caught))

        async def sees(row: Listed) -> bool:
            return visible.sees(row.run_id)

        return await self._scan(query, None, cursor, limit, sees)

    async def search_for_agent(
        self,
        text: str | None,
        run_scope: str | None,
        visible: Visibility,
        cursor: str | None,
        limit: int,
        withheld: Callable[[Listed], Awaitable[bool]],
    ) -> Page:
        """An agent's search: a word or phrase matches a body only where the agent may be
        given that body (``withheld`` says where it may not: ``agent_body = "never"``), so
        that searching never reads a withheld body word by word.

        Words and phrases (``SUBJECT_AND_TEXT``) match the subject or the body; an entry
        they match only in its body is kept unless its body is withheld. A negated word or
        phrase looks at the subject only (what it excludes would tell a withheld body's
        words too)."""
        query = query_of(text)
        texts = tuple(
            Text(SUBJECT, t.value, True) if t.negated and BODY in t.columns else t
            for t in query.texts
        )
        in_body = tuple(t for t in texts if BODY in t.columns)
        filters = query.filters
        if not visible.caught_mail:
            filters = (*filters, Filter("is", "caught", negated=True))
        query = Query(texts, filters)

        async def keep(row: Listed) -> bool:
            if not visible.sees(row.run_id):
                return False
            if texts_match(in_body, {SUBJECT[0]: row.subject}):
                return True  # the subject alone matches: no body was needed
            return not await withheld(row)

        return await self._scan(query, run_scope, cursor, limit, keep)

    async def _scan(
        self,
        query: Query,
        run_scope: str | None,
        cursor: str | None,
        limit: int,
        keep: Callable[[Listed], Awaitable[bool]],
    ) -> Page:
        """A search whose rows ``keep`` filters as they come: a first batch of what the page
        needs, then larger ones, at most ``_SCAN_BATCHES`` a page; a page cut short there says
        ``has_more`` with a cursor past what was looked at."""
        before = _position(cursor, "search")
        kept: list[Listed] = []
        batch = limit + 1  # what a page needs when every row is kept; more after that
        for _ in range(_SCAN_BATCHES):
            rows = await self._store.search(query, run_scope, before, batch)
            for row in rows:
                if await keep(row):
                    kept.append(row)
                    if len(kept) > limit:
                        return _page(kept, limit, "search")
            if len(rows) < batch:
                return Page(kept, None, False)
            before = rows[-1].position
            batch = min(batch * 4, _SCAN_BATCH)
        return Page(kept, ids.encode_list_cursor("search", *rows[-1].position), True)

    async def window(
        self, text: str | None, start: int, limit: int
    ) -> tuple[list[Listed], int, int]:
        """Offset paging (Mailpit's ``start``): the entries, the matches and the total."""
        query = query_of(text)
        rows = await self._store.search(query, None, None, limit, start) if limit else []
        matches = await self._store.count(query, None, COUNT_CAP)
        total = matches if text is None else await self._store.count(Query(), None, COUNT_CAP)
        return rows, matches, total

    async def count(self, query: Query, run_scope: str | None = None) -> int:
        return await self._store.count(query, run_scope, COUNT_CAP)

    async def count_unclaimed(self, text: str) -> int:
        """How many entries match ``text`` and are not claimed evidence (Mailpit's unread)."""
        query = query_of(text)
        unclaimed = Query(query.texts, (*query.filters, Filter("is", "claimed", negated=True)))
        return await self._store.count(unclaimed, None, COUNT_CAP)

    # -- one entry, either kind ----------------------------------------------------------

    async def entry(self, entry_id: str) -> Listed:
        if entry_id == "latest":
            rows = await self._store.search(Query(), None, None, 1)
            if not rows:
                raise NotFound("there is no message yet")
            return rows[0]
        found = None
        if ids.MESSAGE_ID.fullmatch(entry_id) or ids.CAUGHT_ID.fullmatch(entry_id):
            found = await self._store.listed(entry_id)
        if found is None:
            raise NotFound(f"no message {entry_id[:64]!r}")
        return found

    async def entry_raw(self, entry: Listed) -> bytes | None:
        return await self._store.listed_raw(entry.id)

    async def delete(self, entry_ids: list[str] | None) -> Deleted:
        outcome = await self._store.delete_listed(entry_ids, clock.now())
        if outcome.refused:
            shown = ", ".join(outcome.refused[:10])
            raise LiveEvidence(
                f"nothing was deleted: {len(outcome.refused)} of the named messages are "
                f"evidence of a live inbox ({shown}); they can be deleted once the inbox "
                "expires or its run is released (DELETE /v1/runs/{run_id})",
                {"live": list(outcome.refused)},
            )
        self.deleted += outcome.deleted
        log("mail_deleted", count=outcome.deleted, named=entry_ids is not None)
        return outcome


def _position(cursor: str | None, kind: str) -> tuple[int, int] | None:
    return None if cursor is None else ids.decode_list_cursor(kind, cursor)


def _page(rows: list[Listed], limit: int, kind: str) -> Page:
    items = rows[:limit]
    has_more = len(rows) > limit
    cursor = ids.encode_list_cursor(kind, *items[-1].position) if has_more else None
    return Page(items, cursor, has_more)
