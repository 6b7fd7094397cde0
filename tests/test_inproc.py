"""tests/inproc.py: the app in-process answers as a server process does where a test can tell."""

from __future__ import annotations

import time

import httpx
import pytest

from sink.ingest import DataVerdict
from tests.inproc import InProcess
from tests.support import create_inbox, new_run_id


def _active_long_polls(client: httpx.Client) -> str:
    lines = client.get("/metrics").text.splitlines()
    return next(line for line in lines if line.startswith("runsink_active_long_polls "))


def test_a_client_that_gives_up_on_a_long_poll_hangs_up(app: InProcess) -> None:
    """A read timeout mid long-poll is the client hanging up: the wait ends, no poll recorded."""
    with app.http() as client:
        inbox = create_inbox(client)
        with pytest.raises(httpx.ReadTimeout):
            client.post(f"/v1/inboxes/{inbox['inbox_id']}/wait", json={"timeout_s": 9}, timeout=0.5)
        deadline = time.monotonic() + 5
        while _active_long_polls(client) != "runsink_active_long_polls 0.0":
            assert time.monotonic() < deadline, "the abandoned long-poll is still waiting"
            time.sleep(0.02)
        after = client.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
    assert after["attempt"] == 0 and after["state"] == "created"


def test_an_event_stream_is_read_as_it_comes(app: InProcess) -> None:
    """A run's event stream yields its inbox's creation while the stream is still open."""
    run_id = new_run_id("inproc")
    with (
        app.http() as client,
        client.stream("GET", "/v1/events", params={"run_id": run_id}) as stream,
    ):
        assert stream.status_code == 200
        lines = stream.iter_lines()
        next(lines)  # the stream's first line: the app is streaming
        with app.http() as other:
            inbox = create_inbox(other, run_id)
        seen = ""
        while inbox["inbox_id"] not in seen:
            seen += next(lines)


def test_ingest_delivers_through_the_real_ingest_without_a_socket(app: InProcess) -> None:
    """InProcess.ingest routes and stores a message as SMTP would: the inbox's wait gets it."""
    with app.http() as client:
        inbox = create_inbox(client)
        raw = (
            f"From: app@example.test\r\nTo: {inbox['address']}\r\nSubject: Direct\r\n\r\n"
            "Your code is 482913.\r\n"
        ).encode()
        assert app.ingest(raw, [inbox["address"]]) == DataVerdict.STORED
        body = client.post(f"/v1/inboxes/{inbox['inbox_id']}/wait", json={"timeout_s": 5}).json()
    assert body["state"] == "received" and body["message"]["subject"] == "Direct"
