"""The wait endpoint's lean path: the edge's behaviour kept, and a client hanging up mid-wait.

Most waits are answered by ``api/waitpath.py`` in front of the app; a chunked body (or a UI
session) goes through the Starlette route. Both are checked over real HTTP.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest

from tests.support import Server, create_inbox, new_run_id, wait

ROUTE = "/v1/inboxes/{inbox_id}/wait"


def _log_lines(server: Server, event: str, inbox_id: str) -> list[dict[str, Any]]:
    return [
        line
        for line in server.log_lines()
        if line.get("event") == event and line.get("inbox_id") == inbox_id
    ]


def _until_logged(
    server: Server, inbox_id: str, status: int, deadline_s: float = 10
) -> dict[str, Any]:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for line in _log_lines(server, "http_request", inbox_id):
            if line["status"] == status:
                return line
        time.sleep(0.05)
    raise AssertionError(f"no request on {inbox_id} logged with status {status}")


def test_a_wait_carries_the_trace_headers_and_access_log_of_any_request(server: Server) -> None:
    """A wait answers with the caller's trace (X-Trace-Id or traceparent), the safe headers,
    and one access log line naming the route, run, inbox and trace."""
    with server.http() as client:
        inbox = create_inbox(client)
        given = client.post(
            f"/v1/inboxes/{inbox['inbox_id']}/wait",
            json={"timeout_s": 0},
            headers={"X-Trace-Id": "fast-trace-1", "X-Run-Id": inbox["run_id"]},
        )
        parent = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
        traced = client.post(
            f"/v1/inboxes/{inbox['inbox_id']}/wait", json={}, headers={"traceparent": parent}
        )
    assert given.status_code == 200 and given.json()["state"] == "waiting"
    assert given.headers["x-trace-id"] == given.json()["trace_id"] == "fast-trace-1"
    assert traced.headers["x-trace-id"] == traced.json()["trace_id"] == "ab" * 16
    for name in ("x-content-type-options", "x-frame-options", "cache-control"):
        assert name in given.headers
    assert given.headers["content-type"] == "application/json"
    line = next(
        entry
        for entry in _log_lines(server, "http_request", inbox["inbox_id"])
        if entry.get("trace_id") == "fast-trace-1"
    )
    assert line["route"] == ROUTE and line["method"] == "POST" and line["status"] == 200
    assert line["run_id"] == inbox["run_id"] and "latency_ms" in line


def test_a_wait_refuses_bad_input_with_the_usual_envelopes(server: Server) -> None:
    """Bad JSON and unknown fields are 422, an unknown inbox 404, the wrong run 403
    wrong_run, two different runs named 422; a GET is 405."""
    with server.http() as client:
        inbox = create_inbox(client)
        path = f"/v1/inboxes/{inbox['inbox_id']}/wait"
        bad_json = client.post(path, content=b"{nope", headers={"content-type": "application/json"})
        unknown = client.post(path, json={"timeout": 1})
        missing = client.post("/v1/inboxes/ib_nothere/wait", json={})
        wrong = client.post(path, json={"run_id": new_run_id()})
        twice = client.post(path, json={"run_id": inbox["run_id"]}, headers={"X-Run-Id": "x-1"})
        method = client.get(path)
    assert bad_json.status_code == 422 and bad_json.json()["error"]["code"] == "invalid_request"
    assert unknown.status_code == 422 and unknown.json()["error"]["details"]["errors"]
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert wrong.status_code == 403 and wrong.json()["reason"] == "wrong_run"
    assert wrong.headers["x-trace-id"] == wrong.json()["trace_id"]
    assert twice.status_code == 422
    assert method.status_code == 405


def test_a_chunked_wait_is_answered_through_the_app(server: Server) -> None:
    """A body without Content-Length takes the Starlette route, with the same answer."""
    with server.http() as client:
        inbox = create_inbox(client)
        answer = client.post(
            f"/v1/inboxes/{inbox['inbox_id']}/wait",
            content=iter([b'{"timeout_s"', b": 0}"]),
            headers={"content-type": "application/json"},
        )
    assert answer.status_code == 200 and answer.json()["state"] == "waiting"
    assert answer.json()["attempt"] == 1


def _hang_up_during_a_wait(server: Server, chunked: bool) -> dict[str, Any]:
    with server.http() as client:
        inbox = create_inbox(client)
    body = json.dumps({"timeout_s": 30}).encode()
    if chunked:
        framing = b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    else:
        framing = b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/inboxes/%s/wait HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/json\r\n" % inbox["inbox_id"].encode() + framing
        )
        # Parked once a look is recorded as busy: a second wait is then too_early.
        deadline = time.monotonic() + 10
        with server.http() as client:
            while True:
                busy = wait(client, inbox["inbox_id"], timeout_s=0).json()
                if busy["reason"] == "too_early":
                    break
                assert time.monotonic() < deadline, "the wait never parked"
                time.sleep(0.05)
    return inbox


@pytest.mark.parametrize("chunked", [False, True], ids=["lean-path", "app-route"])
def test_a_client_that_hangs_up_ends_its_wait_and_spends_nothing(
    server: Server, chunked: bool
) -> None:
    """A client gone mid-wait ends the long-poll at once: logged 499, no poll spent, and the
    inbox is free for the next wait (not too_early until the old deadline)."""
    started = time.monotonic()
    inbox = _hang_up_during_a_wait(server, chunked)
    line = _until_logged(server, inbox["inbox_id"], 499)
    assert line["route"] == ROUTE
    with server.http() as client:
        deadline = time.monotonic() + 10
        while True:
            after = wait(client, inbox["inbox_id"], timeout_s=0).json()
            if after["reason"] != "too_early":
                break
            assert time.monotonic() < deadline, "the inbox stayed busy after the hang-up"
            time.sleep(0.05)
    assert after["state"] == "waiting" and after["attempt"] == 1  # only this look was spent
    assert time.monotonic() - started < 25  # long before the gone wait's 30 s
    polled = _log_lines(server, "polled", inbox["inbox_id"])
    assert len(polled) == 1


def test_a_wait_asking_to_close_the_connection_is_answered_and_closed(server: Server) -> None:
    """``Connection: close`` on a wait still closes the connection after the answer (the wait
    keeps that header when it lets go of the others)."""
    with server.http() as client:
        inbox = create_inbox(client)
    body = b'{"timeout_s": 0}'
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/inboxes/%s/wait HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (inbox["inbox_id"].encode(), len(body), body)
        )
        received = b""
        while chunk := sock.recv(65536):  # until the server closes
            received += chunk
    head, _, answer = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"connection: close" in head.lower()
    assert json.loads(answer)["state"] == "waiting"
