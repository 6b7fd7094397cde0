"""Ordinary SMTP behaviour, end to end: smtplib in, the HTTP API out, on a real server."""

from __future__ import annotations

import base64
import io
import sqlite3
import uuid
from concurrent.futures import ThreadPoolExecutor
from email.generator import BytesGenerator
from email.message import EmailMessage
from typing import Any

import httpx
import pytest

from tests.support import Server, create_inbox, new_run_id, on_each_backend, psql

SENDER = "app@example.test"
LARGEST_MESSAGE_BYTES = 26214400  # the built-in max_message_bytes; no test policy raises it


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest, server: Server) -> Server:
    """Every test here runs against a server on each persistent backend."""
    return on_each_backend(request, server)


def messages(http: httpx.Client, inbox_id: str) -> list[dict[str, Any]]:
    response = http.get(f"/v1/inboxes/{inbox_id}/messages", params={"limit": 500})
    assert response.status_code == 200, response.text
    listed: list[dict[str, Any]] = response.json()["messages"]
    return listed


def raw_of(http: httpx.Client, message_id: str) -> bytes:
    response = http.get(f"/v1/messages/{message_id}/raw")
    assert response.status_code == 200, response.text
    return response.content


def plain(to: str, subject: str = "Hello", body: str = "Hello from the app.\r\n") -> bytes:
    return (
        f"From: {SENDER}\r\nTo: {to}\r\nSubject: {subject}\r\n"
        f"Message-ID: <{uuid.uuid4().hex}@example.test>\r\n\r\n{body}"
    ).encode()


def test_ehlo_advertises_the_contracts_extensions(server: Server) -> None:
    """EHLO offers SIZE, 8BITMIME, SMTPUTF8, PIPELINING, ENHANCEDSTATUSCODES; no STARTTLS
    without a certificate (contract v2); AUTH PLAIN LOGIN CRAM-MD5 (contract v3)."""
    with server.smtp() as client:
        code, _ = client.ehlo("client.example.test")
        assert code == 250
        assert client.esmtp_features["size"] == str(LARGEST_MESSAGE_BYTES)
        for extension in ("8bitmime", "smtputf8", "pipelining", "enhancedstatuscodes"):
            assert extension in client.esmtp_features, extension
        assert client.esmtp_features["auth"].split() == ["PLAIN", "LOGIN", "CRAM-MD5"]
        assert "starttls" not in client.esmtp_features


def test_dot_stuffed_lines_come_back_exactly(server: Server, http: httpx.Client) -> None:
    """Lines that start with a dot survive the round trip byte for byte (RFC 5321 4.5.2)."""
    inbox = create_inbox(http)
    body = ".\r\n..\r\n.leading dot\r\n...three\r\ntrailing dot.\r\n. \r\nend\r\n"
    original = plain(inbox["address"], "Dots", body)
    with server.smtp() as client:
        client.sendmail(SENDER, [inbox["address"]], original)
    (listed,) = messages(http, inbox["inbox_id"])
    assert raw_of(http, listed["message_id"]) == original
    assert listed["size"] == len(original)


def test_smtputf8_sender_and_encoded_subject(server: Server, http: httpx.Client) -> None:
    """A UTF-8 envelope sender is kept as sent and an RFC 2047 subject is decoded in the API."""
    inbox = create_inbox(http)
    sender = "jöhn@exämple.test"
    subject = "Grüße: bitte bestätigen ✓"
    encoded = "=?utf-8?b?" + base64.b64encode(subject.encode()).decode() + "?="
    raw = (
        f"From: Jöhn <{sender}>\r\nTo: {inbox['address']}\r\nSubject: {encoded}\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n"
        "Content-Transfer-Encoding: 8bit\r\n\r\nHallo Jöhn.\r\n"
    ).encode()
    with server.smtp() as client:
        client.ehlo()
        assert client.has_extn("smtputf8")
        client.sendmail(sender, [inbox["address"]], raw, mail_options=["SMTPUTF8", "BODY=8BITMIME"])
    (listed,) = messages(http, inbox["inbox_id"])
    assert listed["subject"] == subject
    message = http.get(f"/v1/messages/{listed['message_id']}").json()
    assert message["subject"] == subject
    assert message["envelope"]["mail_from"] == sender
    assert message["from"] == sender
    assert raw_of(http, listed["message_id"]) == raw


