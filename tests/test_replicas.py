"""Several runsink processes on one PostgreSQL: the contract holds across them.

Real processes, a real database; every wait is bounded by a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import smtplib
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.pg_cluster import Cluster
from tests.support import Server, create_inbox, new_run_id, psql, start_replicas, wait

SENDER = "app@example.test"


def _message(to: str, subject: str) -> bytes:
    return (
        f"From: {SENDER}\r\nTo: {to}\r\nSubject: {subject}\r\n"
        f"Message-ID: <{uuid.uuid4().hex}@example.test>\r\n\r\nbody\r\n"
    ).encode()


def test_mail_accepted_by_one_replica_wakes_a_wait_held_by_another(
    pair: tuple[Server, Server],
) -> None:
    """A long-poll on B answers as soon as A has said 250 for the mail."""
    a, b = pair
    with a.http() as on_a, b.http() as on_b:
        inbox = create_inbox(on_a)
        answer: dict[str, object] = {}
        registered = threading.Event()

        def long_poll() -> None:
            registered.set()
            response = wait(on_b, inbox["inbox_id"], timeout_s=10)
            answer.update(response.json(), answered_at=time.monotonic())

        waiter = threading.Thread(target=long_poll)
        waiter.start()
        registered.wait(5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # B has registered the wait (its metric says so)
            if "runsink_active_long_polls 1.0" in on_b.get("/metrics").text:
                break
            time.sleep(0.01)
        a.send(inbox["address"], subject="Cross replica")
        acknowledged = time.monotonic()
        waiter.join(15)
    assert answer["state"] == "received"
    assert float(answer["answered_at"]) - acknowledged < 2.0  # type: ignore[arg-type]


def test_fifty_claims_over_two_replicas_make_one_claim(pair: tuple[Server, Server]) -> None:
    """50 concurrent claims by the owning run, split over both replicas: one wins, 49 replay."""
    a, b = pair
    run_id = new_run_id()
    with a.http() as on_a, b.http() as on_b:
        inbox = create_inbox(on_a, run_id)
        a.send(inbox["address"], subject="Claim me")
        found = wait(on_b, inbox["inbox_id"], timeout_s=5).json()
        message_id = found["message"]["message_id"]

        def claim(n: int) -> dict[str, object]:
            client = on_a if n % 2 else on_b
            response = client.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id})
            assert response.status_code == 200, response.text
            body: dict[str, object] = response.json()
            return body

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(claim, range(50)))
    reasons = [answer["reason"] for answer in answers]
    assert reasons.count(None) == 1 and reasons.count("already_claimed") == 49
    assert len({answer["claim"]["claim_id"] for answer in answers}) == 1  # type: ignore[index]


def test_one_idempotency_key_on_both_replicas_at_once_makes_one_inbox(
    pair: tuple[Server, Server],
) -> None:
    """20 creates with one key, half on each replica, at once: one 201, nineteen replays."""
    a, b = pair
    body = {"run_id": new_run_id(), "purpose": "signup-check"}
    key = uuid.uuid4().hex
    start = threading.Barrier(20)

    def create(n: int) -> tuple[int, str]:
        server = a if n % 2 else b
        with httpx.Client(base_url=server.url, timeout=30) as client:
            start.wait(10)
            response = client.post("/v1/inboxes", json=body, headers={"Idempotency-Key": key})
        return response.status_code, response.json()["inbox_id"]

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(create, range(20)))
    assert sorted(status for status, _ in results) == [200] * 19 + [201]
    assert len({inbox_id for _, inbox_id in results}) == 1


def test_a_poll_spent_on_one_replica_is_spent_on_the_other(pair: tuple[Server, Server]) -> None:
    """attempt and next_poll_at are the same whichever replica is asked; B sees A's too_early."""
    a, b = pair
    with a.http() as on_a, b.http() as on_b:
        inbox = create_inbox(on_a, policy="paced")
        first = wait(on_a, inbox["inbox_id"], timeout_s=0).json()
        on_a_view = on_a.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
        on_b_view = on_b.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
        second = wait(on_b, inbox["inbox_id"], timeout_s=0).json()
    assert first["attempt"] == 1
    assert on_a_view["attempt"] == on_b_view["attempt"] == 1
    assert on_a_view["next_poll_at"] == on_b_view["next_poll_at"]
    assert (second["status"], second["reason"], second["attempt"]) == ("blocked", "too_early", 1)


