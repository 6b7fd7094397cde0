"""The contract's envelope table, row by row, over real HTTP and real SMTP."""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.inproc import InProcess, Served
from tests.support import (
    Server,
    app_on_each_backend,
    create_inbox,
    new_run_id,
    on_each_backend,
    wait,
)


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def app(request: pytest.FixtureRequest) -> InProcess:
    """Every row of the table is checked against the app on each persistent backend, in this
    process."""
    result: InProcess = app_on_each_backend(request)
    return result


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest, server: Server) -> Server:
    """The rows about the socket and the server's log, against a server process."""
    return on_each_backend(request, server)


def _claim(client: httpx.Client, message_id: str, run_id: str) -> httpx.Response:
    return client.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id})


def _received(
    server: Served, client: httpx.Client, inbox: dict[str, Any], subject: str = "Welcome"
) -> dict[str, Any]:
    server.send(inbox["address"], subject=subject)
    body = wait(client, inbox["inbox_id"], timeout_s=5).json()
    assert body["state"] == "received", body
    return dict(body)


def test_created_envelope_has_every_field(app: InProcess) -> None:
    """Create answers 201 with the full envelope (and v2's `capped`): created, completed,
    wait_for_message."""
    with app.http() as client:
        response = client.post(
            "/v1/inboxes", json={"run_id": new_run_id(), "purpose": "signup-check"}
        )
    body = response.json()
    assert response.status_code == 201
    assert set(body) == {
        "state", "status", "next_action", "reason", "inbox_id", "run_id", "purpose", "address",
        "expires_at", "attempt", "remaining_attempts", "retry_after", "next_poll_at", "cursor",
        "message", "claim", "last_error", "trace_id", "capped", "replayed",
        "next_tool", "next_arguments", "hint",
        "newer_matching", "unmatched", "rescan_cursor", "near_misses",
    }  # fmt: skip
    assert body["capped"] == [] and body["replayed"] is False
    assert (body["unmatched"], body["rescan_cursor"], body["near_misses"]) == ([], None, [])
    assert (body["state"], body["status"], body["next_action"], body["reason"]) == (
        "created", "completed", "wait_for_message", None,
    )  # fmt: skip
    assert body["address"].endswith("@sink.test") and body["address"] == body["address"].lower()
    assert body["expires_at"].endswith("Z") and len(body["expires_at"]) == 24
    assert body["attempt"] == 0 and body["remaining_attempts"] == 12
    assert response.headers["x-trace-id"] == body["trace_id"]


def test_wait_with_nothing_is_waiting_retryable(app: InProcess) -> None:
    """A wait that finds nothing: waiting, retryable, wait_for_message, evidence_not_found."""
    with app.http() as client:
        inbox = create_inbox(client)
        response = wait(client, inbox["inbox_id"])
    body = response.json()
    assert (body["state"], body["status"], body["next_action"], body["reason"]) == (
        "waiting", "retryable", "wait_for_message", "evidence_not_found",
    )  # fmt: skip
    assert body["attempt"] == 1 and body["remaining_attempts"] == 11
    assert body["retry_after"] is not None
    assert response.headers["Retry-After"] == str(math.ceil(body["retry_after"]))


def test_long_poll_returns_when_mail_arrives(app: InProcess) -> None:
    """A long-poll answers received as soon as the message is stored, well before its timeout."""
    with app.http() as client:
        inbox = create_inbox(client)
        sender = threading.Timer(0.3, app.send, args=(inbox["address"],), kwargs={"subject": "Hi"})
        started = time.monotonic()
        sender.start()
        body = wait(client, inbox["inbox_id"], timeout_s=8).json()
        elapsed = time.monotonic() - started
        sender.join()
    assert body["state"] == "received" and body["next_action"] == "claim_message"
    assert body["message"]["subject"] == "Hi"
    assert elapsed < 8


def test_received_is_returned_again_until_claimed(app: InProcess) -> None:
    """An unclaimed match is never skipped: waiting again returns the same message."""
    run_id = new_run_id()
    with app.http() as client:
        inbox = create_inbox(client, run_id)
        first = _received(app, client, inbox)
        again = wait(client, inbox["inbox_id"]).json()
        _claim(client, first["message"]["message_id"], run_id)
        after_claim = wait(client, inbox["inbox_id"]).json()
    assert again["message"]["message_id"] == first["message"]["message_id"]
    assert again["cursor"] == first["cursor"]
    assert after_claim["state"] == "waiting" and after_claim["message"] is None


