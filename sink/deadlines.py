"""One loop timer for the deadlines of every parked long-poll.

A timer per wait (uvloop's ``TimerHandle`` with its libuv timer and arguments) was about
500 bytes of each parked wait; an entry in this heap is about 120. A wait that ends early
(mail came) leaves its entry until its moment, its future already done and skipped then:
the heap holds at most the waits begun within the last ``long_poll_max_s``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math

# uvloop's timers have millisecond resolution and may fire a hair early: an entry due
# within this much is due now (rather than a timer re-armed for the same instant).
_SLACK_S = 0.001


class Deadlines:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._next = math.inf

    def add(self, future: asyncio.Future[None], seconds: float) -> None:
        """Resolve ``future`` (with None, unless it is done by then) in ``seconds``."""
        loop = future.get_loop()
        if loop is not self._loop:  # a new loop (tests run several): the old one's are moot
            self._heap, self._loop, self._timer, self._next = [], loop, None, math.inf
        when = loop.time() + seconds
        heapq.heappush(self._heap, (when, next(self._order), future))
        if when < self._next:
            self._arm(loop, when)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._next = when
        self._timer = loop.call_at(when, self._fire, loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer, self._next = None, math.inf
        heap = self._heap
        due = loop.time() + _SLACK_S
        while heap and heap[0][0] <= due:
            future = heapq.heappop(heap)[2]
            if not future.done():
                future.set_result(None)
        if heap:
            self._arm(loop, heap[0][0])
