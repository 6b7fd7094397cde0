"""DATA read in chunks up to each ``.<CRLF>``: the end marker, dot-stuffing and sizes hold
wherever the client's writes (and so the server's reads) happen to split the bytes."""

from __future__ import annotations

import asyncio
import socket
from types import SimpleNamespace

import httpx
import pytest

from sink.smtp.protocol import RunsinkSMTP
from tests.support import Server, create_inbox
from tests.test_smtp_hardening import SENDER, Raw, greeted, in_data, messages, raw_of, unstuffed


def _send_in_pieces(client: Raw, data: bytes, cut: int) -> None:
    """Write ``data`` in two sends split at ``cut``, each on its own TCP segment."""
    client.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client.send(data[:cut])
    client.send(data[cut:])


BODY = b"Subject: pieces\r\n\r\nThanks.\r\n..leading dot\r\nend.\r\n"


@pytest.mark.parametrize("cut", range(len(BODY) - 8, len(BODY) + 3))
def test_the_final_dot_is_found_wherever_the_bytes_split(
    server: Server, http: httpx.Client, cut: int
) -> None:
    """<CRLF>.<CRLF> split over two writes at any byte still ends DATA, once, unstuffed."""
    inbox = create_inbox(http)
    with Raw(server.smtp_port) as client:
        in_data(client, inbox["address"])
        _send_in_pieces(client, BODY + b".\r\n", cut)
        assert client.code() == 250
        assert client.cmd("NOOP") == 250
    (listed,) = messages(http, inbox["inbox_id"])
    assert raw_of(http, listed["message_id"]) == unstuffed(BODY)