def test_get_reports_claimed_as_proceed(app: InProcess) -> None:
    """After a claim, GET answers received, completed, proceed with the claim."""
    run_id = new_run_id()
    with app.http() as client:
        inbox = create_inbox(client, run_id)
        received = _received(app, client, inbox)
        _claim(client, received["message"]["message_id"], run_id)
        body = client.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
    assert (body["state"], body["status"], body["next_action"]) == (
        "received",
        "completed",
        "proceed",
    )
    assert body["claim"]["run_id"] == run_id
    assert body["claim"]["message_id"] == received["message"]["message_id"]


def test_get_spends_no_budget(app: InProcess) -> None:
    """GET never spends a poll."""
    with app.http() as client:
        inbox = create_inbox(client)
        for _ in range(3):
            body = client.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
    assert body["attempt"] == 0 and body["remaining_attempts"] == 12


def test_too_early_is_blocked_and_spends_nothing(app: InProcess) -> None:
    """A wait before next_poll_at is blocked/too_early with retry_after and spends no poll."""
    with app.http() as client:
        inbox = create_inbox(client, policy="paced")
        first = wait(client, inbox["inbox_id"]).json()
        early = wait(client, inbox["inbox_id"])
    body = early.json()
    assert first["attempt"] == 1
    assert (body["state"], body["status"], body["next_action"], body["reason"]) == (
        "waiting", "blocked", "wait_then_retry", "too_early",
    )  # fmt: skip
    assert body["attempt"] == 1
    assert 0 < body["retry_after"] <= 1.5
    assert early.headers["Retry-After"] in ("1", "2")


def test_budget_spent_without_evidence_expires_timeout(app: InProcess) -> None:
    """The last poll without evidence expires the inbox (timeout); the policy allows another."""
    run_id = new_run_id()
    with app.http() as client:
        expired_before = _expired_count(client, "timeout")
        inbox = create_inbox(client, run_id, poll_budget=2)
        wait(client, inbox["inbox_id"])
        last = wait(client, inbox["inbox_id"]).json()
        after = wait(client, inbox["inbox_id"]).json()
        expired_after = _expired_count(client, "timeout")
    assert (last["state"], last["status"], last["next_action"], last["reason"]) == (
        "expired", "blocked", "create_new_inbox", "timeout",
    )  # fmt: skip
    assert last["retry_after"] is None and last["remaining_attempts"] == 0
    assert after["state"] == "expired" and after["attempt"] == 2
    assert expired_after == expired_before + 1  # counted once, by the poll that spent it


def _expired_count(client: httpx.Client, reason: str) -> float:
    wanted = f'runsink_inboxes_expired_total{{reason="{reason}"}} '
    lines = client.get("/metrics").text.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(wanted))


def test_expired_with_no_inbox_left_says_stop(app: InProcess) -> None:
    """When inboxes_per_purpose is used up, an expired inbox says stop, and create is 409."""
    run_id = new_run_id()
    with app.http() as client:
        first = create_inbox(client, run_id, policy="tiny", poll_budget=1)
        wait(client, first["inbox_id"])
        second = client.post(
            "/v1/inboxes",
            json={"run_id": run_id, "purpose": "signup-check", "policy": "tiny", "poll_budget": 1},
        )
        assert second.status_code == 201, second.text
        ended = wait(client, second.json()["inbox_id"]).json()
        third = client.post(
            "/v1/inboxes",
            json={"run_id": run_id, "purpose": "signup-check", "policy": "tiny", "poll_budget": 1},
        )
    assert second.json()["inbox_id"] != first["inbox_id"]
    assert ended["state"] == "expired" and ended["next_action"] == "stop"
    assert third.status_code == 409
    assert third.json()["error"]["code"] == "policy_forbids"


def test_lease_over_gives_expired_lease(app: InProcess) -> None:
    """Once now >= expires_at the inbox is expired/lease (GET applies it, no wait needed)."""
    with app.http() as client:
        inbox = create_inbox(client, ttl_s=1)
        deadline = time.monotonic() + 10
        body = inbox
        while body["state"] != "expired" and time.monotonic() < deadline:
            time.sleep(0.1)
            body = client.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
    assert (body["state"], body["status"], body["reason"]) == ("expired", "blocked", "lease")
    assert body["next_action"] == "create_new_inbox"


def test_a_wait_the_lease_cuts_short_answers_expired(app: InProcess) -> None:
    """A long-poll capped by the lease ends with it: the answer is expired/lease, never a
    "wait again" when no time is left (several at once: the loop's timers fire a moment
    early now and then)."""
    with app.http() as client:
        inboxes = [create_inbox(client, ttl_s=1) for _ in range(6)]
        with ThreadPoolExecutor(len(inboxes)) as pool:
            answers = list(pool.map(lambda i: wait(client, i["inbox_id"], timeout_s=5), inboxes))
    for answer in answers:
        body = answer.json()
        assert (body["state"], body["status"], body["reason"]) == ("expired", "blocked", "lease")
        assert body["next_action"] == "create_new_inbox"


