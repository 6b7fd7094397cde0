"""The provider guard: every agent operation's call to the store goes through here.

It applies, in order: the circuit breaker of (run, inbox, operation), an injected
fault if one matches, and the policy's ``provider_deadline_s``. Failures are
provider trouble (``ProviderTimeout``/``ProviderError``) and ownership faults;
a normal "nothing yet" is a success.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from sink.breaker import Admission, BreakerKey, Breakers, BreakerSettings, Transition
from sink.errors import ProviderError, ProviderTimeout
from sink.faults import Fault, FaultRegistry
from sink.policy import Policy

T = TypeVar("T")

_CLOSED = Admission(allowed=True, probe=False, retry_after=None, transition=None)

_TRANSITION_EVENTS = {
    "open": "breaker_opened",
    "half_open": "breaker_half_open",
    "closed": "breaker_closed",
}


@dataclass(frozen=True, slots=True)
class BreakerChange:
    """A breaker moved: the run report and the metrics want to know."""

    key: BreakerKey
    event: str
    cause: str | None
    cooldown_s: float | None


def breaker_settings(policy: Policy) -> BreakerSettings:
    return BreakerSettings(
        failure_threshold=policy.breaker_failure_threshold,
        cooldown_s=policy.breaker_cooldown_s,
        cooldown_max_s=policy.breaker_cooldown_max_s,
    )


class Guard:
    def __init__(
        self,
        faults: FaultRegistry | None,
        on_change: Callable[[BreakerChange], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.breakers = Breakers()
        self.faults = faults
        self._on_change = on_change
        self._clock = clock

    # A breaker is remembered only from its first failure until it settles again (closed,
    # no failures): the many runs that never fail cost no memory at all.

    def admit(self, key: BreakerKey, policy: Policy) -> Admission:
        now = self._clock()
        self.breakers.forget_idle(now)
        breaker = self.breakers.find(key)
        if breaker is None:
            return _CLOSED
        admission = breaker.admit(now)
        self._note(key, admission.transition, None)
        return admission

    def success(self, key: BreakerKey, policy: Policy) -> None:
        breaker = self.breakers.find(key)
        if breaker is None:
            return
        transition = breaker.record_success(self._clock())
        self._note(key, transition, None)
        if breaker.is_settled:
            self.breakers.discard(key)

    def failure(self, key: BreakerKey, policy: Policy, cause: str) -> None:
        transition = self.breakers.get(key, breaker_settings(policy)).record_failure(self._clock())
        self._note(key, transition, cause)

    def abandon(self, key: BreakerKey, policy: Policy) -> None:
        breaker = self.breakers.find(key)
        if breaker is not None:
            breaker.abandon_probe(self._clock())

    def remaining_cooldown(self, key: BreakerKey, policy: Policy) -> float | None:
        breaker = self.breakers.find(key)
        if breaker is None or breaker.opened_at is None:
            return None
        return max(0.1, breaker.opened_at + breaker.cooldown_s - self._clock())

    def _note(self, key: BreakerKey, transition: Transition | None, cause: str | None) -> None:
        if transition is None:
            return
        event = _TRANSITION_EVENTS.get(transition.to_state.value)
        if event is not None:
            self._on_change(BreakerChange(key, event, cause, transition.cooldown_s))

    def take_fault(self, target: str, run_id: str | None, policy: Policy) -> Fault | None:
        if self.faults is None or self.faults.is_empty or not policy.allow_faults:
            return None
        return self.faults.take(target, run_id)

    async def call(
        self, operation: str, run_id: str, policy: Policy, work: Callable[[], Awaitable[T]]
    ) -> T:
        """One provider call: the injected fault (if any), then the work, within the deadline."""
        fault = self.take_fault(operation, run_id, policy)
        deadline = policy.provider_deadline_s

        async def attempt() -> T:
            if fault is not None:
                await apply_fault(fault, deadline)
            return await work()

        try:
            return await asyncio.wait_for(attempt(), deadline)
        except TimeoutError as exc:
            raise ProviderTimeout(
                f"the store did not answer {operation} within {deadline:g}s"
            ) from exc


async def apply_fault(fault: Fault, deadline: float) -> None:
    """Act out an injected fault: hold past the deadline, fail, or add a delay."""
    if fault.mode == "timeout":
        await asyncio.sleep(deadline + 60)  # cut short by the caller's deadline
    elif fault.mode == "error":
        raise ProviderError(f"injected fault {fault.fault_id}")
    elif fault.mode == "delay" and fault.delay_s:
        await asyncio.sleep(fault.delay_s)