def test_two_waits_at_once_on_two_replicas_one_is_too_early(pair: tuple[Server, Server]) -> None:
    """A long-poll held on A: a wait on B meanwhile is blocked/too_early and spends nothing."""
    a, b = pair
    with a.http() as on_a, b.http() as on_b:
        inbox = create_inbox(on_a)
        answer: dict[str, object] = {}

        def long_poll() -> None:
            answer.update(wait(on_a, inbox["inbox_id"], timeout_s=3).json())

        waiter = threading.Thread(target=long_poll)
        waiter.start()
        _until_long_polls(on_a, 1)
        second = wait(on_b, inbox["inbox_id"], timeout_s=0).json()
        waiter.join(15)
        after = on_b.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
    assert (second["status"], second["reason"]) == ("blocked", "too_early")
    # The time left in A's wait, as on one replica (not also the slot's margin for a
    # replica that dies holding it).
    assert 0 < second["retry_after"] <= 3 + 0.1
    assert answer["attempt"] == 1 and after["attempt"] == 1


def test_a_breaker_opened_through_one_replica_is_open_on_the_other(
    pair: tuple[Server, Server],
) -> None:
    """Provider errors on A open the run's wait breaker; B answers circuit_open, and after
    the cooldown the one probe closes it for both."""
    a, b = pair
    run_id = new_run_id()
    with a.http() as on_a, b.http() as on_b:
        inbox = create_inbox(on_a, run_id, policy="sturdy")
        fault = {"target": "wait", "mode": "error", "count": 2, "run_id": run_id}
        assert on_a.post("/v1/faults", json=fault).status_code == 201
        failures = [wait(on_a, inbox["inbox_id"], timeout_s=0).json() for _ in range(2)]
        refused = wait(on_b, inbox["inbox_id"], timeout_s=0).json()
        on_a_too = wait(on_a, inbox["inbox_id"], timeout_s=0).json()
        deadline = time.monotonic() + 10
        while True:  # after the cooldown: B's call is the probe, and it closes the breaker
            probe = wait(on_b, inbox["inbox_id"], timeout_s=0).json()
            if probe["reason"] != "circuit_open" or time.monotonic() > deadline:
                break
            time.sleep(min(0.2, probe["retry_after"]))
        closed = wait(on_a, inbox["inbox_id"], timeout_s=0).json()
        report = on_a.get(f"/v1/runs/{run_id}").json()
    assert [f["reason"] for f in failures] == ["provider_error", "provider_error"]
    assert (refused["status"], refused["reason"]) == ("blocked", "circuit_open")
    assert on_a_too["reason"] == "circuit_open"
    assert probe["status"] == "retryable" and probe["reason"] == "evidence_not_found"
    assert closed["reason"] == "evidence_not_found"
    types = [e["type"] for e in report["events"]]
    assert types.count("breaker_opened") == 1 and types.count("breaker_closed") == 1


def test_a_release_on_one_replica_ends_a_wait_on_the_other(pair: tuple[Server, Server]) -> None:
    """DELETE /v1/runs on A answers B's long-poll at once, expired/lease."""
    a, b = pair
    run_id = new_run_id()
    with a.http() as on_a, b.http() as on_b:
        inbox = create_inbox(on_a, run_id)
        answer: dict[str, object] = {}

        def long_poll() -> None:
            answer.update(wait(on_b, inbox["inbox_id"], timeout_s=10).json())

        waiter = threading.Thread(target=long_poll)
        waiter.start()
        _until_long_polls(on_b, 1)
        started = time.monotonic()
        assert on_a.delete(f"/v1/runs/{run_id}").status_code == 204
        waiter.join(15)
    assert time.monotonic() - started < 5
    assert (answer["state"], answer["reason"]) == ("expired", "lease")


