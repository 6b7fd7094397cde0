"""settle_soon (PostgreSQL, sink/storage/postgres/webhooks.py): a delivered attempt is written
with the others that end near it, within SETTLE_SOON_S; the lease, the fleet's in-flight
count, holds the slot until the write, which leases the next ones. (SQLite's delivered
attempts are written by the delivery child: tests/test_webhook_record.py.)"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from sink import clock
from sink.storage.base import Event
from sink.storage.postgres import webhooks as pg_webhooks
from sink.storage.postgres.store import PostgresStore
from sink.webhooks.model import DeliveryState, Due, Outcome
from sink.webhooks.port import IN_FLIGHT_MAX
from tests.support import new_run_id
from tests.test_webhook_store import _hook, _opened, _turn


def _delivered(due: Due) -> Outcome:
    # Ended now (the tests' NOW is an hour ahead: the leases taken now would have ended).
    return Outcome(due.delivery_id, due.attempt, clock.now(), 200, None, DeliveryState.DELIVERED)


async def _leased(store: PostgresStore, webhook_id: str) -> int:
    rows = await store.fetch(
        "test",
        "SELECT COUNT(*) FROM webhook_deliveries WHERE webhook_id = $1 AND state = 'pending' "
        "AND lease_until > $2",
        webhook_id,
        time.time(),
    )
    return int(rows[0][0])


async def _events(store: PostgresStore, run_id: str, count: int) -> None:
    """``count`` run events, one commit each; what they hand over reaches the worker."""
    for _ in range(count):
        await store.add_events([Event(run_id, "breaker_opened", clock.now(), "ib_x")])
        await _turn()


def test_postgres_delivered_attempts_hold_the_cap_until_written_together_then_refill(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seven of a webhook's 8 handed-over deliveries end delivered (settle_soon): nothing is
    written yet and their leases still fill the cap fleet-wide (no new mail's delivery is
    leased, by this replica or another); within SETTLE_SOON_S they are written in one
    call, which leases the next due delivery to this worker; all 8 ending at once write at
    once."""

    async def scenario() -> None:
        handed: list[Due] = []
        store = await _opened(pg_dsn, handed)
        other = await _opened(pg_dsn, None)
        try:
            run_id = new_run_id()
            hook = _hook(events=("run_event",), run_id=run_id)
            await store.webhooks.create_webhook(hook)
            await _events(store, run_id, IN_FLIGHT_MAX)
            assert len(handed) == IN_FLIGHT_MAX
            soon = store.webhooks.settle_soon
            assert soon is not None
            assert all(soon(due, _delivered(due)) for due in handed[:7])
            rows = await store.webhooks.deliveries(hook.webhook_id, None, 20)
            assert {r.state for r in rows} == {DeliveryState.PENDING}  # not written yet
            assert await _leased(store, hook.webhook_id) == IN_FLIGHT_MAX
            await _events(store, run_id, 1)
            assert len(handed) == IN_FLIGHT_MAX  # the cap holds: not handed over
            assert await other.webhooks.take_due(clock.now(), 100) == []
            deadline = time.monotonic() + pg_webhooks.SETTLE_SOON_S + 5
            while len(handed) == IN_FLIGHT_MAX:  # the write refills the freed slots
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            [ninth] = handed[IN_FLIGHT_MAX:]
            assert ninth.delivery_id not in {d.delivery_id for d in handed[:IN_FLIGHT_MAX]}
            rows = await store.webhooks.deliveries(hook.webhook_id, None, 20)
            done = {r.delivery_id for r in rows if r.state is DeliveryState.DELIVERED}
            assert done == {d.delivery_id for d in handed[:7]}
            assert await _leased(store, hook.webhook_id) == 2  # the eighth and the ninth
            # All of a webhook's in-flight attempts ended: written now (the timer is a minute).
            monkeypatch.setattr(pg_webhooks, "SETTLE_SOON_S", 60.0)
            await _events(store, run_id, IN_FLIGHT_MAX - 2)
            assert len(handed) == 2 * IN_FLIGHT_MAX - 1
            for due in handed[7:]:
                assert soon(due, _delivered(due))
            deadline = time.monotonic() + 10
            while await store.webhooks.pending_count() > 0:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
        finally:
            for opened in (store, other):
                await opened.close()

    asyncio.run(scenario())


