"""SMTP input hardening (issue 4): smuggling, strict paths, HTTP, limits (AUTH, TLS: elsewhere).

Most tests speak raw bytes over a socket to the real server and check what was stored over
the HTTP API. Timeouts and the connection limit need limits too small for a real server's
defaults: those run the same listener (``Connections`` + ``Handler`` over a real SQLite
store) in-process with small ``Limits``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, TypeVar

import httpx
import pytest

from sink.config import Settings
from sink.errors import StorageError
from sink.ingest import Ingest
from sink.metrics import Metrics
from sink.smtp.handler import Handler
from sink.smtp.limits import Limits
from sink.smtp.protocol import Connections
from sink.smtp.syntax import command_path, header_field_count, http_request_line
from sink.storage.base import Incoming
from sink.storage.sqlite.store import SQLiteStore
from sink.waiters import Waiters
from tests.support import Server, create_inbox, make_certificate, start_server

SENDER = "app@example.test"
LIMITS = Limits()
LIMITS_SIZE = 26214400  # the built-in max_message_bytes (EHLO's SIZE on the test server)


class Raw:
    """A raw SMTP client: bytes out, replies in, and the server's hang-up seen as EOF."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        # The timeout is a safety net for a broken server, never part of an assertion.
        self.sock: socket.socket = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = b""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes | str) -> None:
        self.sock.sendall(data.encode() if isinstance(data, str) else data)

    def _line(self) -> bytes | None:
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.rstrip(b"\r")

    def reply(self) -> str:
        """One whole reply (all its lines); raises EOFError if the server hung up."""
        lines: list[str] = []
        while True:
            line = self._line()
            if line is None:
                raise EOFError(lines)
            lines.append(line.decode())
            if line[3:4] != b"-":
                return "\n".join(lines)

    def code(self) -> int:
        return int(self.reply()[:3])

    def cmd(self, line: bytes | str) -> int:
        self.send(line.encode() + b"\r\n" if isinstance(line, str) else line + b"\r\n")
        return self.code()

    def rest(self) -> list[str]:
        """Every line until the server closes the connection."""
        lines = []
        while (line := self._line()) is not None:
            lines.append(line.decode())
        return lines

    def starttls(self) -> None:
        assert self.buffer == b"", "plaintext left over before the TLS handshake"
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        self.sock = context.wrap_socket(self.sock)


def messages(http: httpx.Client, inbox_id: str) -> list[dict[str, Any]]:
    response = http.get(f"/v1/inboxes/{inbox_id}/messages", params={"limit": 500})
    assert response.status_code == 200, response.text
    listed: list[dict[str, Any]] = response.json()["messages"]
    return listed


def raw_of(http: httpx.Client, message_id: str) -> bytes:
    response = http.get(f"/v1/messages/{message_id}/raw")
    assert response.status_code == 200, response.text
    return response.content


def unstuffed(data: bytes) -> bytes:
    """RFC 5321 4.5.2: each CRLF-ended line loses one leading dot."""
    lines = data.split(b"\r\n")
    return b"\r\n".join(line[1:] if line.startswith(b".") else line for line in lines)


RawT = TypeVar("RawT", bound="Raw")


def greeted(client: RawT) -> RawT:
    assert client.code() == 220
    assert client.cmd("EHLO client.example.test") == 250
    return client


def in_data(client: Raw, address: str) -> Raw:
    """Greeted, one recipient accepted, and DATA answered 354: the message comes next."""
    greeted(client)
    assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250
    assert client.cmd(f"RCPT TO:<{address}>") == 250
    assert client.cmd("DATA") == 354
    return client


# -- SMTP smuggling ----------------------------------------------------------------------

MALFORMED_END_MARKERS = {
    "LF.LF": b"\n.\n",
    "LF.CRLF": b"\n.\r\n",
    "CRLF.LF": b"\r\n.\n",
    "CR.CR": b"\r.\r",
    "CR.LF": b"\r.\n",
    "LF.CR": b"\n.\r",
    "CR.CRLF": b"\r.\r\n",
    "CRLF.CR": b"\r\n.\r",
    "CRLF.NUL-CRLF": b"\r\n.\x00\r\n",
    "CRLF-NUL.CRLF": b"\r\n\x00.\r\n",
}


