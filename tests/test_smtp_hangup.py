"""A client that goes away right after its final dot (issue 22): the message is stored once
its final dot has arrived, whether the client stays for the 250 or not.

aiosmtpd cancelled the command loop as soon as the client's side ended, and with it the read
of what had arrived and the store: 0, 1 or 0 of 3 such messages were kept. Each timing here is
tried several times on one real server over real sockets, and every message must be listed.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.support import Server, create_inbox, make_certificate, start_server
from tests.test_smtp_hardening import SENDER, Raw, messages

TRIES = 6
DEADLINE_S = 10.0


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("hangup-tls")
    cert, key = make_certificate(folder, "sink.test")
    running = start_server(folder, "--tls-cert", str(cert), "--tls-key", str(key))
    yield running
    running.stop()


def transaction(to: str, subject: str) -> bytes:
    return (
        f"EHLO client.example.test\r\nMAIL FROM:<{SENDER}>\r\nRCPT TO:<{to}>\r\nDATA\r\n"
        f"Subject: {subject}\r\n\r\nbody\r\n.\r\n"
    ).encode()


def closed(client: Raw) -> None:
    client.sock.close()


def quit_then_closed(client: Raw) -> None:
    client.send(b"QUIT\r\n")
    client.sock.close()


def half_closed(client: Raw) -> None:
    """shutdown(SHUT_WR): the client's side ends; it still reads the replies to the end."""
    client.sock.shutdown(socket.SHUT_WR)
    replies = client.rest()
    assert replies and replies[-1].startswith("250"), replies  # the 250 after the dot
    client.sock.close()


def reset(client: Raw) -> None:
    """SO_LINGER 0: close() sends a RST instead of a FIN."""
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.sock.close()


ENDINGS: dict[str, Callable[[Raw], None]] = {
    "close": closed,
    "quit-close": quit_then_closed,
    "half-close": half_closed,
    "reset": reset,
}


def wait_for_count(http: httpx.Client, inbox_id: str, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        listed = messages(http, inbox_id)
        if len(listed) >= count or time.monotonic() > deadline:
            return listed
        time.sleep(0.05)


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_a_pipelined_message_is_stored_when_the_client_leaves_after_the_dot(
    server: Server, http: httpx.Client, ending: str
) -> None:
    """The whole transaction in one write, then the client leaves (close, QUIT and close,
    half-close, reset): every message is stored."""
    inbox = create_inbox(http)
    for n in range(TRIES):
        client = Raw(server.smtp_port)
        client.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.send(transaction(inbox["address"], f"{ending} {n}"))
        ENDINGS[ending](client)
    listed = wait_for_count(http, inbox["inbox_id"], TRIES)
    assert sorted(m["subject"] for m in listed) == [f"{ending} {n}" for n in range(TRIES)]


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_a_message_is_stored_when_the_client_leaves_right_after_its_dot(
    server: Server, http: httpx.Client, ending: str
) -> None:
    """A client that waits for each reply up to 354, then sends the message and its dot
    and leaves at once: every message is stored."""
    inbox = create_inbox(http)
    for n in range(TRIES):
        client = Raw(server.smtp_port)
        assert client.code() == 220
        assert client.cmd("EHLO client.example.test") == 250
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250
        assert client.cmd(f"RCPT TO:<{inbox['address']}>") == 250
        assert client.cmd("DATA") == 354
        client.send(f"Subject: {ending} {n}\r\n\r\nbody\r\n.\r\n")
        ENDINGS[ending](client)
    listed = wait_for_count(http, inbox["inbox_id"], TRIES)
    assert sorted(m["subject"] for m in listed) == [f"{ending} {n}" for n in range(TRIES)]


@pytest.mark.parametrize("ending", ["close", "quit-close", "reset"])  # TLS: no half-close
def test_a_message_over_starttls_is_stored_when_the_client_leaves_after_the_dot(
    tls_server: Server, ending: str
) -> None:
    """Over STARTTLS too (where the end of the client's side closes the TLS layer), the
    transaction sent in one write and the client gone at once: every message is stored."""
    with tls_server.http() as http:
        inbox = create_inbox(http)
        for n in range(TRIES):
            client = Raw(tls_server.smtp_port)
            assert client.code() == 220
            assert client.cmd("EHLO client.example.test") == 250
            assert client.cmd("STARTTLS") == 220
            client.starttls()
            client.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            client.send(transaction(inbox["address"], f"tls {ending} {n}"))
            ENDINGS[ending](client)
        listed = wait_for_count(http, inbox["inbox_id"], TRIES)
    assert sorted(m["subject"] for m in listed) == [f"tls {ending} {n}" for n in range(TRIES)]


def test_the_server_sends_nothing_between_the_handshake_and_the_first_command(
    tls_server: Server,
) -> None:
    """No TLS 1.3 session ticket follows the handshake: a write there, to a client that
    already sent its transaction and reset, closed the socket with the transaction unread."""
    client = Raw(tls_server.smtp_port)
    assert client.code() == 220
    assert client.cmd("EHLO client.example.test") == 250
    assert client.cmd("STARTTLS") == 220
    client.starttls()
    assert client.cmd("EHLO client.example.test") == 250  # read after any ticket sent before
    assert isinstance(client.sock, ssl.SSLSocket)
    assert client.sock.version() == "TLSv1.3"
    session = client.sock.session
    assert session is not None and not session.has_ticket
    client.sock.close()


def test_a_message_cut_before_its_dot_is_not_stored(server: Server, http: httpx.Client) -> None:
    """A client that leaves before the final dot stores nothing (no 250 was owed), and the
    next message on a new connection is stored."""
    inbox = create_inbox(http)
    client = Raw(server.smtp_port)
    client.send(transaction(inbox["address"], "cut")[: -len(".\r\n")])
    client.sock.shutdown(socket.SHUT_WR)
    assert not any(line.startswith("250 2.0.0") for line in client.rest())
    client.sock.close()
    client = Raw(server.smtp_port)
    client.send(transaction(inbox["address"], "whole"))
    half_closed(client)
    assert [m["subject"] for m in wait_for_count(http, inbox["inbox_id"], 1)] == ["whole"]


def test_the_server_logs_no_trouble_for_clients_that_left(server: Server) -> None:
    """Clients leaving at every timing above are no trouble: no warning or error is logged."""
    before = len(server.log_lines())
    for ending in ENDINGS.values():
        client = Raw(server.smtp_port)
        client.send(transaction("someone@elsewhere.test", "log check"))
        ending(client)
    with server.http() as http:  # the last one's message is stored: the others ran before it
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            listed = http.get("/v1/unrouted", params={"limit": 50}).json()["messages"]
            if sum(m["subject"] == "log check" for m in listed) >= len(ENDINGS):
                break
            time.sleep(0.05)
    troubles = [
        line
        for line in server.log_lines()[before:]
        if line["level"] in ("warning", "error") and line["event"].startswith(("smtp", "library"))
    ]
    assert troubles == []


def test_commands_after_the_half_close_are_all_answered(server: Server) -> None:
    """After a half-close the server answers every command sent before it, then closes."""
    client = Raw(server.smtp_port)
    client.send(b"EHLO client.example.test\r\nNOOP\r\nNOOP\r\nRSET\r\n")
    client.sock.shutdown(socket.SHUT_WR)
    replies = [line for line in client.rest() if not line.startswith("250-")]
    client.sock.close()
    assert [line[:3] for line in replies] == ["220", "250", "250", "250", "250"]
