"""Catch-all (contract v2): any recipient is accepted and kept; only live inboxes get evidence."""

from __future__ import annotations

import smtplib
import time
import uuid
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.inproc import InProcess, Served
from tests.support import app_on_each_backend, create_inbox, new_run_id, wait

SENDER = "app@example.test"


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def app(request: pytest.FixtureRequest) -> InProcess:
    """Each check runs against the app on each persistent backend, in this process."""
    result: InProcess = app_on_each_backend(request)
    return result


@pytest.fixture
def http(app: InProcess) -> Iterator[httpx.Client]:
    """A client of the test's app."""
    with app.http() as client:
        yield client


def _caught(http: httpx.Client, rcpt: str) -> list[dict[str, Any]]:
    listed = http.get("/v1/unrouted", params={"limit": 500}).json()["messages"]
    return [item for item in listed if rcpt in item["rcpt_to"]]


def _send(app: Served, to: list[str], subject: str, body: str = "hello") -> None:
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = SENDER, ", ".join(to), subject
    message.set_content(body)
    with app.smtp() as client:
        client.send_message(message, to_addrs=to)


def test_mail_to_gmail_is_250_caught_readable_and_never_evidence(
    app: InProcess, http: httpx.Client
) -> None:
    """someone@gmail.com gets 250, is readable as caught mail, and no inbox's wait sees it."""
    inbox = create_inbox(http)
    first = wait(http, inbox["inbox_id"]).json()
    assert first["reason"] == "evidence_not_found"
    subject = f"welcome {uuid.uuid4().hex[:8]}"
    with app.smtp() as client:
        client.ehlo()
        assert client.mail(SENDER)[0] == 250
        assert client.rcpt("someone@gmail.com")[0] == 250
        message = (
            f"From: Acme <{SENDER}>\r\nTo: someone@gmail.com\r\nSubject: {subject}\r\n\r\n"
            "Your code is 482913\r\n"
        )
        assert client.data(message.encode())[0] == 250

    (item,) = [c for c in _caught(http, "someone@gmail.com") if c["subject"] == subject]
    assert item["mail_from"] == SENDER
    assert item["id"].startswith("cm_")
    read = http.get(f"/v1/unrouted/{item['id']}").json()
    assert read["caught"] is True
    assert read["codes"] == ["482913"]
    assert (read["from"], read["from_name"], read["parse_warnings"]) == (SENDER, "Acme", [])
    assert read["envelope"] == {
        "mail_from": SENDER,
        "rcpt_to": ["someone@gmail.com"],
        "auth_user": None,  # the sender did not log in (v3)
    }
    raw = http.get(f"/v1/unrouted/{item['id']}/raw")
    assert raw.headers["content-type"] == "message/rfc822"
    assert b"Your code is 482913" in raw.content

    # No inbox's wait, list or claim ever sees it.
    again = wait(http, inbox["inbox_id"]).json()
    assert again["state"] == "waiting" and again["reason"] == "evidence_not_found"
    assert http.get(f"/v1/inboxes/{inbox['inbox_id']}/messages").json()["messages"] == []
    assert http.get(f"/v1/messages/{item['id']}").status_code == 404
    claim = http.post(f"/v1/messages/{item['id']}/claim", json={"run_id": inbox["run_id"]})
    assert claim.status_code == 404


def test_message_with_both_kinds_of_recipients_is_stored_once(
    app: InProcess, http: httpx.Client
) -> None:
    """Evidence for the inbox, caught mail for the rest; the body stays while either needs it."""
    run_id = new_run_id("both")
    inbox = create_inbox(http, run_id)
    stranger = f"stranger-{uuid.uuid4().hex[:8]}@elsewhere.example"
    _send(app, [inbox["address"], stranger], "for two", "shared body")
    found = wait(http, inbox["inbox_id"], timeout_s=5).json()
    message_id = found["message"]["message_id"]
    read = http.get(f"/v1/messages/{message_id}").json()
    assert read["envelope"]["rcpt_to"] == [inbox["address"]]
    (item,) = _caught(http, stranger)
    assert item["rcpt_to"] == [stranger]

    # Releasing the run keeps the caught copy's body (stored once, needed by caught mail).
    assert http.delete(f"/v1/runs/{run_id}").status_code == 204
    assert http.get(f"/v1/messages/{message_id}/raw").status_code == 410
    assert b"shared body" in http.get(f"/v1/unrouted/{item['id']}/raw").content


def test_late_arrival_is_not_caught_mail(
    tmp_path: Path, policy_file: str, own_db: str | None
) -> None:
    """Mail for an expired inbox follows late_arrival (dropped, recorded), never caught mail."""
    running = InProcess(tmp_path, "--policy-file", policy_file, db=own_db)
    try:
        with running.http() as client:
            run_id = new_run_id("late")
            inbox = create_inbox(client, run_id)
            assert client.delete(f"/v1/runs/{run_id}").status_code == 204
            _send(running, [inbox["address"]], "too late")
            assert _caught(client, inbox["address"]) == []
            events = client.get(f"/v1/runs/{run_id}").json()["events"]
            assert "late_arrival" in [e["type"] for e in events]
    finally:
        running.stop()


