"""The lean command loop (``sink/smtp/loop.py``): lines are framed, checked and answered as in
aiosmtpd's loop wherever the client's writes split them, and the lazily restarted idle timer
still cuts only the silent."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx

from sink.smtp.limits import Limits
from tests.support import Server, create_inbox
from tests.test_smtp_hardening import SENDER, Client, Raw, greeted, listener, messages, raw_of


def _nodelay(client: Raw) -> Raw:
    client.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client


def test_a_whole_transaction_in_one_packet_is_answered_in_order(
    server: Server, http: httpx.Client
) -> None:
    """MAIL, RCPT, DATA, the message, the dot and QUIT in one write: each reply, in order."""
    inbox = create_inbox(http)
    with Raw(server.smtp_port) as client:
        greeted(client)
        client.send(
            f"MAIL FROM:<{SENDER}>\r\nRCPT TO:<{inbox['address']}>\r\nDATA\r\n"
            "Subject: one packet\r\n\r\nbody\r\n.\r\nNOOP\r\nQUIT\r\n"
        )
        codes = [client.code() for _ in range(6)]
        assert codes == [250, 250, 354, 250, 250, 221]
    (listed,) = messages(http, inbox["inbox_id"])
    assert raw_of(http, listed["message_id"]) == b"Subject: one packet\r\n\r\nbody\r\n"


def test_a_command_split_byte_by_byte_is_one_command(server: Server) -> None:
    """A command line arriving one byte per packet is read as one line, answered once."""
    with _nodelay(Raw(server.smtp_port)) as client:
        greeted(client)
        for byte in f"MAIL FROM:<{SENDER}>\r\n".encode():
            client.send(bytes([byte]))
        assert client.code() == 250
        assert client.cmd("RSET") == 250


def test_a_command_line_over_the_reader_limit_is_500_and_the_session_goes_on(
    tmp_path: Path,
) -> None:
    """A command line longer than the reader's buffer limit is read to its end, then 500."""

    async def scenario() -> tuple[str, str]:
        async with listener(tmp_path, Limits(max_line_bytes=4096)) as listening:
            client = await Client.connect(listening.port)
            await client.line()
            await client.cmd("EHLO client.example.test")
            for _ in range(4):  # 32 KiB with no line end, in pieces
                client.writer.write(b"NOOP " + b"x" * 8192)
            too_long = await client.cmd("")
            after = await client.cmd("NOOP")
            await client.close()
            return too_long, after

    too_long, after = asyncio.run(scenario())
    assert too_long.startswith("500 ")
    assert after.startswith("250 ")


def test_a_bare_lf_inside_data_is_text(server: Server, http: httpx.Client) -> None:
    """A bare LF inside DATA is text; the message ends only at <CRLF>.<CRLF>."""
    inbox = create_inbox(http)
    with Raw(server.smtp_port) as client:
        greeted(client)
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250
        assert client.cmd(f"RCPT TO:<{inbox['address']}>") == 250
        assert client.cmd("DATA") == 354
        client.send(b"Subject: lf\r\n\r\nline\n.\nMAIL FROM:<x@example.test>\r\n.\r\n")
        assert client.code() == 250
        assert client.cmd("NOOP") == 250
    (listed,) = messages(http, inbox["inbox_id"])
    assert raw_of(http, listed["message_id"]) == (
        b"Subject: lf\r\n\r\nline\n.\nMAIL FROM:<x@example.test>\r\n"
    )


def test_unrecognised_commands_past_the_budget_close_the_connection(server: Server) -> None:
    """Four unknown commands get 500 each, the fifth 502 and the connection is closed."""
    with Raw(server.smtp_port) as client:
        greeted(client)
        assert [client.cmd("BOGUS") for _ in range(4)] == [500] * 4
        assert client.cmd("BOGUS") == 502
        assert client.rest() == []


def test_commands_keep_a_client_alive_past_the_idle_timeout(tmp_path: Path) -> None:
    """Each accepted command restarts the idle window; silence after the last one is cut."""

    async def scenario() -> tuple[list[str], list[str]]:
        async with listener(tmp_path, Limits(idle_timeout_s=0.4)) as listening:
            client = await Client.connect(listening.port)
            await client.line()
            replies = [await client.cmd("EHLO client.example.test")]
            for _ in range(5):  # 1 s in all: past the idle timeout, never silent for long
                await asyncio.sleep(0.2)  # the client's pace, not a synchronisation
                replies.append(await client.cmd("NOOP"))
            lines = await client.rest()
            await client.close()
            return replies, lines

    replies, lines = asyncio.run(scenario())
    assert [reply[:3] for reply in replies] == ["250"] * 6
    assert [line[:9] for line in lines] == ["421 4.4.2"]


def test_the_idle_window_after_data_is_the_idle_timeout_again(tmp_path: Path) -> None:
    """After a long DATA deadline, the idle timeout (shorter) applies from the final dot."""

    async def scenario() -> list[str]:
        limits = Limits(idle_timeout_s=0.3, data_timeout_s=60)
        async with listener(tmp_path, limits) as listening:
            client = await Client.connect(listening.port)
            await client.line()
            await client.cmd("EHLO client.example.test")
            assert (await client.cmd(f"MAIL FROM:<{SENDER}>")).startswith("250")
            assert (await client.cmd("RCPT TO:<nobody@sink.test>")).startswith("250")
            assert (await client.cmd("DATA")).startswith("354")
            assert (await client.cmd("Subject: x\r\n\r\nbody\r\n.")).startswith("250")
            async with asyncio.timeout(5):  # far less than DATA's 60 s
                lines = await client.rest()
            await client.close()
            return lines

    assert [line[:9] for line in asyncio.run(scenario())] == ["421 4.4.2"]
