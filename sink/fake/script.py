"""What happens during the fake's waits (the script), and how each step is acted out.

Each step goes in through the product's own hooks: ``Received`` is mail through ingest,
``ProviderTimeout``/``ProviderError`` an injected fault, ``Expired`` the clock (or, for
``timeout``, the polls that spend the budget), ``CircuitOpen`` the breaker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sink.clock import EPOCH, FakeClock

__all__ = [
    "EPOCH",
    "CircuitOpen",
    "Expired",
    "FakeClock",
    "ProviderError",
    "ProviderTimeout",
    "Received",
    "Step",
    "Waiting",
]


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