def test_idempotency_conflict_on_another_body(app: InProcess) -> None:
    """The same key with another body is 409 idempotency_key_conflict."""
    run_id = new_run_id()
    key = "k-" + run_id
    with app.http() as client:
        first = client.post(
            "/v1/inboxes", json={"run_id": run_id, "purpose": "a"}, headers={"Idempotency-Key": key}
        )
        other = client.post(
            "/v1/inboxes", json={"run_id": run_id, "purpose": "b"}, headers={"Idempotency-Key": key}
        )
        same_parsed = client.post(
            "/v1/inboxes",
            content=b'{ "purpose": "a",   "run_id": "' + run_id.encode() + b'" }',
            headers={"Idempotency-Key": key, "Content-Type": "application/json"},
        )
    assert first.status_code == 201
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_key_conflict"
    assert same_parsed.status_code == 200
    assert same_parsed.json()["inbox_id"] == first.json()["inbox_id"]


def test_a_replay_compares_numbers_as_numbers(app: InProcess) -> None:
    """ttl_s 60 and 60.0 are one parsed-JSON body: the second create replays the first."""
    run_id = new_run_id()
    body = {"run_id": run_id, "purpose": "numbers", "match": {"max_age_s": 30}}
    with app.http() as client:
        first = client.post("/v1/inboxes", json={**body, "ttl_s": 60})
        again = client.post(
            "/v1/inboxes", json={**body, "ttl_s": 60.0, "match": {"max_age_s": 30.0}}
        )
    assert first.status_code == 201
    assert again.status_code == 200, again.text
    assert again.json()["inbox_id"] == first.json()["inbox_id"] and again.json()["replayed"]


def test_replay_after_expiry_creates_the_next_inbox(app: InProcess) -> None:
    """Once the keyed inbox expired, the same create makes the run's next inbox (201)."""
    run_id = new_run_id()
    body = {"run_id": run_id, "purpose": "signup-check", "poll_budget": 1}
    with app.http() as client:
        first = client.post("/v1/inboxes", json=body).json()
        wait(client, first["inbox_id"])
        second = client.post("/v1/inboxes", json=body)
    assert second.status_code == 201
    assert second.json()["inbox_id"] != first["inbox_id"]


def test_unknown_policy_is_400(app: InProcess) -> None:
    """An unknown policy name is 400 unknown_policy."""
    with app.http() as client:
        response = client.post(
            "/v1/inboxes", json={"run_id": new_run_id(), "purpose": "x", "policy": "nope"}
        )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unknown_policy"


def test_caller_values_are_capped_by_the_policy(app: InProcess) -> None:
    """ttl_s and poll_budget above the policy are capped, never raised past it."""
    with app.http() as client:
        body = create_inbox(client, ttl_s=10**8, poll_budget=999)
    assert body["remaining_attempts"] == 12


def test_wrong_run_is_403_and_leaks_nothing(app: InProcess) -> None:
    """A wait naming another run is 403 wrong_run with only status, reason, next_action, trace."""
    with app.http() as client:
        inbox = create_inbox(client)
        response = client.post(
            f"/v1/inboxes/{inbox['inbox_id']}/wait",
            json={},
            headers={"X-Run-Id": new_run_id("other")},
        )
    body = response.json()
    assert response.status_code == 403
    assert set(body) == {
        "status", "reason", "next_action", "retry_after", "trace_id", "error",
        "next_tool", "next_arguments", "hint",
    }  # fmt: skip
    assert (body["status"], body["reason"], body["next_action"]) == ("blocked", "wrong_run", "stop")
    assert (body["next_tool"], body["next_arguments"]) == (None, None)
    assert inbox["address"] not in response.text and inbox["inbox_id"] not in response.text


def test_claim_by_another_run_is_409_claimed_by_other_run(app: InProcess) -> None:
    """A claim of a message another run claimed is 409, and wins over wrong_run."""
    run_id = new_run_id()
    with app.http() as client:
        inbox = create_inbox(client, run_id)
        received = _received(app, client, inbox)
        message_id = received["message"]["message_id"]
        _claim(client, message_id, run_id)
        response = _claim(client, message_id, new_run_id("thief"))
    body = response.json()
    assert response.status_code == 409
    assert (body["reason"], body["next_action"], body["status"]) == (
        "claimed_by_other_run",
        "stop",
        "blocked",
    )
    assert "message" not in body and "claim" not in body