def test_a_typo_caught_by_one_replica_is_a_near_miss_of_an_inbox_made_on_another(
    pair: tuple[Server, Server],
) -> None:
    """B's new inbox reaches A's near-miss index (the create's NOTIFY): A records the
    mistyped mail it catches as the inbox's near miss, and B's run report shows it."""
    a, b = pair
    run_id = new_run_id()
    with a.http() as on_a, b.http() as on_b:
        inbox = create_inbox(on_b, run_id)
        local, _, domain = inbox["address"].partition("@")
        typo = f"{local[:-1]}@{domain}"
        deadline = time.monotonic() + 10
        near: list[dict[str, object]] = []
        while not near:  # the notification crosses in milliseconds; a mail takes longer
            assert time.monotonic() < deadline, "A never learnt of B's inbox"
            a.send(typo, subject="Your code")
            events = on_b.get(f"/v1/runs/{run_id}").json()["events"]
            near = [e for e in events if e["type"] == "near_miss"]
        assert near[0]["inbox_id"] == inbox["inbox_id"]
        assert near[0]["detail"] == {"address": typo, "distance": 1}
        assert on_a.get(f"/v1/runs/{run_id}").json()["events"][-1]["type"] == "near_miss"


def _until_long_polls(client: httpx.Client, count: int, deadline_s: float = 10.0) -> None:
    """Until the replica holds ``count`` long-polls (it registers them before it scans)."""
    deadline = time.monotonic() + deadline_s
    while f"runsink_active_long_polls {float(count)}" not in client.get("/metrics").text:
        assert time.monotonic() < deadline, "the long-poll never became active"
        time.sleep(0.01)


def _send_until(
    servers: list[Server], addresses: list[str], stop: threading.Event, sender: int
) -> tuple[list[str], int]:
    """One sender: new messages round-robin over the replicas until ``stop``; the subjects
    that got a 250, and how many attempts failed otherwise (refused, 451, cut off)."""
    acknowledged: list[str] = []
    failed = 0
    n = 0
    while not stop.is_set():
        server = servers[(sender + n) % len(servers)]
        to = addresses[n % len(addresses)]
        subject = f"s{sender}-{n}"
        n += 1
        try:
            with smtplib.SMTP("127.0.0.1", server.smtp_port, timeout=10) as client:
                client.sendmail(SENDER, [to], _message(to, subject))
            acknowledged.append(subject)
        except (OSError, smtplib.SMTPException):
            failed += 1
    return acknowledged, failed


def _subjects(server: Server, inbox_ids: list[str]) -> set[str]:
    seen: set[str] = set()
    with server.http() as client:
        for inbox_id in inbox_ids:
            cursor = None
            while True:
                params: dict[str, object] = {"limit": 500}
                if cursor:
                    params["after"] = cursor
                page = client.get(f"/v1/inboxes/{inbox_id}/messages", params=params).json()
                seen.update(m["subject"] for m in page["messages"])
                cursor = page["next_cursor"]
                if not page["has_more"]:
                    break
    return seen


@pytest.mark.slow
def test_a_replica_killed_mid_stream_loses_no_acknowledged_mail(
    tmp_path: Path, policy_file: str, pg_cluster: Cluster
) -> None:
    """8 senders on two replicas; SIGKILL one: every 250 it gave is readable from the other."""
    dsn = pg_cluster.dsn(pg_cluster.new_database("runsink_template"))
    a, b = start_replicas(tmp_path, dsn, policy_file, 2)
    try:
        with b.http() as client:
            inboxes = [create_inbox(client, policy="kept") for _ in range(4)]
        addresses = [i["address"] for i in inboxes]
        stop = threading.Event()
        with ThreadPoolExecutor(8) as pool:
            senders = [pool.submit(_send_until, [a, b], addresses, stop, n) for n in range(8)]
            _until_delivered(dsn, 40)
            a.stop(signal.SIGKILL)
            _until_delivered(dsn, 120)
            stop.set()
            results = [s.result(60) for s in senders]
        acknowledged = {subject for subjects, _ in results for subject in subjects}
        stored = _subjects(b, [i["inbox_id"] for i in inboxes])
    finally:
        a.stop()
        b.stop()
    assert len(acknowledged) >= 40
    assert acknowledged <= stored  # nothing acknowledged is lost


def _until_delivered(dsn: str, count: int, deadline_s: float = 60.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if int(psql(dsn, "SELECT COUNT(*) FROM deliveries")[0][0]) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} deliveries within {deadline_s}s")


@contextlib.contextmanager
def _own_database() -> Iterator[Cluster]:
    """A PostgreSQL server of the test's own (to stop and start), with a database runsink."""
    own = Cluster.create()
    try:
        own.start()
        own.psql("CREATE DATABASE runsink")
        yield own
    finally:
        own.destroy()