@pytest.mark.parametrize("marker", MALFORMED_END_MARKERS.values(), ids=MALFORMED_END_MARKERS)
def test_malformed_end_of_data_never_ends_the_message(
    server: Server, http: httpx.Client, marker: bytes
) -> None:
    """Only <CRLF>.<CRLF> ends DATA: a smuggled second transaction stays text of the first."""
    inbox = create_inbox(http)
    victim = create_inbox(http)
    smuggled = (
        f"MAIL FROM:<ceo@example.test>\r\nRCPT TO:<{victim['address']}>\r\nDATA\r\n"
        "From: ceo@example.test\r\nSubject: smuggled\r\n\r\nPay now.\r\n"
    ).encode()
    body = (
        f"From: {SENDER}\r\nTo: {inbox['address']}\r\nSubject: carrier\r\n\r\nHello".encode()
        + marker
        + smuggled
    )
    with Raw(server.smtp_port) as client:
        greeted(client)
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250
        assert client.cmd(f"RCPT TO:<{inbox['address']}>") == 250
        assert client.cmd("DATA") == 354
        client.send(body + b".\r\nQUIT\r\n")
        assert [line[:3] for line in client.rest()] == ["250", "221"]
    (listed,) = messages(http, inbox["inbox_id"])
    assert listed["subject"] == "carrier"
    assert raw_of(http, listed["message_id"]) == unstuffed(body)
    assert messages(http, victim["inbox_id"]) == []


def test_only_crlf_dot_crlf_ends_data_even_split_across_writes(
    server: Server, http: httpx.Client
) -> None:
    """The end marker split over several packets still ends DATA once, at the right place."""
    inbox = create_inbox(http)
    with Raw(server.smtp_port) as client:
        greeted(client)
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250
        assert client.cmd(f"RCPT TO:<{inbox['address']}>") == 250
        assert client.cmd("DATA") == 354
        for piece in (b"Subject: split\r\n\r\nbody\r", b"\n", b".", b"\r", b"\n"):
            client.send(piece)
        assert client.code() == 250
    (listed,) = messages(http, inbox["inbox_id"])
    assert raw_of(http, listed["message_id"]) == b"Subject: split\r\n\r\nbody\r\n"


# -- strict envelope addresses -----------------------------------------------------------


def bad_recipients(local: str) -> list[bytes]:
    """Malformed forms of an inbox's address: none may be repaired into the inbox."""
    return [
        f"RCPT TO:<{local} @sink.test>".encode(),
        f"RCPT TO:<{local}(comment)@sink.test>".encode(),
        f"RCPT TO:<{local[:5]} {local[5:]}@sink.test>".encode(),
        f"RCPT TO:<{local}@sink.test >".encode(),
        f"RCPT TO:<{local}\x00@sink.test>".encode(),
        f"RCPT TO:<{local}\r@sink.test>".encode(),
        f"RCPT TO:<\t{local}@sink.test>".encode(),
        f"RCPT TO:<{local}@sink.test".encode(),
        f"RCPT TO:{local} x@sink.test".encode(),
        f'RCPT TO:<"{local}"@sink.test'.encode(),
        f"RCPT TO:<{local}@sink.test> NOTIFY=NEVER".encode(),
        b"RCPT TO:<temp gamil com@sink.test>",
        b"RCPT TO:<>",
        b"RCPT TO:",
        b"RCPT TO:<@relay.test:>",
    ]


def test_malformed_recipients_are_refused_never_repaired(
    server: Server, http: httpx.Client
) -> None:
    """NUL, bare CR, spaces outside quotes, comments and <> in RCPT are 5xx; nothing arrives."""
    target = create_inbox(http)
    control = create_inbox(http)
    local = target["address"].split("@")[0]
    with Raw(server.smtp_port) as client:
        greeted(client)
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250
        for line in bad_recipients(local):
            code = client.cmd(line)
            assert 500 <= code < 600, line
        assert client.cmd(f"RCPT TO:<{control['address']}>") == 250
        assert client.cmd("DATA") == 354
        assert client.cmd(b"Subject: control\r\n\r\nbody\r\n.") == 250
    assert messages(http, target["inbox_id"]) == []
    assert len(messages(http, control["inbox_id"])) == 1
    unrouted = http.get("/v1/unrouted", params={"limit": 500}).json()["messages"]
    rcpts = [r for u in unrouted for r in u["rcpt_to"]]
    assert not [r for r in rcpts if "gamil" in r or local in r]


def test_bare_lf_inside_a_path_is_refused(server: Server, http: httpx.Client) -> None:
    """A bare LF splits the command: both halves are refused, the inbox gets nothing."""
    inbox = create_inbox(http)
    local = inbox["address"].split("@")[0]
    with Raw(server.smtp_port) as client:
        greeted(client)
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250
        client.send(f"RCPT TO:<{local}\n@sink.test>\r\n")
        assert client.code() >= 500
        assert client.code() >= 500
        assert client.cmd("DATA") == 503
        assert client.cmd("NOOP") == 250
    assert messages(http, inbox["inbox_id"]) == []


