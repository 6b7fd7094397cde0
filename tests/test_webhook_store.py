"""The webhook store port (sink/webhooks/port.py) and its outbox, on every backend: the
deliveries written with their events, the filters, leases, attempts and their listing."""

from __future__ import annotations

import asyncio
import json
import time
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest

from sink import clock, event_shapes, ids
from sink.event_ids import EventIds
from sink.message import summarize
from sink.storage.base import Event, Incoming
from sink.storage.postgres import webhooks as pg_webhooks
from sink.storage.postgres.store import PostgresStore
from sink.storage.sqlite.store import SQLiteStore
from sink.vocabulary import Reason
from sink.webhooks.model import DeliveryState, Outcome, Webhook
from sink.webhooks.port import IN_FLIGHT_MAX, LEASE_S
from tests.support import new_webhook
from tests.test_storage import (  # noqa: F401  (backend: the parametrised fixture)
    Backend,
    backend,
    created_event,
    incoming,
    new_inbox,
)

T = TypeVar("T")
NOW = clock.now() + 3600  # after every event the tests record


def _hook(**fields: Any) -> Webhook:
    return new_webhook(**{"created_at": NOW, **fields})


async def _mail(store: Any, run_id: str | None) -> Incoming:
    """Mail for a new inbox of ``run_id`` (created first), or caught mail with None."""
    if run_id is None:
        raw = b"From: a@b.test\r\nSubject: Hello\r\n\r\nbody\r\n"
        item = Incoming(
            raw,
            summarize(raw),
            "a@b.test",
            clock.now(),
            (),
            ("x@sink.test",),
            caught_id=ids.new_caught_id(),
        )
    else:
        new = new_inbox(run_id, key=ids.new_inbox_id())
        await store.create_inbox(new, created_event(new))
        item = incoming(new.inbox)
    await store.save_message(item)
    return item


async def _types(store: Any, hook: Webhook) -> list[str]:
    return sorted(a.type for a in await store.webhooks.deliveries(hook.webhook_id, None, 100))


def test_an_event_goes_to_every_webhook_whose_filter_wants_it(backend: Backend) -> None:  # noqa: F811
    """Types, run_id and run_glob filter; caught mail goes only to an admin's unfiltered webhook."""

    async def scenario(store: Any) -> None:
        hooks = {
            "all": _hook(),
            "admin": _hook(created_by_admin=True),
            "run": _hook(run_id="team-a-1"),
            "glob": _hook(run_glob="team-a-*"),
            "other": _hook(run_glob="team-b-*"),
            "messages": _hook(events=("message",), created_by_admin=True),
        }
        for hook in hooks.values():
            await store.webhooks.create_webhook(hook)
        await store.add_events([Event("team-a-1", "breaker_opened", clock.now(), "ib_x")])
        await _mail(store, "team-a-1")
        await _mail(store, None)
        got = {name: await _types(store, hook) for name, hook in hooks.items()}
        # created (and its inbox event), breaker_opened, message_accepted and its message
        run_events = ["inbox", "message", "run_event", "run_event", "run_event"]
        assert got["all"] == run_events
        assert got["admin"] == sorted(["message", *run_events])
        assert got["run"] == got["glob"] == run_events
        assert got["other"] == []
        assert got["messages"] == ["message", "message"]

    backend.run(scenario)


def test_the_body_is_the_live_event_and_its_id_is_the_events_id(
    backend: Backend,  # noqa: F811
) -> None:
    """A delivery's body is {type, id, timestamp, data} with data exactly as SSE shows it."""

    async def scenario(store: Any) -> None:
        hook = _hook()
        await store.webhooks.create_webhook(hook)
        item = await _mail(store, "r1")
        due = await store.webhooks.take_due(NOW, 10)
        message = next(d for d in due if d.type == "message")
        body = json.loads(message.body)
        assert body["id"] == message.event_id and body["type"] == "message"
        assert body["timestamp"].endswith("Z")
        [delivered] = item.deliveries
        assert body["data"] == {
            "message_id": delivered.message_id,
            "inbox_id": delivered.inbox_id,
            "run_id": "r1",
            "caught": False,
            "subject": "Hello",
            "received_at": body["timestamp"],
        }
        runs = [json.loads(d.body)["data"] for d in due if d.type == "run_event"]
        assert [r["type"] for r in runs] == ["created", "message_accepted"]
        assert {r["run_id"] for r in runs} == {"r1"}
        inbox = next(json.loads(d.body)["data"] for d in due if d.type == "inbox")
        assert inbox == {
            "inbox_id": delivered.inbox_id,
            "run_id": "r1",
            "state": "created",
            "reason": None,
        }

    backend.run(scenario)