@pytest.mark.slow
def test_the_database_restarted_mid_run_costs_451s_and_nothing_acknowledged(
    tmp_path: Path, policy_file: str, pg_cluster: Cluster
) -> None:
    """PostgreSQL stops under load: 451s (never a 250 without a commit), /readyz 503,
    provider trouble on waits; back up, everything recovers without restarting runsink."""
    with _own_database() as own:
        dsn = own.dsn("runsink")
        (a,) = start_replicas(tmp_path, dsn, policy_file, 1)
        try:
            with a.http() as client:
                inbox = create_inbox(client, policy="kept")
                stop = threading.Event()
                with ThreadPoolExecutor(4) as pool:
                    senders = [
                        pool.submit(_send_until, [a], [inbox["address"]], stop, n) for n in range(4)
                    ]
                    _until_delivered(dsn, 20)
                    own.stop("immediate")  # a crash: only what was committed survives
                    _until(lambda: client.get("/readyz").status_code == 503)
                    refused = _smtp_answer(a, inbox["address"])
                    down = wait(client, inbox["inbox_id"], timeout_s=0)
                    own.start()
                    _until(lambda: client.get("/readyz").status_code == 200)
                    _until(lambda: _smtp_answer(a, inbox["address"]) == 250)
                    stop.set()
                    results = [s.result(60) for s in senders]
                acknowledged = {subject for subjects, _ in results for subject in subjects}
                failures = sum(failed for _, failed in results)
                after = wait(client, inbox["inbox_id"], timeout_s=0).json()
            stored = _subjects(a, [inbox["inbox_id"]])
        finally:
            a.stop()
    assert refused == 451
    # The inbox cannot be read, but this replica knows it: provider trouble, state unchanged.
    assert down.status_code == 200 and down.headers["Retry-After"] == "1"
    body = down.json()
    assert (body["status"], body["next_action"]) == ("retryable", "wait_then_retry")
    assert body["reason"] in ("provider_error", "provider_timeout")
    assert after["state"] == "received"
    assert failures > 0
    assert acknowledged <= stored


def _send_timed(
    servers: list[Server], to: str, stop: threading.Event, sender: int
) -> tuple[list[str], int, float]:
    """As ``_send_until``, to one address, also timing the longest attempt (a sender left
    without an answer shows as one that takes the SMTP client's whole timeout)."""
    acknowledged: list[str] = []
    failed, longest, n = 0, 0.0, 0
    while not stop.is_set():
        subject = f"t{sender}-{n}"
        server = servers[(sender + n) % len(servers)]
        n += 1
        started = time.monotonic()
        try:
            with smtplib.SMTP("127.0.0.1", server.smtp_port, timeout=60) as client:
                client.sendmail(SENDER, [to], _message(to, subject))
            acknowledged.append(subject)
        except (OSError, smtplib.SMTPException):
            failed += 1
        longest = max(longest, time.monotonic() - started)
    return acknowledged, failed, longest


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgres_stopped_under_load_answers_every_sender_at_once(
    tmp_path: Path, policy_file: str, mode: str
) -> None:
    """pg_ctl stop -m fast / -m immediate under SMTP load on two replicas: every sender is
    answered within seconds (451 while it is down, never a hang until the idle window), no
    task dies unretrieved, and nothing acknowledged is lost once it is back."""
    with _own_database() as own:
        dsn = own.dsn("runsink")
        a, b = start_replicas(tmp_path, dsn, policy_file, 2)
        try:
            with a.http() as client:
                inbox = create_inbox(client, policy="kept")
            stop = threading.Event()
            with ThreadPoolExecutor(16) as pool:
                senders = [
                    pool.submit(_send_timed, [a, b], inbox["address"], stop, n) for n in range(16)
                ]
                _until_delivered(dsn, 40)
                own.stop(mode)
                for replica in (a, b):
                    _until(lambda r=replica: _smtp_answer(r, inbox["address"]) == 451)
                own.start()
                for replica in (a, b):
                    _until(lambda r=replica: _smtp_answer(r, inbox["address"]) == 250)
                stop.set()
                results = [s.result(120) for s in senders]
            stored = _subjects(a, [inbox["inbox_id"]])
        finally:
            a.stop()
            b.stop()
        logged = a.log_path.read_text() + b.log_path.read_text()
    acknowledged = {subject for subjects, _, _ in results for subject in subjects}
    longest = max(took for _, _, took in results)
    assert longest < 20, f"a sender waited {longest:.1f}s for an answer"
    assert sum(failed for _, failed, _ in results) > 0  # the stop was felt
    assert acknowledged <= stored  # nothing acknowledged is lost
    assert "Task exception was never retrieved" not in logged
    assert "internal_error" not in logged