def test_claim_of_unclaimed_message_by_another_run_is_wrong_run(app: InProcess) -> None:
    """Claiming an unclaimed message of another run's inbox is 403 wrong_run."""
    with app.http() as client:
        inbox = create_inbox(client)
        received = _received(app, client, inbox)
        response = _claim(client, received["message"]["message_id"], new_run_id("thief"))
        after = client.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
    assert response.status_code == 403 and response.json()["reason"] == "wrong_run"
    assert after["claim"] is None and after["next_action"] == "claim_message"


def test_claim_after_lease_is_409_lease_expired(app: InProcess) -> None:
    """Claiming an unclaimed message after the lease ended is 409 lease_expired."""
    run_id = new_run_id()
    with app.http() as client:
        inbox = create_inbox(client, run_id, ttl_s=1)
        received = _received(app, client, inbox)
        deadline = time.monotonic() + 10
        while client.get(f"/v1/inboxes/{inbox['inbox_id']}").json()["state"] != "expired":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        response = _claim(client, received["message"]["message_id"], run_id)
    body = response.json()
    assert response.status_code == 409
    assert (body["state"], body["status"], body["reason"]) == (
        "expired",
        "blocked",
        "lease_expired",
    )
    assert body["next_action"] == "create_new_inbox"


def test_same_run_replay_wins_over_lease_expired(app: InProcess) -> None:
    """A claimed inbox keeps its claim after expiry; the same run's replay is already_claimed."""
    run_id = new_run_id()
    with app.http() as client:
        inbox = create_inbox(client, run_id, ttl_s=1)
        received = _received(app, client, inbox)
        message_id = received["message"]["message_id"]
        _claim(client, message_id, run_id)
        deadline = time.monotonic() + 10
        while client.get(f"/v1/inboxes/{inbox['inbox_id']}").json()["state"] != "expired":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        replay = _claim(client, message_id, run_id)
        got = client.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
    assert replay.status_code == 200 and replay.json()["reason"] == "already_claimed"
    assert (got["state"], got["status"], got["next_action"]) == ("expired", "completed", "proceed")
    assert got["claim"]["message_id"] == message_id


def test_any_routed_message_can_be_claimed_and_moves_the_cursor(app: InProcess) -> None:
    """A message never returned by a wait can be claimed; a wait never returns a claimed one."""
    run_id = new_run_id()
    with app.http() as client:
        inbox = create_inbox(client, run_id)
        app.send(inbox["address"], subject="one")
        app.send(inbox["address"], subject="two")
        listed = client.get(f"/v1/inboxes/{inbox['inbox_id']}/messages").json()["messages"]
        second = listed[1]["message_id"]
        claimed = _claim(client, second, run_id).json()
        waited = wait(client, inbox["inbox_id"]).json()
    assert claimed["state"] == "received" and claimed["message"]["subject"] == "two"
    # The stored cursor moved past "two", so "one" (before it) is no longer beyond it.
    assert waited["state"] == "waiting"


def test_given_cursor_reads_from_there_but_never_moves_the_stored_one_back(app: InProcess) -> None:
    """A wait from an older cursor can return an older unclaimed message; the stored one holds."""
    run_id = new_run_id()
    with app.http() as client:
        inbox = create_inbox(client, run_id)
        start_cursor = inbox["cursor"]
        app.send(inbox["address"], subject="alpha")
        mismatch = wait(client, inbox["inbox_id"], match={"subject_contains": "zzz"}).json()
        again = wait(client, inbox["inbox_id"], cursor=start_cursor).json()
    assert mismatch["reason"] == "evidence_mismatch"
    assert again["state"] == "received" and again["message"]["subject"] == "alpha"


def test_match_criteria_are_literal_and_case_insensitive(app: InProcess) -> None:
    """subject/from/body criteria are literal substrings: regex characters mean themselves."""
    run_id = new_run_id()
    with app.http() as client:
        inbox = create_inbox(client, run_id)
        app.send(inbox["address"], subject="Order .* confirmed", body="Total: $42 (VAT incl.)")
        regexish = wait(client, inbox["inbox_id"], match={"subject_contains": "ORDER .*"}).json()
        inbox2 = create_inbox(client, run_id, purpose="p2")
        app.send(inbox2["address"], subject="Order 1 confirmed", sender="Shop <shop@store.test>")
        no_literal = wait(client, inbox2["inbox_id"], match={"subject_contains": "order .*"}).json()
        inbox3 = create_inbox(client, run_id, purpose="p3", match={"from_contains": "STORE.test"})
        app.send(
            inbox3["address"], subject="Hi", sender="shop@store.test", body="Your PIN is in here"
        )
        by_from = wait(client, inbox3["inbox_id"]).json()
        inbox4 = create_inbox(client, run_id, purpose="p4")
        app.send(inbox4["address"], subject="Hi", html="<p>Click <b>VERIFY now</b></p>")
        by_body = wait(client, inbox4["inbox_id"], match={"body_contains": "verify NOW"}).json()
    assert regexish["state"] == "received"
    assert no_literal["state"] == "waiting" and no_literal["reason"] == "evidence_mismatch"
    assert by_from["state"] == "received"
    assert by_body["state"] == "received"


