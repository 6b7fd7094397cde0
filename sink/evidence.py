"""What the server knows beyond an answer's own message: resends, mismatches, near misses.

Three facts an agent cannot see from one envelope, read from the inbox's own deliveries
(by the per-inbox ``seq`` index, never a scan of all mail) and its recorded near misses:

- ``newer_matching``: unclaimed deliveries after the answer's message that meet the same
  criteria (a resend: the newest usually holds the valid code);
- ``unmatched``: what a mismatching wait looked at and passed over, newest first, with the
  cursor from before it (``rescan_cursor``), so the same mail can be looked at again;
- ``near_misses``: caught mail addressed within 2 edits of the inbox (recorded by the store
  when the caught mail was stored: ``sink/nearmiss.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sink.inbox import Delivery, Match
from sink.longpoll import LongPolls
from sink.storage.base import Store

# The newest this many: what an answer shows (the contract's "up to 3").
SHOWN = 3
_PAGE = 200
# Past this many deliveries after the message, the count stops (an inbox flooded by a loop).
_COUNTED_AT_MOST = 2000


@dataclass(frozen=True, slots=True)
class Newer:
    """The matching mail after a message: how many, and the newest one's id (or None)."""

    count: int
    newest: str | None


class EvidenceFacts:
    def __init__(self, store: Store, polls: LongPolls) -> None:
        self._store = store
        self._polls = polls

    async def newer_matching(
        self, inbox_id: str, match: Match, after_seq: int, now: float
    ) -> Newer:
        """Unclaimed deliveries after ``after_seq`` that meet ``match``."""
        count = 0
        newest: Delivery | None = None
        position = after_seq
        for _ in range(_COUNTED_AT_MOST // _PAGE):
            page = await self._store.deliveries_after(inbox_id, position, _PAGE)
            for delivery in page:
                if delivery.claim is None and await self._polls.matches(match, delivery, now):
                    count += 1
                    if newest is None or (delivery.received_at, delivery.seq) > (
                        newest.received_at,
                        newest.seq,
                    ):
                        newest = delivery
                position = delivery.seq
            if len(page) < _PAGE:
                break
        return Newer(count, newest.message_id if newest is not None else None)

    async def unmatched(self, inbox_id: str, first_seq: int, last_seq: int) -> list[Delivery]:
        """The unclaimed deliveries in ``(first_seq, last_seq]`` (what a wait that matched
        none of them looked at), the newest ``SHOWN`` of them, newest first."""
        kept: list[Delivery] = []
        position = first_seq
        for _ in range(_COUNTED_AT_MOST // _PAGE):
            page = await self._store.deliveries_after(inbox_id, position, _PAGE)
            looked = [d for d in page if d.seq <= last_seq]
            kept = [*kept, *(d for d in looked if d.claim is None)][-SHOWN:]
            if len(looked) < _PAGE:
                break
            position = looked[-1].seq
        # Newest first by arrival time, ties by arrival order (seq).
        return sorted(kept, key=lambda d: (d.received_at, d.seq), reverse=True)
