"""Failed credentials per client address: past a limit in a minute, the address waits.

One rule for the web UI's sign-in form (``api/ui/access.py``, 10 a minute, as the contract
says) and for bearer tokens on every other route (``api/auth.py``, ``API_FAILURES_PER_MINUTE``,
our choice where the contract is silent): a token is not guessed one try after another. Past
the limit an address is refused (429 with ``Retry-After``) until its oldest failure in the
window is a minute old. Kept in memory, per process, for at most ``_ADDRESSES`` addresses
(the oldest forgotten first).
"""

from __future__ import annotations

from collections import OrderedDict, deque

WINDOW_S = 60.0
_ADDRESSES = 10_000


class FailureThrottle:
    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, address: str, now: float) -> float | None:
        """Seconds until ``address`` may try again, or None when it may now."""
        failures = self._recent(address, now)
        if failures is None or len(failures) < self.per_minute:
            return None
        return failures[0] + WINDOW_S - now

    def failed(self, address: str, now: float) -> None:
        failures = self._recent(address, now)
        if failures is None:
            failures = self._failures[address] = deque(maxlen=self.per_minute)
            while len(self._failures) > _ADDRESSES:
                self._failures.popitem(last=False)
        failures.append(now)
        self._failures.move_to_end(address)

    def _recent(self, address: str, now: float) -> deque[float] | None:
        failures = self._failures.get(address)
        if failures is None:
            return None
        while failures and failures[0] <= now - WINDOW_S:
            failures.popleft()
        if not failures:
            del self._failures[address]
            return None
        return failures