def test_declared_size_over_the_limit_is_552_at_mail(server: Server, http: httpx.Client) -> None:
    """MAIL with SIZE above the advertised limit gets 552; the connection stays usable."""
    inbox = create_inbox(http)
    with server.smtp() as client:
        client.ehlo()
        code, _ = client.mail(SENDER, [f"SIZE={LARGEST_MESSAGE_BYTES + 1}"])
        assert code == 552
        code, _ = client.mail(SENDER, [f"SIZE={LARGEST_MESSAGE_BYTES}"])
        assert code == 250
        assert client.rcpt(inbox["address"])[0] == 250
        assert client.data(plain(inbox["address"]))[0] == 250
    assert len(messages(http, inbox["inbox_id"])) == 1


def test_declared_size_over_the_inbox_policy_is_552_at_rcpt(
    server: Server, http: httpx.Client
) -> None:
    """RCPT for an inbox whose policy is smaller than the declared SIZE gets 552; others pass."""
    small = create_inbox(http, policy="small")
    roomy = create_inbox(http)
    with server.smtp() as client:
        client.ehlo()
        assert client.mail(SENDER, ["SIZE=5000"])[0] == 250
        assert client.rcpt(small["address"])[0] == 552
        assert client.rcpt(roomy["address"])[0] == 250
        assert client.data(plain(roomy["address"]))[0] == 250
        assert client.noop()[0] == 250
    assert messages(http, small["inbox_id"]) == []
    assert len(messages(http, roomy["inbox_id"])) == 1


def test_message_over_the_inbox_policy_is_552_after_the_dot(
    server: Server, http: httpx.Client
) -> None:
    """A message bigger than its inbox's policy is refused after the dot; the next one passes."""
    small = create_inbox(http, policy="small")
    big = plain(small["address"], "Big", ("y" * 78 + "\r\n") * 60)
    assert len(big) > 2048
    with server.smtp() as client:
        client.ehlo()
        assert client.mail(SENDER)[0] == 250  # no SIZE declared: the limit applies at the dot
        assert client.rcpt(small["address"])[0] == 250
        assert client.data(big)[0] == 552
        client.sendmail(SENDER, [small["address"]], plain(small["address"], "Small"))
    (listed,) = messages(http, small["inbox_id"])
    assert listed["subject"] == "Small"


def test_address_outside_our_domain_is_caught(server: Server) -> None:
    """RCPT for another domain is 250 (contract v2: catch-all); the mail is kept, not relayed."""
    with server.smtp() as client:
        client.ehlo()
        assert client.mail(SENDER)[0] == 250
        code, text = client.rcpt("someone@example.com")
        assert code == 250
        assert b"caught" in text


def test_bad_commands_get_5xx_and_the_connection_keeps_working(
    server: Server, http: httpx.Client
) -> None:
    """Unknown, malformed and out-of-order commands are 5xx; a good transaction then passes."""
    inbox = create_inbox(http)
    with server.smtp() as client:
        assert client.docmd("RCPT", f"TO:<{inbox['address']}>")[0] == 503  # before EHLO
        client.ehlo()
        assert client.docmd("FROB")[0] == 500
        assert client.docmd("HELO")[0] == 501
        assert client.docmd("MAIL", "TO:<a@example.test>")[0] == 501
        assert client.docmd("MAIL", "FROM:<a@example.test> FROB=1")[0] == 555
        assert client.docmd("MAIL", "FROM:<a@example.test> BODY=9BIT")[0] == 501
        assert client.docmd("RCPT", f"TO:<{inbox['address']}>")[0] == 503
        assert client.docmd("DATA")[0] == 503
        assert client.docmd("MAIL", "FROM:<a@example.test>")[0] == 250
        assert client.docmd("MAIL", "FROM:<a@example.test>")[0] == 503  # nested
        assert client.docmd("DATA")[0] == 503  # no recipient yet
        assert client.docmd("RSET")[0] == 250
        client.sendmail(SENDER, [inbox["address"]], plain(inbox["address"], "After"))
    (listed,) = messages(http, inbox["inbox_id"])
    assert listed["subject"] == "After"


