"""The six checkpoints of seed 000 ("states before retries"), end to end over real sockets."""

from __future__ import annotations

import time

from tests.support import Server, create_inbox, new_run_id, wait

SECRET_SUBJECT = "Tu código secreto 918273"
SECRET_BODY = "Reset here: https://app.test/reset?token=SUPERSECRETTOKEN and code 918273"


def test_checkpoint_1_same_key_returns_same_inbox_id(server: Server) -> None:
    """A repeated create with the same Idempotency-Key returns the same inbox_id (200, replayed)."""
    run_id = new_run_id()
    body = {"run_id": run_id, "purpose": "signup-check"}
    with server.http() as client:
        first = client.post(
            "/v1/inboxes", json=body, headers={"Idempotency-Key": "signup-check:run-1842-" + run_id}
        )
        second = client.post(
            "/v1/inboxes", json=body, headers={"Idempotency-Key": "signup-check:run-1842-" + run_id}
        )
        default_first = client.post("/v1/inboxes", json={**body, "purpose": "reset"})
        default_again = client.post("/v1/inboxes", json={**body, "purpose": "reset"})
    assert first.status_code == 201
    assert second.status_code == 200
    assert second.headers["Idempotent-Replayed"] == "true"
    assert (first.json()["replayed"], second.json()["replayed"]) == (False, True)
    assert first.json()["inbox_id"] == second.json()["inbox_id"]
    assert first.json()["address"] == second.json()["address"]
    # Without a header the key is purpose:run_id.
    assert default_first.status_code == 201
    assert default_again.status_code == 200
    assert default_again.json()["inbox_id"] == default_first.json()["inbox_id"]


def test_checkpoint_2_message_after_expiry_does_not_change_state(server: Server) -> None:
    """Mail after expires_at is a late arrival: the inbox stays expired, nothing is listed."""
    run_id = new_run_id()
    with server.http() as client:
        inbox = create_inbox(client, run_id, ttl_s=1)
        deadline = time.monotonic() + 10
        state = inbox["state"]
        while state != "expired" and time.monotonic() < deadline:
            time.sleep(0.1)
            state = client.get(f"/v1/inboxes/{inbox['inbox_id']}").json()["state"]
        assert state == "expired"
        server.send(inbox["address"], subject="too late")
        after = client.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
        waited = wait(client, inbox["inbox_id"]).json()
        listed = client.get(f"/v1/inboxes/{inbox['inbox_id']}/messages").json()
        report = client.get(f"/v1/runs/{run_id}").json()
    assert after["state"] == "expired" and after["reason"] == "lease"
    assert after["message"] is None
    assert waited["state"] == "expired" and waited["status"] == "blocked"
    assert listed["messages"] == []
    late = [e for e in report["events"] if e["type"] == "late_arrival"]
    assert len(late) == 1 and late[0]["inbox_id"] == inbox["inbox_id"]
    assert "too late" not in str(report)


def test_checkpoint_3_claiming_twice_does_not_duplicate_the_effect(server: Server) -> None:
    """A second claim by the same run answers already_claimed with the original claim."""
    run_id = new_run_id()
    with server.http() as client:
        inbox = create_inbox(client, run_id)
        server.send(inbox["address"], subject="Confirm your account")
        received = wait(client, inbox["inbox_id"], timeout_s=5).json()
        message_id = received["message"]["message_id"]
        first = client.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id})
        second = client.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id})
        report = client.get(f"/v1/runs/{run_id}").json()
    assert first.status_code == 200 and second.status_code == 200
    assert first.json()["reason"] is None and first.json()["next_action"] == "proceed"
    assert second.json()["reason"] == "already_claimed"
    assert second.json()["next_action"] == "proceed"
    assert second.json()["claim"] == first.json()["claim"]
    assert [e["type"] for e in report["events"]].count("claimed") == 1


def test_checkpoint_4_cursor_advances_when_nothing_matches(server: Server) -> None:
    """A wait that finds only non-matching mail moves the stored cursor past it."""
    run_id = new_run_id()
    with server.http() as client:
        inbox = create_inbox(client, run_id)
        inbox_id = inbox["inbox_id"]
        server.send(inbox["address"], subject="Newsletter")
        server.send(inbox["address"], subject="Weekly digest")
        first = wait(client, inbox_id, match={"subject_contains": "reset"}).json()
        server.send(inbox["address"], subject="Password reset")
        second = wait(client, inbox_id, match={"subject_contains": "reset"}).json()
    assert first["state"] == "waiting"
    assert first["reason"] == "evidence_mismatch"
    assert first["next_action"] == "verify_trigger"
    assert first["cursor"] != inbox["cursor"]
    assert second["state"] == "received"
    assert second["message"]["subject"] == "Password reset"
    # The received cursor sits just before the returned message, past the skipped ones.
    assert second["cursor"] != inbox["cursor"]


def test_checkpoint_5_logs_carry_run_and_trace_never_content(server: Server) -> None:
    """Log lines name the run and the trace, and never the subject, body, code or link."""
    run_id = new_run_id()
    trace = "feedfacecafe0000" + run_id[-12:]
    with server.http(headers={"X-Trace-Id": trace}) as client:
        inbox = create_inbox(client, run_id)
        server.send(inbox["address"], subject=SECRET_SUBJECT, body=SECRET_BODY)
        received = wait(client, inbox["inbox_id"], timeout_s=5).json()
        message_id = received["message"]["message_id"]
        read = client.get(f"/v1/messages/{message_id}").json()
        client.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id})
    assert "918273" in read["codes"]
    text = server.log_path.read_text(encoding="utf-8")
    for secret in ("918273", "SUPERSECRETTOKEN", "código", "https://app.test/reset"):
        assert secret not in text
    ours = [line for line in server.log_lines() if line.get("run_id") == run_id]
    events = {line["event"] for line in ours}
    assert {"inbox_created", "message_accepted", "polled", "claimed"} <= events
    assert all(line.get("trace_id") for line in ours if line["event"] != "message_accepted")
    assert any(line.get("trace_id") == trace for line in ours)


def test_checkpoint_6_every_state_gives_a_concrete_next_action(server: Server) -> None:
    """created, waiting, received (unclaimed and claimed) and expired each name a next action."""
    run_id = new_run_id()
    seen: dict[str, str] = {}
    with server.http() as client:
        inbox = create_inbox(client, run_id, policy="tiny")
        inbox_id = inbox["inbox_id"]
        seen["created"] = inbox["next_action"]
        seen["waiting"] = wait(client, inbox_id).json()["next_action"]
        server.send(inbox["address"], subject="Welcome")
        received = wait(client, inbox_id, timeout_s=5).json()
        seen["received"] = received["next_action"]
        claimed = client.post(
            f"/v1/messages/{received['message']['message_id']}/claim", json={"run_id": run_id}
        ).json()
        seen["claimed"] = claimed["next_action"]
        other = create_inbox(client, run_id, purpose="other", policy="tiny", poll_budget=1)
        expired = wait(client, other["inbox_id"]).json()
        seen["expired"] = expired["next_action"]
    assert seen == {
        "created": "wait_for_message",
        "waiting": "wait_for_message",
        "received": "claim_message",
        "claimed": "proceed",
        "expired": "create_new_inbox",
    }
    assert expired["state"] == "expired" and expired["reason"] == "timeout"
