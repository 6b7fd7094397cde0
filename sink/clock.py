"""Time: one wall clock (leases are stored, so they use epoch seconds) and its wire format."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime


def now() -> float:
    """Epoch seconds; the only clock the I/O rim reads. The pure core takes ``now`` as a value."""
    return time.time()


def rfc3339(ts: float) -> str:
    """RFC 3339, UTC, milliseconds, ``Z``: ``2026-10-21T02:30:00.000Z``."""
    moment = datetime.fromtimestamp(math.floor(ts * 1000) / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def rfc3339_or_none(ts: float | None) -> str | None:
    return None if ts is None else rfc3339(ts)


def seconds_up(seconds: float) -> float:
    """A retry_after value: rounded up to 0.1 s, never negative."""
    if seconds <= 0:
        return 0.0
    return math.ceil(round(seconds * 10, 6)) / 10
