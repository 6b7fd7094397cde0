"""The clocks: a wait ends on its signal or at its deadline; fake time jumps, never sleeps."""

from __future__ import annotations

import asyncio
import time

from sink.clock import EPOCH, FakeClock, SystemClock, pause


def test_system_clock_wait_ends_on_the_signal() -> None:
    """SystemClock.wait returns True as soon as the signal is set."""

    async def scenario() -> bool:
        clock, signal = SystemClock(), asyncio.Event()
        asyncio.get_running_loop().call_soon(signal.set)
        return await clock.wait(signal, clock.now() + 30)

    started = time.monotonic()
    assert asyncio.run(scenario()) is True
    assert time.monotonic() - started < 5


def test_system_clock_wait_ends_at_the_deadline() -> None:
    """SystemClock.wait returns False once the deadline passes with no signal."""

    async def scenario() -> bool:
        clock = SystemClock()
        return await clock.wait(asyncio.Event(), clock.now() + 0.05)

    assert asyncio.run(scenario()) is False


def test_fake_clock_jumps_to_the_deadline() -> None:
    """FakeClock.wait with no signal moves time to the deadline at once; pause moves it too."""

    async def scenario(clock: FakeClock) -> bool:
        ended = await clock.wait(asyncio.Event(), EPOCH + 30)
        await pause(clock, 5)
        return ended

    clock = FakeClock()
    assert asyncio.run(scenario(clock)) is False
    assert clock.now() == EPOCH + 35


def test_fake_clock_wait_sees_a_signal_set_meanwhile() -> None:
    """Work already started may set the signal during the wait's one turn of the loop."""

    async def scenario(clock: FakeClock) -> bool:
        signal = asyncio.Event()
        asyncio.get_running_loop().call_soon(signal.set)
        return await clock.wait(signal, EPOCH + 30)

    clock = FakeClock()
    assert asyncio.run(scenario(clock)) is True
    assert clock.now() == EPOCH