@pytest.mark.parametrize(
    "line",
    [
        b"MAIL FROM:<a b@example.test>",
        b"MAIL FROM:<a\x00b@example.test>",
        b"MAIL FROM:<a\rb@example.test>",
        b"MAIL FROM:<a(comment)@example.test>",
        b"MAIL FROM:<a@example.test",
        b"MAIL FROM:<j\xc3\xb6hn@example.test>",  # non-ASCII without SMTPUTF8
        b"MAIL FROM:<a@example.test> SIZE=abc",
        b"MAIL FROM:<a@example.test> SIZE",
        b"MAIL FROM:<a@example.test> SMTPUTF8=yes",
        b"MAIL FROM:<a@example.test>SIZE=10",
    ],
)
def test_malformed_senders_are_refused(server: Server, line: bytes) -> None:
    """A malformed reverse-path or parameter is a 5xx, and the session goes on."""
    with Raw(server.smtp_port) as client:
        greeted(client)
        code = client.cmd(line)
        assert 500 <= code < 600
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250


BAD_LITERALS = [
    "[300.1.1.1]",
    "[1.2.3]",
    "[01.2.3.4]",
    "[mail.example.test]",
    "[2001:db8::1]",  # IPv6 needs its tag
    "[IPv6:2001:db8::zz]",
    "[IPv6:fe80::1%eth0]",
    "[X-tag:anything]",
]
GOOD_LITERALS = ["[192.0.2.1]", "[IPv6:2001:db8::1]", "[ipv6:::ffff:192.0.2.1]"]


@pytest.mark.parametrize("literal", BAD_LITERALS)
def test_an_invalid_address_literal_is_refused_at_mail_and_rcpt(
    server: Server, literal: str
) -> None:
    """``user@[300.1.1.1]`` is no address: 553 at MAIL and at RCPT; the session goes on."""
    with Raw(server.smtp_port) as client:
        greeted(client)
        assert client.cmd(f"MAIL FROM:<user@{literal}>") == 553
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250
        assert client.cmd(f"RCPT TO:<user@{literal}>") == 553
        assert client.cmd("RCPT TO:<someone@elsewhere.test>") == 250


@pytest.mark.parametrize("literal", GOOD_LITERALS)
def test_a_valid_address_literal_is_caught_mail(
    server: Server, http: httpx.Client, literal: str
) -> None:
    """IPv4 and ``IPv6:`` literals are addresses: accepted at MAIL and RCPT, kept as caught mail."""
    subject = f"literal {literal}"
    with Raw(server.smtp_port) as client:
        greeted(client)
        assert client.cmd(f"MAIL FROM:<app@{literal}>") == 250
        assert client.cmd(f"RCPT TO:<user@{literal}>") == 250
        assert client.cmd("DATA") == 354
        assert client.cmd(f"Subject: {subject}\r\n\r\nbody\r\n.") == 250
    listed = http.get("/v1/unrouted", params={"limit": 50}).json()["messages"]
    (caught,) = [m for m in listed if m["subject"] == subject]
    assert caught["rcpt_to"] == [f"user@{literal}"] and caught["mail_from"] == f"app@{literal}"


def test_smtputf8_addresses_are_taken_when_declared(server: Server, http: httpx.Client) -> None:
    """With SMTPUTF8 a UTF-8 sender is accepted as sent; a quoted local part may hold spaces."""
    inbox = create_inbox(http)
    with Raw(server.smtp_port) as client:
        greeted(client)
        assert client.cmd("MAIL FROM:<jöhn@exämple.test> SMTPUTF8 BODY=8BITMIME") == 250
        assert client.cmd('RCPT TO:<"temp gamil com"@sink.test>') == 250  # valid: unrouted
        assert client.cmd(f"RCPT TO:<{inbox['address']}>") == 250
        assert client.cmd("DATA") == 354
        assert client.cmd("Subject: utf8\r\n\r\nbody\r\n.") == 250
    (listed,) = messages(http, inbox["inbox_id"])
    message = http.get(f"/v1/messages/{listed['message_id']}").json()
    assert message["envelope"]["mail_from"] == "jöhn@exämple.test"


# -- HTTP on the SMTP port ---------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_http_request_is_refused_before_any_line_runs(
    server: Server, http: httpx.Client, method: str
) -> None:
    """A browser's request line gets an error and a hang-up; the SMTP in its body never runs."""
    inbox = create_inbox(http)
    smtp = (
        f"EHLO evil.test\r\nMAIL FROM:<{SENDER}>\r\nRCPT TO:<{inbox['address']}>\r\n"
        "DATA\r\nSubject: injected\r\n\r\nfrom a browser\r\n.\r\nQUIT\r\n"
    )
    request = (
        f"{method} / HTTP/1.1\r\nHost: 127.0.0.1:{server.smtp_port}\r\n"
        f"Content-Type: text/plain\r\nContent-Length: {len(smtp)}\r\n\r\n{smtp}"
    )
    with Raw(server.smtp_port) as client:
        client.send(request)
        codes = [line[:3] for line in client.rest()]
    assert codes in (["220", "554"], ["554"])  # the greeting may or may not have gone out
    assert messages(http, inbox["inbox_id"]) == []