def test_nothing_is_queued_without_a_webhook_or_for_a_deleted_one(
    backend: Backend,  # noqa: F811
) -> None:
    """No webhook: no delivery; a deleted webhook's deliveries go with it."""

    async def scenario(store: Any) -> None:
        await _mail(store, "r1")
        assert await store.webhooks.pending_count() == 0
        hook = _hook(events=("message",))
        await store.webhooks.create_webhook(hook)
        await _mail(store, "r2")
        assert await store.webhooks.pending_count() == 1
        assert await store.webhooks.delete_webhook(hook.webhook_id)
        assert not await store.webhooks.delete_webhook(hook.webhook_id)
        assert await store.webhooks.pending_count() == 0
        assert await store.webhooks.webhook(hook.webhook_id) is None

    backend.run(scenario)


def test_leases_give_each_attempt_to_one_taker_and_at_most_eight_per_webhook(
    backend: Backend,  # noqa: F811
) -> None:
    """A taken delivery is not taken again until its lease ends; never more than 8 leased."""

    async def scenario(store: Any) -> None:
        hook = _hook(events=("run_event",))
        await store.webhooks.create_webhook(hook)
        await store.add_events(
            [Event("r", "breaker_opened", clock.now(), "ib_x") for _ in range(12)]
        )
        first = await store.webhooks.take_due(NOW, 100)
        assert len(first) == IN_FLIGHT_MAX and all(d.attempt == 1 for d in first)
        assert await store.webhooks.take_due(NOW + 1, 100) == []
        later = await store.webhooks.take_due(NOW + LEASE_S + 1, 100)
        assert len(later) == IN_FLIGHT_MAX  # the leases ran out: taken again (by anyone)
        assert (await store.webhooks.next_due(NOW + LEASE_S + 1)).pending is not None

    backend.run(scenario)


def test_a_webhook_at_its_cap_does_not_hold_back_another(backend: Backend) -> None:  # noqa: F811
    """A webhook with hundreds due and 8 in flight leaves the next take to the others: a
    quiet webhook's delivery due later is taken at once (SQLite looked only at the oldest
    rows due, all the busy one's, and a retry waited for the backlog to drain)."""

    async def scenario(store: Any) -> None:
        busy, quiet = _hook(events=("run_event",), run_id="busy"), _hook(run_id="quiet")
        await store.webhooks.create_webhook(busy)
        await store.webhooks.create_webhook(quiet)
        await store.add_events(
            [Event("busy", "breaker_opened", clock.now(), "ib_x") for _ in range(300)]
        )
        await store.add_events([Event("quiet", "breaker_opened", clock.now(), "ib_y")])
        taken = await store.webhooks.take_due(NOW, 56)
        by_hook = [d.webhook_id for d in taken]
        assert by_hook.count(busy.webhook_id) == IN_FLIGHT_MAX
        assert by_hook.count(quiet.webhook_id) == 1

    backend.run(scenario)


def test_the_next_due_is_what_can_be_taken_not_a_backlog_at_its_cap(
    backend: Backend,  # noqa: F811
) -> None:
    """With a webhook at its cap and more of it due, the next takeable is another webhook's
    retry (or a lease's end), not the capped backlog, which still counts as pending."""

    async def scenario(store: Any) -> None:
        busy, quiet = _hook(events=("run_event",), run_id="busy"), _hook(run_id="quiet")
        for hook in (busy, quiet):
            await store.webhooks.create_webhook(hook)
        await store.add_events([Event("quiet", "breaker_opened", clock.now(), "ib_y")])
        for due in await store.webhooks.take_due(NOW, 10):
            await store.webhooks.settle(
                Outcome(due.delivery_id, 1, NOW, 500, "http_500", DeliveryState.PENDING, NOW + 5)
            )
        await store.add_events(
            [Event("busy", "breaker_opened", clock.now(), "ib_x") for _ in range(20)]
        )
        assert len(await store.webhooks.take_due(NOW, 64)) == IN_FLIGHT_MAX
        ahead = await store.webhooks.next_due(NOW)
        assert ahead.takeable == NOW + 5
        assert ahead.pending is not None and ahead.pending <= NOW  # the backlog is pending

    backend.run(scenario)


