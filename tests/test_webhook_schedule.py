"""The retry schedule (sink/webhooks/schedule.py), and the worker keeping the contract's
full schedule against a real receiver on a fake clock (no waiting an hour)."""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time

from sink.clock import FakeClock, SystemClock
from sink.metrics import Metrics
from sink.storage.base import Event
from sink.storage.memory import MemoryStore
from sink.webhook_signature import new_secret
from sink.webhooks import schedule
from sink.webhooks.model import Attempt, DeliveryState, Webhook, new_webhook_id
from sink.webhooks.port import NextDue
from sink.webhooks.worker import Worker
from tests.webhook_receiver import Receiver


def test_each_retry_comes_its_delay_after_the_attempt_before_and_at_most_10_percent_later() -> None:
    """1, 5, 30, 120, 600, 1800, 3600 s after the end of the attempt before; then none."""
    for made, delay in enumerate(schedule.DELAYS_S, start=1):
        assert schedule.next_attempt_at(made, 100.0, draw=lambda: 0.0) == 100.0 + delay
        latest = schedule.next_attempt_at(made, 100.0, draw=lambda: 0.999999)
        assert latest is not None and 100.0 + delay <= latest < 100.0 + delay * 1.1
    assert schedule.next_attempt_at(len(schedule.DELAYS_S) + 1, 100.0) is None
    assert schedule.attempts() == 8


def test_the_spread_leaves_the_worker_half_the_contracts_10_percent() -> None:
    """A retry is drawn at most 5% late, so the attempt itself (waking, connecting) still
    starts within the 10% the contract allows, even for the 1 s retry (50 ms to spare)."""
    for made, delay in enumerate(schedule.DELAYS_S, start=1):
        latest = schedule.next_attempt_at(made, 100.0, draw=lambda: 0.999999)
        assert latest is not None and latest <= 100.0 + delay * 1.05


def test_the_worker_keeps_the_whole_schedule_then_fails_the_delivery() -> None:
    """Eight attempts at a receiver that always answers 500, each retry due its delay after
    the attempt before on the (fake) clock; the last fails the delivery with a run event."""
    secret = new_secret()
    receiver = Receiver(secret, answer=lambda _n: 500).start()

    async def scenario() -> list[tuple[int, float, float | None]]:
        clock = FakeClock(time.time())
        store = MemoryStore()
        hook = Webhook(
            new_webhook_id(), receiver.url, ("run_event",), "r", None, None, secret, clock.now()
        )
        await store.webhooks.create_webhook(hook)
        worker = Worker(store.webhooks, Metrics(), clock)
        store.webhooks.wake = worker.wake
        stopping = asyncio.Event()
        running = asyncio.create_task(worker.run(stopping))
        await store.add_events([Event("r", "breaker_opened", clock.now(), "ib_x")])
        seen: list[tuple[int, float, float | None]] = []
        for attempt in range(1, 9):
            rows = await _until(store, hook, attempt)
            seen.append((rows[0].attempt, rows[0].at, rows[0].next_attempt_at))
            if rows[0].next_attempt_at is not None:
                clock.advance(rows[0].next_attempt_at - clock.now())  # time jumps to the retry
                worker.wake()
        stopping.set()
        worker.wake()
        await running
        _, events = await store.run_report("r")
        assert [e.type for e in events].count("webhook_failed") == 1
        rows = await store.webhooks.deliveries(hook.webhook_id, None, 20)
        assert rows[0].state is DeliveryState.FAILED
        return seen

    try:
        seen = asyncio.run(scenario())
    finally:
        receiver.stop()
    assert [a for a, _, _ in seen] == list(range(1, 9)) and len(receiver.got) == 8
    # Signed anew per attempt at its own time: the first within the verifier's tolerance of
    # now; the later ones hours ahead on the fake clock, each signature still its own.
    assert receiver.got[0].verified
    stamps = [g.timestamp for g in receiver.got]
    assert stamps == sorted(stamps) and len(set(stamps)) == 8
    assert all(g.raw == receiver.got[0].raw for g in receiver.got)
    for (_, ended, retry_at), delay in zip(seen, schedule.DELAYS_S, strict=False):
        assert retry_at is not None and ended + delay <= retry_at <= ended + delay * 1.1
    assert seen[-1][2] is None


async def _until(store: MemoryStore, hook: Webhook, attempt: int) -> list[Attempt]:
    for _ in range(400):
        rows = await store.webhooks.deliveries(hook.webhook_id, None, 20)
        if rows and rows[0].attempt == attempt and rows[0].status_code is not None:
            return rows
        await asyncio.sleep(0.025)
    raise AssertionError(f"attempt {attempt} was not made")


class _SlowClock(SystemClock):
    """The wall clock at 99% of its speed: a sleep set to end when a retry is due ends a few
    ms before this clock says it is, as a uvloop timer (whole ms, from the loop's cached
    time) can end a moment before the time it was set for."""

    def __init__(self) -> None:
        self._start = time.time()

    def now(self) -> float:  # (a second ahead: what the store stamps by the wall is due)
        return self._start + 1.0 + (time.time() - self._start) * 0.99


def test_a_round_that_wakes_just_before_a_retry_is_due_takes_it_at_once() -> None:
    """Each 0.5 s retry goes out within 10% of its delay after the attempt before, though the
    worker's sleep ends a moment before the retry is due and its look at the store takes a
    few ms (as SQLite's does): it looks again at once (it waited 0.25 s, so `runsink serve`
    made a 1 s retry 25-30% late about one time in four)."""
    secret = new_secret()
    receiver = Receiver(secret, answer=lambda _n: 500).start()

    async def scenario() -> list[Attempt]:
        clock = _SlowClock()
        store = MemoryStore()
        looks = store.webhooks.next_due

        async def next_due(now: float) -> NextDue:
            await asyncio.sleep(0.005)  # a store a thread away, as SQLite is
            return await looks(now)

        store.webhooks.next_due = next_due  # type: ignore[method-assign]
        hook = Webhook(
            new_webhook_id(), receiver.url, ("run_event",), "r", None, None, secret, clock.now()
        )
        await store.webhooks.create_webhook(hook)
        worker = Worker(store.webhooks, Metrics(), clock, delays=(0.5,) * 4)
        store.webhooks.wake = worker.wake
        stopping = asyncio.Event()
        running = asyncio.create_task(worker.run(stopping))
        await store.add_events([Event("r", "breaker_opened", clock.now(), "ib_x")])
        rows = await _until(store, hook, 5)
        stopping.set()
        worker.wake()
        await running
        return rows

    try:
        rows = asyncio.run(scenario())
    finally:
        receiver.stop()
    made = sorted(row.at for row in rows)  # when each attempt ended, on the worker's clock
    gaps = [b - a for a, b in itertools.pairwise(made)]
    assert min(gaps) >= 0.5 and statistics.median(gaps) <= 0.5 * 1.1, gaps
