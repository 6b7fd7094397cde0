"""STARTTLS only when it can succeed (issue 8 item 1): a certificate, require-TLS, SMTPS.

Real servers in subprocesses, real TLS over sockets. A client that verifies is given the
test certificate as its CA; one that does not trust it must be refused, and the server's
log must say why (the client's alert), never with mail content.
"""

from __future__ import annotations

import smtplib
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import Server, create_inbox, make_certificate, start_server
from tests.test_smtp_hardening import Raw, greeted, messages

SENDER = "app@example.test"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_certificate(tmp_path_factory.mktemp("tls"), "sink.test")


@pytest.fixture(scope="module")
def tls_server(
    tmp_path_factory: pytest.TempPathFactory, certificate: tuple[Path, Path]
) -> Iterator[Server]:
    cert, key = certificate
    running = start_server(
        tmp_path_factory.mktemp("tls-server"),
        "--tls-cert", str(cert), "--tls-key", str(key), "--smtps-port", "0",
    )  # fmt: skip
    yield running
    running.stop()


@pytest.fixture(scope="module")
def strict_server(
    tmp_path_factory: pytest.TempPathFactory, certificate: tuple[Path, Path]
) -> Iterator[Server]:
    cert, key = certificate
    running = start_server(
        tmp_path_factory.mktemp("strict-server"),
        "--tls-cert", str(cert), "--tls-key", str(key), "--smtp-require-tls",
        "--smtps-port", "0",
    )  # fmt: skip
    yield running
    running.stop()


def trusting(cert: Path) -> ssl.SSLContext:
    """A client that verifies, with the test certificate as its CA."""
    return ssl.create_default_context(cafile=str(cert))


def mail(to: str, subject: str) -> bytes:
    return f"From: {SENDER}\r\nTo: {to}\r\nSubject: {subject}\r\n\r\nbody\r\n".encode()


def subjects(server: Server, inbox_id: str) -> list[str]:
    with server.http() as http:
        return [m["subject"] for m in messages(http, inbox_id)]


def tls_failures(server: Server, count: int) -> list[dict[str, Any]]:
    """The server's smtp_tls_failed lines, polled until there are ``count`` (or 10 s pass)."""
    deadline = time.monotonic() + 10
    while True:
        found = [line for line in server.log_lines() if line["event"] == "smtp_tls_failed"]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_no_starttls_without_a_certificate(server: Server) -> None:
    """Without --tls-cert, EHLO offers no STARTTLS, STARTTLS is 502 (a command this server
    does not have: permanent, not aiosmtpd's 454), and plaintext mail lands."""
    with server.http() as http:
        inbox = create_inbox(http)
    with server.smtp() as client:
        client.ehlo()
        assert "starttls" not in client.esmtp_features
        code, text = client.docmd("STARTTLS")
        assert (code, text) == (502, b"5.5.1 STARTTLS is not offered by this server")
        client.sendmail(SENDER, [inbox["address"]], mail(inbox["address"], "plain"))
    assert subjects(server, inbox["inbox_id"]) == ["plain"]
    assert "tls_certificate_generated" not in {line["event"] for line in server.log_lines()}


def test_starttls_with_the_configured_certificate(
    tls_server: Server, certificate: tuple[Path, Path]
) -> None:
    """With --tls-cert/--tls-key, STARTTLS is offered, verifies, and mail over it is stored."""
    cert, _ = certificate
    with tls_server.http() as http:
        inbox = create_inbox(http)
    with tls_server.smtp() as client:
        client.ehlo()
        assert "starttls" in client.esmtp_features
        assert client.starttls(context=trusting(cert))[0] == 220  # verified, host 127.0.0.1
        client.ehlo()
        assert "starttls" not in client.esmtp_features
        assert client.docmd("STARTTLS")[0] == 503  # no TLS inside TLS
        client.sendmail(SENDER, [inbox["address"]], mail(inbox["address"], "over starttls"))
    assert subjects(tls_server, inbox["inbox_id"]) == ["over starttls"]


def test_plaintext_pipelined_after_starttls_is_discarded(tls_server: Server) -> None:
    """Commands sent in the clear after STARTTLS never run inside the TLS session."""
    with tls_server.http() as http:
        inbox = create_inbox(http)
    with Raw(tls_server.smtp_port) as client:
        greeted(client)
        client.send(f"STARTTLS\r\nMAIL FROM:<{SENDER}>\r\nRCPT TO:<{inbox['address']}>\r\n")
        assert client.code() == 220
        client.starttls()
        client.send("EHLO client.example.test\r\n")
        assert client.reply().startswith("250-sink.test")
        assert client.cmd(f"RCPT TO:<{inbox['address']}>") == 503  # the MAIL was dropped
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250


def test_smtps_port_speaks_tls_from_the_first_byte(
    tls_server: Server, certificate: tuple[Path, Path]
) -> None:
    """--smtps-port: the greeting comes inside TLS (verified), no STARTTLS, mail is stored."""
    cert, _ = certificate
    assert tls_server.smtps_port is not None
    with tls_server.http() as http:
        inbox = create_inbox(http)
    with smtplib.SMTP_SSL(
        "127.0.0.1", tls_server.smtps_port, context=trusting(cert), timeout=30
    ) as client:
        client.ehlo()
        assert "starttls" not in client.esmtp_features
        assert client.docmd("STARTTLS")[0] == 503
        client.sendmail(SENDER, [inbox["address"]], mail(inbox["address"], "over smtps"))
    assert subjects(tls_server, inbox["inbox_id"]) == ["over smtps"]


