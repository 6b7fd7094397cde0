"""Agent guidance over the API in-process and real SMTP: next_tool, next_arguments, hint, errors."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.inproc import InProcess
from tests.support import app_on_each_backend, create_inbox, new_run_id, wait


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def app(request: pytest.FixtureRequest) -> InProcess:
    """Storage is involved (the creation arguments): each persistent backend, in this process."""
    result: InProcess = app_on_each_backend(request)
    return result


def _until(check: Any, deadline_s: float = 10.0) -> Any:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("the condition did not hold in time")


def test_an_omitted_timeout_long_polls_until_mail_arrives(app: InProcess) -> None:
    """A wait without timeout_s long-polls (the policy's long_poll_max_s), not a single look."""
    with app.http() as client:
        inbox = create_inbox(client, policy="guided")
        sender = threading.Timer(0.5, app.send, (inbox["address"],), {"subject": "Welcome"})
        sender.start()
        try:
            answer = client.post(f"/v1/inboxes/{inbox['inbox_id']}/wait", json={}).json()
        finally:
            sender.join()
    assert (answer["state"], answer["next_action"]) == ("received", "claim_message")


def test_an_omitted_timeout_ends_at_long_poll_max_s(app: InProcess) -> None:
    """Without mail, an omitted timeout_s waits the policy's long_poll_max_s (1.5 s) and no more."""
    with app.http() as client:
        inbox = create_inbox(client, policy="guided")
        started = time.monotonic()
        answer = client.post(f"/v1/inboxes/{inbox['inbox_id']}/wait", json={}).json()
        took = time.monotonic() - started
    assert answer["state"] == "waiting"
    assert 1.4 <= took < 8, took


def test_the_loop_from_create_to_read_is_named_step_by_step(app: InProcess) -> None:
    """created -> wait -> claim -> read: each answer names the next tool and its arguments."""
    run_id = new_run_id()
    with app.http() as client:
        created = create_inbox(client, run_id, policy="guided")
        assert created["replayed"] is False
        assert (created["next_tool"], created["next_arguments"]) == (
            "wait_for_message",
            {"inbox_id": created["inbox_id"], "run_id": run_id},
        )
        assert created["address"] in created["hint"] and "app send" in created["hint"]
        app.send(created["address"], subject="Your code")
        received = wait(client, created["inbox_id"], run_id=run_id, timeout_s=5).json()
        message_id = received["message"]["message_id"]
        assert (received["next_tool"], received["next_arguments"]) == (
            "claim_message",
            {"message_id": message_id, "run_id": run_id},
        )
        assert received["newer_matching"] in (0, None) and received["unmatched"] == []
        claimed = client.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id}).json()
        assert (claimed["next_tool"], claimed["next_arguments"]) == (
            "read_message",
            {"message_id": message_id, "run_id": run_id},
        )
        assert "Your code" not in claimed["hint"]


def test_no_mail_at_all_is_said_within_three_polls(app: InProcess) -> None:
    """Empty polls with no mail ever: by the third (or hint_after_s) the hint names the cause."""
    with app.http() as client:
        inbox = create_inbox(client, policy="guided")
        hints = [wait(client, inbox["inbox_id"]).json()["hint"] for _ in range(3)]
    assert "No mail at all has reached" in hints[-1] and "exact address" in hints[-1]
    assert inbox["address"] in hints[-1]


def test_an_expired_inbox_names_the_create_that_makes_the_next_one(app: InProcess) -> None:
    """Expired: create_inbox with exactly the creation arguments, which make the next inbox."""
    run_id = new_run_id()
    given = {
        "run_id": run_id,
        "purpose": "guided-expiry",
        "policy": "guided",
        "ttl_s": 1,
        "match": {"subject_contains": "Code"},
    }
    with app.http() as client:
        first = client.post("/v1/inboxes", json=given).json()
        expired = _until(
            lambda: (
                (a := client.get(f"/v1/inboxes/{first['inbox_id']}").json())["state"] == "expired"
                and a
            )
        )
        assert expired["next_action"] == "create_new_inbox"
        assert (expired["next_tool"], expired["next_arguments"]) == ("create_inbox", given)
        assert "without receiving any mail" in expired["hint"] and "1 more" in expired["hint"]
        second = client.post("/v1/inboxes", json=expired["next_arguments"])
    assert second.status_code == 201 and second.json()["inbox_id"] != first["inbox_id"]


