"""The guard: Guard.attempt ends every admitted probe with one of success, failure or abandon,
writes each breaker move to the run's events, and acts faults out on the clock."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TypeVar

import pytest

from sink.breaker import BreakerKey
from sink.clock import FakeClock
from sink.errors import ProviderTimeout
from sink.faults import FaultRegistry, FaultSpec
from sink.guard import Guard
from sink.metrics import Metrics
from sink.policy import CI
from sink.storage.memory import MemoryStore

T = TypeVar("T")
KEY = BreakerKey("run-g", "ib_guard", "wait")
POLICY = replace(CI, breaker_failure_threshold=1, breaker_cooldown_s=5.0, provider_deadline_s=2.0)


class World:
    def __init__(self, faults: FaultRegistry | None = None) -> None:
        self.clock = FakeClock()
        self.store = MemoryStore()
        self.guard = Guard(faults, self.store, Metrics(), self.clock)

    async def events(self) -> list[str]:
        _, events = await self.store.run_report("run-g")
        return [e.type for e in events]

    async def fail_once(self) -> None:
        with pytest.raises(ProviderTimeout):
            async with self.guard.attempt(KEY, POLICY) as attempt:
                await attempt.call(_timeout)


def run(scenario: Callable[[World], Awaitable[T]], faults: FaultRegistry | None = None) -> T:
    return asyncio.run(scenario(World(faults)))


async def _timeout() -> None:
    raise ProviderTimeout("slow")


async def _answer() -> str:
    return "ok"


def test_provider_trouble_opens_and_a_probe_that_answers_closes() -> None:
    """A failure opens the breaker; once the cooldown is over, a probe that answers closes it."""

    async def scenario(world: World) -> tuple[bool, bool, list[str]]:
        await world.fail_once()
        async with world.guard.attempt(KEY, POLICY) as refused:
            pass
        world.clock.advance(5.0)
        async with world.guard.attempt(KEY, POLICY) as probe:
            assert await probe.call(_answer) == "ok"
        return refused.refused, probe.probe, await world.events()

    refused, probe, events = run(scenario)
    assert refused and probe
    assert events == ["breaker_opened", "breaker_half_open", "breaker_closed"]


@pytest.mark.parametrize("ending", ["early answer", "cancelled"])
def test_a_probe_that_never_reached_the_provider_is_handed_back(ending: str) -> None:
    """An early answer or a cancellation abandons the probe: the next call probes at once."""

    async def scenario(world: World) -> tuple[bool, bool]:
        await world.fail_once()
        world.clock.advance(5.0)
        try:
            async with world.guard.attempt(KEY, POLICY) as first:
                if ending == "cancelled":
                    raise asyncio.CancelledError
        except asyncio.CancelledError:
            pass
        async with world.guard.attempt(KEY, POLICY) as second:
            await second.call(_answer)
        return first.probe, second.probe

    assert run(scenario) == (True, True)


def test_a_timeout_fault_is_held_on_the_clock_not_slept() -> None:
    """A timeout fault holds the call for the provider deadline on the (fake) clock."""
    faults = FaultRegistry(random.Random(1))
    faults.add(FaultSpec(target="wait", mode="timeout", count=1), 0.0)

    async def scenario(world: World) -> float:
        started = world.clock.now()
        await world.fail_once()
        return world.clock.now() - started

    assert run(scenario, faults) == pytest.approx(2.0)
