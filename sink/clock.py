"""Time: one wall clock (leases are stored, so they use epoch seconds) and its wire format.

The I/O rim (``Agent``, ``Ingest``, the guard and the sweeper) reads time through a
``Clock``, never ``time`` or ``asyncio.sleep`` directly: the server runs on ``SystemClock``,
the fake and the fuzz tests on ``FakeClock``, where a long-poll that nothing wakes moves
time to its deadline at once instead of sleeping. The pure core takes ``now`` as a value.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable
from typing import Any, Protocol


class Signal(Protocol):
    """What a clock can wait on: an ``asyncio.Event``, or a waiter's ``Wakeup`` (which also
    has ``wait_for(seconds) -> bool``, and times itself)."""

    def is_set(self) -> bool: ...

    async def wait(self) -> Any: ...


class Clock(Protocol):
    def now(self) -> float:
        """Epoch seconds."""

    def monotonic(self) -> float:
        """Seconds that never step back (for durations, e.g. a breaker's cooldown)."""

    def wait(self, signal: Signal, deadline: float) -> Awaitable[bool]:
        """Until ``signal`` is set (True) or ``now()`` reaches ``deadline`` (False)."""


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, signal: Signal, deadline: float) -> Awaitable[bool]:
        timed = getattr(signal, "wait_for", None)
        if timed is not None:
            # A waiter's Wakeup times itself with a plain timer, and is awaited directly: one
            # coroutine frame less for each of thousands of parked long-polls.
            awaitable: Awaitable[bool] = timed(deadline - self.now())
            return awaitable
        return self._wait(signal, deadline)

    async def _wait(self, signal: Signal, deadline: float) -> bool:
        if signal.is_set():
            return True
        remaining = deadline - self.now()
        if remaining <= 0:
            return False
        # asyncio.timeout, not wait_for: wait_for wraps the wait in a task of its own
        # (Python 3.11), and a parked long-poll should cost as little as it can.
        try:
            async with asyncio.timeout(remaining):
                await signal.wait()
        except TimeoutError:
            return signal.is_set()
        return True


EPOCH = 1_893_456_000.0  # 2030-01-01T00:00:00Z: a fixed start, so fake timestamps repeat


class FakeClock:
    """Fake time: ``now`` moves only when told to, or when someone waits for a deadline.

    A wait whose signal is not set (after one turn of the loop, so work already started
    can set it) runs out at once: the clock jumps to the deadline. Nothing else happens
    "meanwhile" in a fake world, so that is what the wait would have seen.
    """

    def __init__(self, start: float = EPOCH) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        if seconds > 0:
            self._now += seconds

    async def wait(self, signal: Signal, deadline: float) -> bool:
        if not signal.is_set():
            await asyncio.sleep(0)
        if signal.is_set():
            return True
        self.advance(deadline - self._now)
        return False


async def pause(clock: Clock, seconds: float) -> None:
    """Sleep on ``clock``: a wait for a signal that never comes."""
    await clock.wait(asyncio.Event(), clock.now() + seconds)


_SYSTEM = SystemClock()


def now() -> float:
    """Epoch seconds on the system clock (for code with no injected clock: the API's edges)."""
    return _SYSTEM.now()


def rfc3339(ts: float) -> str:
    """RFC 3339, UTC, milliseconds, ``Z``: ``2026-10-21T02:30:00.000Z``."""
    seconds, millis = divmod(math.floor(ts * 1000), 1000)
    # time.gmtime, not datetime: half the cost, on every live event and API row.
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def rfc3339_or_none(ts: float | None) -> str | None:
    return None if ts is None else rfc3339(ts)


def seconds_up(seconds: float) -> float:
    """A retry_after value: rounded up to 0.1 s, never negative."""
    if seconds <= 0:
        return 0.0
    return math.ceil(round(seconds * 10, 6)) / 10
