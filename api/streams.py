"""Live streams under a gate: a cap of their own, a share per token, and an end.

A stream (``GET /v1/events``) holds its connection for as long as the client likes, so
without a gate one minted run token could open thousands and hold every HTTP connection:
everyone else, an admin included, would get 503. ``StreamGate`` admits a stream only

- within ``STREAMS_PER_TOKEN`` open streams of its token, when the token is limited to runs
  (a ``runs:`` token by its entry, a minted run token by its run), and as many of the run it
  names (``?run_id=``, whoever asks): 429 with Retry-After;
- within the streams' own cap (``Capacity.streams``, a share of the long-poll cap): 503;
- within the long-poll gate too, since a stream holds a connection as a wait does: so waits
  and streams together always leave the short requests their connections.

An admitted stream ends on its own at its grant's end: the run token's expiry, or
``MAX_LIFE_S`` after it opened (``StreamGate.ends_at``); a client reconnects with
``Last-Event-ID`` and resumes, while its grant holds.
"""

from __future__ import annotations

from collections import Counter

from starlette.responses import Response

from api.connections import LongPollGate
from api.errors import error_response
from sink.scopes import Kind
from sink.tokens import Grant

STREAMS_PER_TOKEN = 32
MAX_LIFE_S = 30 * 60.0
"""However long a grant lasts, a stream ends after this (EventSource reconnects by itself,
then resumes by Last-Event-ID): a stream cannot outlive a change of who may read."""
RETRY_AFTER_S = 5


def _holder(grant: Grant) -> str | None:
    """Whose share a token's streams count against: tokens limited to runs have one; admin,
    read and an open server share only the streams' own cap."""
    if grant.scope.kind in (Kind.RUN, Kind.RUNS):
        return grant.name  # "run:<run_id>" for every token minted for that run
    return None


def holders(grant: Grant, run_id: str | None) -> frozenset[str]:
    """Every share a stream counts against: its token's, and the run it names."""
    shares = {f"run:{run_id}"} if run_id is not None else set()
    if (holder := _holder(grant)) is not None:
        shares.add(holder)
    return frozenset(shares)


class StreamGate:
    def __init__(self, limit: int, held: LongPollGate) -> None:
        self.limit = limit
        self.active = 0
        self._held = held
        self._by_holder: Counter[str] = Counter()

    def enter(self, shares: frozenset[str]) -> Response | None:
        """None when the stream may open (then ``leave`` once it ends), else the refusal."""
        if any(self._by_holder[holder] >= STREAMS_PER_TOKEN for holder in shares):
            return error_response(
                429,
                "too_many_streams",
                f"{STREAMS_PER_TOKEN} live-event streams are already open for this run or "
                "token; close one, or retry later",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        if self.active >= self.limit or not self._held.enter():
            return error_response(
                503,
                "over_capacity",
                "too many live-event streams are open; retry shortly",
                headers={"Retry-After": "1"},
            )
        self.active += 1
        self._by_holder.update(shares)
        return None

    def leave(self, shares: frozenset[str]) -> None:
        self.active -= 1
        self._held.leave()
        self._by_holder.subtract(shares)
        for holder in shares:
            if not self._by_holder[holder]:
                del self._by_holder[holder]

    @staticmethod
    def ends_at(grant: Grant, now: float) -> float:
        """When a stream opened now must end: its token's expiry, or its maximum life."""
        end = now + MAX_LIFE_S
        return end if grant.expires_at is None else min(end, grant.expires_at)
