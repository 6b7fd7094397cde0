"""When a failed delivery is tried again: 1, 5, 30, 120, 600, 1800 and 3600 s after the end
of the attempt before (the contract's schedule), never earlier and up to 10% later: the
draw spreads a retry over the first 5% (so retries of many deliveries that failed together
do not all come back at once), leaving the other 5% to the worker's own latency. Pure.
"""

from __future__ import annotations

import random
from collections.abc import Callable

DELAYS_S: tuple[float, ...] = (1, 5, 30, 120, 600, 1800, 3600)
SPREAD = 0.05  # a retry is drawn up to 5% of its delay late (the contract allows 10%)


def next_attempt_at(
    made: int,
    ended_at: float,
    delays: tuple[float, ...] = DELAYS_S,
    draw: Callable[[], float] = random.random,
) -> float | None:
    """When to make attempt ``made + 1`` after attempt ``made`` ended at ``ended_at``; None
    when ``made`` was the last (one first attempt, then one retry per delay)."""
    if made > len(delays):
        return None
    delay = delays[made - 1]
    return ended_at + delay * (1 + SPREAD * draw())


def attempts(delays: tuple[float, ...] = DELAYS_S) -> int:
    """How many attempts a delivery gets in all."""
    return len(delays) + 1
