"""The circuit breaker, one per (run, inbox, operation); pure: ``now`` is always a parameter.

The rules (docs/contract.md, "The circuit breaker")::

    CLOSED    -- failure_threshold consecutive failures -->  OPEN       (for cooldown_s)
    OPEN      -- cooldown over: one call admitted, the probe --> HALF_OPEN
    HALF_OPEN -- the probe succeeds -->  CLOSED     (failures reset, cooldown back to cooldown_s)
    HALF_OPEN -- the probe fails    -->  OPEN       (cooldown doubled, at most cooldown_max_s)

- In CLOSED every call goes through; a success resets the consecutive failure count.
- OPEN refuses every call, with ``retry_after`` = the cooldown left (never below 0.1 s).
- HALF_OPEN lets exactly one call through, the probe; the others are refused until it answers.
  A probe cancelled without an answer (the client went away) is handed back with
  ``abandon_probe``, and the next call probes at once.
- A result recorded while OPEN comes from a call admitted before the breaker opened: it is
  ignored, so a straggler can neither close the breaker nor stretch its cooldown. In HALF_OPEN
  any result is taken as the probe's answer.

The caller ends every admitted probe with exactly one of ``record_success``,
``record_failure`` or ``abandon_probe`` (a ``try``/``finally``); otherwise the probe slot stays
taken until the registry forgets the breaker.

Memory: ``Breakers`` creates breakers on demand and ``forget_idle(now)`` drops them again. A
breaker that is closed with no failures is the same as a new one, so it is dropped once nobody
has touched it for ``idle_after_s`` (the grace keeps a breaker whose call is still in flight, so
that call's failure is not recorded on a detached object). Any breaker nobody has touched for
``forget_after_s`` is dropped too, whatever its state: by then its inbox's lease is long over,
and this bounds what callers naming made-up runs can pile up. ``forget_idle`` scans at most once
per ``idle_after_s``, so it is cheap enough to call on every operation. The registry lives in the
server's memory: a restart starts every breaker closed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, NamedTuple

__all__ = [
    "Admission",
    "Breaker",
    "BreakerKey",
    "BreakerSettings",
    "BreakerState",
    "Breakers",
    "Transition",
]

MIN_RETRY_AFTER_S: Final = 0.1
"""A refusal never says "retry after 0 s": that would invite a busy loop."""


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    """The policy's breaker values (``breaker_failure_threshold``, ``breaker_cooldown_s``, ...)."""

    failure_threshold: int
    cooldown_s: float
    cooldown_max_s: float

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise ValueError(f"failure_threshold must be >= 1, got {self.failure_threshold}")
        if not 0 < self.cooldown_s < math.inf:
            raise ValueError(f"cooldown_s must be a positive number, got {self.cooldown_s}")
        if not self.cooldown_s <= self.cooldown_max_s < math.inf:
            raise ValueError(
                f"cooldown_max_s must be a number >= cooldown_s ({self.cooldown_s}), "
                f"got {self.cooldown_max_s}"
            )