def test_attempts_are_listed_newest_first_and_the_last_failure_is_a_run_event(
    backend: Backend,  # noqa: F811
) -> None:
    """Pending (retried), then failed: one row per attempt, and a webhook_failed run event."""

    async def scenario(store: Any) -> None:
        hook = _hook(events=("message",))
        await store.webhooks.create_webhook(hook)
        await _mail(store, "r1")
        [queued] = await store.webhooks.deliveries(hook.webhook_id, None, 10)
        assert (queued.attempt, queued.state, queued.status_code) == (
            1,
            DeliveryState.PENDING,
            None,
        )
        [due] = await store.webhooks.take_due(NOW, 10)
        retry = Outcome(
            due.delivery_id, 1, NOW + 1, 500, "http_500", DeliveryState.PENDING, NOW + 2
        )
        await store.webhooks.settle(retry)
        await store.webhooks.settle(retry)  # settled already: ignored
        assert await store.webhooks.take_due(NOW + 1.5, 10) == []
        [again] = await store.webhooks.take_due(NOW + 2, 10)
        assert again.attempt == 2 and again.event_id == due.event_id
        await store.webhooks.settle(
            Outcome(due.delivery_id, 2, NOW + 3, None, "timeout", DeliveryState.FAILED)
        )
        rows = await store.webhooks.deliveries(hook.webhook_id, None, 10)
        assert [(r.attempt, r.state, r.status_code) for r in rows] == [
            (2, DeliveryState.FAILED, None),
            (1, DeliveryState.PENDING, 500),
        ]
        assert rows[1].next_attempt_at == NOW + 2
        assert await store.webhooks.deliveries(hook.webhook_id, rows[0].position, 10) == rows[1:]
        assert await store.webhooks.pending_count() == 0
        _, events = await store.run_report("r1")
        failed = [e for e in events if e.type == "webhook_failed"]
        assert len(failed) == 1 and failed[0].detail["event_id"] == due.event_id

    backend.run(scenario)


def test_gone_disables_the_webhook_and_fails_its_other_deliveries(
    backend: Backend,  # noqa: F811
) -> None:
    """A 410 sets disabled_at; nothing more is queued or taken for it."""

    async def scenario(store: Any) -> None:
        hook = _hook(events=("message",))
        await store.webhooks.create_webhook(hook)
        await _mail(store, "r1")
        await _mail(store, "r2")
        first, _ = await store.webhooks.take_due(NOW, 1) + [None]
        assert first is not None
        await store.webhooks.settle(
            Outcome(first.delivery_id, 1, NOW + 1, 410, "gone", DeliveryState.FAILED, disable=True)
        )
        stored = await store.webhooks.webhook(hook.webhook_id)
        assert stored is not None and stored.disabled_at == NOW + 1
        assert await store.webhooks.take_due(NOW + 100, 10) == []
        await _mail(store, "r3")
        assert await store.webhooks.pending_count() == 0

    backend.run(scenario)


def test_after_a_410_no_attempt_row_stays_pending_and_late_attempts_are_listed(
    backend: Backend,  # noqa: F811
) -> None:
    """A 410 turns the newest row of each delivery waiting for a retry into failed (no
    next_attempt_at); attempts in flight then are still listed, never retried, and only
    the 410 itself is a webhook_failed run event."""

    async def scenario(store: Any) -> None:
        hook = _hook(events=("message",))
        await store.webhooks.create_webhook(hook)
        for run_id in ("r1", "r2", "r3", "r4"):
            await _mail(store, run_id)
        waiting, gone, late_500, late_200 = await store.webhooks.take_due(NOW, 10)
        await store.webhooks.settle(
            Outcome(
                waiting.delivery_id, 1, NOW + 1, 500, "http_500", DeliveryState.PENDING, NOW + 5
            )
        )
        await store.webhooks.settle(
            Outcome(gone.delivery_id, 1, NOW + 2, 410, "gone", DeliveryState.FAILED, disable=True)
        )
        await store.webhooks.settle(
            Outcome(
                late_500.delivery_id, 1, NOW + 3, 500, "http_500", DeliveryState.PENDING, NOW + 9
            )
        )
        await store.webhooks.settle(
            Outcome(late_200.delivery_id, 1, NOW + 4, 200, None, DeliveryState.DELIVERED)
        )
        rows = await store.webhooks.deliveries(hook.webhook_id, None, 10)
        assert [(r.delivery_id, r.state, r.status_code, r.next_attempt_at) for r in rows] == [
            (late_200.delivery_id, DeliveryState.DELIVERED, 200, None),
            (late_500.delivery_id, DeliveryState.FAILED, 500, None),
            (gone.delivery_id, DeliveryState.FAILED, 410, None),
            (waiting.delivery_id, DeliveryState.FAILED, 500, None),
        ]
        assert await store.webhooks.pending_count() == 0
        assert await store.webhooks.take_due(NOW + 100, 10) == []
        failed = []
        for run_id in ("r1", "r2", "r3", "r4"):
            _, events = await store.run_report(run_id)
            failed += [e.detail["delivery_id"] for e in events if e.type == "webhook_failed"]
        assert failed == [gone.delivery_id]

    backend.run(scenario)


def test_two_410s_settled_at_once_are_both_listed(backend: Backend) -> None:  # noqa: F811
    """Two attempts of one webhook answered 410 together settle side by side (on PostgreSQL
    they took each other's rows and one died as a deadlock, its attempt lost)."""

    async def scenario(store: Any) -> None:
        hook = _hook(events=("message",))
        await store.webhooks.create_webhook(hook)
        for run_id in ("r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8"):
            await _mail(store, run_id)
        taken = await store.webhooks.take_due(NOW, 10)
        await asyncio.gather(
            *(
                store.webhooks.settle(
                    Outcome(
                        d.delivery_id, 1, NOW + 1, 410, "gone", DeliveryState.FAILED, disable=True
                    )
                )
                for d in taken
            )
        )
        rows = await store.webhooks.deliveries(hook.webhook_id, None, 10)
        assert sorted((r.attempt, r.state, r.status_code) for r in rows) == [
            (1, DeliveryState.FAILED, 410)
        ] * len(taken)

    backend.run(scenario)