def test_null_reverse_path_is_accepted(server: Server, http: httpx.Client) -> None:
    """MAIL FROM:<> (a bounce) is accepted and kept as an empty envelope sender."""
    inbox = create_inbox(http)
    with server.smtp() as client:
        client.ehlo()
        assert client.docmd("MAIL", "FROM:<>")[0] == 250
        assert client.rcpt(inbox["address"])[0] == 250
        assert client.data(plain(inbox["address"], "Bounce"))[0] == 250
    (listed,) = messages(http, inbox["inbox_id"])
    message = http.get(f"/v1/messages/{listed['message_id']}").json()
    assert message["envelope"]["mail_from"] == ""


def test_pipelined_transaction_is_answered_in_order(server: Server, http: httpx.Client) -> None:
    """A whole transaction sent in one write gets its replies in order (RFC 2920)."""
    inbox = create_inbox(http)
    address = inbox["address"]
    with server.smtp() as client:
        client.ehlo()
        client.send(
            f"MAIL FROM:<{SENDER}>\r\nRCPT TO:<{address}>\r\nDATA\r\n".encode()
            + plain(address, "Pipelined")
            + b".\r\nNOOP\r\n"
        )
        codes = [client.getreply()[0] for _ in range(5)]
    assert codes == [250, 250, 354, 250, 250]
    (listed,) = messages(http, inbox["inbox_id"])
    assert listed["subject"] == "Pipelined"


def test_200_messages_from_20_concurrent_clients_are_all_stored(
    server: Server, http: httpx.Client
) -> None:
    """Twenty clients sending ten messages each at once: all 200 are stored, none twice."""
    inbox = create_inbox(http)
    address = inbox["address"]

    def client_sends(client_no: int) -> None:
        with server.smtp() as client:
            for n in range(10):
                client.sendmail(SENDER, [address], plain(address, f"m-{client_no}-{n}"))

    with ThreadPoolExecutor(max_workers=20) as pool:
        for done in [pool.submit(client_sends, c) for c in range(20)]:
            done.result()
    listed = messages(http, inbox["inbox_id"])
    assert sorted(m["subject"] for m in listed) == sorted(
        f"m-{c}-{n}" for c in range(20) for n in range(10)
    )


def test_mail_for_an_address_without_inbox_is_listed_as_unrouted(
    server: Server, http: httpx.Client
) -> None:
    """Mail for our domain with no inbox is accepted and listed in /v1/unrouted."""
    nobody = f"nobody-{uuid.uuid4().hex[:10]}@sink.test"
    with server.smtp() as client:
        client.sendmail(SENDER, [nobody], plain(nobody, "Lost"))
    listed = http.get("/v1/unrouted", params={"limit": 500}).json()["messages"]
    (item,) = [u for u in listed if u["rcpt_to"] == [nobody]]
    assert item["mail_from"] == SENDER
    assert item["subject"] == "Lost"
    assert set(item) == {"id", "mail_from", "rcpt_to", "subject", "received_at", "size"}


