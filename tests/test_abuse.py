"""Hostile clients over real sockets: silent and slow connections, floods past the caps,
oversized request lines. Scaled down (short deadlines by flag, a lowered descriptor limit)
so each runs in seconds; bench/abuse.py runs the full-size version and prints latencies."""

from __future__ import annotations

import re
import resource
import select
import selectors
import smtplib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from sink.client import Sink
from tests.support import Server, create_inbox, new_run_id, start_server

DEADLINE_S = 20.0


def _fd_limit(limit: int) -> Callable[[], None]:
    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return lower


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
    return sock


def _read_response(
    sock: socket.socket, buffer: bytes = b""
) -> tuple[int, dict[str, str], bytes, bytes]:
    """One HTTP/1.1 response (status, headers, body) and the bytes read past it."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"closed before a whole response head: {buffer!r}")
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest[:length], rest[length:]


def _closed_by_server(sock: socket.socket) -> bool:
    """True once the server closes (EOF, or a reset); waits up to the deadline."""
    sock.settimeout(DEADLINE_S)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def _first_lines(socks: list[socket.socket], deadline_s: float) -> dict[int, bytes]:
    """The first bytes each socket receives (by index), waiting at most ``deadline_s``."""
    selector = selectors.DefaultSelector()
    for index, sock in enumerate(socks):
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, index)
    heard: dict[int, bytes] = {}
    end = time.monotonic() + deadline_s
    while len(heard) < len(socks) and time.monotonic() < end:
        for key, _ in selector.select(timeout=max(0.0, end - time.monotonic())):
            try:
                heard[key.data] = key.fileobj.recv(512)  # type: ignore[union-attr]
            except OSError:
                heard[key.data] = b""
            selector.unregister(key.fileobj)
    selector.close()
    return heard


@pytest.fixture
def held() -> Iterator[list[socket.socket]]:
    """Client sockets a test holds open; closed at the end whatever happens."""
    socks: list[socket.socket] = []
    yield socks
    for sock in socks:
        sock.close()


def _metric(server: Server, name: str, **labels: str) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=DEADLINE_S).text
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{key}="{value}"' in line for key, value in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


# -- timeouts ---------------------------------------------------------------------------


def test_a_silent_connection_is_closed_at_the_header_deadline(tmp_path: Path) -> None:
    """A connection that never sends a byte is closed once --http-header-timeout passes."""
    server = start_server(tmp_path, "--http-header-timeout", "0.5")
    try:
        with _connect(server.http_port) as sock:
            assert _closed_by_server(sock)
        assert _metric(server, "runsink_connection_refusals_total", reason="idle_timeout") >= 1
    finally:
        server.stop()


def test_a_trickled_head_is_answered_408_at_the_deadline(tmp_path: Path) -> None:
    """A head trickled a line at a time gets 408 when the deadline passes, not a reprieve
    per line (slowloris)."""
    server = start_server(tmp_path, "--http-header-timeout", "1")
    try:
        with _connect(server.http_port) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
            sock.settimeout(0.1)
            answer = b""
            end = time.monotonic() + DEADLINE_S
            while not answer and time.monotonic() < end:
                try:
                    sock.sendall(b"X-Slow: 1\r\n")
                    answer = sock.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    break  # closed after the answer: read what arrived
            sock.settimeout(DEADLINE_S)
            if not answer:
                answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:100]
    finally:
        server.stop()


def test_an_idle_keepalive_connection_is_closed(tmp_path: Path) -> None:
    """After a response, a connection that asks nothing more closes after
    --http-keepalive-timeout."""
    server = start_server(tmp_path, "--http-keepalive-timeout", "0.5")
    try:
        with _connect(server.http_port) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            status, _, _, _ = _read_response(sock)
            assert status == 200
            assert _closed_by_server(sock)
    finally:
        server.stop()


def test_pipelined_requests_are_answered_in_order(server: Server) -> None:
    """HTTP/1.1 pipelining: three requests in one write, three answers in their order."""
    with _connect(server.http_port) as sock:
        sock.sendall(
            b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
            b"GET /no-such-page HTTP/1.1\r\nHost: localhost\r\n\r\n"
            b"GET /readyz HTTP/1.1\r\nHost: localhost\r\n\r\n"
        )
        answers = []
        rest = b""
        for _ in range(3):
            status, _, body, rest = _read_response(sock, rest)
            answers.append((status, body))
    assert [status for status, _ in answers] == [200, 404, 200]
    assert answers[2][1].startswith(b'{"status":"ready"')


# -- caps -------------------------------------------------------------------------------


def test_idle_connections_cannot_exhaust_descriptors(
    tmp_path: Path, held: list[socket.socket]
) -> None:
    """With a descriptor limit of 256 and 400 silent HTTP connections held open, /healthz
    answers, SMTP still greets and delivers, and the caps were sized to fit (logged)."""
    server = start_server(tmp_path, preexec_fn=_fd_limit(256))
    try:
        caps = next(e for e in server.log_lines() if e.get("event") == "connection_caps")
        assert caps["fd_limit"] == 256 and caps["lowered"] is True
        assert caps["smtp_max_connections"] + caps["http_max_connections"] <= 256 - 64
        for _ in range(400):
            held.append(_connect(server.http_port))
        with server.http() as client:
            assert client.get("/healthz").status_code == 200
            inbox = create_inbox(client)
            server.send(inbox["address"], subject="still delivered")
            answer = client.post(f"/v1/inboxes/{inbox['inbox_id']}/wait", json={"timeout_s": 5})
            assert answer.json()["state"] == "received"
        assert _metric(server, "runsink_connection_refusals_total", reason="evicted") >= 1
    finally:
        for sock in held:
            sock.close()
        held.clear()
        server.stop()


def test_an_smtp_burst_past_the_cap_hears_421_at_once(
    tmp_path: Path, held: list[socket.socket]
) -> None:
    """300 SMTP connections at once, under a descriptor limit of 256: every one hears a
    first line (220 within the cap, 421 past it); none is left waiting in the backlog."""
    server = start_server(tmp_path, preexec_fn=_fd_limit(256))
    try:
        cap = next(e for e in server.log_lines() if e.get("event") == "connection_caps")[
            "smtp_max_connections"
        ]
        for _ in range(300):
            held.append(socket.create_connection(("127.0.0.1", server.smtp_port), DEADLINE_S))
        heard = _first_lines(held, DEADLINE_S)
        silent = [i for i in range(len(held)) if not heard.get(i)]
        assert not silent, f"{len(silent)} of 300 connections heard nothing"
        codes = [heard[i][:3] for i in range(len(held))]
        assert set(codes) <= {b"220", b"421"}, set(codes)
        refusals = "runsink_connection_refusals_total"
        refused = _metric(server, refusals, listener="smtp", reason="too_many_connections")
        # On a slow machine the first ones may sit silent for 1 s before the burst ends and
        # give their places to later ones (hearing 421 then): each such place is counted.
        evicted = _metric(server, refusals, listener="smtp", reason="idle_evicted")
        assert refused == codes.count(b"421")
        assert cap <= codes.count(b"220") <= cap + evicted
    finally:
        for sock in held:
            sock.close()
        held.clear()
        server.stop()


@pytest.mark.slow
def test_silent_smtp_connections_at_the_cap_make_room_for_mail(
    tmp_path: Path, held: list[socket.socket]
) -> None:
    """With every SMTP slot held by silent connections, mail still gets through: a newcomer
    gets the place of one idle for a few seconds (which hears 421), not a 421 for ever."""
    server = start_server(tmp_path, "--smtp-max-connections", "5")
    try:
        for _ in range(5):
            sock = socket.create_connection(("127.0.0.1", server.smtp_port), DEADLINE_S)
            assert sock.recv(512).startswith(b"220")
            held.append(sock)
        with server.http() as client:
            inbox = create_inbox(client)
            end = time.monotonic() + DEADLINE_S
            while True:
                try:
                    server.send(inbox["address"], subject="through a full listener")
                    break
                except smtplib.SMTPException:
                    assert time.monotonic() < end, "no mail got through a listener of idle peers"
                    time.sleep(0.2)
            answer = client.post(f"/v1/inboxes/{inbox['inbox_id']}/wait", json={"timeout_s": 5})
            assert answer.json()["state"] == "received"
        ready, _, _ = select.select(held, [], [], DEADLINE_S)
        assert ready, "no held connection was told it lost its place"
        assert ready[0].recv(512).startswith(b"421 4.3.2")
    finally:
        server.stop()


def test_busy_connections_at_the_cap_get_503_with_retry_after(
    tmp_path: Path, held: list[socket.socket]
) -> None:
    """When every connection under --http-max-connections has a request in progress (slow
    bodies), a newcomer's request gets 503 with Retry-After, but /healthz still answers
    (contract: "/healthz keeps answering while idle or slow clients hold connections"); once
    they leave, requests get in again."""
    server = start_server(tmp_path, "--http-max-connections", "10", "--http-header-timeout", "60")

    def busy() -> socket.socket:  # a body that never finishes: a request in progress
        sock = _connect(server.http_port)
        sock.sendall(
            b"POST /v1/inboxes HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{"
        )
        return sock

    try:
        held.extend(busy() for _ in range(10))
        end = time.monotonic() + DEADLINE_S
        while True:
            status, headers, body = _get(server, "/openapi.json")
            if status == 503 or time.monotonic() > end:
                break
            # A connection not yet read when the probe came was still idle and made room:
            # replace the ones the server answered and closed, until all ten are busy.
            for index, sock in enumerate(held):
                if _closed_now(sock):
                    sock.close()
                    held[index] = busy()
        assert status == 503
        assert headers["retry-after"] == "1" and headers["x-trace-id"]
        assert re.search(rb'"code": ?"over_capacity"', body)
        assert _healthz(server)[0] == 200  # read past the cap: health checks still answer
        for sock in held:
            sock.close()
        held.clear()
        end = time.monotonic() + DEADLINE_S
        while _get(server, "/openapi.json")[0] != 200 and time.monotonic() < end:
            time.sleep(0.05)
        assert _get(server, "/openapi.json")[0] == 200
        assert _metric(server, "runsink_connection_refusals_total", reason="over_capacity") >= 1
    finally:
        server.stop()


def test_a_burst_past_the_cap_is_answered_never_closed_silently(tmp_path: Path) -> None:
    """Thirty complete requests at once against a cap of ten: every one gets an HTTP answer
    (200, or 503 with Retry-After), none a connection closed without a word."""
    server = start_server(tmp_path, "--http-max-connections", "10")
    try:
        socks = [_connect(server.http_port) for _ in range(30)]
        for sock in socks:
            sock.sendall(
                b"GET /openapi.json HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
            )
        statuses = []
        for sock in socks:
            with sock:
                status, headers, _, _ = _read_response(sock)
            statuses.append(status)
            assert status == 200 or headers["retry-after"] == "1", status
        assert set(statuses) <= {200, 503} and 200 in statuses
    finally:
        server.stop()


def _closed_now(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


def _healthz(server: Server) -> tuple[int, dict[str, str], bytes]:
    return _get(server, "/healthz")


def _get(server: Server, path: str) -> tuple[int, dict[str, str], bytes]:
    with _connect(server.http_port) as sock:
        sock.sendall(b"GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n" % path.encode())
        status, headers, body, _ = _read_response(sock)
    return status, headers, body


def test_long_polls_past_their_cap_are_503(tmp_path: Path, policy_file: str) -> None:
    """Long-polls may take only part of the HTTP cap: past it a wait is 503 over_capacity
    with Retry-After, and short requests still get through."""
    server = start_server(tmp_path, "--policy-file", policy_file, "--http-max-connections", "12")
    caps = next(e for e in server.log_lines() if e.get("event") == "connection_caps")
    limit = caps["max_long_polls"]
    assert 0 < limit < 12
    answers: list[int] = []
    try:
        with server.http() as client:
            inboxes = [create_inbox(client, new_run_id()) for _ in range(limit + 1)]

        def wait(inbox_id: str) -> None:
            with server.http() as own:
                answers.append(
                    own.post(f"/v1/inboxes/{inbox_id}/wait", json={"timeout_s": 10}).status_code
                )

        threads = [
            threading.Thread(target=wait, args=(inbox["inbox_id"],)) for inbox in inboxes[:limit]
        ]
        for thread in threads:
            thread.start()
        end = time.monotonic() + DEADLINE_S
        while _metric(server, "runsink_active_long_polls") < limit and time.monotonic() < end:
            time.sleep(0.05)
        with server.http() as client:
            refused = client.post(
                f"/v1/inboxes/{inboxes[-1]['inbox_id']}/wait", json={"timeout_s": 10}
            )
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "over_capacity"
            guided = refused.json()  # v3: repeat this very wait after retry_after
            assert (guided["next_action"], guided["next_tool"]) == (
                "wait_then_retry",
                "wait_for_message",
            )
            assert guided["next_arguments"] == {
                "inbox_id": inboxes[-1]["inbox_id"],
                "timeout_s": 10,
            }
            assert client.get("/healthz").status_code == 200
    finally:
        server.stop()  # answers the waits in progress
    for thread in threads:
        thread.join(DEADLINE_S)
    assert answers == [200] * limit


def test_expect_message_waits_out_a_full_long_poll_cap(tmp_path: Path, policy_file: str) -> None:
    """The client's expect_message takes a wait's 503 over_capacity as "retry after
    Retry-After" (it gave up at once): once the held long-polls end, it gets its message."""
    server = start_server(tmp_path, "--policy-file", policy_file, "--http-max-connections", "12")
    limit = next(e for e in server.log_lines() if e.get("event") == "connection_caps")[
        "max_long_polls"
    ]
    try:
        with server.http() as client:
            held = [create_inbox(client, new_run_id()) for _ in range(limit)]

        def hold(inbox_id: str) -> None:
            with server.http() as own:
                own.post(f"/v1/inboxes/{inbox_id}/wait", json={"timeout_s": 2})

        threads = [threading.Thread(target=hold, args=(i["inbox_id"],)) for i in held]
        for thread in threads:
            thread.start()
        end = time.monotonic() + DEADLINE_S
        while _metric(server, "runsink_active_long_polls") < limit and time.monotonic() < end:
            time.sleep(0.05)
        with Sink(server.url) as sink:
            inbox = sink.create_inbox(new_run_id(), "capped")
            server.send(inbox.address, subject="Through at last")
            assert inbox.expect_message(timeout_s=20).subject == "Through at last"
        refusals = _metric(
            server, "runsink_connection_refusals_total", reason="too_many_long_polls"
        )
        assert refusals >= 1  # it did meet the cap, and waited it out
    finally:
        server.stop()
    for thread in threads:
        thread.join(DEADLINE_S)


