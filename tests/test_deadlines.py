"""One timer for every parked wait's deadline: each future resolves at its moment."""

from __future__ import annotations

import asyncio

from sink.deadlines import Deadlines


def test_each_future_resolves_at_its_deadline_in_order_and_done_ones_are_skipped() -> None:
    """Later deadlines added first still resolve in time order; a future already done (its
    wait ended early) is left alone."""

    async def scenario() -> list[str]:
        deadlines = Deadlines()
        loop = asyncio.get_running_loop()
        order: list[str] = []
        futures = {name: loop.create_future() for name in ("late", "early", "woken")}
        for name, future in futures.items():
            future.add_done_callback(lambda f, name=name: order.append(name))
        deadlines.add(futures["late"], 0.06)
        deadlines.add(futures["early"], 0.02)
        deadlines.add(futures["woken"], 0.04)
        futures["woken"].set_result(None)  # mail came first
        await asyncio.wait_for(asyncio.gather(*futures.values()), 2)
        return order

    assert asyncio.run(scenario()) == ["woken", "early", "late"]


def test_a_new_event_loop_starts_afresh() -> None:
    """Deadlines left on a closed loop do not hold back those on the next one."""
    deadlines = Deadlines()

    async def one(seconds: float) -> None:
        future = asyncio.get_running_loop().create_future()
        deadlines.add(future, seconds)
        await asyncio.wait_for(future, 2)

    async def abandoned() -> None:
        deadlines.add(asyncio.get_running_loop().create_future(), 0.01)

    asyncio.run(abandoned())
    asyncio.run(one(0.05))