def test_a_failed_webhook_failed_delivery_reports_nothing_more(
    backend: Backend,  # noqa: F811
) -> None:
    """Two dead webhooks of one run: each gets the other's webhook_failed event, and failing
    that records no further one (it did, and the two fed each other without end)."""

    async def scenario(store: Any) -> None:
        hooks = [_hook(events=("run_event",), run_id="r1") for _ in range(2)]
        for hook in hooks:
            await store.webhooks.create_webhook(hook)
        await store.add_events([Event(run_id="r1", type="released", at=NOW)])
        for _ in range(3):  # the event, then each webhook's report of the other's failure
            for due in await store.webhooks.take_due(NOW + 10, 10):
                await store.webhooks.settle(
                    Outcome(
                        due.delivery_id, due.attempt, NOW, 500, "http_500", DeliveryState.FAILED
                    )
                )
        _, events = await store.run_report("r1")
        assert sum(e.type == "webhook_failed" for e in events) == 2
        assert await store.webhooks.pending_count() == 0

    backend.run(scenario)


def test_a_ping_is_queued_at_once(backend: Backend) -> None:  # noqa: F811
    """enqueue_ping queues a ping due now; an unknown webhook gets None."""

    async def scenario(store: Any) -> None:
        hook = _hook()
        await store.webhooks.create_webhook(hook)
        delivery_id = await store.webhooks.enqueue_ping(hook.webhook_id, NOW)
        assert await store.webhooks.enqueue_ping("wh_nope", NOW) is None
        [due] = await store.webhooks.take_due(NOW, 10)
        assert due.delivery_id == delivery_id and due.type == "ping"
        assert json.loads(due.body)["data"] == {"webhook_id": hook.webhook_id}

    backend.run(scenario)


def test_two_postgres_replicas_never_lease_one_delivery_twice(pg_dsn: str) -> None:
    """Replicas taking at the same moment get disjoint deliveries, 8 per webhook in all."""

    async def scenario() -> tuple[list[Any], list[Any]]:
        stores = [PostgresStore(pg_dsn), PostgresStore(pg_dsn)]
        for store in stores:
            await store.open()
        try:
            hooks = [_hook(events=("run_event",)), _hook(events=("run_event",))]
            for hook in hooks:
                await stores[0].webhooks.create_webhook(hook)
            await stores[0].add_events(
                [Event("r", "breaker_opened", clock.now(), "ib_x") for _ in range(12)]
            )
            one, two = await asyncio.gather(
                *(store.webhooks.take_due(NOW, 100) for store in stores)
            )
            return one, two
        finally:
            for store in stores:
                await store.close()

    one, two = asyncio.run(scenario())
    assert not {d.delivery_id for d in one} & {d.delivery_id for d in two}
    taken = one + two
    per_hook = {h: sum(d.webhook_id == h for d in taken) for h in {d.webhook_id for d in taken}}
    assert sorted(per_hook.values()) == [IN_FLIGHT_MAX, IN_FLIGHT_MAX]


def test_resume_makes_every_pending_delivery_due_now(backend: Backend) -> None:  # noqa: F811
    """A worker starting makes a retry minutes away due now (its listing says so too); a
    delivery settled stays as it was."""

    async def scenario(store: Any) -> None:
        hook = _hook(events=("run_event",))
        await store.webhooks.create_webhook(hook)
        await store.add_events([Event("r", "breaker_opened", clock.now(), "ib_x")] * 2)
        retried, delivered = await store.webhooks.take_due(NOW, 10)
        later = NOW + 120
        await store.webhooks.settle(
            Outcome(retried.delivery_id, 1, NOW, None, "connect", DeliveryState.PENDING, later)
        )
        await store.webhooks.settle(
            Outcome(delivered.delivery_id, 1, NOW, 200, None, DeliveryState.DELIVERED)
        )
        assert await store.webhooks.take_due(NOW + 1, 10) == []
        await store.webhooks.resume(NOW + 1)
        [again] = await store.webhooks.take_due(NOW + 1, 10)
        assert (again.delivery_id, again.attempt) == (retried.delivery_id, 2)
        rows = await store.webhooks.deliveries(hook.webhook_id, None, 10)
        listed = {r.delivery_id: r.next_attempt_at for r in rows}
        assert listed == {retried.delivery_id: NOW + 1, delivered.delivery_id: None}

    backend.run(scenario)