def test_from_contains_matches_the_display_name_too(app: InProcess) -> None:
    """from_contains matches the From's decoded display name as well as its address (as the
    search's from: does); a needle in neither is a mismatch."""
    run_id = new_run_id()
    sender = "=?UTF-8?Q?J=C3=BCrgen_at_Acme?= <noreply@mailer.test>"
    answers = []
    with app.http() as client:
        for n, needle in enumerate(["jürgen AT acme", "NOREPLY@mailer", "globex"]):
            inbox = create_inbox(client, run_id, purpose=f"from{n}")
            app.send(inbox["address"], subject="Welcome", sender=sender)
            match = {"from_contains": needle}
            answers.append(wait(client, inbox["inbox_id"], match=match).json()["reason"])
    assert answers == [None, None, "evidence_mismatch"]


def test_max_age_ignores_older_mail(app: InProcess) -> None:
    """max_age_s ignores mail received longer ago than that, at the time of the wait."""
    with app.http() as client:
        inbox = create_inbox(client)
        app.send(inbox["address"], subject="old")
        time.sleep(1.2)  # the criterion itself is about real age: the mail must be older than 1 s
        body = wait(client, inbox["inbox_id"], match={"max_age_s": 1}).json()
    assert body["state"] == "waiting" and body["reason"] == "evidence_mismatch"


def test_list_messages_pages_with_cursor(app: InProcess) -> None:
    """Listing pages oldest first; next_cursor continues as more mail arrives."""
    with app.http() as client:
        inbox = create_inbox(client)
        for n in range(3):
            app.send(inbox["address"], subject=f"m{n}")
        first = client.get(f"/v1/inboxes/{inbox['inbox_id']}/messages", params={"limit": 2}).json()
        second = client.get(
            f"/v1/inboxes/{inbox['inbox_id']}/messages", params={"after": first["next_cursor"]}
        ).json()
        app.send(inbox["address"], subject="m3")
        third = client.get(
            f"/v1/inboxes/{inbox['inbox_id']}/messages", params={"after": second["next_cursor"]}
        ).json()
    assert [m["subject"] for m in first["messages"]] == ["m0", "m1"] and first["has_more"]
    assert [m["subject"] for m in second["messages"]] == ["m2"] and not second["has_more"]
    assert [m["subject"] for m in third["messages"]] == ["m3"]
    assert set(first["messages"][0]) == {
        "message_id",
        "subject",
        "from",
        "received_at",
        "size",
        "claimed",
    }


def test_invalid_cursor_is_400(app: InProcess) -> None:
    """A cursor that is not ours, or another inbox's, is 400 invalid_cursor."""
    with app.http() as client:
        inbox = create_inbox(client)
        other = create_inbox(client)
        bad = wait(client, inbox["inbox_id"], cursor="not-a-cursor")
        foreign = wait(client, inbox["inbox_id"], cursor=other["cursor"])
        listed = client.get(f"/v1/inboxes/{inbox['inbox_id']}/messages", params={"after": "zz"})
    for response in (bad, foreign, listed):
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid_cursor"


def test_a_cursor_past_the_last_delivery_is_400_and_skips_nothing(app: InProcess) -> None:
    """A cursor in our format for a position this inbox never reached (made up, not issued)
    is 400 invalid_cursor on wait and list, and moves nothing: the unclaimed mail and the
    mail that comes later are still found."""
    import base64

    with app.http() as client:
        inbox = create_inbox(client)
        app.send(inbox["address"], subject="first")
        issued = client.get(f"/v1/inboxes/{inbox['inbox_id']}/messages").json()["next_cursor"]
        made_up = [
            "c1_" + base64.urlsafe_b64encode(f"{inbox['inbox_id']}.{seq}".encode()).decode()
            for seq in ("999999", "00")  # never reached; a spelling we never write
        ]
        refused = [
            *(wait(client, inbox["inbox_id"], cursor=cursor) for cursor in made_up),
            client.get(f"/v1/inboxes/{inbox['inbox_id']}/messages", params={"after": made_up[0]}),
        ]
        app.send(inbox["address"], subject="second")
        unclaimed = wait(client, inbox["inbox_id"]).json()
        later = wait(client, inbox["inbox_id"], cursor=issued).json()
    for response in refused:
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid_cursor"
    assert (unclaimed["state"], unclaimed["message"]["subject"]) == ("received", "first")
    assert (later["state"], later["message"]["subject"]) == ("received", "second")


