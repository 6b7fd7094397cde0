"""The worker's HTTP/1.1 client (sink/webhooks/http.py) against a real socket server that
answers as each test scripts: kept-alive reuse, the ways a body can end, redirects as
answers, a kept connection the peer closed, and what is sent."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sink.webhooks import attempt, http
from sink.webhooks.http import Http1, ProtocolError
from tests.support import make_certificate, need

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter, bytes], Awaitable[bool]]


async def _serve(
    answer: Answer, tls: ssl.SSLContext | None = None
) -> tuple[asyncio.Server, list[bytes], list[int]]:
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

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
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


def test_connection_close_is_honoured_though_the_peer_would_serve_more() -> None:
    """An HTTP/1.1 answer with ``Connection: close``: the next post opens a new connection,
    even though this peer keeps reading."""
    response = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
    statuses, requests, connections = _run(_writes(response, keep=True), 2)
    assert statuses == [200, 200] and len(requests) == 2 and connections == 2


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


@pytest.mark.parametrize(
    ("response", "keep", "connections"),
    [
        (b"HTTP/1.1 200 OK\n\n", False, 2),  # no length: the body ran to the close
        (b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok", True, 1),
        (b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n3\nabc\n0\n\n", True, 1),
        (b"HTTP/1.1 100 Continue\n\nHTTP/1.1 204 No Content\r\n\r\n", True, 1),
        (b"\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n", True, 1),
    ],
)
def test_an_answer_with_bare_lf_line_ends_is_read_as_common_clients_read_it(
    response: bytes, keep: bool, connections: int
) -> None:
    """Lines ending in a bare LF (head and chunk sizes), an empty line before the status line:
    the status as sent, the connection kept when the answer allows it."""
    statuses, _, opened = _run(_writes(response, keep=keep), 2)
    assert statuses[0] == statuses[1] and 200 <= statuses[0] < 300 and opened == connections


def _posts(answer: Answer, posts: int) -> tuple[list[tuple[int | None, str | None]], int, float]:
    """Each post as an attempt (sink/webhooks/attempt.py: its 5 s limit): (status, error)
    each, the connections opened, and the longest attempt's seconds."""

    async def main() -> tuple[list[tuple[int | None, str | None]], int, float]:
        server, _, connections = await _serve(answer)
        client = Http1(4)
        results, longest = [], 0.0
        try:
            for _ in range(posts):
                started = time.monotonic()
                results.append(
                    await attempt.post(client, _url(server), "whsec_c2V0IGJlbG93", "ev_1", 1, b"{}")
                )
                longest = max(longest, time.monotonic() - started)
        finally:
            await client.close()
            server.close()
        return results, len(connections), longest

    return asyncio.run(main())


def _answers_then_stalls(head_and_part: bytes, close: bool = False) -> Answer:
    """Writes a head (and part of a body), then never finishes: holds the connection open
    (or closes it, ``close``) until the client goes."""

    async def answer(r: asyncio.StreamReader, w: asyncio.StreamWriter, _q: bytes) -> bool:
        w.write(head_and_part)
        await w.drain()
        if not close:
            await r.read()  # until the client drops the connection
        return False

    return answer


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab",  # the rest never comes
        b"HTTP/1.1 200 OK\r\n\r\npartial",  # HTTP/1.1, no length, the peer keeps it open
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
    ],
)
def test_a_2xx_whose_body_does_not_end_is_delivered_and_its_connection_dropped(
    response: bytes,
) -> None:
    """The status counts once the head has come (a 2xx within 5 s is delivered): a body
    that has not ended within BODY_S after it costs the connection, not the delivery."""
    results, connections, longest = _posts(_answers_then_stalls(response), 2)
    assert results == [(200, None), (200, None)] and connections == 2
    assert longest < http.BODY_S + 2  # not the attempt's 5 s


def test_the_status_is_back_before_a_body_written_apart() -> None:
    """A receiver that writes its head, then its body a moment later (as Nagle holds the
    body of http.server or Java's HttpServer for the head's delayed ACK): the attempt's
    result is back before the body is sent."""
    order: list[str] = []

    async def answer(_r: asyncio.StreamReader, w: asyncio.StreamWriter, _q: bytes) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
        await w.drain()
        await asyncio.sleep(0.3)
        order.append("body")
        w.write(b"ok")
        await w.drain()
        return True

    async def main() -> int:
        server, _, _ = await _serve(answer)
        client = Http1(4)
        try:
            status = await client.post(_url(server), b"{}", {}, timeout_s=5)
            order.append("status")
        finally:
            await client.close()
            server.close()
        return status

    assert asyncio.run(main()) == 200 and order == ["status"]


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab",  # closed short of its length
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # not a chunk size
        b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcdef\r\n",  # overlong
    ],
)
def test_a_body_cut_short_or_malformed_keeps_the_status(response: bytes) -> None:
    """After the head, a broken body only drops the connection: the status is the result."""
    results, connections, _ = _posts(_answers_then_stalls(response, close=True), 2)
    status = int(response[9:12])
    expected = (status, None) if status == 200 else (status, f"http_{status}")
    assert results == [expected, expected] and connections == 2


