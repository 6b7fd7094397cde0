"""Webhooks survive crashes (real server processes, SIGKILL): a delivery is written with its
event, so mail that arrives while the receiver is down is delivered after a restart, within
5 s of it even when its retry was minutes away; on two PostgreSQL replicas one killed
mid-delivery leaves its deliveries to the other within 5 s (not at the end of its leases).
Every event is delivered at least once, and a duplicate always has the same webhook-id and
body."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from sink.storage.postgres.store import PostgresStore
from sink.storage.sqlite.store import SQLiteStore
from tests.pg_cluster import Cluster
from tests.support import Server, create_inbox, new_run_id, start_server
from tests.webhook_receiver import Received, Receiver

MAILS = 5
EXPECTED = 2 + 2 * MAILS  # created + its inbox event, and per mail message_accepted + message
RESTART_S = 5.0  # the contract: after a restart, pending deliveries go out within this


def _store(db: Path | str) -> Any:
    return PostgresStore(db) if isinstance(db, str) else SQLiteStore(db)


def _create_webhook(server: Server, receiver: Receiver, run_id: str) -> str:
    """POST /v1/webhooks for the run's events to the receiver, which learns the secret."""
    with server.http() as client:
        answer = client.post("/v1/webhooks", json={"url": receiver.url, "run_id": run_id})
    assert answer.status_code == 201, answer.text
    receiver.secret = answer.json()["secret"]
    webhook_id: str = answer.json()["webhook_id"]
    return webhook_id


def _outbox(db: Path | str, webhook_id: str) -> list[Any]:
    async def read() -> list[Any]:
        store = _store(db)
        await store.open()
        try:
            rows: list[Any] = await store.webhooks.deliveries(webhook_id, None, 1000)
            return rows
        finally:
            await store.close()

    return asyncio.run(read())


def _attempted(server: Server, count: int = 1) -> None:
    deadline = time.monotonic() + 20
    while sum(line.get("event") == "webhook_attempt" for line in server.log_lines()) < count:
        assert time.monotonic() < deadline, "no delivery attempt was made"
        time.sleep(0.05)


def _check_at_least_once(got: list[Received], event_ids: set[str]) -> None:
    """Every event arrived; a duplicate has the same id and the same body; all verified."""
    assert all(g.verified for g in got)
    by_id: dict[str, set[bytes]] = defaultdict(set)
    for g in got:
        by_id[g.webhook_id].add(g.raw)
        assert g.body["id"] == g.webhook_id
    assert set(by_id) == event_ids
    assert all(len(bodies) == 1 for bodies in by_id.values())


def test_mail_that_came_while_the_receiver_was_down_is_delivered_after_a_sigkill(
    tmp_path: Path, own_db: str | None
) -> None:
    """Receiver down, mail arrives (250s given), the server is SIGKILLed and restarted, the
    receiver comes up: every event (inbox, run events, messages) is delivered."""
    db: Path | str = own_db or tmp_path / "runsink.db"
    receiver = Receiver("")  # not started: connections are refused
    run_id = new_run_id()
    args = ("--webhook-retry-s", "0.5,1,2,30,30,30,30")
    server = start_server(tmp_path / "one", *args, db=db)
    try:
        hook = _create_webhook(server, receiver, run_id)
        with server.http() as client:
            inbox = create_inbox(client, run_id)
        for n in range(MAILS):
            server.send(inbox["address"], subject=f"Mail {n}")
        _attempted(server)
    finally:
        server.stop(signal.SIGKILL)
    receiver.start()
    restarted = start_server(tmp_path / "two", *args, db=db)
    try:
        # created + its inbox event, and per mail message_accepted + its message event.
        expected = 2 + 2 * MAILS
        got = receiver.until(lambda got: len({g.webhook_id for g in got}) >= expected)
    finally:
        restarted.stop()
        receiver.stop()
    rows = _outbox(db, hook)  # after the stop: with SQLite, one process owns the file
    _check_at_least_once(receiver.snapshot(), {r.event_id for r in rows})
    subjects = {g.body["data"]["subject"] for g in got if g.body["type"] == "message"}
    assert subjects == {f"Mail {n}" for n in range(MAILS)}


def test_retries_a_restart_finds_on_a_long_schedule_go_out_within_5_s(
    tmp_path: Path, own_db: str | None
) -> None:
    """Receiver down, every event's first attempt failed with its retry 120 s away; the
    server is SIGKILLed and restarted with the receiver up: every event arrives within 5 s of
    the restart."""
    db: Path | str = own_db or tmp_path / "runsink.db"
    receiver = Receiver("")  # not started: connections are refused
    run_id = new_run_id()
    args = ("--webhook-retry-s", ",".join(["120"] * 7))
    server = start_server(tmp_path / "one", *args, db=db)
    try:
        hook = _create_webhook(server, receiver, run_id)
        with server.http() as client:
            inbox = create_inbox(client, run_id)
        for n in range(MAILS):
            server.send(inbox["address"], subject=f"Mail {n}")
        _attempted(server, EXPECTED)  # every event's first attempt made (and failed)
    finally:
        server.stop(signal.SIGKILL)
    receiver.start()
    restarted_at = time.monotonic()
    restarted = start_server(tmp_path / "two", *args, db=db)
    try:
        got = receiver.until(lambda got: len({g.webhook_id for g in got}) >= EXPECTED)
    finally:
        restarted.stop()
        receiver.stop()
    first = {g.webhook_id: g.at for g in sorted(got, key=lambda g: -g.at)}
    assert max(first.values()) - restarted_at <= RESTART_S
    _check_at_least_once(receiver.snapshot(), {r.event_id for r in _outbox(db, hook)})