def test_a_message_larger_than_the_line_cap_is_kept_whole(
    server: Server, http: httpx.Client
) -> None:
    """3 MiB of ordinary lines (no ``.<CRLF>`` for more than the reader's limit) arrive whole."""
    inbox = create_inbox(http)
    line = b"x" * 76 + b"\r\n"
    body = b"Subject: big\r\n\r\n" + line * (3 * 2**20 // len(line)) + b".stuffed\r\nlast\r\n"
    with Raw(server.smtp_port) as client:
        in_data(client, inbox["address"])
        assert client.cmd(b"." + body + b".") == 250
    (listed,) = messages(http, inbox["inbox_id"])
    assert raw_of(http, listed["message_id"]) == unstuffed(b"." + body)


def test_lines_ending_in_a_dot_are_text(server: Server, http: httpx.Client) -> None:
    """Many lines ending in "." (each one a read that is not the end) are kept as sent."""
    inbox = create_inbox(http)
    body = b"Subject: dots\r\n\r\n" + b"".join(b"Sentence %d.\r\n" % n for n in range(500))
    with Raw(server.smtp_port) as client:
        in_data(client, inbox["address"])
        assert client.cmd(body + b".") == 250
    (listed,) = messages(http, inbox["inbox_id"])
    assert raw_of(http, listed["message_id"]) == body


def test_pipelined_commands_after_the_dot_are_answered(server: Server, http: httpx.Client) -> None:
    """What follows the final dot in the same write is the next command, not message text."""
    inbox = create_inbox(http)
    with Raw(server.smtp_port) as client:
        greeted(client)
        client.send(f"MAIL FROM:<{SENDER}>\r\nRCPT TO:<{inbox['address']}>\r\nDATA\r\n".encode())
        assert [client.code(), client.code(), client.code()] == [250, 250, 354]
        client.send(b"Subject: one\r\n\r\nfirst\r\n.\r\nNOOP\r\nQUIT\r\n")
        assert [client.code(), client.code(), client.code()] == [250, 250, 221]
    (listed,) = messages(http, inbox["inbox_id"])
    assert raw_of(http, listed["message_id"]) == b"Subject: one\r\n\r\nfirst\r\n"


@pytest.mark.parametrize(
    "body",
    [b"", b"\r\n", b"one line\r\n", b".\rnot the end\r\n", b"..\r\n", b"a\n.\r\nb\r\n"],
    ids=["empty", "blank-line", "one-line", "dot-cr", "stuffed-dot", "bare-lf-dot"],
)
def test_short_and_odd_bodies_end_where_the_marker_is(
    server: Server, http: httpx.Client, body: bytes
) -> None:
    """The shortest messages, and a dot after a bare CR or LF, end only at <CRLF>.<CRLF>."""
    inbox = create_inbox(http)
    with Raw(server.smtp_port) as client:
        in_data(client, inbox["address"])
        assert client.cmd(body + b".") == 250
        assert client.cmd("NOOP") == 250
    (listed,) = messages(http, inbox["inbox_id"])
    assert raw_of(http, listed["message_id"]) == unstuffed(body)


class _ScriptedReader:
    """What a StreamReader hands ``_read_data``, read by read, as scripted: ``("until",
    bytes)`` a readuntil that found its separator, ``("over", bytes)`` one that found none
    within the limit (then a readexactly of those bytes), ``("exact", bytes)`` a readexactly."""

    def __init__(self, script: list[tuple[str, bytes]]) -> None:
        self.script = list(script)

    async def readuntil(self, separator: bytes) -> bytes:
        kind, chunk = self.script[0]
        if kind == "over":
            raise asyncio.LimitOverrunError("no separator within the limit", len(chunk))
        assert kind == "until" and chunk.endswith(separator), (chunk, separator)
        return self.script.pop(0)[1]

    async def readexactly(self, n: int) -> bytes:
        kind, chunk = self.script.pop(0)
        assert kind in ("over", "exact") and len(chunk) == n
        return chunk


def _read(script: list[tuple[str, bytes]], size_limit: int = 1000) -> tuple[bytes, str | None]:
    reader = _ScriptedReader(script)
    protocol = SimpleNamespace(_reader=reader, data_size_limit=size_limit, line_length_limit=998)
    found = asyncio.run(RunsinkSMTP._read_data(protocol))  # type: ignore[arg-type]
    assert reader.script == [], "DATA must be read up to its final dot, and no further"
    return found


def test_the_end_marker_is_found_across_reads_and_only_there() -> None:
    """Reads split anywhere: the CR before <LF>.<CRLF> may come in an earlier read; a dot
    line right after data dropped for size is not the end of an empty message."""
    assert _read([("until", b"line\r"), ("over", b"\nabc\r"), ("until", b"\n.\r\n")]) == (
        b"line\r\nabc\r\n",
        None,
    )
    assert _read([("until", b"a\r"), ("until", b"\nb\n.\r\n"), ("until", b"c\r\n.\r\n")]) == (
        b"a\r\nb\n.\r\nc\r\n",
        None,
    )
    assert _read([("until", b".\r"), ("exact", b"\n")]) == (b"", None)
    over_the_cap = [
        ("over", b"x" * 60),  # a first line over the size cap, dropped as it is read
        ("until", b".\r"),  # the line's end: no final dot of an empty message
        ("until", b"\nmore\r\n.\r\n"),
    ]
    assert _read(over_the_cap, size_limit=50) == (b"", "552 5.3.4 Error: too much mail data")


def test_the_size_limit_counts_the_last_read_too() -> None:
    """A message whose reads end past the size limit is 552, the read holding the final dot
    included (caught mail over EHLO's SIZE was stored). The limit is SIZE's count (RFC 1870):
    CRLFs in, the final dot and the stuffed dots out."""
    one_line = [("until", b"x" * 47 + b"\r"), ("until", b"\n.\r\n")]  # 49 octets
    assert _read(one_line, size_limit=48) == (b"", "552 5.3.4 Error: too much mail data")
    assert _read(one_line, size_limit=49) == (b"x" * 47 + b"\r\n", None)
    # ".." is one dot: 1 + 2 + 44 + 2 = 49 octets, within a limit of 49.
    stuffed = [("until", b"..\r"), ("until", b"\n" + b"x" * 44 + b"\r\n.\r\n")]
    assert _read(stuffed, size_limit=49) == (b".\r\n" + b"x" * 44 + b"\r\n", None)
    assert _read(stuffed, size_limit=48)[1] == "552 5.3.4 Error: too much mail data"