def test_a_head_not_come_within_the_limit_is_a_timeout() -> None:
    """The status line alone, then silence: TimeoutError at the post's limit (an attempt's
    5 s: ``timeout``, no status), however much of the head came."""

    async def main() -> None:
        server, _, _ = await _serve(_answers_then_stalls(b"HTTP/1.1 200 OK\r\nX-A: 1\r\n"))
        client = Http1(4)
        try:
            with pytest.raises(TimeoutError):
                await client.post(_url(server), b"{}", {}, timeout_s=0.3)
        finally:
            await client.close()
            server.close()

    asyncio.run(asyncio.wait_for(main(), 5))


_NODE_RECEIVER = r"""
const http = require("http");
let n = 0;
const server = http.createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    n += 1;
    if (n % 3 === 1) { res.writeHead(200); res.end(); }
    else if (n % 3 === 2) { res.writeHead(202); res.write("o"); setTimeout(() => res.end("k"), 9); }
    else { res.statusCode = 204; res.end(); }
  });
});
server.keepAliveTimeout = 200;  // ms: closes a kept connection idle longer than this
server.listen(0, "127.0.0.1", () => console.log(server.address().port));
"""


def _attempts(url: str, pauses: list[float]) -> list[tuple[int | None, str | None]]:
    """An attempt at ``url`` after each pause, on one client (its kept connections)."""

    async def main() -> list[tuple[int | None, str | None]]:
        client = Http1(4)
        results = []
        try:
            for pause in pauses:
                await asyncio.sleep(pause)
                results.append(await attempt.post(client, url, "whsec_c2V0IGJlbG93", "e", 1, b"{}"))
        finally:
            await client.close()
        return results

    return asyncio.run(main())


def test_a_node_receiver_is_answered_in_every_way_it_ends_an_answer() -> None:
    """Node's http server: end() with no length, a chunked body written in two parts, a 204;
    a kept connection its keepAliveTimeout closed is not used: every attempt delivered."""
    program = shutil.which("node")
    need("Node.js", program is not None, "apt-get install nodejs")
    assert program is not None
    with subprocess.Popen(
        [program, "-e", _NODE_RECEIVER], stdout=subprocess.PIPE, text=True
    ) as node:
        try:
            assert node.stdout is not None
            url = f"http://127.0.0.1:{int(node.stdout.readline())}/hook"
            results = _attempts(url, [0, 0, 0, 0.5, 0, 0.5])
        finally:
            node.kill()
    assert results == [(200, None), (202, None), (204, None)] * 2


@pytest.mark.parametrize(
    ("version", "length"),
    [("HTTP/1.0", True), ("HTTP/1.0", False), ("HTTP/1.1", True), ("HTTP/1.1", False)],
)
def test_a_python_http_server_is_answered_however_it_frames_its_answer(
    version: str, length: bool
) -> None:
    """http.server speaking HTTP/1.0 (it closes after each answer) or HTTP/1.1 (it keeps the
    connection), with or without Content-Length: every attempt delivered, never a 5 s
    timeout (HTTP/1.1 without a length, the connection left open, waiting for the next
    request, is delivered once the head came)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = version

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(200)
            if length:
                self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        started = time.monotonic()
        results = _attempts(f"http://127.0.0.1:{server.server_address[1]}/hook", [0, 0, 0])
        took = time.monotonic() - started
    finally:
        server.shutdown()
        server.server_close()
    assert results == [(200, None)] * 3 and took < attempt.ATTEMPT_S


def test_an_https_receiver_is_verified_against_the_trusted_certificates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """https: a receiver whose certificate the server does not trust is a ``tls`` failure
    (not ``network``); trusted (SSL_CERT_FILE names its CA), it is delivered, with the
    URL's ``user:password@`` as Basic auth inside the TLS connection."""
    cert, key = make_certificate(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)

    async def main() -> tuple[list[tuple[int | None, str | None]], list[bytes]]:
        server, requests, _ = await _serve(
            _writes(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), tls
        )
        url = _url(server).replace("http://", "https://ci:pw@")
        results = []
        try:
            for trusted in (False, True):
                if trusted:
                    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
                client = Http1(4)  # its TLS context is made at its first https connection
                try:
                    result = await attempt.post(client, url, "whsec_c2V0IGJlbG93", "e", 1, b"{}")
                    results.append(result)
                finally:
                    await client.close()
        finally:
            server.close()
        return results, requests

    results, requests = asyncio.run(main())
    assert results == [(None, "tls"), (200, None)]
    [request] = requests
    assert b"\r\nAuthorization: Basic Y2k6cHc=\r\n" in request  # ci:pw