def test_a_postgres_replica_gone_leaves_its_leases_to_the_others_at_once(pg_dsn: str) -> None:
    """Leases name their worker's presence lock: while it is held they stand, once its
    connection is gone any replica's reclaim frees them (before the lease's end)."""

    async def scenario() -> None:
        gone, stays = PostgresStore(pg_dsn), PostgresStore(pg_dsn)
        for store in (gone, stays):
            await store.open()
        try:
            await gone.webhooks.create_webhook(_hook(events=("run_event",)))
            await gone.add_events([Event("r", "breaker_opened", clock.now(), "ib_x")] * 3)
            await gone.webhooks.resume(NOW)
            await stays.webhooks.resume(NOW)
            taken = await gone.webhooks.take_due(NOW, 10)
            assert len(taken) == 3 and gone.webhooks.holder is not None
            assert await stays.webhooks.reclaim(NOW + 1) == 0  # its holder is alive
            assert await stays.webhooks.take_due(NOW + 1, 10) == []
            await gone.webhooks.close()  # as its connection closes when the process dies
            deadline = time.monotonic() + 5  # (its server process ends a moment after)
            while (freed := await stays.webhooks.reclaim(NOW + 1)) == 0:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            assert freed == 3
            again = await stays.webhooks.take_due(NOW + 1, 10)
            assert {d.delivery_id for d in again} == {d.delivery_id for d in taken}
        finally:
            for store in (gone, stays):
                await store.close()

    asyncio.run(scenario())


GLOBS = ["team-a-*", "t?am-*", "[tx]eam-a-1", "[!t]eam-*", "team.a:*", "run[", "*-1", "*"]
RUNS = ["team-a-1", "team-b-2", "xeam-a-1", "team.a:9", "run[", "tEam-a-1", "Team-a-1"]


def test_run_globs_match_as_fnmatchcase_does(backend: Backend) -> None:  # noqa: F811
    """A run_glob selects exactly the runs Python's fnmatchcase matches (also in SQL)."""

    async def scenario(store: Any) -> dict[str, set[str]]:
        hooks = {glob: _hook(events=("run_event",), run_glob=glob) for glob in GLOBS}
        for hook in hooks.values():
            await store.webhooks.create_webhook(hook)
        await store.add_events([Event(run, "breaker_opened", clock.now(), "ib_x") for run in RUNS])
        return {
            glob: {a.run_id for a in await store.webhooks.deliveries(hook.webhook_id, None, 100)}
            for glob, hook in hooks.items()
        }

    got = backend.run(scenario)
    assert got == {glob: {r for r in RUNS if fnmatchcase(r, glob)} for glob in GLOBS}


def test_settled_deliveries_are_forgotten_after_their_history_pending_ones_never(
    backend: Backend,  # noqa: F811
) -> None:
    """prune drops delivered and failed deliveries (and their attempts) older than its bound."""

    async def scenario(store: Any) -> None:
        hook = _hook(events=("run_event",))
        await store.webhooks.create_webhook(hook)
        await store.add_events([Event("r", "breaker_opened", clock.now(), "ib_x")] * 3)
        done, failed, _ = await store.webhooks.take_due(NOW, 10)
        for due, state in ((done, DeliveryState.DELIVERED), (failed, DeliveryState.FAILED)):
            await store.webhooks.settle(Outcome(due.delivery_id, 1, NOW, 200, None, state))
        assert await store.webhooks.prune(clock.now() - 3600) == 0  # not old enough
        assert await store.webhooks.prune(NOW) == 2
        rows = await store.webhooks.deliveries(hook.webhook_id, None, 10)
        assert [r.state for r in rows] == [DeliveryState.PENDING]
        assert await store.webhooks.pending_count() == 1

    backend.run(scenario)