def test_http_request_line_split_across_packets_is_refused(server: Server) -> None:
    """The request line is recognised even when its method arrives in pieces."""
    with Raw(server.smtp_port) as client:
        assert client.code() == 220
        client.send(b"PO")
        client.send(b"ST /submit HTTP/1.1\r\nHost: localhost\r\n\r\nEHLO x\r\n")
        assert [line[:3] for line in client.rest()] == ["554"]


def test_http_request_line_is_recognised_from_its_first_bytes() -> None:
    """The sniffer answers as soon as the first word is known, and not before."""
    assert http_request_line(b"GET / HTTP/1.1\r\n") is True
    assert http_request_line(b"post /x") is True
    assert http_request_line(b"OPTIONS * HTTP/1.1") is True
    assert http_request_line(b"GE") is None
    assert http_request_line(b"EHLO x\r\n") is False
    assert http_request_line(b"QUIT\r\n") is False
    assert http_request_line(b"GET\r\n") is False
    assert http_request_line(b"NOTAMETHOD") is False


# -- command syntax (pure) ---------------------------------------------------------------


def test_command_path_parses_strictly() -> None:
    """Paths parse to the mailbox as written; anything malformed is None, never repaired."""
    assert command_path("FROM:<a@x.test>", "FROM:") == ("a@x.test", [])
    assert command_path("from: <a@x.test> SIZE=10  BODY=8BITMIME", "FROM:") == (
        "a@x.test",
        ["SIZE=10", "BODY=8BITMIME"],
    )
    assert command_path("FROM:<>", "FROM:") == ("", [])
    assert command_path("TO:a@x.test", "TO:") == ("a@x.test", [])
    assert command_path('TO:<"a b>c"@x.test>', "TO:") == ('"a b>c"@x.test', [])
    assert command_path("TO:<@r1.test,@r2.test:a@x.test>", "TO:") == ("a@x.test", [])
    for bad in (
        "TO:<a b@x.test>",
        "TO:<a@x.test",
        "TO:<a@x.test>x",
        "TO:<a\x00@x.test>",
        "TO:<a@x.test> SIZE=\x01",
        "TO:",
        "FROM:<a@x.test>",
        'TO:<"a@x.test>',
        "TO:<a\u00a0b@x.test>",
    ):
        assert command_path(bad, "TO:") is None, bad


def test_header_fields_are_counted_up_to_the_body() -> None:
    """Folded lines continue a field; the count stops at the empty line and past the limit."""
    raw = b"A: 1\r\nB: 2\r\n  folded\r\n\tmore\r\nC: 3\r\n\r\nD: not a header\r\n"
    assert header_field_count(raw, stop_after=100) == 3
    assert header_field_count(b"A: 1\nB: 2\n\nbody", stop_after=100) == 2
    assert header_field_count(b"X: y\r\n" * 50, stop_after=10) == 11


# -- limits ------------------------------------------------------------------------------


def test_command_line_over_512_octets_is_500_and_the_session_goes_on(server: Server) -> None:
    """A command line longer than 512 octets gets 500; the next command is answered."""
    with Raw(server.smtp_port) as client:
        greeted(client)
        assert client.cmd("NOOP " + "x" * 600) == 500
        assert client.cmd(f"MAIL FROM:<{'a' * 600}@example.test>") == 500
        assert client.cmd("NOOP") == 250


def test_long_text_lines_are_accepted_intact(server: Server, http: httpx.Client) -> None:
    """A 200,000-octet HTML line (far past RFC 5321's 1000) is stored, not lost."""
    inbox = create_inbox(http)
    html = b"<p>" + b"a" * 200_000 + b"</p>"
    body = b"Subject: long line\r\nContent-Type: text/html\r\n\r\n" + html + b"\r\n"
    with Raw(server.smtp_port) as client:
        greeted(client)
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250
        assert client.cmd(f"RCPT TO:<{inbox['address']}>") == 250
        assert client.cmd("DATA") == 354
        assert client.cmd(body + b".") == 250
    (listed,) = messages(http, inbox["inbox_id"])
    assert raw_of(http, listed["message_id"]) == body