def test_error_bodies_say_what_to_do(app: InProcess) -> None:
    """A refused create is fix_arguments on create_inbox; an unknown id is stop, no tool."""
    with app.http() as client:
        refused = client.post("/v1/inboxes", json={"run_id": new_run_id(), "purpose": "a b"})
        missing = client.get("/v1/messages/msg_aaaaaaaaaaaaaaaaaaaaaaaaaa")
    body = refused.json()
    assert refused.status_code == 422
    assert (body["status"], body["next_action"], body["next_tool"], body["next_arguments"]) == (
        "blocked",
        "fix_arguments",
        "create_inbox",
        None,
    )
    assert "purpose" in body["hint"] and body["retry_after"] is None
    gone = missing.json()
    assert (gone["status"], gone["next_action"], gone["next_tool"]) == ("blocked", "stop", None)
    assert "id returned by the call that made it" in gone["hint"]


def test_a_body_too_large_for_a_tool_route_names_its_tool(app: InProcess) -> None:
    """A create whose declared body is over 1 MiB is 413 fix_arguments on create_inbox (the
    route's tool, as every invalid_request names), not a null next_tool."""
    body = b'{"run_id": "' + b"a" * (1024 * 1024) + b'"}'
    with app.http() as client:
        refused = client.post(
            "/v1/inboxes", content=body, headers={"Content-Type": "application/json"}
        )
    guided = refused.json()
    assert refused.status_code == 413
    assert (guided["next_action"], guided["next_tool"], guided["next_arguments"]) == (
        "fix_arguments",
        "create_inbox",
        None,
    )


def test_a_failed_read_repeats_itself_and_success_clears_last_error(app: InProcess) -> None:
    """Provider trouble names the same call; last_error lasts until a call the provider answers."""
    run_id = new_run_id()
    with app.http() as client:
        inbox = create_inbox(client, run_id, policy="guided")
        app.send(inbox["address"], subject="Hello")
        message_id = wait(client, inbox["inbox_id"], timeout_s=5).json()["message"]["message_id"]
        for target in ("read", "wait"):
            fault = {"target": target, "mode": "error", "count": 1, "run_id": run_id}
            assert client.post("/v1/faults", json=fault).status_code == 201
        read = client.get(f"/v1/messages/{message_id}", headers={"X-Run-Id": run_id})
        failed = wait(client, inbox["inbox_id"], run_id=run_id).json()
        reported = client.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
        time.sleep(failed["retry_after"])
        answered = wait(client, inbox["inbox_id"], run_id=run_id).json()
        after = client.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
    body = read.json()
    assert read.status_code == 503
    assert (body["status"], body["next_action"], body["next_tool"]) == (
        "retryable",
        "wait_then_retry",
        "read_message",
    )
    assert body["next_arguments"] == {"message_id": message_id, "run_id": run_id}
    assert (failed["reason"], failed["last_error"]) == ("provider_error", "provider_error")
    assert failed["next_arguments"] == {
        "inbox_id": inbox["inbox_id"],
        "run_id": run_id,
        "timeout_s": 0,
    }
    assert reported["last_error"] == "provider_error"  # a GET reports; it calls no provider
    assert answered["state"] == "received"
    assert (answered["last_error"], after["last_error"]) == (None, None)


def test_a_replayed_create_says_so_and_a_conflict_speaks_of_arguments(app: InProcess) -> None:
    """A replay says replayed: true; other arguments for a live inbox are fix_arguments."""
    run_id = new_run_id()
    given = {"run_id": run_id, "purpose": "replay", "policy": "guided"}
    with app.http() as client:
        client.post("/v1/inboxes", json=given)
        replay = client.post("/v1/inboxes", json=given).json()
        conflict = client.post("/v1/inboxes", json={**given, "ttl_s": 30})
    assert replay["replayed"] is True
    body = conflict.json()
    assert conflict.status_code == 409 and body["error"]["code"] == "idempotency_key_conflict"
    assert "Idempotency-Key" not in body["error"]["message"]
    assert (body["next_action"], body["next_tool"]) == ("fix_arguments", "create_inbox")


def test_a_wrong_run_refusal_is_guided_and_leaks_nothing(app: InProcess) -> None:
    """A wrong_run refusal says stop with no tool, and nothing of the other run's inbox."""
    with app.http() as client:
        inbox = create_inbox(client, policy="guided")
        refused = client.get(
            f"/v1/inboxes/{inbox['inbox_id']}", headers={"X-Run-Id": new_run_id("other")}
        )
    body = refused.json()
    assert refused.status_code == 403
    assert (body["next_action"], body["next_tool"], body["next_arguments"]) == ("stop", None, None)
    assert inbox["address"] not in refused.text and inbox["inbox_id"] not in refused.text