def test_read_message_returns_bodies_links_codes_and_envelope(app: InProcess) -> None:
    """read_message returns text, html, headers, links, codes and the SMTP envelope."""
    run_id = new_run_id()
    with app.http() as client:
        inbox = create_inbox(client, run_id)
        app.send(
            inbox["address"],
            subject="Verify your email",
            body="Your code is 482913.\nVerify: https://app.test/verify?t=abc",
            html='<p>Code <b>482913</b> <a href="https://app.test/verify?t=abc">Verify</a></p>',
            sender="App <noreply@app.test>",
        )
        received = wait(client, inbox["inbox_id"], timeout_s=5).json()
        message_id = received["message"]["message_id"]
        read = client.get(f"/v1/messages/{message_id}", headers={"X-Run-Id": run_id})
        mismatch = client.get(f"/v1/messages/{message_id}", params={"run_id": new_run_id("x")})
        raw = client.get(f"/v1/messages/{message_id}/raw")
    body = read.json()
    assert read.status_code == 200
    assert body["subject"] == "Verify your email" and body["from"] == "noreply@app.test"
    assert "482913" in body["text"] and "<b>482913</b>" in body["html"]
    assert body["codes"][0] == "482913"
    assert body["links"][0] == "https://app.test/verify?t=abc"
    assert body["envelope"] == {
        "mail_from": "noreply@app.test",
        "rcpt_to": [inbox["address"]],
        "auth_user": None,  # the sender did not log in (v3)
    }
    assert body["released_at"] is None and body["claimed"] is False
    assert mismatch.status_code == 403 and mismatch.json()["reason"] == "wrong_run"
    assert raw.headers["content-type"].startswith("message/rfc822")
    assert raw.headers["content-disposition"].startswith("attachment")
    assert b"Subject: Verify your email" in raw.content


def test_release_expires_and_drops_bodies(app: InProcess) -> None:
    """DELETE /v1/runs/{id} expires inboxes (lease), deletes bodies, keeps metadata; idempotent."""
    run_id = new_run_id()
    with app.http() as client:
        inbox = create_inbox(client, run_id)
        received = _received(app, client, inbox, subject="Secret")
        message_id = received["message"]["message_id"]
        first = client.delete(f"/v1/runs/{run_id}")
        second = client.delete(f"/v1/runs/{run_id}")
        got = client.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
        read = client.get(f"/v1/messages/{message_id}").json()
        raw = client.get(f"/v1/messages/{message_id}/raw")
        report = client.get(f"/v1/runs/{run_id}").json()
    assert first.status_code == 204 and second.status_code == 204
    assert got["state"] == "expired" and got["reason"] == "lease"
    assert read["text"] is None and read["html"] is None and read["released_at"] is not None
    assert read["subject"] == "Secret"
    assert raw.status_code == 410 and raw.json()["error"]["code"] == "evidence_released"
    types = [e["type"] for e in report["events"]]
    assert "released" in types and "expired" in types
    assert report["inboxes"][0]["evidence_release_at"] is not None


def test_release_answers_a_waiting_long_poll(app: InProcess) -> None:
    """A long-poll in progress on a released inbox answers expired at once."""
    run_id = new_run_id()
    with app.http() as client:
        inbox = create_inbox(client, run_id)

        def release() -> None:
            with app.http() as other:
                other.delete(f"/v1/runs/{run_id}")

        releaser = threading.Timer(0.3, release)
        releaser.start()
        started = time.monotonic()
        body = wait(client, inbox["inbox_id"], timeout_s=8).json()
        elapsed = time.monotonic() - started
        releaser.join()
    assert body["state"] == "expired"
    assert elapsed < 5


def test_run_report_has_the_inbox_facts_and_ordered_events(app: InProcess) -> None:
    """The run report names reservation, last poll, accepted message and release time, in order."""
    run_id = new_run_id()
    with app.http() as client:
        inbox = create_inbox(client, run_id)
        received = _received(app, client, inbox)
        _claim(client, received["message"]["message_id"], run_id)
        report = client.get(f"/v1/runs/{run_id}").json()
        missing = client.get(f"/v1/runs/{new_run_id('nobody')}")
    entry = report["inboxes"][0]
    assert (
        entry["reserved_at"] and entry["last_poll_at"] and entry["last_poll_latency_ms"] is not None
    )
    assert entry["accepted_message_id"] == received["message"]["message_id"]
    assert entry["last_change_reason"] == "evidence_found"
    assert entry["evidence_release_at"] is not None
    types = [e["type"] for e in report["events"]]
    assert types == ["created", "message_accepted", "polled", "claimed"]
    stamps = [e["at"] for e in report["events"]]
    assert stamps == sorted(stamps)
    assert missing.status_code == 404


