"""Live-event streams under a gate, over real sockets: per-token and overall caps that leave
an admin served, and the end of a stream at its token's expiry or its run's release."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import Server, create_inbox, new_run_id, start_server

DEADLINE_S = 10.0


class Stream:
    """``GET /v1/events`` over a plain socket (HTTP/1.0: the server closes it at the end)."""

    def __init__(self, port: int, path: str = "/v1/events", token: str | None = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        self.sock.sendall(f"GET {path} HTTP/1.0\r\nHost: localhost\r\n{auth}\r\n".encode())
        self.received = b""
        while b"\r\n\r\n" not in self.received:
            chunk = self.sock.recv(65536)
            assert chunk, f"closed before a head: {self.received!r}"
            self.received += chunk
        head = self.received.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        self.status = int(head[0].split(" ")[1])
        self.headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in head[1:])
        }

    def until_closed(self, deadline_s: float) -> float:
        """Read until the server closes the stream; the seconds that took."""
        started = time.monotonic()
        self.sock.settimeout(deadline_s)
        while chunk := self.sock.recv(65536):
            self.received += chunk
            assert time.monotonic() - started < deadline_s, "the stream did not end"
        return time.monotonic() - started

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def streams() -> Iterator[list[Stream]]:
    opened: list[Stream] = []
    yield opened
    for stream in opened:
        stream.close()


def _mint(client: httpx.Client, run_id: str, ttl_s: int = 600) -> dict[str, object]:
    response = client.post(f"/v1/runs/{run_id}/token", json={"ttl_s": ttl_s})
    assert response.status_code in (200, 201), response.text
    minted: dict[str, object] = response.json()
    return minted


def _admin_served(server: Server) -> None:
    with server.http() as client:
        assert client.get("/healthz").status_code == 200
        create_inbox(client)  # asserts 201


def test_a_run_token_opens_32_streams_and_the_admin_is_still_served(
    server: Server, streams: list[Stream]
) -> None:
    """A run token's 33rd open stream is 429 with Retry-After; the admin still creates and
    /healthz answers; closing one makes room for another."""
    with server.http() as client:
        token = str(_mint(client, new_run_id("flood"))["token"])
    streams.extend(Stream(server.http_port, token=token) for _ in range(32))
    assert {s.status for s in streams} == {200}
    refused = Stream(server.http_port, token=token)
    streams.append(refused)
    assert refused.status == 429 and int(refused.headers["retry-after"]) >= 1
    refused.until_closed(DEADLINE_S)
    assert b"too_many_streams" in refused.received
    _admin_served(server)
    streams[0].close()
    deadline = time.monotonic() + DEADLINE_S
    while (again := Stream(server.http_port, token=token)).status != 200:
        again.close()
        assert time.monotonic() < deadline, "the closed stream's place never came back"
    streams.append(again)


def test_streams_of_one_run_are_32_without_a_run_token(
    server: Server, streams: list[Stream]
) -> None:
    """Streams naming one run by ?run_id= (no run token) are capped at 32 too: the 33rd is 429
    with Retry-After, and another run's stream is still served."""
    run_id = new_run_id("byrun")
    path = f"/v1/events?run_id={run_id}"
    streams.extend(Stream(server.http_port, path=path) for _ in range(32))
    assert {s.status for s in streams} == {200}
    refused = Stream(server.http_port, path=path)
    streams.append(refused)
    assert refused.status == 429 and int(refused.headers["retry-after"]) >= 1
    other = Stream(server.http_port, path=f"/v1/events?run_id={new_run_id('byrun')}")
    streams.append(other)
    assert other.status == 200


def test_streams_past_their_own_cap_are_503_and_the_admin_is_still_served(
    tmp_path: Path, streams: list[Stream]
) -> None:
    """With the streams' cap full (a share of the connections), one more is 503 with
    Retry-After, and an admin's create and /healthz still answer."""
    server = start_server(tmp_path, "--http-max-connections", "100")
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            stream = Stream(server.http_port)
            streams.append(stream)
            if stream.status != 200:
                break
            assert len(streams) <= 100 and time.monotonic() < deadline, "no stream cap"
        assert stream.status == 503 and stream.headers["retry-after"] == "1"
        assert len(streams) - 1 < 100  # the cap is a share of the connections, not all
        _admin_served(server)
    finally:
        server.stop()


def test_a_stream_ends_within_a_second_of_its_token_expiry(
    server: Server, streams: list[Stream]
) -> None:
    """A run token's stream ends at the token's expiry (not later than 1 s after), and the
    token cannot open another."""
    with server.http() as client:
        run_id = new_run_id("exp")
        token = str(_mint(client, run_id, ttl_s=2)["token"])
    stream = Stream(server.http_port, token=token)
    streams.append(stream)
    assert stream.status == 200
    took = stream.until_closed(DEADLINE_S)
    assert took <= 2 + 1.0, f"ended {took:.2f}s after opening (a token for 2 s)"
    again = Stream(server.http_port, token=token)
    streams.append(again)
    assert again.status == 401


def test_a_stream_ends_when_its_run_is_released(server: Server, streams: list[Stream]) -> None:
    """A stream of one run delivers the release (the inbox expired), then ends within 1 s,
    whoever reads it: a run token (which cannot come back) and an admin, or a server without
    tokens (whose reconnection with Last-Event-ID resumes: its grant holds)."""
    with server.http() as client:
        inbox = create_inbox(client, new_run_id("rel"))
        run_id = inbox["run_id"]
        token = str(_mint(client, run_id)["token"])
        scoped = Stream(server.http_port, token=token)
        admin = Stream(server.http_port, path=f"/v1/events?run_id={run_id}")
        streams.extend((scoped, admin))
        assert scoped.status == admin.status == 200
        assert client.delete(f"/v1/runs/{run_id}").status_code == 204
    assert scoped.until_closed(1.0 + 0.5) <= 1.5
    assert admin.until_closed(1.0 + 0.5) <= 1.5
    for ended in (scoped, admin):
        assert b'"reason":"lease"' in ended.received or b"expired" in ended.received
    refused = Stream(server.http_port, token=token)
    streams.append(refused)
    assert refused.status == 401
    ids = re.findall(rb"^id: (\S+)", admin.received, re.MULTILINE)
    again = Stream(
        server.http_port, path=f"/v1/events?run_id={run_id}&last_event_id={ids[-1].decode()}"
    )
    streams.append(again)
    assert again.status == 200
    again.sock.settimeout(0.5)
    with pytest.raises(TimeoutError):
        while again.sock.recv(65536):  # open: the release was before its Last-Event-ID
            pass