def test_one_message_for_several_inboxes_is_stored_once_and_delivered_to_each(
    server: Server, http: httpx.Client
) -> None:
    """Three inboxes (one named twice) each get one delivery of the one stored message."""
    inboxes = [create_inbox(http) for _ in range(3)]
    first = inboxes[0]["address"]
    tagged = first.replace("@", "+again@")
    rcpts = [i["address"] for i in inboxes] + [tagged]
    original = plain(", ".join(rcpts), "For three")
    with server.smtp() as client:
        client.sendmail(SENDER, rcpts, original)
    delivered = [messages(http, i["inbox_id"]) for i in inboxes]
    assert [len(d) for d in delivered] == [1, 1, 1]
    ids = [d[0]["message_id"] for d in delivered]
    assert len(set(ids)) == 3
    assert all(raw_of(http, message_id) == original for message_id in ids)
    envelope = http.get(f"/v1/messages/{ids[0]}").json()["envelope"]
    assert sorted(envelope["rcpt_to"]) == sorted([first, tagged])
    if isinstance(server.db, str):
        listed = ",".join(f"'{i}'" for i in ids)  # our own ids: msg_ and base32
        rows = psql(
            server.db, f"SELECT DISTINCT message_key FROM deliveries WHERE message_id IN ({listed})"
        )
        assert len(rows) == 1
        return
    with sqlite3.connect(f"file:{server.db}?mode=ro", uri=True) as db:
        rows = db.execute(
            f"SELECT DISTINCT message_pk FROM deliveries WHERE message_id IN ({','.join('?' * 3)})",
            ids,
        ).fetchall()
    assert len(rows) == 1


def test_late_arrival_under_reject_is_550_at_rcpt(server: Server, http: httpx.Client) -> None:
    """Mail for an expired inbox whose policy says reject is refused at RCPT with 550."""
    run_id = new_run_id()
    inbox = create_inbox(http, run_id, policy="strict")
    assert http.delete(f"/v1/runs/{run_id}").status_code == 204
    with server.smtp() as client:
        client.ehlo()
        assert client.mail(SENDER)[0] == 250
        assert client.rcpt(inbox["address"])[0] == 550
        assert client.noop()[0] == 250
    assert messages(http, inbox["inbox_id"]) == []


def test_late_arrival_under_drop_is_250_and_kept_as_an_event(
    server: Server, http: httpx.Client
) -> None:
    """Mail for an expired inbox under drop gets 250, is never listed, and is a run event."""
    run_id = new_run_id()
    inbox = create_inbox(http, run_id)
    assert http.delete(f"/v1/runs/{run_id}").status_code == 204
    with server.smtp() as client:
        client.ehlo()
        assert client.mail(SENDER)[0] == 250
        assert client.rcpt(inbox["address"])[0] == 250
        assert client.data(plain(inbox["address"], "Too late"))[0] == 250
    assert messages(http, inbox["inbox_id"]) == []
    events = http.get(f"/v1/runs/{run_id}").json()["events"]
    assert [e["type"] for e in events if e["type"] == "late_arrival"] == ["late_arrival"]


def test_email_message_with_attachment_round_trips(server: Server, http: httpx.Client) -> None:
    """A multipart message sent by smtplib's send_message is stored as the bytes it sent."""
    inbox = create_inbox(http)
    message = EmailMessage()
    message["From"] = SENDER
    message["To"] = inbox["address"]
    message["Subject"] = "With attachment"
    message.set_content("See attached.\n.\nA lone dot above.\n")
    message.add_attachment(b"\x00\x01binary" * 100, maintype="application", subtype="octet-stream")
    message.set_boundary("runsink-test-boundary")  # so both flattenings agree
    with server.smtp() as client:
        client.send_message(message)
    (listed,) = messages(http, inbox["inbox_id"])
    flattened = io.BytesIO()
    BytesGenerator(flattened).flatten(message, linesep="\r\n")
    assert raw_of(http, listed["message_id"]) == flattened.getvalue()


def test_every_reply_carries_an_enhanced_status_code(server: Server) -> None:
    """ENHANCEDSTATUSCODES is kept: aiosmtpd's own replies get RFC 3463 codes too."""
    import re

    with server.smtp() as client:
        client.ehlo("client.example.test")
        for command in ("NOOP", "RSET", "BOGUS", "EXPN x", "DATA", "MAIL FROM:<bad"):
            code, text = client.docmd(command)
            assert re.match(rb"[245]\.\d+\.\d+ ", text), (command, code, text)
        code, text = client.docmd("QUIT")
        assert (code, text) == (221, b"2.0.0 Bye")
