"""The long-poll: a delivery during a wait wakes it at once; the inbox is busy meanwhile."""

from __future__ import annotations

import asyncio
import time

from sink.breaker import BreakerKey
from sink.clock import SystemClock
from sink.guard import Guard
from sink.longpoll import Ending, LongPolls, Look
from sink.metrics import Metrics
from sink.policy import CI
from sink.storage.memory import MemoryStore
from sink.waiters import Waiters
from tests.test_storage import created_event, incoming, new_inbox


def test_a_delivery_wakes_the_wait_and_is_found() -> None:
    """Mail saved and woken while a look waits ends the look with it, long before its deadline."""

    async def scenario() -> tuple[Ending, str | None, bool, float]:
        clock, store, waiters, metrics = SystemClock(), MemoryStore(), Waiters(), Metrics()
        polls = LongPolls(store, waiters, clock, metrics)
        guard = Guard(None, store, metrics, clock)
        new = new_inbox()
        await store.create_inbox(new, created_event(new))
        inbox = new.inbox
        key = BreakerKey(inbox.run_id, inbox.inbox_id, "wait")

        async def look() -> Look:
            async with guard.attempt(key, CI) as attempt:
                return await polls.look(inbox, inbox.match, 0, clock.now() + 30, attempt)

        started = time.monotonic()
        task = asyncio.create_task(look())
        deadline = time.monotonic() + 5
        while waiters.active == 0:  # registered: the scan found nothing, the wait began
            assert time.monotonic() < deadline, "the look never started waiting"
            await asyncio.sleep(0.001)
        busy = polls.busy_until(inbox.inbox_id) is not None
        await store.save_message(incoming(inbox))
        waiters.wake([inbox.inbox_id])
        result = await task
        found = result.scan.found
        return result.ending, found.inbox_id if found else None, busy, time.monotonic() - started

    ending, found_in, busy, took = asyncio.run(scenario())
    assert ending is Ending.FOUND and found_in is not None and busy
    assert took < 10