@dataclass(frozen=True, slots=True)
class Transition:
    """A state change, for the caller to log: breaker_opened, breaker_half_open, breaker_closed.

    ``cooldown_s`` is the cooldown the breaker opened for (``to_state`` OPEN), else None.
    """

    from_state: BreakerState
    to_state: BreakerState
    cooldown_s: float | None = None


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer to "may this call go to the provider?"."""

    allowed: bool
    probe: bool
    """True when this call is the single half-open probe."""
    retry_after: float | None
    """When refused: seconds to wait (>= MIN_RETRY_AFTER_S); None when allowed."""
    transition: Transition | None
    """OPEN -> HALF_OPEN when this call became the probe, else None."""


ALLOWED: Final = Admission(allowed=True, probe=False, retry_after=None, transition=None)
"""Admitted, not as the probe (here and in the fleet's breakers, ``postgres/breakers.py``)."""


def refused(retry_after: float) -> Admission:
    """Refused: come back in ``retry_after`` seconds (at least ``MIN_RETRY_AFTER_S``)."""
    return Admission(
        allowed=False,
        probe=False,
        retry_after=max(retry_after, MIN_RETRY_AFTER_S),
        transition=None,
    )


class Breaker:
    """One breaker, for one (run_id, inbox_id, operation). See the module docstring."""

    __slots__ = (
        "_cooldown_s",
        "_failures",
        "_opened_at",
        "_probe_in_flight",
        "_state",
        "_touched_at",
        "settings",
    )

    def __init__(self, settings: BreakerSettings) -> None:
        self.settings = settings
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._cooldown_s = settings.cooldown_s
        self._opened_at = 0.0
        self._probe_in_flight = False
        self._touched_at: float | None = None

    def __repr__(self) -> str:
        return (
            f"<Breaker {self._state} failures={self._failures} cooldown_s={self._cooldown_s}"
            f" probe_in_flight={self._probe_in_flight}>"
        )

    @property
    def state(self) -> BreakerState:
        return self._state

    @property
    def consecutive_failures(self) -> int:
        return self._failures

    @property
    def cooldown_s(self) -> float:
        """The cooldown of the current (or next) opening: doubled by each failed probe."""
        return self._cooldown_s

    @property
    def opened_at(self) -> float | None:
        """When the breaker last opened; None while CLOSED."""
        return None if self._state is BreakerState.CLOSED else self._opened_at

    @property
    def probe_in_flight(self) -> bool:
        return self._probe_in_flight

    @property
    def touched_at(self) -> float | None:
        """The ``now`` of the last admit or record; None if never used."""
        return self._touched_at

    @property
    def is_settled(self) -> bool:
        """Closed with no failures: no different from a new breaker."""
        return self._state is BreakerState.CLOSED and self._failures == 0

    def admit(self, now: float) -> Admission:
        """Decide whether a call may go to the provider now; may start the half-open probe."""
        self._touched_at = now
        if self._state is BreakerState.CLOSED:
            return ALLOWED
        if self._state is BreakerState.OPEN:
            left = self._opened_at + self._cooldown_s - now
            if left > 0:
                # min(): a clock that stepped back must not promise more than one cooldown.
                return refused(min(left, self._cooldown_s))
            self._state = BreakerState.HALF_OPEN
            self._probe_in_flight = True
            transition = Transition(BreakerState.OPEN, BreakerState.HALF_OPEN)
            return Admission(allowed=True, probe=True, retry_after=None, transition=transition)
        if self._probe_in_flight:
            # The probe is a short look; the base cooldown comfortably covers it.
            return refused(self.settings.cooldown_s)
        self._probe_in_flight = True  # the last probe was abandoned: this call takes its place
        return Admission(allowed=True, probe=True, retry_after=None, transition=None)

    def record_success(self, now: float) -> Transition | None:
        """The provider answered. Closes a half-open breaker; resets the failure count."""
        self._touched_at = now
        if self._state is BreakerState.OPEN:
            return None  # a straggler admitted before the breaker opened
        from_state = self._state
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._cooldown_s = self.settings.cooldown_s
        self._probe_in_flight = False
        if from_state is BreakerState.CLOSED:
            return None
        return Transition(from_state, BreakerState.CLOSED)

    def record_failure(self, now: float) -> Transition | None:
        """The provider timed out or failed (or the caller named the wrong run)."""
        self._touched_at = now
        if self._state is BreakerState.OPEN:
            return None  # a straggler admitted before the breaker opened
        self._failures += 1
        if self._state is BreakerState.HALF_OPEN:
            self._cooldown_s = min(self._cooldown_s * 2, self.settings.cooldown_max_s)
        elif self._failures < self.settings.failure_threshold:
            return None
        from_state = self._state
        self._state = BreakerState.OPEN
        self._opened_at = now
        self._probe_in_flight = False
        return Transition(from_state, BreakerState.OPEN, self._cooldown_s)

    def abandon_probe(self, now: float) -> None:
        """The probe was cancelled without an answer: the next call may probe at once."""
        self._touched_at = now
        if self._state is BreakerState.HALF_OPEN:
            self._probe_in_flight = False


class BreakerKey(NamedTuple):
    """Whose breaker: one inbox of one run, for one operation."""

    run_id: str
    inbox_id: str
    operation: str  # "wait", "read" or "claim"


class Breakers:
    """The in-memory registry of breakers, by (run_id, inbox_id, operation).

    ``get`` creates a breaker on demand; ``forget_idle`` keeps the registry small (see the
    module docstring for what it drops and why).
    """

    __slots__ = ("_breakers", "_forget_after_s", "_idle_after_s", "_next_sweep_at")

    def __init__(self, *, idle_after_s: float = 120.0, forget_after_s: float = 3600.0) -> None:
        if not 0 < idle_after_s < math.inf:
            raise ValueError(f"idle_after_s must be a positive number, got {idle_after_s}")
        if not idle_after_s <= forget_after_s < math.inf:
            raise ValueError(
                f"forget_after_s must be a number >= idle_after_s ({idle_after_s}), "
                f"got {forget_after_s}"
            )
        self._breakers: dict[BreakerKey, Breaker] = {}
        self._idle_after_s = idle_after_s
        self._forget_after_s = forget_after_s
        self._next_sweep_at = -math.inf

    def __len__(self) -> int:
        return len(self._breakers)

    def get(self, key: BreakerKey, settings: BreakerSettings) -> Breaker:
        """The breaker for ``key``, created closed with ``settings`` if there is none.

        An existing breaker keeps the settings it was created with (a policy is fixed for the
        life of an inbox).
        """
        breaker = self._breakers.get(key)
        if breaker is None:
            breaker = self._breakers[key] = Breaker(settings)
        return breaker

    def find(self, key: BreakerKey) -> Breaker | None:
        """The breaker for ``key`` if one is remembered (none means closed, no failures)."""
        return self._breakers.get(key)

    def discard(self, key: BreakerKey) -> None:
        """Forget a breaker now (e.g. one that settled back to closed with no failures)."""
        self._breakers.pop(key, None)

    def forget_idle(self, now: float) -> int:
        """Drop the breakers not worth remembering; return how many were dropped.

        Scans at most once per ``idle_after_s``; calls in between return 0 at once.
        """
        if now < self._next_sweep_at:
            return 0
        self._next_sweep_at = now + self._idle_after_s
        forgotten = [
            key for key, breaker in self._breakers.items() if self._forgettable(breaker, now)
        ]
        for key in forgotten:
            del self._breakers[key]
        return len(forgotten)

    def snapshot(self) -> dict[BreakerKey, BreakerState]:
        """The state of each remembered breaker (e.g. for metrics); forgotten ones are closed."""
        return {key: breaker.state for key, breaker in self._breakers.items()}

    def _forgettable(self, breaker: Breaker, now: float) -> bool:
        touched_at = breaker.touched_at
        if touched_at is None:
            return breaker.is_settled
        untouched_s = now - touched_at
        if breaker.is_settled:
            return untouched_s >= self._idle_after_s
        return untouched_s >= self._forget_after_s