def test_unrouted_mail_is_kept_with_its_body(app: InProcess) -> None:
    """Mail for our domain with no inbox is caught mail: listed newest first, readable whole."""
    rcpt = f"{new_run_id('nobody')}@sink.test"
    app.send(rcpt, subject="lost letter", body="the body is kept")
    with app.http() as client:
        body = client.get("/v1/unrouted", params={"limit": 500}).json()
        ours = [u for u in body["messages"] if u["rcpt_to"] == [rcpt]]
        assert len(ours) == 1
        assert ours[0]["subject"] == "lost letter"
        read = client.get(f"/v1/unrouted/{ours[0]['id']}").json()
    assert "the body is kept" in read["text"]


def test_plus_tag_and_case_reach_the_same_inbox(app: InProcess) -> None:
    """local+anything@domain and upper case reach the same inbox."""
    with app.http() as client:
        inbox = create_inbox(client)
        local, domain = inbox["address"].split("@")
        app.send(f"{local.upper()}+signup@{domain.upper()}", subject="tagged")
        body = wait(client, inbox["inbox_id"], timeout_s=5).json()
    assert body["state"] == "received" and body["message"]["subject"] == "tagged"


def test_a_quoted_local_part_reaches_the_same_inbox(app: InProcess) -> None:
    """RCPT TO:<"local+tag"@domain> is the mailbox local+tag@domain (RFC 5322 3.4.1: the
    quotes are not part of it); a quoted part that is no dot-atom stays caught mail."""
    with app.http() as client:
        inbox = create_inbox(client)
        local, domain = inbox["address"].split("@")
        with app.smtp() as smtp:
            smtp.ehlo()
            smtp.mail("app@example.test")
            code, text = smtp.rcpt(f'"{local}+quoted"@{domain}')
            assert (code, b"caught" in text) == (250, False)
            code, text = smtp.rcpt(f'"{local} x"@{domain}')
            assert (code, b"caught" in text) == (250, True)
            smtp.data(b"Subject: quoted\r\n\r\nbody\r\n")
        body = wait(client, inbox["inbox_id"], timeout_s=5).json()
    assert body["state"] == "received" and body["message"]["subject"] == "quoted"


def test_trace_continues_from_header_or_inbox(app: InProcess) -> None:
    """A request's trace comes from traceparent or X-Trace-Id, else continues the inbox's trace."""
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with app.http() as client:
        created = client.post(
            "/v1/inboxes",
            json={"run_id": new_run_id(), "purpose": "t"},
            headers={"traceparent": parent},
        ).json()
        continued = client.get(f"/v1/inboxes/{created['inbox_id']}")
        explicit = client.get(
            f"/v1/inboxes/{created['inbox_id']}", headers={"X-Trace-Id": "my-trace-1"}
        )
        junk = client.get(
            f"/v1/inboxes/{created['inbox_id']}", headers={"X-Trace-Id": "bad trace!"}
        )
    assert created["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert continued.json()["trace_id"] == created["trace_id"]
    assert continued.headers["x-trace-id"] == created["trace_id"]
    assert explicit.json()["trace_id"] == "my-trace-1"
    assert junk.json()["trace_id"] not in (created["trace_id"], "bad trace!")
    assert junk.headers["x-trace-id"] == junk.json()["trace_id"]


def test_reads_of_an_inbox_and_its_mail_continue_the_inbox_trace(server: Server) -> None:
    """The message list, a message, its raw bytes and an attachment answer with the inbox's
    trace when the caller sends none, and with the caller's when it does."""
    with server.http() as client:
        inbox = create_inbox(client)
        received = _received(server, client, inbox)
        message_id = received["message"]["message_id"]
        paths = [
            f"/v1/inboxes/{inbox['inbox_id']}/messages",
            f"/v1/messages/{message_id}",
            f"/v1/messages/{message_id}/raw",
        ]
        for path in paths:
            continued = client.get(path)
            assert continued.status_code == 200, path
            assert continued.headers["x-trace-id"] == inbox["trace_id"], path
            explicit = client.get(path, headers={"X-Trace-Id": "my-own-trace"})
            assert explicit.headers["x-trace-id"] == "my-own-trace", path
    # The access log line of a message's read names the message, under the inbox's trace.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        logged = [
            line
            for line in server.log_lines()
            if line.get("event") == "http_request"
            and line.get("route") == "/v1/messages/{message_id}/raw"
            and line.get("message_id") == message_id
        ]
        if logged:
            break
        time.sleep(0.05)
    assert logged and logged[0]["trace_id"] == inbox["trace_id"]