def test_reject_unknown_recipients_restores_the_refusal(tmp_path: Path) -> None:
    """--reject-unknown-recipients: 550 at RCPT naming the accepted domains; inboxes still work."""
    running = InProcess(
        tmp_path,
        "--reject-unknown-recipients",
        "--domain",
        "sink.test",
        "--domain",
        "*.example.test",
    )
    try:
        with running.http() as client:
            inbox = create_inbox(client)
        with running.smtp() as smtp:
            smtp.ehlo()
            assert smtp.mail(SENDER)[0] == 250
            code, text = smtp.rcpt("someone@gmail.com")
            assert code == 550
            assert b"sink.test, *.example.test" in text
            assert smtp.rcpt("nobody@sink.test")[0] == 550
            assert smtp.rcpt(inbox["address"])[0] == 250
    finally:
        running.stop()


def test_several_domains_and_wildcards_route_to_inboxes(tmp_path: Path, own_db: str | None) -> None:
    """--domain is repeatable, with *.example.test wildcards; addresses use the first one."""
    running = InProcess(tmp_path, "--domain", "mail.test", "--domain", "*.example.test", db=own_db)
    try:
        with running.http() as client:
            inbox = create_inbox(client)
            local, domain = inbox["address"].split("@")
            assert domain == "mail.test"
            _send(running, [f"{local}@staging.example.test"], "wildcard")
            body = wait(client, inbox["inbox_id"], timeout_s=5).json()
            assert body["message"]["subject"] == "wildcard"
            _send(running, [f"{local}@example.test"], "bare parent")  # not *.example.test
            assert [c["subject"] for c in _caught(client, f"{local}@example.test")] == [
                "bare parent"
            ]
    finally:
        running.stop()


def test_caught_mail_is_deleted_after_its_retention(tmp_path: Path, own_db: str | None) -> None:
    """catch_all_retention_s of the default policy: caught mail goes when it ends."""
    policies = tmp_path / "p.toml"
    policies.write_text("[policy.ci]\ncatch_all_retention_s = 1\n")
    running = InProcess(tmp_path, "--policy-file", str(policies), db=own_db)
    try:
        with running.http() as client:
            _send(running, ["short@gmail.com"], "short-lived")
            (item,) = _caught(client, "short@gmail.com")
            deadline = time.monotonic() + 15
            while client.get(f"/v1/unrouted/{item['id']}").status_code == 200:
                assert time.monotonic() < deadline, "caught mail outlived its retention"
                time.sleep(0.2)  # polling with a deadline: the sweeper runs every second
            assert client.get(f"/v1/unrouted/{item['id']}/raw").status_code == 404
            assert _caught(client, "short@gmail.com") == []
    finally:
        running.stop()


def test_caught_mail_pages_newest_first_with_a_cursor(app: InProcess, http: httpx.Client) -> None:
    """limit and cursor page through caught mail, newest first; a foreign cursor is 400."""
    tag = uuid.uuid4().hex[:8]
    for n in range(3):
        _send(app, [f"page-{tag}@gmail.com"], f"page {n}")
    first = http.get("/v1/unrouted", params={"limit": 2}).json()
    assert first["has_more"] is True
    assert [m["subject"] for m in first["messages"]] == ["page 2", "page 1"]
    second = http.get("/v1/unrouted", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    assert second["messages"][0]["subject"] == "page 0"
    bad = http.get("/v1/unrouted", params={"cursor": "c1_bm9wZQ"})
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid_cursor"
    assert http.get("/v1/unrouted/cm_nope").status_code == 404


def test_an_app_sending_to_any_domain_sees_no_refusal(app: InProcess) -> None:
    """smtplib sending to any domain raises nothing (only a malformed address is refused)."""
    with app.smtp() as client:
        refused = client.sendmail(
            SENDER, ["a@gmail.com", "b@yahoo.example"], b"Subject: x\r\n\r\nx"
        )
    assert refused == {}
    with pytest.raises(smtplib.SMTPRecipientsRefused), app.smtp() as client:
        client.sendmail(SENDER, ["bad address@x"], b"Subject: x\r\n\r\nx")


def test_over_the_size_cap_the_oldest_caught_mail_goes_first(
    tmp_path: Path, own_db: str | None
) -> None:
    """--max-store-mb counts caught mail: the oldest goes first; live evidence stays."""
    running = InProcess(tmp_path, "--max-store-mb", "1", db=own_db)
    try:
        with running.http() as client:
            inbox = create_inbox(client)
            _send(running, ["big@gmail.com"], "big", "x" * 700_000)
            _send(running, [inbox["address"]], "live", "y" * 400_000)
            (big,) = _caught(client, "big@gmail.com")
            deadline = time.monotonic() + 15
            while client.get(f"/v1/unrouted/{big['id']}").status_code == 200:
                assert time.monotonic() < deadline, "caught mail outlived the size cap"
                time.sleep(0.2)  # polling with a deadline: the sweeper runs every second
            found = wait(client, inbox["inbox_id"], timeout_s=5).json()
            message_id = found["message"]["message_id"]
            assert client.get(f"/v1/messages/{message_id}/raw").status_code == 200
    finally:
        running.stop()