def test_text_line_over_the_cap_is_refused_after_the_dot(
    server: Server, http: httpx.Client
) -> None:
    """A DATA line longer than the cap gets a 500 at the dot; the session stays usable."""
    inbox = create_inbox(http)
    with Raw(server.smtp_port) as client:
        greeted(client)
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250
        assert client.cmd(f"RCPT TO:<{inbox['address']}>") == 250
        assert client.cmd("DATA") == 354
        line = b"b" * (LIMITS.max_line_bytes + 10)
        assert client.cmd(b"Subject: too long\r\n\r\n" + line + b"\r\n.") == 500
        assert client.cmd("NOOP") == 250
    assert messages(http, inbox["inbox_id"]) == []


def test_too_many_header_fields_is_552(server: Server, http: httpx.Client) -> None:
    """More header fields than the limit: 552 after the dot; the session stays usable."""
    inbox = create_inbox(http)
    headers = b"".join(b"X-Field-%d: v\r\n" % n for n in range(LIMITS.max_header_fields + 1))
    with Raw(server.smtp_port) as client:
        greeted(client)
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250
        assert client.cmd(f"RCPT TO:<{inbox['address']}>") == 250
        assert client.cmd("DATA") == 354
        assert client.cmd(headers + b"\r\nbody\r\n.") == 552
        assert client.cmd("NOOP") == 250
    assert messages(http, inbox["inbox_id"]) == []


def test_recipients_past_the_limit_get_452(server: Server, http: httpx.Client) -> None:
    """100 recipients are taken; the 101st gets 452, and the message is delivered once."""
    inbox = create_inbox(http)
    local, domain = inbox["address"].split("@")
    with Raw(server.smtp_port) as client:
        greeted(client)
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250
        commands = "".join(
            f"RCPT TO:<{local}+{n}@{domain}>\r\n" for n in range(LIMITS.max_recipients + 1)
        )
        client.send(commands)  # pipelined
        codes = [client.code() for _ in range(LIMITS.max_recipients + 1)]
        assert codes == [250] * LIMITS.max_recipients + [452]
        assert client.cmd("DATA") == 354
        assert client.cmd("Subject: many\r\n\r\nbody\r\n.") == 250
    (listed,) = messages(http, inbox["inbox_id"])
    message = http.get(f"/v1/messages/{listed['message_id']}").json()
    assert len(message["envelope"]["rcpt_to"]) == LIMITS.max_recipients


def test_size_advertised_is_the_real_limit(server: Server) -> None:
    """EHLO's SIZE is the limit MAIL enforces: equal passes, one more is 552."""
    with Raw(server.smtp_port) as client:
        assert client.code() == 220
        client.send("EHLO client.example.test\r\n")
        (size,) = [line[9:] for line in client.reply().splitlines() if line[4:8] == "SIZE"]
        assert client.cmd(f"MAIL FROM:<{SENDER}> SIZE={int(size) + 1}") == 552
        assert client.cmd(f"MAIL FROM:<{SENDER}> SIZE={size}") == 250


def test_a_lying_size_does_not_get_a_big_message_past_its_inbox(
    server: Server, http: httpx.Client
) -> None:
    """SIZE=100 followed by 5,000 octets for a 2,048-octet inbox: 552 at the dot."""
    small = create_inbox(http, policy="small")
    with Raw(server.smtp_port) as client:
        greeted(client)
        assert client.cmd(f"MAIL FROM:<{SENDER}> SIZE=100") == 250
        assert client.cmd(f"RCPT TO:<{small['address']}>") == 250
        assert client.cmd("DATA") == 354
        assert client.cmd(b"Subject: liar\r\n\r\n" + b"z" * 5000 + b"\r\n.") == 552
        assert client.cmd("NOOP") == 250
    assert messages(http, small["inbox_id"]) == []


def test_a_lying_size_does_not_get_past_the_server_limit(
    server: Server, http: httpx.Client
) -> None:
    """SIZE=100 followed by more than the advertised limit: 552 at the dot, session usable."""
    inbox = create_inbox(http)
    line = b"w" * 65_534 + b"\r\n"
    count = LIMITS_SIZE // len(line) + 2
    with Raw(server.smtp_port) as client:
        greeted(client)
        assert client.cmd(f"MAIL FROM:<{SENDER}> SIZE=100") == 250
        assert client.cmd(f"RCPT TO:<{inbox['address']}>") == 250
        assert client.cmd("DATA") == 354
        client.send(b"Subject: flood\r\n\r\n")
        for _ in range(count):
            client.send(line)
        assert client.cmd(".") == 552
        assert client.cmd("NOOP") == 250
    assert messages(http, inbox["inbox_id"]) == []


