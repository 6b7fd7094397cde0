"""The provider guard: every agent operation's call to the store goes through here.

It applies, in order: the circuit breaker of (run, inbox, operation), an injected
fault if one matches, and the policy's ``provider_deadline_s``. Failures are
provider trouble (``ProviderTimeout``/``ProviderError``) and ownership faults;
a normal "nothing yet" is a success.

The breaker's rule, "every admitted probe ends with exactly one of success, failure
or abandon" (``sink/breaker.py``), is kept in one place, ``Guard.attempt``::

    async with guard.attempt(key, policy) as attempt:
        if attempt.refused:
            return blocked(..., attempt.retry_after)
        result = await attempt.call(work)      # the provider: faults, deadline

A normal exit after a call records a success; ``ProviderTrouble`` records a failure;
a cancellation, another exception or an exit that never reached the provider (an early
answer: too early, out of budget) abandons the probe. The guard writes each breaker move
to the run's events itself, before the operation answers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from sink.breaker import Admission, BreakerKey, Breakers, BreakerSettings, Transition
from sink.clock import Clock, SystemClock, pause
from sink.errors import ProviderError, ProviderTimeout, ProviderTrouble, StorageError
from sink.faults import Fault, FaultRegistry
from sink.logs import log
from sink.metrics import Metrics
from sink.policy import Policy
from sink.storage.base import Event

T = TypeVar("T")

_CLOSED = Admission(allowed=True, probe=False, retry_after=None, transition=None)

_TRANSITION_EVENTS = {
    "open": "breaker_opened",
    "half_open": "breaker_half_open",
    "closed": "breaker_closed",
}

_BOOKKEEPING_S = 1.0  # when the store is the trouble, its events must not hold the answer


class EventLog(Protocol):
    """Where breaker moves are written (the store's ``add_events``)."""

    async def add_events(self, events: list[Event]) -> None: ...


def breaker_settings(policy: Policy) -> BreakerSettings:
    return BreakerSettings(
        failure_threshold=policy.breaker_failure_threshold,
        cooldown_s=policy.breaker_cooldown_s,
        cooldown_max_s=policy.breaker_cooldown_max_s,
    )


class Attempt:
    """One admitted (or refused) operation on one breaker; see ``Guard.attempt``."""

    __slots__ = ("_guard", "_key", "_policy", "admission", "reached_provider")

    def __init__(self, guard: Guard, key: BreakerKey, policy: Policy, admission: Admission):
        self._guard = guard
        self._key = key
        self._policy = policy
        self.admission = admission
        self.reached_provider = False  # also: an injected fault has had its one chance

    @property
    def refused(self) -> bool:
        return not self.admission.allowed

    @property
    def retry_after(self) -> float:
        """When refused: how long until the breaker lets a call through."""
        return self.admission.retry_after or self._policy.breaker_cooldown_s

    @property
    def probe(self) -> bool:
        """This call is the half-open probe: the caller keeps it short."""
        return self.admission.probe

    async def call(self, work: Callable[[], Awaitable[T]]) -> T:
        """One provider call, within the deadline. An injected fault hits the operation's
        first call only: a wait makes several (its scans, its poll's record), and is still one
        of the "next N matching calls" a fault counts, delayed once."""
        assert not self.refused, "a refused attempt must not reach the provider"
        first = not self.reached_provider
        self.reached_provider = True
        key = self._key
        return await self._guard.call(key.operation, key.run_id, self._policy, work, fault=first)


class Attempting:
    """``Guard.attempt``'s context: a small object, not a generator's (a long-poll holds it
    for its whole wait)."""

    __slots__ = ("_at", "_attempt", "_guard", "_key", "_policy")

    def __init__(self, guard: Guard, key: BreakerKey, policy: Policy, at: float | None) -> None:
        self._guard = guard
        self._key = key
        self._policy = policy
        self._at = at
        self._attempt: Attempt | None = None

    async def __aenter__(self) -> Attempt:
        guard, key, policy = self._guard, self._key, self._policy
        admission = await guard._admit(key, policy, self._at)
        self._attempt = Attempt(guard, key, policy, admission)
        return self._attempt

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> bool:
        attempt, guard, key = self._attempt, self._guard, self._key
        assert attempt is not None
        if attempt.refused:
            return False
        if exc is None:
            if attempt.reached_provider:
                await guard._success(key)
            else:
                await guard._abandon(key, attempt)
        elif isinstance(exc, ProviderTrouble):
            await guard.failure(key, self._policy, exc.reason)
        else:
            await guard._abandon(key, attempt)
        return False


class FleetBreakers(Protocol):
    """Breaker state shared by every replica of one database (``Backend.fleet_breakers``).

    Each method is one atomic move of the breaker's row; ``breaker_admit`` hands out the
    fleet's one half-open probe. They raise ``StorageError`` when the database is away.
    """

    async def breaker_admit(
        self, key: BreakerKey, base_cooldown_s: float, hold_s: float
    ) -> Admission: ...

    async def breaker_success(self, key: BreakerKey) -> Transition | None: ...

    async def breaker_failure(
        self, key: BreakerKey, settings: BreakerSettings
    ) -> Transition | None: ...

    async def breaker_abandon(self, key: BreakerKey) -> None: ...

    async def breaker_cooldown_left(self, key: BreakerKey) -> float | None: ...

    async def forget_breakers(self, untouched_s: float) -> int:
        """Delete breakers nobody touched for ``untouched_s`` (the sweeper's, not the guard's)."""


class Guard:
    """Breakers live in memory, or with ``fleet`` (replicas sharing a database) in the
    database, so that a run cannot dodge an open circuit by reaching another replica.
    While the database is away (exactly when the breaker matters) each replica falls back
    to its memory breakers and decides alone."""

    def __init__(
        self,
        faults: FaultRegistry | None,
        events: EventLog,
        metrics: Metrics,
        clock: Clock | None = None,
        fleet: FleetBreakers | None = None,
    ) -> None:
        self.breakers = Breakers()
        self.faults = faults
        self._events = events
        self._metrics = metrics
        self._clock = clock or SystemClock()
        self._fleet = fleet

    # A breaker is remembered only from its first failure until it settles again (closed,
    # no failures): the many runs that never fail cost no memory at all.

    def attempt(self, key: BreakerKey, policy: Policy, at: float | None = None) -> Attempting:
        """``async with guard.attempt(key, policy) as attempt``: admitted or refused by the
        breaker; a ProviderTrouble out of the body is a failure, leaving having reached the
        provider a success, anything else (cancelled, refused early) gives the slot back.

        ``at``: when the operation started (its events carry that time). A move the admission
        makes (half-open: this call is the probe) is written at that time too, so that the run
        report lists it before the poll or claim it let through, not after.
        """
        return Attempting(self, key, policy, at)

    async def failure(self, key: BreakerKey, policy: Policy, cause: str) -> None:
        """A failure outside an attempt's provider call (the caller named the wrong run)."""
        settings = breaker_settings(policy)
        if self._fleet is not None:
            try:
                shared = await _shared(self._fleet.breaker_failure(key, settings))
            except _FleetAway:
                pass  # counted in memory below: the breaker matters most when the store is away
            else:
                await self._note(key, shared, cause)
                return
        transition = self.breakers.get(key, settings).record_failure(self._clock.monotonic())
        await self._note(key, transition, cause)

    def trip(self, key: BreakerKey, policy: Policy, cooldown_s: float) -> None:
        """Open the breaker now for ``cooldown_s`` (the fake's scripted ``CircuitOpen``)."""
        settings = breaker_settings(policy)
        tripped = BreakerSettings(1, cooldown_s, max(cooldown_s, settings.cooldown_max_s))
        self.breakers.discard(key)
        self.breakers.get(key, tripped).record_failure(self._clock.monotonic())

    def remaining_cooldown(self, key: BreakerKey) -> float | None:
        breaker = self.breakers.find(key)
        if breaker is None or breaker.opened_at is None:
            return None
        return max(0.1, breaker.opened_at + breaker.cooldown_s - self._clock.monotonic())

    async def cooldown_left(self, key: BreakerKey) -> float | None:
        """The cooldown left, as the fleet has it (else as this process has it)."""
        if self._fleet is not None:
            with contextlib.suppress(_FleetAway):
                left = await _shared(self._fleet.breaker_cooldown_left(key))
                if left is not None:
                    return left
        return self.remaining_cooldown(key)

    def _take_fault(self, target: str, run_id: str | None, policy: Policy) -> Fault | None:
        if self.faults is None or self.faults.is_empty or not policy.allow_faults:
            return None
        return self.faults.take(target, run_id)

    async def call(
        self,
        operation: str,
        run_id: str,
        policy: Policy,
        work: Callable[[], Awaitable[T]],
        fault: bool = True,
    ) -> T:
        """One provider call: the injected fault (if any, and ``fault``), then the work,
        within the deadline."""
        injected = self._take_fault(operation, run_id, policy) if fault else None
        deadline = policy.provider_deadline_s
        timed_out = ProviderTimeout(f"the store did not answer {operation} within {deadline:g}s")
        held = 0.0
        if injected is not None:
            if injected.mode == "error":
                raise ProviderError(f"injected fault {injected.fault_id}")
            # Held on the clock, so a fake clock acts a timeout out without sleeping.
            held = (
                deadline if injected.mode == "timeout" else min(injected.delay_s or 0.0, deadline)
            )
            await pause(self._clock, held)
            if held >= deadline:
                raise timed_out
        try:
            # asyncio.timeout, not wait_for: wait_for runs the work in a task of its own
            # (Python 3.11), a task and two turns of the loop more on every store call (a
            # woken long-poll makes two before it answers).
            async with asyncio.timeout(deadline - held):
                return await work()
        except TimeoutError as exc:
            raise timed_out from exc

    # -- the breaker's bookkeeping ------------------------------------------------------

    async def _admit(self, key: BreakerKey, policy: Policy, at: float | None) -> Admission:
        if self._fleet is not None:
            try:
                # The probe's slot is held at most this long by a replica that died with it.
                hold_s = policy.provider_deadline_s + 1.0
                shared = await _shared(
                    self._fleet.breaker_admit(key, policy.breaker_cooldown_s, hold_s)
                )
            except _FleetAway:
                pass  # the database is away: this replica decides alone, from memory
            else:
                await self._note(key, shared.transition, None, at)
                return shared
        now = self._clock.monotonic()
        self.breakers.forget_idle(now)
        breaker = self.breakers.find(key)
        if breaker is None:
            return _CLOSED
        admission = breaker.admit(now)
        await self._note(key, admission.transition, None, at)
        return admission

    async def _success(self, key: BreakerKey) -> None:
        breaker = self.breakers.find(key)
        transition = None
        if breaker is not None:
            transition = breaker.record_success(self._clock.monotonic())
            if breaker.is_settled:
                self.breakers.discard(key)
        if self._fleet is not None:
            with contextlib.suppress(_FleetAway):
                transition = await _shared(self._fleet.breaker_success(key))
        await self._note(key, transition, None)

    async def _abandon(self, key: BreakerKey, attempt: Attempt) -> None:
        breaker = self.breakers.find(key)
        if attempt.probe and breaker is not None:
            breaker.abandon_probe(self._clock.monotonic())
        if attempt.probe and self._fleet is not None:
            with contextlib.suppress(_FleetAway):
                await _shared(self._fleet.breaker_abandon(key))

    async def _note(
        self,
        key: BreakerKey,
        transition: Transition | None,
        cause: str | None,
        at: float | None = None,
    ) -> None:
        """A breaker moved: count it, log it and write it to the run's events (at ``at``,
        else now)."""
        if transition is None:
            return
        event = _TRANSITION_EVENTS.get(transition.to_state.value)
        if event is None:
            return
        run_id, inbox_id, operation = key
        self._metrics.breaker(operation, event, cause)
        log(event, run_id=run_id, inbox_id=inbox_id, operation=operation, cause=cause)
        moved = Event(
            run_id=run_id,
            type=event,
            at=self._clock.now() if at is None else at,
            inbox_id=inbox_id,
            detail={"operation": operation, "cause": cause, "cooldown_s": transition.cooldown_s},
        )
        try:
            await asyncio.wait_for(self._events.add_events([moved]), _BOOKKEEPING_S)
        except Exception as exc:  # bookkeeping must never turn an answer into a 500
            log("bookkeeping_failed", error=type(exc).__name__)


class _FleetAway(Exception):
    """The shared breaker state could not be reached in time."""


async def _shared(work: Awaitable[T]) -> T:
    """A move of the fleet's breaker state, bounded: the database may be the trouble."""
    try:
        return await asyncio.wait_for(work, _BOOKKEEPING_S)
    except (StorageError, TimeoutError) as exc:
        raise _FleetAway from exc