def test_log_lines_of_reads_and_release_name_their_run_inbox_and_trace(server: Server) -> None:
    """The access lines of a message's read and raw bytes name its run and inbox as well as
    the message; the release's line carries the request's trace (the X-Trace-Id it answered)."""
    with server.http() as client:
        inbox = create_inbox(client)
        message_id = _received(server, client, inbox)["message"]["message_id"]
        client.get(f"/v1/messages/{message_id}")
        client.get(f"/v1/messages/{message_id}/raw")
        released = client.delete(f"/v1/runs/{inbox['run_id']}")
    routes = {"/v1/messages/{message_id}", "/v1/messages/{message_id}/raw"}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = server.log_lines()
        reads = [
            line
            for line in lines
            if line.get("event") == "http_request"
            and line.get("route") in routes
            and line.get("message_id") == message_id
        ]
        release = [
            line
            for line in lines
            if line.get("event") == "run_released" and line.get("run_id") == inbox["run_id"]
        ]
        if len(reads) == 2 and release:
            break
        time.sleep(0.05)
    assert len(reads) == 2
    for line in reads:
        assert (line.get("run_id"), line.get("inbox_id")) == (inbox["run_id"], inbox["inbox_id"])
    assert release and release[0].get("trace_id") == released.headers["x-trace-id"]


@pytest.mark.parametrize(
    ("traceparent", "kept"),
    [
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", True),
        ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later-field", True),
        ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", False),  # version ff
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", False),  # v00: 4 fields
        ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", False),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", False),
        ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", False),  # uppercase
    ],
)
def test_traceparent_is_taken_only_when_w3c_valid(
    app: InProcess, traceparent: str, kept: bool
) -> None:
    """A valid traceparent's trace id is the request's trace; an invalid one starts a new one."""
    with app.http() as client:
        answer = client.get("/healthz", headers={"traceparent": traceparent})
    trace = answer.headers["x-trace-id"]
    assert (trace == "4bf92f3577b34da6a3ce929d0e0e4736") is kept, trace


def test_get_naming_another_run_is_wrong_run(app: InProcess) -> None:
    """GET /v1/inboxes/{id} with X-Run-Id of another run is 403 wrong_run; the owner is fine."""
    run_id = new_run_id()
    with app.http() as client:
        inbox = create_inbox(client, run_id)
        other = client.get(
            f"/v1/inboxes/{inbox['inbox_id']}", headers={"X-Run-Id": new_run_id("x")}
        )
        owner = client.get(f"/v1/inboxes/{inbox['inbox_id']}", params={"run_id": run_id})
    assert other.status_code == 403 and other.json()["reason"] == "wrong_run"
    assert inbox["address"] not in other.text
    assert owner.status_code == 200


def test_claim_takes_the_run_from_x_run_id(app: InProcess) -> None:
    """A claim may name its run with X-Run-Id instead of the body."""
    run_id = new_run_id()
    with app.http() as client:
        inbox = create_inbox(client, run_id)
        received = _received(app, client, inbox)
        response = client.post(
            f"/v1/messages/{received['message']['message_id']}/claim", headers={"X-Run-Id": run_id}
        )
    assert response.status_code == 200 and response.json()["next_action"] == "proceed"


def test_a_long_poll_whose_client_goes_away_ends_and_spends_nothing(server: Server) -> None:
    """When the client hangs up mid long-poll, the wait ends at once and records no poll."""
    import socket

    with server.http() as client:
        inbox = create_inbox(client)
        body = b'{"timeout_s": 9}'
        request = (
            f"POST /v1/inboxes/{inbox['inbox_id']}/wait HTTP/1.1\r\nHost: localhost\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        with socket.create_connection(("127.0.0.1", server.http_port)) as raw:
            raw.sendall(request)
            deadline = time.monotonic() + 5
            while "runsink_active_long_polls 1.0" not in client.get("/metrics").text:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        # The socket is closed: the server notices and ends the wait.
        deadline = time.monotonic() + 5
        while "runsink_active_long_polls 0.0" not in client.get("/metrics").text:
            assert time.monotonic() < deadline, "the abandoned long-poll is still waiting"
            time.sleep(0.02)
        after = client.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
    assert after["attempt"] == 0 and after["state"] == "created"