def _until(condition: object, deadline_s: float = 30.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            if condition():  # type: ignore[operator]
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"not within {deadline_s}s")


def _smtp_answer(server: Server, to: str) -> int:
    """The reply code to one message's final dot (or the first refusal before it)."""
    try:
        with smtplib.SMTP("127.0.0.1", server.smtp_port, timeout=10) as client:
            client.sendmail(SENDER, [to], _message(to, "probe"))
    except smtplib.SMTPResponseException as exc:
        return int(exc.smtp_code)
    except smtplib.SMTPRecipientsRefused as exc:
        return int(next(iter(exc.recipients.values()))[0])
    return 250


@pytest.mark.slow
def test_database_down_inbox_calls_answer_wait_then_retry(tmp_path: Path, policy_file: str) -> None:
    """PostgreSQL stopped: get, wait and claim (HTTP and MCP) answer the envelope with the
    state unchanged, retryable/wait_then_retry and a retry_after; an inbox this replica never
    saw, a create, a listing and a read get a 503 that says the same; after a restart of
    PostgreSQL (not of runsink) the same calls answer normally."""
    with _own_database() as own:
        dsn = own.dsn("runsink")
        a, b = start_replicas(tmp_path, dsn, policy_file, 2)
        try:
            with a.http() as on_a, b.http() as on_b:
                run_id = new_run_id()
                inbox = create_inbox(on_a, run_id, policy="kept")
                stranger = create_inbox(on_b, new_run_id(), policy="kept")  # A never sees it
                a.send(inbox["address"], subject="Before the outage")
                before = wait(on_a, inbox["inbox_id"], timeout_s=5).json()
                message_id = before["message"]["message_id"]
                own.stop("immediate")
                _until(lambda: on_a.get("/readyz").status_code == 503)
                got = on_a.get(f"/v1/inboxes/{inbox['inbox_id']}")
                waited = wait(on_a, inbox["inbox_id"], timeout_s=0)
                claimed = on_a.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id})
                wrong = wait(on_a, inbox["inbox_id"], timeout_s=0, run_id=new_run_id())
                unknown = wait(on_a, stranger["inbox_id"], timeout_s=0)
                created = on_a.post("/v1/inboxes", json={"run_id": run_id, "purpose": "more"})
                listed = on_a.get(f"/v1/inboxes/{inbox['inbox_id']}/messages")
                read = on_a.get(f"/v1/messages/{message_id}")
                by_mcp = asyncio.run(_mcp_wait(a, inbox["inbox_id"]))
                own.start()
                _until(lambda: on_a.get("/readyz").status_code == 200)
                after = on_a.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id})
                stranger_after = wait(on_a, stranger["inbox_id"], timeout_s=0)
        finally:
            a.stop()
            b.stop()
    assert (before["state"], before["next_action"]) == ("received", "claim_message")
    for answer in (got, waited, claimed):
        assert answer.status_code == 200, answer.text
        assert int(answer.headers["Retry-After"]) >= 1
        body = answer.json()
        assert (body["state"], body["status"], body["next_action"]) == (
            "received",
            "retryable",
            "wait_then_retry",
        )
        assert body["reason"] in ("provider_error", "provider_timeout")
        assert body["retry_after"] > 0 and body["inbox_id"] == inbox["inbox_id"]
        assert body["message"]["message_id"] == message_id and body["claim"] is None
    assert wrong.status_code == 403 and wrong.json()["reason"] == "wrong_run"
    for answer in (unknown, created, listed, read):
        assert answer.status_code == 503 and answer.headers["Retry-After"] == "1"
        body = answer.json()
        assert (body["status"], body["next_action"]) == ("retryable", "wait_then_retry")
        assert body["retry_after"] == 1.0 and body["reason"] == body["error"]["code"]
    assert (by_mcp["state"], by_mcp["next_action"]) == ("received", "wait_then_retry")
    assert after.status_code == 200 and after.json()["next_action"] == "proceed"
    assert stranger_after.json()["reason"] == "evidence_not_found"