def test_sqlite_hands_new_deliveries_to_its_worker_in_their_commit_within_its_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a worker's hand set, SQLite leases new deliveries in the commit that writes them
    and hands them over after it, HELD_MAX per webhook (8 here); a settle hands over the next
    due one."""
    monkeypatch.setattr("sink.storage.sqlite.webhooks.HELD_MAX", IN_FLIGHT_MAX)

    async def scenario() -> None:
        store = SQLiteStore(tmp_path / "s.db")
        await store.open()
        handed: list[Any] = []
        store.webhooks.hand = handed.extend
        try:
            hook = _hook(events=("run_event",))
            await store.webhooks.create_webhook(hook)
            await store.add_events(
                [Event("r", "breaker_opened", clock.now(), "ib_x") for _ in range(12)]
            )
            assert len(handed) == IN_FLIGHT_MAX and all(d.attempt == 1 for d in handed)
            assert await store.webhooks.take_due(clock.now() + 1, 100) == []  # the cap holds
            first = handed[0]
            await store.webhooks.settle(
                Outcome(first.delivery_id, 1, clock.now(), 200, None, DeliveryState.DELIVERED)
            )
            [next_one] = handed[IN_FLIGHT_MAX:]
            assert next_one.delivery_id not in {d.delivery_id for d in handed[:IN_FLIGHT_MAX]}
            assert await store.webhooks.take_due(clock.now() + 1, 100) == []  # leased already
        finally:
            await store.close()

    asyncio.run(scenario())


KINDS_CASES = [
    ("created", {}),
    ("claimed", {}),
    ("expired", {"reason": "lease"}),
    ("released", {}),
    ("message_accepted", {"size": 1}),
    ("late_arrival", {}),
    ("near_miss", {}),
    ("breaker_opened", {}),
    ("token_minted", {}),
    ("webhook_failed", {"webhook_id": "wh_x"}),
    *(
        ("polled", {"outcome": outcome})
        for outcome in (
            "received",
            "evidence_not_found",
            "evidence_mismatch",
            "evidence_misaddressed",
            "timeout",
        )
    ),
]


def test_sqlite_hands_a_stream_over_whole_and_holds_it_until_settled(tmp_path: Path) -> None:
    """Twelve deliveries of one webhook in one commit: all twelve are handed over (the worker
    keeps the cap of 8 in flight), and no take leases them again, even after LEASE_S: they
    are the worker's until it settles them; a retry waits behind them (they fill the cap)."""

    async def scenario() -> None:
        store = SQLiteStore(tmp_path / "s.db")
        await store.open()
        handed: list[Any] = []
        store.webhooks.hand = handed.extend
        try:
            hook = _hook(events=("run_event",))
            await store.webhooks.create_webhook(hook)
            await store.add_events(
                [Event("r", "breaker_opened", clock.now(), "ib_x") for _ in range(12)]
            )
            assert len(handed) == 12 and len({d.delivery_id for d in handed}) == 12
            later = clock.now() + LEASE_S + 1
            assert await store.webhooks.take_due(later, 100) == []
            await store.webhooks.settle(
                Outcome(
                    handed[0].delivery_id, 1, later, 500, "http_500", DeliveryState.PENDING, later
                )
            )
            assert await store.webhooks.take_due(later, 100) == []  # 11 held: the cap
            for due in handed[1:]:
                await store.webhooks.settle(
                    Outcome(due.delivery_id, 1, later, 200, None, DeliveryState.DELIVERED)
                )
            [retried] = handed[12:]  # handed over by the settle that made room
            assert retried.delivery_id == handed[0].delivery_id and retried.attempt == 2
        finally:
            await store.close()

    asyncio.run(scenario())


def test_postgres_makes_the_live_kinds_python_makes(pg_dsn: str) -> None:
    """The trigger's runsink_live_kinds (SQL) gives every events row the live events that
    sink/event_shapes.py makes of it (message: for message_accepted rows)."""

    async def scenario() -> list[tuple[str, set[str], set[str]]]:
        store = PostgresStore(pg_dsn)
        await store.open()  # migrated
        await store.close()
        connection = await asyncpg.connect(pg_dsn)
        try:
            out = []
            ids = EventIds()
            for kind, detail in KINDS_CASES:
                sql = await connection.fetchval(
                    "SELECT runsink_live_kinds($1, $2)", kind, json.dumps(detail)
                )
                event = Event("r", kind, clock.now(), "ib_x", None, detail, 1)
                python = {live.type for live in event_shapes.of_event(event, ids, 1)}
                if kind == "message_accepted":
                    python.add("message")
                out.append((kind, set(sql), python))
            return out
        finally:
            await connection.close()

    for kind, sql, python in asyncio.run(scenario()):
        assert sql == python, kind


