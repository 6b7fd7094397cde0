"""The agent safety layer end to end: breaker, failure taxonomy, fault injection, metrics."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sink.storage.memory import memory_backend
from tests.inproc import InProcess
from tests.support import create_inbox, new_run_id, wait


def _fault(client: httpx.Client, **spec: object) -> dict[str, Any]:
    response = client.post("/v1/faults", json=spec)
    assert response.status_code == 201, response.text
    return dict(response.json())


def _fragile(client: httpx.Client, run_id: str | None = None, **body: Any) -> dict[str, Any]:
    return create_inbox(client, run_id or new_run_id("brk"), policy="sturdy", **body)


def _until(predicate: object, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_provider_error_is_retryable_and_spends_nothing(app: InProcess) -> None:
    """An injected provider error: retryable, wait_then_retry, last_error set, no poll spent."""
    with app.http() as client:
        inbox = _fragile(client)
        _fault(client, target="wait", mode="error", count=1, run_id=inbox["run_id"])
        response = wait(client, inbox["inbox_id"])
        after = client.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
    body = response.json()
    assert (body["state"], body["status"], body["next_action"], body["reason"]) == (
        "created", "retryable", "wait_then_retry", "provider_error",
    )  # fmt: skip
    assert body["retry_after"] > 0 and response.headers["Retry-After"]
    assert body["attempt"] == 0 and body["last_error"] == "provider_error"
    assert (
        after["attempt"] == 0
        and after["next_poll_at"] is None
        and after["last_error"] == "provider_error"
    )


def test_provider_timeout_holds_until_the_deadline(app: InProcess) -> None:
    """A timeout fault holds the call until provider_deadline_s, then answers provider_timeout."""
    with app.http() as client:
        inbox = _fragile(client)
        _fault(client, target="wait", mode="timeout", count=1, run_id=inbox["run_id"])
        started = time.monotonic()
        body = wait(client, inbox["inbox_id"]).json()
        elapsed = time.monotonic() - started
    assert body["reason"] == "provider_timeout" and body["status"] == "retryable"
    assert elapsed >= 0.3


def test_breaker_opens_blocks_and_closes_after_a_good_probe(app: InProcess) -> None:
    """Failures open it; while open calls are circuit_open (no poll); a good probe closes it."""
    with app.http() as client:
        inbox = _fragile(client)
        run_id = inbox["run_id"]
        _fault(client, target="wait", mode="error", count=2, run_id=run_id)
        first = wait(client, inbox["inbox_id"]).json()
        second = wait(client, inbox["inbox_id"]).json()
        blocked = wait(client, inbox["inbox_id"])
        state_while_open = client.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
        time.sleep(1.05)  # the cooldown itself is what is under test (1.0 s in the sturdy policy)
        probe = wait(client, inbox["inbox_id"]).json()
        report = client.get(f"/v1/runs/{run_id}").json()
    assert first["reason"] == second["reason"] == "provider_error"
    body = blocked.json()
    assert (body["status"], body["next_action"], body["reason"]) == (
        "blocked",
        "wait_then_retry",
        "circuit_open",
    )
    assert 0 < body["retry_after"] <= 1.0 and blocked.headers["Retry-After"] == "1"
    assert state_while_open["attempt"] == 0
    assert probe["state"] == "waiting" and probe["attempt"] == 1
    types = [e["type"] for e in report["events"]]
    assert types.count("breaker_opened") == 1
    # The probe's poll comes after the half-open move that let it through, before the close.
    assert (
        types.index("breaker_opened")
        < types.index("breaker_half_open")
        < types.index("polled")
        < types.index("breaker_closed")
    )


def test_failed_probe_doubles_the_cooldown_up_to_the_cap(app: InProcess) -> None:
    """A failed probe reopens the breaker with the cooldown doubled, capped at cooldown_max_s."""
    with app.http() as client:
        inbox = _fragile(client)
        _fault(client, target="wait", mode="error", count=3, run_id=inbox["run_id"])
        wait(client, inbox["inbox_id"])
        wait(client, inbox["inbox_id"])
        time.sleep(1.05)  # past the 1.0 s cooldown
        failed_probe = wait(client, inbox["inbox_id"]).json()
        reopened = wait(client, inbox["inbox_id"]).json()
    assert failed_probe["reason"] == "provider_error"
    assert reopened["reason"] == "circuit_open"
    # 1.0 doubled is 2.0, capped at the policy's 1.5.
    assert 1.0 < reopened["retry_after"] <= 1.5


def test_exactly_one_probe_among_concurrent_calls(app: InProcess) -> None:
    """After the cooldown exactly one call goes through as the probe; the others stay blocked."""
    with app.http() as client:
        # A long provider deadline, so the probe can be held (3 s) while the others arrive.
        inbox = create_inbox(client, new_run_id("probe"), policy="probing")
        run_id = inbox["run_id"]
        _fault(client, target="wait", mode="error", count=2, run_id=run_id)
        wait(client, inbox["inbox_id"])
        wait(client, inbox["inbox_id"])
        _fault(client, target="wait", mode="delay", delay_s=3, count=1, run_id=run_id)
        time.sleep(0.65)  # the cooldown (0.6 s) must pass before a probe is let through
    start = threading.Barrier(6)

    def call(_: int) -> dict[str, Any]:
        start.wait()
        with app.http() as each:
            return dict(each.post(f"/v1/inboxes/{inbox['inbox_id']}/wait", json={}).json())

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(call, range(6)))
    reasons = sorted(a["reason"] for a in answers)
    assert reasons.count("circuit_open") == 5
    assert next(a for a in answers if a["reason"] != "circuit_open")["state"] == "waiting"


def test_breakers_are_isolated_by_operation_inbox_and_run(app: InProcess) -> None:
    """An open wait breaker on one inbox leaves its reads, its claims and other inboxes alone."""
    run_id = new_run_id("iso")
    with app.http() as client:
        broken = _fragile(client, run_id)
        healthy = _fragile(client, run_id, purpose="other")
        app.send(broken["address"], subject="kept")
        message_id = client.get(f"/v1/inboxes/{broken['inbox_id']}/messages").json()["messages"][0][
            "message_id"
        ]
        _fault(client, target="wait", mode="error", count=2, run_id=run_id)
        wait(client, broken["inbox_id"])
        wait(client, broken["inbox_id"])
        assert wait(client, broken["inbox_id"]).json()["reason"] == "circuit_open"
        other_inbox = wait(client, healthy["inbox_id"]).json()
        read = client.get(f"/v1/messages/{message_id}")
        claim = client.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id}).json()
        stranger = _fragile(client)
        stranger_wait = wait(client, stranger["inbox_id"]).json()
    assert other_inbox["state"] == "waiting"
    assert read.status_code == 200
    assert claim["next_action"] == "proceed"
    assert stranger_wait["state"] == "waiting"


def test_read_faults_are_503_with_retry_after_and_open_the_read_breaker(app: InProcess) -> None:
    """read_message under provider trouble is 503 with Retry-After; then 503 circuit_open."""
    with app.http() as client:
        inbox = _fragile(client)
        app.send(inbox["address"], subject="x")
        message_id = wait(client, inbox["inbox_id"], timeout_s=5).json()["message"]["message_id"]
        _fault(client, target="read", mode="error", count=2, run_id=inbox["run_id"])
        first = client.get(f"/v1/messages/{message_id}")
        second = client.get(f"/v1/messages/{message_id}/raw")
        third = client.get(f"/v1/messages/{message_id}")
        still_waits = client.get(f"/v1/inboxes/{inbox['inbox_id']}")
    assert first.status_code == 503 and first.json()["error"]["code"] == "provider_error"
    assert first.headers["Retry-After"]
    assert second.status_code == 503
    assert third.status_code == 503 and third.json()["error"]["code"] == "circuit_open"
    assert still_waits.status_code == 200


def test_claim_fault_is_an_envelope_and_claims_nothing(app: InProcess) -> None:
    """A claim under provider trouble answers retryable and leaves the message unclaimed."""
    with app.http() as client:
        inbox = _fragile(client)
        app.send(inbox["address"], subject="x")
        message_id = wait(client, inbox["inbox_id"], timeout_s=5).json()["message"]["message_id"]
        _fault(client, target="claim", mode="timeout", count=1, run_id=inbox["run_id"])
        failed = client.post(f"/v1/messages/{message_id}/claim", json={"run_id": inbox["run_id"]})
        retried = client.post(
            f"/v1/messages/{message_id}/claim", json={"run_id": inbox["run_id"]}
        ).json()
    assert failed.status_code == 200
    assert failed.json()["reason"] == "provider_timeout" and failed.json()["claim"] is None
    assert retried["reason"] is None and retried["next_action"] == "proceed"


def test_fault_is_used_up_only_by_a_call_that_reaches_the_provider(app: InProcess) -> None:
    """A too_early wait does not use up a count fault; the next real poll does."""
    with app.http() as client:
        inbox = create_inbox(client, new_run_id("fu"), policy="paced")
        wait(client, inbox["inbox_id"])
        fault = _fault(client, target="wait", mode="error", count=1, run_id=inbox["run_id"])
        early = wait(client, inbox["inbox_id"]).json()
        listed = client.get("/v1/faults").json()["faults"]
    assert early["reason"] == "too_early"
    mine = [f for f in listed if f["fault_id"] == fault["fault_id"]]
    assert mine and mine[0]["remaining"] == 1


def test_one_wait_is_one_call_for_a_fault(app: InProcess) -> None:
    """A wait makes several store calls (its scan, its poll's record; a woken long-poll scans
    again) and counts as one call for a fault: a delay is added once, a count goes down by
    one."""
    with app.http() as client:
        inbox = _fragile(client)
        fault = _fault(
            client, target="wait", mode="delay", delay_s=0.05, count=3, run_id=inbox["run_id"]
        )
        app.send(inbox["address"], subject="Woken")  # the wait finds mail: scan and record
        answer = wait(client, inbox["inbox_id"], timeout_s=0).json()
        (after,) = [
            f
            for f in client.get("/v1/faults").json()["faults"]
            if f["fault_id"] == fault["fault_id"]
        ]
    assert answer["state"] == "received"
    assert (after["hits"], after["remaining"]) == (1, 2)


def test_faults_never_apply_under_production(app: InProcess) -> None:
    """An inbox under the production policy ignores injected faults: its waits, and the SMTP
    that delivers to it (RCPT and DATA are 250, the mail is stored)."""
    with app.http() as client:
        inbox = create_inbox(client, new_run_id("prod"), policy="production")
        _fault(client, target="wait", mode="error", run_id=inbox["run_id"])
        body = wait(client, inbox["inbox_id"]).json()
        for target in ("smtp.rcpt", "smtp.data"):
            _fault(client, target=target, mode="error", count=1, run_id=inbox["run_id"])
        with app.smtp() as smtp:
            smtp.ehlo()
            smtp.mail("a@app.test")
            assert smtp.rcpt(inbox["address"])[0] == 250
            assert smtp.data(b"Subject: kept\r\n\r\nbody\r\n")[0] == 250
        listed = client.get(f"/v1/inboxes/{inbox['inbox_id']}/messages").json()["messages"]
        unused = [
            f for f in client.get("/v1/faults").json()["faults"] if f["run_id"] == inbox["run_id"]
        ]
    assert body["state"] == "waiting"
    assert [m["subject"] for m in listed] == ["kept"]
    assert sorted(f["target"] for f in unused if f["remaining"] == 1) == ["smtp.data", "smtp.rcpt"]


def test_connect_faults_follow_the_default_policy(tmp_path: Path) -> None:
    """An smtp.connect fault (no inbox known yet) follows the default policy, as caught mail
    does: with --default-policy production it never fires and is not used up."""
    import socket

    app = InProcess(tmp_path / "s", "--enable-faults", "--default-policy", "production")
    try:
        with app.http() as client:
            _fault(client, target="smtp.connect", mode="error", count=1)
            with socket.create_connection(("127.0.0.1", app.smtp_port), timeout=30) as sock:
                greeting = sock.recv(100)
            (fault,) = client.get("/v1/faults").json()["faults"]
    finally:
        app.stop()
    assert greeting.startswith(b"220 ")
    assert fault["remaining"] == 1


def test_smtp_faults_answer_451(app: InProcess) -> None:
    """smtp.rcpt and smtp.data faults answer 451; the next try goes through."""
    import smtplib

    with app.http() as client:
        inbox = create_inbox(client, new_run_id("smtpf"))
        _fault(client, target="smtp.data", mode="error", count=1, run_id=inbox["run_id"])
        with app.smtp() as smtp:
            smtp.ehlo()
            smtp.mail("a@app.test")
            smtp.rcpt(inbox["address"])
            code, _ = smtp.data(b"Subject: x\r\n\r\nbody\r\n")
            assert code == 451
            smtp.rset()
            _fault(client, target="smtp.rcpt", mode="error", count=1, run_id=inbox["run_id"])
            smtp.mail("a@app.test")
            code, _ = smtp.rcpt(inbox["address"])
            assert code == 451
            code, _ = smtp.rcpt(inbox["address"])
            assert code == 250
            code, _ = smtp.data(b"Subject: y\r\n\r\nbody\r\n")
            assert code == 250
        listed = client.get(f"/v1/inboxes/{inbox['inbox_id']}/messages").json()["messages"]
    assert [m["subject"] for m in listed] == ["y"]
    assert smtplib  # the module is the client under test's peer


def test_smtp_timeout_faults_hold_until_the_policy_deadline(tmp_path: Path) -> None:
    """An SMTP `timeout` fault holds the reply for the provider deadline of the policy in
    play (the recipient's inbox, else the default policy's for a connection), then fails."""
    import socket

    policies = tmp_path / "policies.toml"
    policies.write_text("[policy.patient]\npoll_interval_s = [0]\nprovider_deadline_s = 3.0\n")
    app = InProcess(
        tmp_path / "s", "--policy-file", str(policies), "--enable-faults",
        "--default-policy", "patient",
    )  # fmt: skip
    try:
        with app.http() as client:
            inbox = create_inbox(client, new_run_id("deadline"))
            _fault(client, target="smtp.connect", mode="timeout", count=1)
            started = time.monotonic()
            with socket.create_connection(("127.0.0.1", app.smtp_port), timeout=30) as sock:
                greeting = sock.recv(100)
            connect_held = time.monotonic() - started
            _fault(client, target="smtp.rcpt", mode="timeout", count=1)
            with app.smtp() as smtp:
                smtp.ehlo()
                smtp.mail("a@app.test")
                started = time.monotonic()
                code, _ = smtp.rcpt(inbox["address"])
                rcpt_held = time.monotonic() - started
    finally:
        app.stop()
    assert greeting.startswith(b"421 ") and connect_held >= 3.0
    assert code == 451 and rcpt_held >= 3.0


def test_failure_taxonomy_leads_to_three_different_actions(app: InProcess) -> None:
    """Provider trouble -> wait_then_retry; no evidence -> wait_for_message/verify_trigger;
    invalid evidence -> stop or create_new_inbox."""
    run_id = new_run_id("tax")
    with app.http() as client:
        slow = _fragile(client, run_id)
        _fault(client, target="wait", mode="timeout", count=1, run_id=run_id)
        unavailable = wait(client, slow["inbox_id"]).json()
        empty = wait(client, slow["inbox_id"]).json()
        app.send(slow["address"], subject="Newsletter")
        mismatch = wait(client, slow["inbox_id"], match={"subject_contains": "reset"}).json()
        app.send(slow["address"], subject="Password reset")
        found = wait(client, slow["inbox_id"], match={"subject_contains": "reset"}).json()
        message_id = found["message"]["message_id"]
        client.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id})
        reused = client.post(
            f"/v1/messages/{message_id}/claim", json={"run_id": new_run_id("x")}
        ).json()
    assert (unavailable["status"], unavailable["next_action"]) == ("retryable", "wait_then_retry")
    assert (empty["status"], empty["next_action"]) == ("retryable", "wait_for_message")
    assert (mismatch["status"], mismatch["next_action"]) == ("retryable", "verify_trigger")
    assert (reused["status"], reused["next_action"], reused["reason"]) == (
        "blocked",
        "stop",
        "claimed_by_other_run",
    )


def test_faults_are_404_without_the_flag(tmp_path: Path, policy_file: str) -> None:
    """Without --enable-faults the fault endpoints answer 404."""
    plain = InProcess(tmp_path, "--policy-file", policy_file, backend=memory_backend)
    try:
        with plain.http() as client:
            post = client.post("/v1/faults", json={"target": "wait", "mode": "error"})
            get = client.get("/v1/faults")
            delete = client.delete("/v1/faults")
    finally:
        plain.stop()
    assert post.status_code == get.status_code == delete.status_code == 404


def _metrics(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    values = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def test_metrics_move_after_a_scripted_scenario(tmp_path: Path, policy_file: str) -> None:
    """Messages, claims, polls, breaker openings and HTTP latency move as the scenario says."""
    flags = ("--policy-file", policy_file, "--enable-faults")
    fresh = InProcess(tmp_path, *flags, backend=memory_backend)
    run_id = new_run_id("met")
    try:
        with fresh.http() as client:
            inbox = create_inbox(client, run_id)
            wait(client, inbox["inbox_id"])
            fresh.send(inbox["address"], subject="hello")
            fresh.send("nobody-here@sink.test", subject="lost")
            message_id = wait(client, inbox["inbox_id"], timeout_s=5).json()["message"][
                "message_id"
            ]
            client.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id})
            client.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id})
            fragile = create_inbox(client, run_id, purpose="f", policy="sturdy")
            _fault(client, target="wait", mode="error", count=2, run_id=run_id)
            wait(client, fragile["inbox_id"])
            wait(client, fragile["inbox_id"])
            wait(client, fragile["inbox_id"])
            values = _metrics(client)
            text = client.get("/metrics").text
    finally:
        fresh.stop()
    assert values[("runsink_messages_total", (("outcome", "stored"),))] == 1
    assert values[("runsink_messages_total", (("outcome", "caught"),))] == 1
    assert values[("runsink_claims_total", (("result", "claimed"),))] == 1
    assert values[("runsink_claims_total", (("result", "already_claimed"),))] == 1
    opened = (
        "runsink_breaker_transitions_total",
        (("cause", "provider_error"), ("event", "breaker_opened"), ("operation", "wait")),
    )
    assert values[opened] == 1
    assert (
        values[("runsink_blocked_calls_total", (("operation", "wait"), ("reason", "circuit_open")))]
        == 1
    )
    assert values[("runsink_polls_per_inbox_count", ())] == 1
    assert values[("runsink_time_to_first_evidence_seconds_count", ())] == 1
    assert values[("runsink_active_long_polls", ())] == 0
    assert values[("runsink_polls_total", (("outcome", "received"),))] == 1
    route = (("method", "POST"), ("route", "/v1/inboxes/{inbox_id}/wait"), ("status", "2xx"))
    assert values[("runsink_http_request_duration_seconds_count", route)] >= 5
    # Bounded cardinality: no run id, inbox id or address ever appears in a label.
    for secret in (run_id, inbox["inbox_id"], inbox["address"], message_id):
        assert secret not in text


@pytest.mark.parametrize("operation", ["read"])
def test_wrong_run_counts_against_the_named_run(app: InProcess, operation: str) -> None:
    """wrong_run refusals count as failures for the run the caller named (its breaker opens)."""
    owner = new_run_id("own")
    intruder = new_run_id("intr")
    with app.http() as client:
        inbox = _fragile(client, owner)
        app.send(inbox["address"], subject="x")
        message_id = wait(client, inbox["inbox_id"], timeout_s=5).json()["message"]["message_id"]
        for _ in range(2):
            refused = client.get(f"/v1/messages/{message_id}", headers={"X-Run-Id": intruder})
            assert refused.status_code == 403
        _until(
            lambda: any(
                e["type"] == "breaker_opened"
                for e in client.get(f"/v1/runs/{intruder}").json().get("events", [])
            )
        )
        report = client.get(f"/v1/runs/{intruder}").json()
        owner_read = client.get(f"/v1/messages/{message_id}", headers={"X-Run-Id": owner})
    opened = [e for e in report["events"] if e["type"] == "breaker_opened"]
    assert (
        opened[0]["detail"]["cause"] == "wrong_run"
        and opened[0]["detail"]["operation"] == operation
    )
    assert owner_read.status_code == 200


def test_a_wait_probe_is_a_short_look(app: InProcess) -> None:
    """The half-open probe does not long-poll: it looks once and answers."""
    with app.http() as client:
        inbox = _fragile(client)
        _fault(client, target="wait", mode="error", count=2, run_id=inbox["run_id"])
        wait(client, inbox["inbox_id"])
        wait(client, inbox["inbox_id"])
        time.sleep(1.05)  # past the 1.0 s cooldown
        started = time.monotonic()
        probe = wait(client, inbox["inbox_id"], timeout_s=8).json()
        elapsed = time.monotonic() - started
        after = wait(client, inbox["inbox_id"], timeout_s=0.5).json()
    assert probe["state"] == "waiting" and probe["attempt"] == 1
    assert elapsed < 4  # a long-poll would have held for 8 s
    assert after["attempt"] == 2