def test_postgres_a_direct_settle_is_written_alone_or_with_those_waiting(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A settle (an attempt made in the server) with nothing waiting is written at once; one
    beside delivered attempts that wait joins them and returns once they are written (8 make
    a write at once); close() writes what still waits: reopened, none is pending."""

    async def scenario() -> None:
        handed: list[Due] = []
        store = await _opened(pg_dsn, handed)
        run_id = new_run_id()
        hook = _hook(events=("run_event",), run_id=run_id)
        await store.webhooks.create_webhook(hook)
        await _events(store, run_id, IN_FLIGHT_MAX)
        monkeypatch.setattr(pg_webhooks, "SETTLE_SOON_S", 60.0)  # no write by the timer
        await store.webhooks.settle(_delivered(handed[0]))
        assert await _states(store, hook.webhook_id) == {handed[0].delivery_id}
        await _events(store, run_id, 2)  # one handed over (the slot written free), one kept
        soon = store.webhooks.settle_soon
        assert soon is not None and len(handed) == IN_FLIGHT_MAX + 1
        assert soon(handed[1], _delivered(handed[1]))
        joined = asyncio.create_task(store.webhooks.settle(_delivered(handed[2])))
        assert await _states(store, hook.webhook_id) == {handed[0].delivery_id}
        assert not joined.done()  # it waits with the other for their write
        assert all(soon(due, _delivered(due)) for due in handed[3:9])  # eight: written now
        await joined
        assert await _states(store, hook.webhook_id) == {d.delivery_id for d in handed[:9]}
        [last] = handed[9:]  # refilled by that write
        assert soon(last, _delivered(last))
        await store.close()
        again = await _opened(pg_dsn, None)
        try:
            assert await again.webhooks.pending_count() == 0
        finally:
            await again.close()

    asyncio.run(scenario())


async def _states(store: PostgresStore, webhook_id: str) -> set[str]:
    """The webhook's deliveries listed delivered."""
    rows = await store.webhooks.deliveries(webhook_id, None, 50)
    return {r.delivery_id for r in rows if r.state is DeliveryState.DELIVERED}


_CRASH = """
import asyncio, os, sys
import pytest

from sink import clock
from sink.storage.base import Event
from sink.storage.postgres import webhooks as pg_webhooks
from sink.storage.postgres.store import PostgresStore
from sink.webhooks.model import DeliveryState, Outcome
from tests.test_webhook_store import _hook, _mail, _opened, _turn

async def main():
    store = PostgresStore(sys.argv[1])
    await store.open()
    handed = []
    store.webhooks.hand = handed.extend
    await store.webhooks.resume(clock.now())  # the worker's presence: its leases name it
    hook = _hook(events=("run_event",), run_id="crash-run")
    await store.webhooks.create_webhook(hook)
    await store.add_events([Event("crash-run", "breaker_opened", clock.now(), "ib_x")])
    await asyncio.sleep(0)
    [due] = handed
    outcome = Outcome(due.delivery_id, 1, clock.now(), 200, None, DeliveryState.DELIVERED)
    assert store.webhooks.settle_soon(due, outcome)
    print(due.delivery_id, due.event_id, flush=True)
    os._exit(9)  # killed before the write

asyncio.run(main())
"""


def test_postgres_a_crash_before_the_write_sends_the_delivery_again(pg_dsn: str) -> None:
    """A replica killed after a delivered attempt but before its write: another replica
    takes that delivery again at once (at least once), with the same id and body."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _CRASH, pg_dsn],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 9, done.stderr
    delivery_id, event_id = done.stdout.split()

    async def scenario() -> None:
        other = await _opened(pg_dsn, None)
        try:
            await other.webhooks.resume(clock.now())  # frees the dead holder's leases
            [again] = await other.webhooks.take_due(clock.now(), 100)
            assert (again.delivery_id, again.event_id, again.attempt) == (
                delivery_id,
                event_id,
                1,
            )
        finally:
            await other.close()

    asyncio.run(scenario())