def _scans(plan: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(node type, index) of every node of a JSON plan that reads webhook_deliveries."""
    found = []
    if plan.get("Relation Name") == "webhook_deliveries":
        index = plan.get("Index Name")
        if plan["Node Type"] == "Bitmap Heap Scan":  # its index is its children's
            index = ",".join(sorted({c.get("Index Name", "") for c in plan["Plans"]}))
        found.append((plan["Node Type"], index))
    for child in plan.get("Plans", []):
        found.extend(_scans(child))
    return found


PENDING_INDEXES = ("webhook_deliveries_due", "webhook_deliveries_leased")  # WHERE state = 'pending'


def test_postgres_worker_reads_the_pending_index_not_the_settled_history(pg_dsn: str) -> None:
    """Beside 20,000 settled deliveries (a week's history), take_due's two queries and
    next_due's read webhook_deliveries only through its partial indexes of pending rows."""

    async def scenario() -> dict[str, list[tuple[str, str | None]]]:
        store = PostgresStore(pg_dsn)
        await store.open()
        try:
            hooks = [_hook() for _ in range(3)]
            for i, hook in enumerate(hooks):
                await store.webhooks.create_webhook(hook)
                await store.fetch(
                    "test",
                    "INSERT INTO webhook_deliveries (delivery_id, webhook_id, kind, created_at,"
                    " state, attempts, next_attempt_at) SELECT 'dlv_old_' || $2 || '_' || g, $1,"
                    " 'ping', $3, 'delivered', 1, $3 FROM generate_series(1, $4) g",
                    hook.webhook_id,
                    str(i),
                    NOW - 3600,
                    16000 if i == 0 else 2000,
                )
                await store.webhooks.enqueue_ping(hook.webhook_id, NOW)
            await store.fetch("test", "ANALYZE webhook_deliveries")
            ids = [h.webhook_id for h in hooks]
            plans = {}
            for name, args in (
                ("_DUE_HOOKS", (NOW, 64)),
                ("_DUE", (NOW, ids, 64)),
                ("_NEXT_DUE", (NOW,)),
            ):
                sql = getattr(pg_webhooks, name)
                [row] = await store.fetch("test", "EXPLAIN (FORMAT JSON) " + sql, *args)
                plans[name] = _scans(json.loads(row[0])[0]["Plan"])
            return plans
        finally:
            await store.close()

    for name, scans in asyncio.run(scenario()).items():
        assert scans and all(index in PENDING_INDEXES for _, index in scans), (name, scans)


async def _opened(dsn: str, handed: list[Any] | None) -> PostgresStore:
    """A PostgreSQL replica; with ``handed``, its worker's hand (what it is handed, kept)."""
    store = PostgresStore(dsn)
    await store.open()
    if handed is not None:
        store.webhooks.hand = handed.extend
    return store


async def _turn() -> None:
    """One turn of the loop: what a commit handed over reaches the worker's hand once the
    callers that commit answers have run (PostgresStore.transaction)."""
    await asyncio.sleep(0)


async def _notified(dsn: str) -> tuple[asyncpg.Connection, list[str]]:
    """A connection listening on the channel, and the payloads it has heard (in commit order)."""
    heard: list[str] = []
    connection = await asyncpg.connect(dsn)
    await connection.add_listener("runsink", lambda *args: heard.append(str(args[3])))
    return connection, heard


async def _hears(connection: asyncpg.Connection, heard: list[str]) -> list[str]:
    """What was heard up to now: a marker NOTIFYed after every commit before it arrives last."""
    marker = f"test {ids.new_inbox_id()}"
    await connection.execute("SELECT pg_notify('runsink', $1)", marker)
    for _ in range(500):
        if marker in heard:
            return [h for h in heard[: heard.index(marker)] if h == "db h"]
        await asyncio.sleep(0.01)
    raise AssertionError("the marker was not heard within 5 s")


def test_postgres_hands_new_deliveries_to_its_worker_in_their_commit_within_the_cap(
    pg_dsn: str,
) -> None:
    """A replica whose worker runs leases the deliveries its commit writes (8 per webhook) to
    that worker in that commit: no take_due and no NOTIFY for them, nor for those the cap
    keeps back (a settle refills); one whose lease ends unsettled is made again with the same
    id and bytes."""

    async def scenario() -> None:
        handed: list[Any] = []
        store = await _opened(pg_dsn, handed)
        other = await _opened(pg_dsn, None)
        listening, heard = await _notified(pg_dsn)
        try:
            hook = _hook(events=("message", "run_event"), run_id="r1")
            await store.webhooks.create_webhook(hook)
            item = await _mail(store, "r1")
            await _turn()
            assert sorted(d.type for d in handed) == ["message", "run_event", "run_event"]
            assert await _hears(listening, heard) == []  # nobody woken: all handed over
            assert await other.webhooks.take_due(clock.now(), 100) == []  # leased in the commit
            message = next(d for d in handed if d.type == "message")
            [delivered] = item.deliveries
            assert json.loads(message.body)["data"]["message_id"] == delivered.message_id
            assert message.event_id == EventIds(await store.signing_key()).of_message(
                delivered.message_id
            )
            assert message.url == hook.url and message.secret == hook.secret
            # Their leases end unsettled (the replica died): another replica makes the same
            # ids and bodies from the rows.
            await listening.execute("UPDATE webhook_deliveries SET lease_until = 0")
            again = await other.webhooks.take_due(clock.now(), 100)
            assert sorted((d.delivery_id, d.event_id, d.body) for d in again) == sorted(
                (d.delivery_id, d.event_id, d.body) for d in handed
            )
            # Beyond the cap: 8 handed over in all (5 more); the rest wake nobody (a settle
            # frees a slot and refills it) and are taken once the leases run out.
            handed.clear()
            await store.add_events(
                [Event("r1", "breaker_opened", clock.now(), "ib_x") for _ in range(12)]
            )
            await _turn()
            assert len(handed) == IN_FLIGHT_MAX - 3 and all(d.attempt == 1 for d in handed)
            assert await _hears(listening, heard) == []
            assert await other.webhooks.take_due(clock.now(), 100) == []  # the cap holds
            later = await other.webhooks.take_due(clock.now() + LEASE_S + 1, 100)
            assert len(later) == IN_FLIGHT_MAX
        finally:
            await listening.close()
            for opened in (store, other):
                await opened.close()

    asyncio.run(scenario())


async def _waits_for_a_lock(connection: asyncpg.Connection) -> None:
    """Until another session of the database waits for a lock (polled, 5 s at most)."""
    for _ in range(500):
        if await connection.fetchval(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        ):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("nobody waited for a lock within 5 s")


def test_postgres_hand_off_holds_the_cap_fleet_wide_across_replicas(pg_dsn: str) -> None:
    """Two replicas handing over at once lease at most 8 of one webhook together; a webhook
    locked by another transaction (a take, a refill or a hand-off in progress) is waited for,
    then handed over: no worker is woken."""

    async def scenario() -> None:
        handed: list[list[Any]] = [[], []]
        stores = [await _opened(pg_dsn, handed[0]), await _opened(pg_dsn, handed[1])]
        listening, heard = await _notified(pg_dsn)
        try:
            hook = _hook(events=("run_event",), run_id="r")
            await stores[0].webhooks.create_webhook(hook)
            for _ in range(5):
                await asyncio.gather(
                    *(
                        store.add_events(
                            [Event("r", "breaker_opened", clock.now(), "ib_x") for _ in range(6)]
                        )
                        for store in stores
                    )
                )
                await _turn()
            every = handed[0] + handed[1]
            assert len(every) == IN_FLIGHT_MAX
            assert len({d.delivery_id for d in every}) == IN_FLIGHT_MAX
            assert await stores[0].webhooks.take_due(clock.now(), 100) == []
            # Locked elsewhere (a take, a refill): the hand-off waits for the lock, then hands
            # its delivery over, waking nobody.
            quiet = _hook(events=("run_event",), run_id="quiet")
            await stores[0].webhooks.create_webhook(quiet)
            _ = await _hears(listening, heard)
            heard.clear()
            handed[1].clear()
            async with listening.transaction():
                await listening.execute(
                    "SELECT 1 FROM webhooks WHERE webhook_id = $1 FOR UPDATE", quiet.webhook_id
                )
                adding = asyncio.create_task(
                    stores[1].add_events([Event("quiet", "breaker_opened", clock.now(), "ib")])
                )
                await _waits_for_a_lock(listening)
                assert not adding.done()
            await adding
            await _turn()
            [due] = handed[1]
            assert due.webhook_id == quiet.webhook_id
            assert await _hears(listening, heard) == []
            assert await stores[0].webhooks.take_due(clock.now(), 100) == []
        finally:
            await listening.close()
            for store in stores:
                await store.close()

    asyncio.run(scenario())


def test_postgres_a_webhook_made_on_another_replica_gets_its_deliveries_at_once(
    pg_dsn: str,
) -> None:
    """A replica that found no webhook inserts events as without webhooks; a webhook another
    replica makes meanwhile still gets their deliveries, in their commit, and every worker is
    woken for them."""

    async def scenario() -> None:
        handed: list[Any] = []
        store = await _opened(pg_dsn, handed)
        other = await _opened(pg_dsn, None)
        listening, heard = await _notified(pg_dsn)
        try:
            await store.add_events([Event("r", "breaker_opened", clock.now(), "ib_x")])
            assert not store.webhooks.handing_over  # none found: the plain statements
            hook = _hook(events=("run_event",))
            await other.webhooks.create_webhook(hook)
            await store.add_events([Event("r", "breaker_opened", clock.now(), "ib_x")])
            await _turn()
            assert handed == [] and await _hears(listening, heard) == ["db h"]
            [due] = await other.webhooks.take_due(clock.now(), 100)
            assert due.webhook_id == hook.webhook_id
            store.webhooks.notified()  # what its listener does on that 'db h'
            assert store.webhooks.handing_over
        finally:
            await listening.close()
            for opened in (store, other):
                await opened.close()

    asyncio.run(scenario())


def test_postgres_hands_over_an_expiry_and_a_release(pg_dsn: str) -> None:
    """An inbox's expiry and its run's release (run events written by the sweeper's and the
    API's transactions) are handed over as the mail's are: inbox and run_event deliveries."""

    async def scenario() -> None:
        handed: list[Any] = []
        store = await _opened(pg_dsn, handed)
        try:
            await store.webhooks.create_webhook(_hook(events=("inbox", "run_event"), run_id="rx"))
            new = new_inbox("rx", key=ids.new_inbox_id())
            await store.create_inbox(new, created_event(new))
            await _turn()
            handed.clear()
            await store.expire(new.inbox.expire(Reason.LEASE, clock.now()), 60)
            await _turn()
            bodies = [json.loads(d.body) for d in handed]
            assert sorted(b["type"] for b in bodies) == ["inbox", "run_event"]
            assert {b["data"].get("state") for b in bodies if b["type"] == "inbox"} == {"expired"}
            handed.clear()
            await store.release_run("rx", clock.now())
            await _turn()
            assert [json.loads(d.body)["data"]["type"] for d in handed] == ["released"]
        finally:
            await store.close()

    asyncio.run(scenario())
