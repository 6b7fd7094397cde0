"""The worker's HTTP/1.1 client (sink/webhooks/http.py) against a real socket server that
answers as each test scripts: kept-alive reuse, the ways a body can end, redirects as
answers, a kept connection the peer closed, and what is sent."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from sink.webhooks.http import Http1, ProtocolError

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter, bytes], Awaitable[bool]]


async def _serve(answer: Answer) -> tuple[asyncio.Server, list[bytes], list[int]]:
    """A server whose ``answer`` writes each response; it returns whether to read another
    request on the same connection. Requests and connections are counted."""
    requests: list[bytes] = []
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                request = head + await reader.readexactly(length)
                requests.append(request)
                if not await answer(reader, writer, request):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, requests, connections


def _url(server: asyncio.Server, path: str = "/hook?x=1") -> str:
    return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}{path}"


def _run(answer: Answer, posts: int) -> tuple[list[int], list[bytes], int]:
    async def main() -> tuple[list[int], list[bytes], int]:
        server, requests, connections = await _serve(answer)
        client = Http1(4)
        try:
            statuses = [
                await asyncio.wait_for(
                    client.post(_url(server), b'{"a":1}', {"webhook-id": "ev_1"}), 5
                )
                for _ in range(posts)
            ]
        finally:
            await client.close()
            server.close()
        return statuses, requests, len(connections)

    return asyncio.run(main())


def _writes(response: bytes, keep: bool = True) -> Answer:
    async def answer(_r: asyncio.StreamReader, w: asyncio.StreamWriter, _q: bytes) -> bool:
        w.write(response)
        await w.drain()
        return keep

    return answer


def test_a_post_says_what_it_carries_and_a_connection_is_kept_for_the_next() -> None:
    """Host, path and query, length, the given headers and the body; one connection reused."""
    statuses, requests, connections = _run(
        _writes(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), 3
    )
    assert statuses == [200, 200, 200] and connections == 1
    head, _, body = requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /hook?x=1 HTTP/1.1" and body == b'{"a":1}'
    assert "Content-Length: 7" in lines and "webhook-id: ev_1" in lines
    assert any(line.startswith("Host: 127.0.0.1:") for line in lines)


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 204 No Content\r\n\r\n",  # no body, no length
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n",
    ],
)
def test_every_way_a_kept_answer_ends_leaves_the_connection_usable(response: bytes) -> None:
    """204 without a length, a chunked body with a trailer, a 1xx before the answer."""
    statuses, _, connections = _run(_writes(response), 2)
    assert statuses[0] == statuses[1] and 200 <= statuses[0] < 300 and connections == 1


def test_an_answer_ending_with_its_connection_is_read_to_the_end() -> None:
    """HTTP/1.0 (or no length): the body runs to the close; the next post connects again."""
    statuses, _, connections = _run(_writes(b"HTTP/1.0 200 OK\r\n\r\nbody", keep=False), 2)
    assert statuses == [200, 200] and connections == 2


def test_a_redirect_is_an_answer_not_followed() -> None:
    """A 302 comes back as 302; nothing is requested from its Location."""
    response = b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:9/x\r\nContent-Length: 0\r\n\r\n"
    statuses, requests, _ = _run(_writes(response), 1)
    assert statuses == [302] and len(requests) == 1


def test_a_kept_connection_the_peer_closed_is_replaced_once() -> None:
    """The server closes after each answer without saying so: the next post, finding the
    kept connection dead before any answer, goes out again on a new one."""
    statuses, requests, connections = _run(
        _writes(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", keep=False), 3
    )
    assert statuses == [200, 200, 200] and len(requests) == 3 and connections == 3


def test_what_is_not_http_is_a_protocol_error() -> None:
    """A peer that answers something else: ProtocolError, never a hang."""
    with pytest.raises(ProtocolError):
        _run(_writes(b"SSH-2.0-OpenSSH\r\n\r\n", keep=False), 1)


def test_a_url_with_non_ascii_characters_is_sent_percent_encoded() -> None:
    """A path or query beyond ASCII goes out as UTF-8 %XX escapes (as httpx or a browser
    sends it; raw it is a 400 from most servers), escapes already there kept as they are."""

    async def main() -> list[bytes]:
        server, requests, _ = await _serve(_writes(b"HTTP/1.1 204 No Content\r\n\r\n"))
        client = Http1(4)
        try:
            for path in ("/h\u00f6k/\u8def?q=\u00e9&x=%2F", "/a%C3%B6?b=c d"):
                status = await asyncio.wait_for(client.post(_url(server, path), b"{}", {}), 5)
                assert status == 204
        finally:
            await client.close()
            server.close()
        return requests

    first, second = asyncio.run(main())
    assert first.startswith(b"POST /h%C3%B6k/%E8%B7%AF?q=%C3%A9&x=%2F HTTP/1.1\r\n")
    assert second.startswith(b"POST /a%C3%B6?b=c%20d HTTP/1.1\r\n")