def test_require_tls_refuses_mail_before_starttls(
    strict_server: Server, certificate: tuple[Path, Path]
) -> None:
    """--smtp-require-tls: MAIL in the clear is 530; after STARTTLS, or on SMTPS, it is 250."""
    cert, _ = certificate
    assert strict_server.smtps_port is not None
    with strict_server.http() as http:
        inbox = create_inbox(http)
    with strict_server.smtp() as client:
        client.ehlo()
        code, reply = client.mail(SENDER)
        assert code == 530 and b"STARTTLS" in reply
        client.rset()
        client.starttls(context=trusting(cert))
        client.ehlo()
        client.sendmail(SENDER, [inbox["address"]], mail(inbox["address"], "after starttls"))
    with smtplib.SMTP_SSL(
        "127.0.0.1", strict_server.smtps_port, context=trusting(cert), timeout=30
    ) as client:
        client.sendmail(SENDER, [inbox["address"]], mail(inbox["address"], "on smtps"))
    assert subjects(strict_server, inbox["inbox_id"]) == ["after starttls", "on smtps"]


def test_a_refused_handshake_is_logged_with_the_clients_alert(tls_server: Server) -> None:
    """A client that does not trust the certificate fails; the log names its alert, no content."""
    assert tls_server.smtps_port is not None
    before = len(tls_failures(tls_server, 0))
    untrusting = ssl.create_default_context()  # the system CAs: our test cert is unknown
    with tls_server.smtp() as client:
        client.ehlo()
        with pytest.raises(ssl.SSLCertVerificationError):
            client.starttls(context=untrusting)
    with pytest.raises(ssl.SSLCertVerificationError):
        smtplib.SMTP_SSL("127.0.0.1", tls_server.smtps_port, context=untrusting, timeout=30)
    found = tls_failures(tls_server, before + 2)[before:]
    assert {line["mode"] for line in found} == {"starttls", "implicit"}
    for line in found:
        assert line["level"] == "warning"
        assert line["client_alert"] is True
        assert "ALERT" in line["reason"], line  # e.g. TLSV1_ALERT_UNKNOWN_CA
        assert set(line) <= {"time", "level", "event", "mode", "reason", "client_alert"}


def test_a_plaintext_client_on_the_smtps_port_is_logged_and_closed(tls_server: Server) -> None:
    """Plain SMTP to the SMTPS port gets no greeting; the log says the handshake failed."""
    assert tls_server.smtps_port is not None
    before = len(tls_failures(tls_server, 0))
    with Raw(tls_server.smtps_port) as client:
        client.send("EHLO client.example.test\r\n")
        assert not any(line.startswith("220") for line in client.rest())
    (line,) = tls_failures(tls_server, before + 1)[before:]
    assert line["mode"] == "implicit" and line["client_alert"] is False


def test_no_starttls_flag_hides_starttls_but_keeps_smtps(
    tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    """--smtp-no-starttls with a certificate: STARTTLS not offered; --smtps-port still works."""
    cert, key = certificate
    server = start_server(
        tmp_path, "--tls-cert", str(cert), "--tls-key", str(key), "--smtp-no-starttls",
        "--smtps-port", "0",
    )  # fmt: skip
    try:
        with server.smtp() as client:
            client.ehlo()
            assert "starttls" not in client.esmtp_features
            assert client.docmd("STARTTLS")[0] == 502
        assert server.smtps_port is not None
        with smtplib.SMTP_SSL(
            "127.0.0.1", server.smtps_port, context=trusting(cert), timeout=30
        ) as client:
            assert client.noop()[0] == 250
    finally:
        server.stop()


def test_failed_smtps_handshakes_give_their_connection_slot_back(
    tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    """Refused SMTPS handshakes leave no connection counted: past the limit, 220 still comes."""
    cert, key = certificate
    server = start_server(
        tmp_path, "--tls-cert", str(cert), "--tls-key", str(key), "--smtps-port", "0",
        "--smtp-max-connections", "2",
    )  # fmt: skip
    assert server.smtps_port is not None
    try:
        for _ in range(4):
            with pytest.raises(ssl.SSLCertVerificationError):
                smtplib.SMTP_SSL(
                    "127.0.0.1", server.smtps_port, context=ssl.create_default_context()
                )
        tls_failures(server, 4)
        deadline = time.monotonic() + 10
        while True:  # the server sees the closes asynchronously: poll until greeted
            with Raw(server.smtp_port) as client:
                if client.code() == 220:
                    break
            assert time.monotonic() < deadline, "refused handshakes kept their slots"
        with smtplib.SMTP_SSL(
            "127.0.0.1", server.smtps_port, context=trusting(cert), timeout=30
        ) as client:
            assert client.noop()[0] == 250
    finally:
        server.stop()