async def _mcp_wait(server: Server, inbox_id: str) -> dict[str, object]:
    from tests.test_mcp import call, connect

    async with connect("http", server.url) as client:
        return await call(client, "wait_for_message", inbox_id=inbox_id, timeout_s=0)


def test_live_events_of_one_replica_reach_readers_on_the_other_once_in_order(
    pair: tuple[Server, Server],
) -> None:
    """A /v1/events reader on B sees everything A commits for the run (created, message,
    claim, expiry, release) and B's own poll after the message that answered it; A's reader
    sees the very same stream: every event once, in one order, under the same ids."""
    from tests.test_ui_http import Reader

    a, b = pair
    run_id = new_run_id()
    on_b_reader = Reader(f"{b.url}/v1/events?run_id={run_id}")
    on_a_reader = Reader(f"{a.url}/v1/events?run_id={run_id}")
    try:
        with a.http() as on_a, b.http() as on_b_client:
            inbox = create_inbox(on_a, run_id)
            found: dict[str, Any] = {}
            # B's long-poll is answered by A's mail: B's reader must see A's message first.
            waiter = threading.Thread(
                target=lambda: found.update(
                    wait(on_b_client, inbox["inbox_id"], timeout_s=10).json()
                )
            )
            waiter.start()
            _until_long_polls(on_b_client, 1)
            a.send(inbox["address"], subject="Across replicas")
            waiter.join(15)
            message_id = found["message"]["message_id"]
            on_a.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id})
            on_a.delete(f"/v1/runs/{run_id}")

        def released(events: list[tuple[str, str, dict[str, object]]]) -> bool:
            return any(
                kind == "run_event" and data["type"] == "released" for _, kind, data in events
            )

        on_b_ids = on_b_reader.until(released, 10)
        on_a_ids = on_a_reader.until(released, 10)
        on_b = [(kind, data) for _, kind, data in on_b_ids]
        on_a_seen = [(kind, data) for _, kind, data in on_a_ids]
    finally:
        on_b_reader.close()
        on_a_reader.close()
    types = [data["type"] for kind, data in on_b if kind == "run_event"]
    assert types == [
        "created",
        "message_accepted",
        "polled",
        "claimed",
        "run_released",
        "expired",
        "released",
    ]
    assert on_b == on_a_seen  # the same events, in the same order, none twice
    assert on_b_ids == on_a_ids  # under the same ids: made from the rows, not per replica
    message = next(data for kind, data in on_b if kind == "message")
    assert message["subject"] == "Across replicas" and message["message_id"] == message_id
    states = [data["state"] for kind, data in on_b if kind == "inbox"]
    assert states == ["created", "received", "received", "expired"]


def test_a_run_token_minted_on_one_replica_holds_on_the_other(pair: tuple[Server, Server]) -> None:
    """The signing key is in the database: B accepts A's run token, with its scope."""
    a, b = pair
    run_id = new_run_id()
    with a.http() as on_a:
        create_inbox(on_a, run_id)
        token = on_a.post(f"/v1/runs/{run_id}/token", json={}).json()["token"]
    with b.http(headers={"Authorization": f"Bearer {token}"}) as on_b:
        assert on_b.get(f"/v1/runs/{run_id}").status_code == 200
        other = on_b.get(f"/v1/runs/{new_run_id()}")
        assert other.status_code == 403 and other.json()["error"]["code"] == "forbidden_scope"


def test_a_release_on_one_replica_ends_the_runs_tokens_on_the_other(
    pair: tuple[Server, Server],
) -> None:
    """A run token minted on A is 401 on A right after its run is released on B."""
    a, b = pair
    run_id = new_run_id()
    with a.http() as on_a:
        create_inbox(on_a, run_id)
        token = on_a.post(f"/v1/runs/{run_id}/token", json={}).json()["token"]
    with b.http() as on_b:
        assert on_b.delete(f"/v1/runs/{run_id}").status_code == 204
    with a.http(headers={"Authorization": f"Bearer {token}"}) as on_a:
        refused = on_a.get(f"/v1/runs/{run_id}")
    assert refused.status_code == 401 and "released" in refused.json()["error"]["message"]