def test_commands_out_of_order_get_503(server: Server) -> None:
    """MAIL before EHLO, RCPT before MAIL, DATA before RCPT and a nested MAIL are 503."""
    with Raw(server.smtp_port) as client:
        assert client.code() == 220
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 503
        assert client.cmd("EHLO client.example.test") == 250
        assert client.cmd("RCPT TO:<a@sink.test>") == 503
        assert client.cmd("DATA") == 503
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250
        assert client.cmd("DATA") == 503
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 503
        assert client.cmd("RSET") == 250
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250


# -- faults and trouble: 451 and 421, never aiosmtpd's "500 Error" -------------------------


@pytest.fixture()
def faults(http: httpx.Client) -> Iterator[httpx.Client]:
    yield http
    assert http.delete("/v1/faults").status_code in (200, 204)


def add_fault(http: httpx.Client, **spec: Any) -> None:
    response = http.post("/v1/faults", json=spec)
    assert response.status_code == 201, response.text


def test_connect_fault_is_a_421_greeting(server: Server, faults: httpx.Client) -> None:
    """An smtp.connect error fault answers the next connection with 421 and closes it."""
    add_fault(faults, target="smtp.connect", mode="error", count=1)
    with Raw(server.smtp_port) as client:
        assert [line[:3] for line in client.rest()] == ["421"]
    with Raw(server.smtp_port) as client:
        assert client.code() == 220


def test_rcpt_and_data_faults_are_451(server: Server, faults: httpx.Client) -> None:
    """smtp.rcpt and smtp.data error faults are 451s; the same transaction then completes."""
    inbox = create_inbox(faults)
    add_fault(faults, target="smtp.rcpt", mode="error", count=1, run_id=inbox["run_id"])
    add_fault(faults, target="smtp.data", mode="error", count=1, run_id=inbox["run_id"])
    with Raw(server.smtp_port) as client:
        greeted(client)
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250
        assert client.cmd(f"RCPT TO:<{inbox['address']}>") == 451
        assert client.cmd(f"RCPT TO:<{inbox['address']}>") == 250
        assert client.cmd("DATA") == 354
        assert client.cmd("Subject: once\r\n\r\nbody\r\n.") == 451
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250
        assert client.cmd(f"RCPT TO:<{inbox['address']}>") == 250
        assert client.cmd("DATA") == 354
        assert client.cmd("Subject: twice\r\n\r\nbody\r\n.") == 250
    (listed,) = messages(faults, inbox["inbox_id"])
    assert listed["subject"] == "twice"


# -- a server with a configured certificate ----------------------------------------------


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_certificate(tmp_path_factory.mktemp("tls"), "configured.test")


@pytest.fixture(scope="module")
def tls_server(
    tmp_path_factory: pytest.TempPathFactory, tls_files: tuple[Path, Path]
) -> Iterator[Server]:
    cert, key = tls_files
    running = start_server(
        tmp_path_factory.mktemp("tls-server"), "--tls-cert", str(cert), "--tls-key", str(key)
    )
    yield running
    running.stop()


def test_starttls_presents_the_configured_certificate(
    tls_server: Server, tls_files: tuple[Path, Path]
) -> None:
    """With --tls-cert/--tls-key, STARTTLS presents that certificate (a client can verify it)."""
    cert, _ = tls_files
    context = ssl.create_default_context(cafile=str(cert))
    with tls_server.smtp() as client:
        client.ehlo()
        assert client.starttls(context=context)[0] == 220  # verified, host 127.0.0.1
        assert isinstance(client.sock, ssl.SSLSocket)
        presented = client.sock.getpeercert(binary_form=True)
    assert presented == ssl.PEM_cert_to_DER_cert(cert.read_text())


# -- in-process listener: timeouts, the connection limit, storage trouble ----------------


class FailingStore:
    """A real SQLite store whose saves fail as the adapter reports a broken database."""

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def save_message(self, incoming: Incoming) -> None:
        raise StorageError("database disk image is malformed")


class HungStore(FailingStore):
    """A real SQLite store whose saves never answer (a database that hangs)."""

    async def save_message(self, incoming: Incoming) -> None:
        await asyncio.Event().wait()


async def poll(done: Callable[[], bool]) -> None:
    """Wait, with a deadline, for the listener's own count to change (it has no event)."""
    async with asyncio.timeout(10):
        while not done():  # noqa: ASYNC110 - the state is a counter, not an awaitable
            await asyncio.sleep(0.01)


@dataclass
class Listening:
    port: int
    connections: Connections
    store: SQLiteStore


