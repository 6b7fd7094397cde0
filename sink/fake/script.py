"""What happens during the fake's waits (the script), and the fake's clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

EPOCH = 1_893_456_000.0  # 2030-01-01T00:00:00Z: a fixed start, so timestamps repeat too


@dataclass(frozen=True, slots=True)
class Waiting:
    """Nothing arrives during this wait (it long-polls to its end)."""


@dataclass(frozen=True, slots=True)
class Received:
    """A message arrives for the inbox as this wait starts (it matches, or it is a mismatch)."""

    subject: str = "Hello"
    text: str = "Hello from the app."
    html: str | None = None
    sender: str = "app@example.test"


@dataclass(frozen=True, slots=True)
class Expired:
    """The inbox expires: ``lease`` (the clock reaches expires_at) or ``timeout`` (budget spent)."""

    reason: Literal["lease", "timeout"] = "lease"


@dataclass(frozen=True, slots=True)
class ProviderTimeout:
    """The store does not answer within the policy's provider_deadline_s."""


@dataclass(frozen=True, slots=True)
class ProviderError:
    """The store fails."""


@dataclass(frozen=True, slots=True)
class CircuitOpen:
    """The circuit breaker is open for ``retry_after`` seconds, from this wait on."""

    retry_after: float = 5.0


Step = Waiting | Received | Expired | ProviderTimeout | ProviderError | CircuitOpen


class FakeClock:
    """Fake time: ``now`` (epoch seconds) moves only when told to, or when someone sleeps."""

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
