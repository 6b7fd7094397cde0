"""SQLite's settle_soon (sink/storage/sqlite/webhooks.py): a delivered attempt frees its
webhook's in-flight slot at once and is written with the others that end near it, within
SETTLE_SOON_S; a webhook whose cap keeps due deliveries back settles at once instead (that
settle leases the next ones)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from sink import clock
from sink.storage.sqlite.store import SQLiteStore
from sink.storage.sqlite.webhooks import SETTLE_SOON_S
from sink.webhooks.model import DeliveryState, Due, Outcome
from sink.webhooks.port import IN_FLIGHT_MAX
from tests.support import new_run_id
from tests.test_webhook_store import _hook, _mail


def _delivered(due: Due) -> Outcome:
    # Ended now (the tests' NOW is an hour ahead: the leases taken now would have ended).
    return Outcome(due.delivery_id, due.attempt, clock.now(), 200, None, DeliveryState.DELIVERED)


def test_delivered_attempts_free_their_slots_at_once_and_are_written_together(
    tmp_path: Path,
) -> None:
    """A webhook's 8 handed-over deliveries end delivered: the next mail's delivery is handed
    over at once (no write needed for the slots), and all 8 are listed delivered within
    SETTLE_SOON_S (and a little), not before the store wrote them."""

    async def scenario() -> None:
        store = SQLiteStore(tmp_path / "runsink.db")
        await store.open()
        try:
            handed: list[Due] = []
            store.webhooks.hand = handed.extend
            run_id = new_run_id()
            hook = _hook(events=("message",), run_id=run_id)
            await store.webhooks.create_webhook(hook)
            for _ in range(IN_FLIGHT_MAX):
                await _mail(store, run_id)
            assert len(handed) == IN_FLIGHT_MAX
            soon = store.webhooks.settle_soon
            assert soon is not None
            assert all(soon(due, _delivered(due)) for due in handed)
            rows = await store.webhooks.deliveries(hook.webhook_id, None, 20)
            assert {r.state for r in rows} == {DeliveryState.PENDING}  # not written yet
            await _mail(store, run_id)
            assert len(handed) == IN_FLIGHT_MAX + 1  # its slot was free
            deadline = time.monotonic() + SETTLE_SOON_S + 5
            while True:
                rows = await store.webhooks.deliveries(hook.webhook_id, None, 20)
                done = [r for r in rows if r.state is DeliveryState.DELIVERED]
                if len(done) == IN_FLIGHT_MAX:
                    break
                assert time.monotonic() < deadline, rows
                await asyncio.sleep(0.01)
            assert {r.delivery_id for r in done} == {d.delivery_id for d in handed[:-1]}
            assert await store.webhooks.pending_count() == 1
        finally:
            await store.close()

    asyncio.run(scenario())


def test_a_webhook_with_deliveries_its_cap_kept_back_settles_at_once(tmp_path: Path) -> None:
    """Nine mails for a webhook with 8 in flight: settle_soon declines (False), and the
    settle written at once leases the ninth to the worker in its commit."""

    async def scenario() -> None:
        store = SQLiteStore(tmp_path / "runsink.db")
        await store.open()
        try:
            handed: list[Due] = []
            store.webhooks.hand = handed.extend
            run_id = new_run_id()
            await store.webhooks.create_webhook(_hook(events=("message",), run_id=run_id))
            for _ in range(IN_FLIGHT_MAX + 1):
                await _mail(store, run_id)
            assert len(handed) == IN_FLIGHT_MAX
            soon = store.webhooks.settle_soon
            assert soon is not None
            first = handed[0]
            assert not soon(first, _delivered(first))
            await store.webhooks.settle(_delivered(first))
            assert len(handed) == IN_FLIGHT_MAX + 1
        finally:
            await store.close()

    asyncio.run(scenario())


def test_the_store_writes_what_waits_when_it_closes(tmp_path: Path) -> None:
    """Delivered attempts not written yet are written by close(): reopened, none is pending."""

    async def scenario() -> None:
        store = SQLiteStore(tmp_path / "runsink.db")
        await store.open()
        handed: list[Due] = []
        store.webhooks.hand = handed.extend
        run_id = new_run_id()
        hook = _hook(events=("message",), run_id=run_id)
        await store.webhooks.create_webhook(hook)
        await _mail(store, run_id)
        soon = store.webhooks.settle_soon
        assert soon is not None and soon(handed[0], _delivered(handed[0]))
        await store.close()
        again = SQLiteStore(tmp_path / "runsink.db")
        await again.open()
        try:
            assert await again.webhooks.pending_count() == 0
        finally:
            await again.close()

    asyncio.run(scenario())
