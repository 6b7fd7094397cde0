"""The long-poll: look beyond the cursor; if nothing matches, wait for a wake-up or the deadline.

``LongPolls.look`` is the mechanics of one wait that reached the store: register for
wake-ups before the first scan (so no delivery is missed between scan and wait), scan
the deliveries beyond the cursor for the first unclaimed match, and wait on the clock
until new mail, the inbox's end, shutdown or the deadline. Matching a body reads it once
and keeps its searchable text in a small cache. It also knows which inboxes have a wait
in progress, so a second concurrent wait is answered ``too_early``.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import partial

from sink.clock import Clock
from sink.guard import Attempt
from sink.inbox import Delivery, Inbox, Match, ScanResult
from sink.message import searchable_text, summarize
from sink.metrics import Metrics
from sink.storage.base import Store
from sink.waiters import Waiters

_SCAN_PAGE = 200
_SCAN_PAGES_PER_LOOK = 10
_BODY_CACHE = 512


class Ending(StrEnum):
    FOUND = "found"  # an unclaimed match beyond the cursor
    DEADLINE = "deadline"  # nothing matched before the deadline
    ENDED = "ended"  # the inbox was released or swept while we waited
    CLOSING = "closing"  # the server is shutting down


@dataclass(frozen=True, slots=True)
class Look:
    scan: ScanResult
    ending: Ending
    ended_at: float


class LongPolls:
    def __init__(self, store: Store, waiters: Waiters, clock: Clock, metrics: Metrics) -> None:
        self._store = store
        self._waiters = waiters
        self._clock = clock
        self._metrics = metrics
        self._in_flight: dict[str, float] = {}  # inbox_id -> when its wait ends
        self._bodies: OrderedDict[str, str] = OrderedDict()
        self._names: OrderedDict[str, str] = OrderedDict()  # message_id -> From display name

    def busy_until(self, inbox_id: str) -> float | None:
        """When the wait in progress on this inbox ends; None if there is none."""
        return self._in_flight.get(inbox_id)

    def forget_bodies(self) -> None:
        """Evidence was released: no cached text may outlive it."""
        self._bodies.clear()
        self._names.clear()

    async def look(
        self,
        inbox: Inbox,
        match: Match,
        position: int,
        deadline: float,
        attempt: Attempt,
        newest: bool = False,
    ) -> Look:
        """Scan, then wait and scan again, until a match, the deadline or the inbox's end.

        ``newest``: the newest unclaimed match beyond the cursor rather than the oldest.
        """
        first = position
        mismatched = False
        found: Delivery | None = None
        self._in_flight[inbox.inbox_id] = deadline
        woken = self._waiters.register(inbox.inbox_id)
        self._metrics.long_polls.inc()
        try:
            while True:
                woken.clear()
                result = await attempt.call(partial(self._scan, inbox, match, position, newest))
                position = max(position, result.last_seq)
                mismatched = mismatched or result.mismatched
                found = result.found
                if found is not None or self._waiters.closing or woken.ended:
                    break
                if self._clock.now() >= deadline or not await self._clock.wait(woken, deadline):
                    break
        finally:
            self._metrics.long_polls.dec()
            self._waiters.unregister(inbox.inbox_id, woken)
            self._in_flight.pop(inbox.inbox_id, None)
        if found is not None:
            ending = Ending.FOUND
        elif woken.ended:
            ending = Ending.ENDED
        elif self._waiters.closing:
            ending = Ending.CLOSING
        else:
            ending = Ending.DEADLINE
        scan = ScanResult(found, position, mismatched, first_seq=first, match=match)
        return Look(scan, ending, self._clock.now())

    async def _scan(
        self, inbox: Inbox, match: Match, after_seq: int, newest: bool = False
    ) -> ScanResult:
        """Deliveries beyond the cursor, oldest first: the first unclaimed match, or none
        (with ``newest``, the last one)."""
        position = after_seq
        mismatched = False
        now = self._clock.now()
        unclaimed: list[Delivery] = []  # with ``newest``: matched newest first, below
        for _ in range(_SCAN_PAGES_PER_LOOK):
            page = await self._store.deliveries_after(inbox.inbox_id, position, _SCAN_PAGE)
            for delivery in page:
                if delivery.claim is None:
                    if newest:
                        unclaimed.append(delivery)
                    elif await self.matches(match, delivery, now):
                        return ScanResult(delivery, position, mismatched)
                    else:
                        mismatched = True
                position = delivery.seq
            if len(page) < _SCAN_PAGE:
                break
        for delivery in reversed(unclaimed):
            if await self.matches(match, delivery, now):
                return ScanResult(delivery, position, True)
        return ScanResult(None, position, mismatched or bool(unclaimed))

    async def matches(self, match: Match, delivery: Delivery, now: float) -> bool:
        """Whether a delivery meets the criteria (a body is read once, then cached)."""
        subject, from_addr, received_at = delivery.subject, delivery.from_addr, delivery.received_at
        if not match.headers_match(subject, from_addr, received_at, now):
            if match.from_matches(from_addr):
                return False  # the subject or the age failed: no display name helps
            # The address alone did not do: the display name may (read once, then cached).
            name = await self._from_name(delivery.message_id)
            if not match.headers_match(subject, from_addr, received_at, now, name):
                return False
        if not match.needs_body:
            return True
        return match.body_matches(await self._body_text(delivery.message_id))

    async def _from_name(self, message_id: str) -> str:
        """The From's decoded display name ("" when none, or once the body is released)."""
        return await self._kept(self._names, message_id, _display_name, in_thread=False)

    async def _body_text(self, message_id: str) -> str:
        return await self._kept(self._bodies, message_id, searchable_text, in_thread=True)

    async def _kept(
        self,
        cache: OrderedDict[str, str],
        message_id: str,
        make: Callable[[bytes], str],
        in_thread: bool,
    ) -> str:
        """What ``make`` draws from a message's bytes ("" once they are released): read once,
        then kept in ``cache`` among the _BODY_CACHE most recently used."""
        cached = cache.get(message_id)
        if cached is not None:
            cache.move_to_end(message_id)
            return cached
        raw = await self._store.raw(message_id)
        if raw is None:
            value = ""
        elif in_thread:  # (a whole body's text: off the loop)
            value = await asyncio.to_thread(make, raw)
        else:
            value = make(raw)
        cache[message_id] = value
        if len(cache) > _BODY_CACHE:
            cache.popitem(last=False)
        return value


def _display_name(raw: bytes) -> str:
    return summarize(raw).from_name or ""