# -- request lines ----------------------------------------------------------------------


def test_a_120kb_request_target_is_414_not_a_reset(server: Server) -> None:
    """A 120 KB URL is answered 414 once the head buffer overflows, and the answer survives
    the client sending the rest (the server drains it instead of resetting)."""
    request = b"GET /v1/messages/" + b"a" * 120_000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n"
    with _connect(server.http_port) as sock:
        sock.sendall(request[:20_000])  # past the 16 KiB head buffer, no line end yet
        sock.sendall(request[20_000:])  # drained by the server, not answered with a reset
        status, _, body, _ = _read_response(sock)
    assert status == 414
    assert b"uri_too_long" in body


def test_a_10kb_request_target_is_414(server: Server) -> None:
    """A target over 8 KiB that fits the head buffer is 414 uri_too_long too."""
    with server.http() as client:
        answer = client.get("/v1/messages/" + "a" * 10_000)
    assert answer.status_code == 414
    assert answer.json()["error"]["code"] == "uri_too_long"


@pytest.mark.parametrize(
    "fields",
    [
        {"Host": "rebound.example"},  # otherwise 421
        {"Content-Type": "text/plain"},  # otherwise 415
        {"Origin": "https://cross.example"},  # otherwise 403
    ],
)
def test_a_long_target_is_414_before_the_local_safety_checks(
    server: Server, fields: dict[str, str]
) -> None:
    """A 10 KB target is 414 whatever else the request gets wrong, as a longer one (over the
    head buffer) is: the size rules come first, at every length."""
    with server.http() as client:
        answer = client.post("/v1/inboxes?pad=" + "a" * 10_000, content=b"{}", headers=fields)
    assert answer.status_code == 414
    assert answer.json()["error"]["code"] == "uri_too_long"