@contextlib.asynccontextmanager
async def listener(
    folder: Path, limits: Limits, failing: bool = False, hung: bool = False
) -> AsyncIterator[Listening]:
    """The production listener (Connections + Handler + Ingest + SQLite) on a free port."""
    settings = Settings(db=folder / "runsink.db")
    store = SQLiteStore(settings.db)
    await store.open()
    used: Any = FailingStore(store) if failing else HungStore(store) if hung else store
    handler = Handler(Ingest(used, Waiters(), settings, Metrics()), Metrics(), None, limits)
    loop = asyncio.get_running_loop()
    connections = Connections(settings, handler, Metrics(), None, loop)
    server = await loop.create_server(connections.plaintext, "127.0.0.1", 0)
    try:
        yield Listening(server.sockets[0].getsockname()[1], connections, store)
    finally:
        server.close()
        await server.wait_closed()
        await poll(lambda: connections.gate.active == 0)  # every connection has closed
        await store.close()


class Client:
    """An asyncio SMTP client for the in-process listener."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int) -> Client:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def line(self) -> str:
        async with asyncio.timeout(10):  # safety net only
            return (await self.reader.readline()).decode().rstrip("\r\n")

    async def cmd(self, line: str) -> str:
        self.writer.write(line.encode() + b"\r\n")
        while (reply := await self.line())[3:4] == "-":
            pass
        return reply

    async def rest(self) -> list[str]:
        lines = []
        while line := await self.line():
            lines.append(line)
        return lines

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


def test_idle_client_is_told_421_and_disconnected(tmp_path: Path) -> None:
    """A client silent past the idle timeout gets 421 4.4.2 and is disconnected."""

    async def scenario() -> list[str]:
        async with listener(tmp_path, Limits(idle_timeout_s=0.2)) as listening:
            client = await Client.connect(listening.port)
            assert (await client.line()).startswith("220 ")
            assert (await client.cmd("EHLO client.example.test")).startswith("250 ")
            lines = await client.rest()
            await client.close()
            return lines

    assert [line[:9] for line in asyncio.run(scenario())] == ["421 4.4.2"]


def test_data_trickled_forever_is_cut_at_the_data_deadline(tmp_path: Path) -> None:
    """A client that keeps trickling DATA lines is cut at the DATA deadline; nothing is stored."""

    async def scenario() -> tuple[list[str], int]:
        limits = Limits(idle_timeout_s=60, data_timeout_s=0.3)
        async with listener(tmp_path, limits) as listening:
            client = await Client.connect(listening.port)
            await client.line()
            await client.cmd("EHLO client.example.test")
            assert (await client.cmd(f"MAIL FROM:<{SENDER}>")).startswith("250")
            assert (await client.cmd("RCPT TO:<nobody@sink.test>")).startswith("250")
            assert (await client.cmd("DATA")).startswith("354")
            reading = asyncio.ensure_future(client.rest())
            async with asyncio.timeout(10):  # the client would trickle for 100 s
                for n in range(1000):
                    if reading.done():
                        break
                    client.writer.write(b"line %d\r\n" % n)
                    await asyncio.sleep(0.1)  # the slow client's pace, not a synchronisation
            lines = await reading
            await client.close()
            return lines, len(await listening.store.mail.caught_page(None, 10))

    lines, stored = asyncio.run(scenario())
    assert [line[:9] for line in lines] == ["421 4.4.2"]
    assert stored == 0


def test_connections_past_the_limit_get_421_and_the_listener_goes_on(tmp_path: Path) -> None:
    """One connection over the limit is 421 and closed; once one leaves, a new one is served."""

    async def scenario() -> None:
        async with listener(tmp_path, Limits(max_connections=2)) as listening:
            port, gate = listening.port, listening.connections.gate
            held = [await Client.connect(port) for _ in range(2)]
            for client in held:
                assert (await client.line()).startswith("220 ")
            extra = await Client.connect(port)
            assert [line[:9] for line in await extra.rest()] == ["421 4.3.2"]
            await extra.close()
            await held.pop().close()
            await poll(lambda: gate.active < 2)
            again = await Client.connect(port)
            assert (await again.line()).startswith("220 ")
            assert (await again.cmd("NOOP")).startswith("250")
            for client in [*held, again]:
                await client.close()

    asyncio.run(scenario())


async def _one_message(client: Client) -> list[str]:
    """Greeting, EHLO, then one message to caught mail: the replies to MAIL, RCPT, DATA and
    the final dot."""
    await client.line()
    await client.cmd("EHLO client.example.test")
    return [
        await client.cmd(f"MAIL FROM:<{SENDER}>"),
        await client.cmd("RCPT TO:<nobody@sink.test>"),
        await client.cmd("DATA"),
        await client.cmd("Subject: x\r\n\r\nbody\r\n."),
    ]


def test_storage_trouble_is_451_never_500(tmp_path: Path) -> None:
    """A store that fails at DATA gives 451 (send again later), not aiosmtpd's 500 Error."""

    async def scenario() -> list[str]:
        async with listener(tmp_path, Limits(), failing=True) as listening:
            client = await Client.connect(listening.port)
            replies = await _one_message(client)
            replies.append(await client.cmd(f"MAIL FROM:<{SENDER}>"))  # the transaction was reset
            await client.cmd("QUIT")
            await client.close()
            return replies

    replies = asyncio.run(scenario())
    assert [r[:3] for r in replies] == ["250", "250", "354", "451", "250"]
    assert "Error" not in replies[3] and "StorageError" not in replies[3]