def test_two_replicas_one_killed_mid_delivery_deliver_every_event(
    tmp_path: Path, pg_cluster: Cluster, policy_file: str
) -> None:
    """A takes the deliveries (8 in flight, the per-webhook cap) and is SIGKILLed while the
    slow receiver holds them; B, started on the same database, makes those attempts again
    within 5 s of its start (not at the end of A's leases), and the rest: every event
    delivered, duplicates under the same id."""
    dsn = pg_cluster.dsn(pg_cluster.new_database("runsink_template"))
    receiver = Receiver("", answer=lambda n: (200, 4.0) if n == 1 else 200).start()
    run_id = new_run_id()
    a = start_server(tmp_path / "a", "--policy-file", policy_file, db=dsn)
    b: Server | None = None
    try:
        hook = _create_webhook(a, receiver, run_id)
        with a.http() as client:
            inbox = create_inbox(client, run_id)
        for n in range(MAILS):
            a.send(inbox["address"], subject=f"Mail {n}")
        held = receiver.until(lambda got: len(got) >= 8)  # A's 8 attempts, held by the receiver
        assert receiver.in_flight > 0  # A is mid-delivery
        a.stop(signal.SIGKILL)
        b_started = time.monotonic()
        b = start_server(tmp_path / "b", "--policy-file", policy_file, db=dsn)
        _again_within(receiver, {g.webhook_id for g in held}, b_started + RESTART_S)
        receiver.until(lambda got: len({g.webhook_id for g in got}) >= EXPECTED, deadline_s=60)
        rows = _until_settled(dsn, hook, EXPECTED)
    finally:
        a.stop(signal.SIGKILL)
        if b is not None:
            b.stop()
        receiver.stop()
    _check_at_least_once(receiver.snapshot(), {r.event_id for r in rows})


def test_a_replica_killed_mid_attempt_leaves_its_deliveries_to_a_running_one_within_5_s(
    tmp_path: Path, pg_cluster: Cluster, policy_file: str
) -> None:
    """A holds 8 attempts at a receiver that never answers them and B runs beside it when A
    is SIGKILLed: B attempts those deliveries again within 5 s of the kill (A's presence
    lock went with its connection), not when A's 10 s leases end."""
    dsn = pg_cluster.dsn(pg_cluster.new_database("runsink_template"))
    killed = threading.Event()  # then no first attempt is held (B's would take a cap slot)
    receiver = Receiver("", answer=lambda n: (200, 30.0) if n == 1 and not killed.is_set() else 200)
    receiver.start()
    run_id = new_run_id()
    a = start_server(tmp_path / "a", "--policy-file", policy_file, db=dsn)
    b: Server | None = None
    try:
        _create_webhook(a, receiver, run_id)
        with a.http() as client:
            inbox = create_inbox(client, run_id)
        for n in range(MAILS):
            a.send(inbox["address"], subject=f"Mail {n}")
        held = receiver.until(lambda got: len(got) >= 8)  # A's 8 attempts: the webhook's cap
        b = start_server(tmp_path / "b", "--policy-file", policy_file, db=dsn)
        assert receiver.in_flight >= 8  # A is mid-attempt (its 5 s timeout not reached)
        killed.set()
        a.stop(signal.SIGKILL)
        killed_at = time.monotonic()
        _again_within(receiver, {g.webhook_id for g in held}, killed_at + RESTART_S)
    finally:
        a.stop(signal.SIGKILL)
        if b is not None:
            b.stop()
        receiver.stop()


def _again_within(receiver: Receiver, ids: set[str], deadline: float) -> None:
    """Each of these ids arrives a second time, the last of them by ``deadline``."""
    got = receiver.until(lambda got: all(sum(g.webhook_id == i for g in got) >= 2 for i in ids))
    again = {i: sorted(g.at for g in got if g.webhook_id == i)[1] for i in ids}
    assert max(again.values()) <= deadline, max(again.values()) - deadline


def _until_settled(dsn: str, hook: str, expected: int) -> list[Any]:
    deadline = time.monotonic() + 60
    while True:
        rows = _outbox(dsn, hook)
        delivered = [r for r in rows if r.state.value == "delivered"]
        if len({r.event_id for r in delivered}) >= expected:
            return delivered
        assert time.monotonic() < deadline, rows
        time.sleep(0.2)