def test_an_oversized_head_is_431(server: Server) -> None:
    """Header fields over 16 KiB in all are 431."""
    with _connect(server.http_port) as sock:
        fields = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 1000) for i in range(40))
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
            for start in range(0, len(fields), 2048):
                sock.sendall(fields[start : start + 2048])
        except OSError:
            pass
        status, headers, body, _ = _read_response(sock)
    assert status == 431
    assert re.search(rb'"code": ?"header_too_large"', body)
    assert re.fullmatch(r"[0-9a-f]{32}", headers["x-trace-id"])  # every answer has a trace


def test_a_whole_oversized_head_in_one_read_is_431_too(server: Server) -> None:
    """A head over 16 KiB that arrives at once (one 70 KB field) is 431 as well: h11 limits
    only a head still incomplete."""
    with _connect(server.http_port) as sock:
        sock.sendall(
            b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"b" * 70_000 + b"\r\n\r\n"
        )
        status, headers, body, _ = _read_response(sock)
    assert status == 431
    assert re.search(rb'"code": ?"header_too_large"', body) and headers["x-trace-id"]


def _head(size: int, target: bytes) -> bytes:
    """A GET of ``target`` whose head (request line, fields, blank line) is ``size`` bytes."""
    start = b"GET " + target + b" HTTP/1.1\r\nHost: localhost\r\nX-Pad: "
    return start + b"p" * (size - len(start) - 4) + b"\r\n\r\n"