def test_a_store_that_hangs_is_451_at_the_idle_timeout(tmp_path: Path) -> None:
    """A store that never answers the save: when the idle window runs out the sender hears
    451 (storage trouble: send again later), not the 421 of a silent client."""

    async def scenario() -> tuple[list[str], str]:
        async with listener(tmp_path, Limits(idle_timeout_s=0.3), hung=True) as listening:
            client = await Client.connect(listening.port)
            replies = await _one_message(client)
            after = (await client.reader.read()).decode()  # then the connection closes
            await client.close()
            return replies, after

    replies, after = asyncio.run(scenario())
    assert [r[:3] for r in replies] == ["250", "250", "354", "451"]
    assert replies[3].startswith("451 4.3.0") and after == ""


def test_many_real_connections_then_421(server: Server) -> None:
    """The real server greets up to its connection limit, then answers 421, and recovers.

    The held connections stay in a mail transaction, so the gate cannot make room by
    evicting one however slowly the machine opens them."""
    held: list[Raw] = []
    try:
        codes = []
        for _ in range(LIMITS.max_connections + 1):
            client = Raw(server.smtp_port)
            held.append(client)
            codes.append(client.code())
            if codes[-1] == 220:
                # In a mail transaction, a connection is never evicted to make room (an
                # idle one would be, after a second: on a loaded machine, before the last).
                assert client.cmd("EHLO held.example.test") == 250
                assert client.cmd("MAIL FROM:<held@example.test>") == 250
    finally:
        for client in held:
            client.sock.close()
    # Connections other tests left open may still count: at most the limit is greeted.
    assert codes[-1] == 421
    assert set(codes) == {220, 421}
    assert codes.count(220) <= LIMITS.max_connections
    deadline = time.monotonic() + 10
    while True:  # the server sees the hang-ups asynchronously: poll until greeted
        with Raw(server.smtp_port) as client:
            if client.code() == 220:
                break
        assert time.monotonic() < deadline, "the listener did not recover"


def test_a_multi_line_reply_leaves_in_one_write(server: Server) -> None:
    """EHLO's lines go out together (one send, not one per line), and read as before."""
    with Raw(server.smtp_port) as client:
        assert client.code() == 220
        client.send(b"EHLO client.example.test\r\n")
        first = client.sock.recv(65536)  # loopback: one write arrives as one segment
        lines = first.decode().split("\r\n")
        assert lines[-1] == ""  # ends with a whole line
        assert [line[:4] for line in lines[:-2]] == ["250-"] * (len(lines) - 2)
        assert lines[-2] == "250 HELP"
        assert "250-PIPELINING" in lines and "250-ENHANCEDSTATUSCODES" in lines
        assert client.cmd("QUIT") == 221


def test_caught_mail_over_the_advertised_size_is_552(tmp_path: Path) -> None:
    """EHLO's SIZE (the largest max_message_bytes of all policies) holds for caught mail too,
    which no inbox's policy checks: past it, 552 after the final dot and nothing stored, even
    when the whole message arrives in one read; the connection goes on."""
    policies = tmp_path / "small.toml"
    policies.write_text(
        "".join(
            f"[policy.{name}]\nmax_message_bytes = 3000\n"
            for name in ("ci", "preview", "production")
        )
    )
    server = start_server(tmp_path, "--policy-file", str(policies))
    try:
        with server.smtp() as smtp:
            assert smtp.ehlo()[0] == 250 and smtp.esmtp_features["size"] == "3000"
            head = b"Subject: big\r\n\r\n"
            for size, expected in ((3000, 250), (3001, 552), (200_000, 552)):
                body = head + b"x" * (size - len(head) - 2) + b"\r\n"
                assert len(body) == size
                smtp.mail("app@example.test")
                smtp.rcpt(f"nobody-{size}@elsewhere.example")
                assert smtp.data(body)[0] == expected, size
        with server.http() as http:
            caught = http.get("/v1/unrouted").json()["messages"]
        assert [m["size"] for m in caught] == [3000]
    finally:
        server.stop()