def test_the_head_limit_counts_the_request_line_too(server: Server) -> None:
    """A head of 16 KiB with a 6 KB target is served; one byte more is 431, though its fields
    alone are under 16 KiB (the contract's limit is on the whole head, as h11 counts it)."""
    target = b"/healthz?" + b"q" * 6_000
    for size, expected in ((16 * 1024, 200), (16 * 1024 + 1, 431)):
        with _connect(server.http_port) as sock:
            sock.sendall(_head(size, target))
            status, _, body, _ = _read_response(sock)
        assert status == expected, (size, body[:200])


def test_a_malformed_request_is_400_with_a_trace(server: Server) -> None:
    """A request h11 cannot parse gets the JSON 400, and an X-Trace-Id like every answer."""
    with _connect(server.http_port) as sock:
        sock.sendall(b"GARBAGE\r\n\r\n")
        status, headers, body, _ = _read_response(sock)
    assert status == 400 and b"invalid_request" in body
    assert re.fullmatch(r"[0-9a-f]{32}", headers["x-trace-id"])


def test_a_whole_oversized_head_on_the_wait_path_is_431(server: Server) -> None:
    """A 60 KB head in one read on a wait is 431 as on any route (the wait path does not
    skip the edge's head limit)."""
    with server.http() as client:
        inbox = create_inbox(client)
    body = b'{"timeout_s": 0}'
    with _connect(server.http_port) as sock:
        sock.sendall(
            b"POST /v1/inboxes/%s/wait HTTP/1.1\r\nHost: localhost\r\n" % inbox["inbox_id"].encode()
            + b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
            + b"X-Big: "
            + b"b" * 60_000
            + b"\r\n\r\n"
            + body
        )
        status, _, answer, _ = _read_response(sock)
    assert status == 431 and re.search(rb'"code": ?"header_too_large"', answer)


def test_a_wait_past_the_cap_is_503_and_leaves_the_health_slots(
    tmp_path: Path, held: list[socket.socket]
) -> None:
    """With every connection busy, a wait that comes in on a spare health-check connection
    is 503 over_capacity at once (it never parks there) and /healthz still answers."""
    server = start_server(tmp_path, "--http-max-connections", "10", "--http-header-timeout", "60")

    def busy() -> socket.socket:
        sock = _connect(server.http_port)
        sock.sendall(
            b"POST /v1/inboxes HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{"
        )
        return sock

    try:
        with server.http() as client:
            inbox = create_inbox(client)
        held.extend(busy() for _ in range(10))
        end = time.monotonic() + DEADLINE_S
        while _get(server, "/openapi.json")[0] != 503 and time.monotonic() < end:
            for index, sock in enumerate(held):
                if _closed_now(sock):
                    sock.close()
                    held[index] = busy()
        body = b'{"timeout_s": 60}'
        waits = [_connect(server.http_port) for _ in range(4)]
        held.extend(waits)
        for sock in waits:
            sock.sendall(
                b"POST /v1/inboxes/%s/wait HTTP/1.1\r\nHost: localhost\r\n"
                % inbox["inbox_id"].encode()
                + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(body), body)
            )
        for sock in waits:
            sock.settimeout(10)
            status, _, answer, _ = _read_response(sock)
            assert status == 503 and re.search(rb'"code": ?"over_capacity"', answer)
        assert _healthz(server)[0] == 200
    finally:
        server.stop()
