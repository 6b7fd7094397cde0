"""Retention: bodies go after lease + retention_s; a size cap releases the oldest first."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.inproc import InProcess
from tests.support import app_on_each_backend, create_inbox, new_run_id


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def app(request: pytest.FixtureRequest) -> InProcess:
    """Retention runs on each persistent backend (on PostgreSQL, by one replica's sweeper), in
    this process."""
    result: InProcess = app_on_each_backend(request)
    return result


def _message_id(client: httpx.Client, inbox: dict[str, Any]) -> str:
    listed = client.get(f"/v1/inboxes/{inbox['inbox_id']}/messages").json()["messages"]
    assert listed, "the message was not stored"
    message_id: str = listed[0]["message_id"]
    return message_id


def _released(client: httpx.Client, message_id: str) -> bool:
    return client.get(f"/v1/messages/{message_id}").json()["released_at"] is not None


def _sweeps(client: httpx.Client) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("runsink_sweeps_total "):
            return float(line.split()[1])
    return 0.0


def _until(predicate: object, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def test_evidence_is_released_after_lease_plus_retention(app: InProcess) -> None:
    """A body is released retention_s after the lease ends; metadata and the report stay."""
    run_id = new_run_id("ret")
    with app.http() as client:
        inbox = create_inbox(client, run_id, policy="brief")
        app.send(inbox["address"], subject="Reset", body="secret body")
        message_id = _message_id(client, inbox)
        assert client.get(f"/v1/messages/{message_id}").json()["text"] is not None
        _until(lambda: _released(client, message_id))
        read = client.get(f"/v1/messages/{message_id}").json()
        raw = client.get(f"/v1/messages/{message_id}/raw")
        report = client.get(f"/v1/runs/{run_id}").json()
    assert read["text"] is None and read["html"] is None and read["subject"] == "Reset"
    assert raw.status_code == 410
    entry = report["inboxes"][0]
    assert entry["state"] == "expired" and entry["released_at"] is not None
    assert entry["evidence_release_at"] == entry["released_at"]
    assert [e["type"] for e in report["events"]][-2:] == ["expired", "released"]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_size_cap_releases_the_oldest_expired_evidence_first(
    tmp_path: Path, policy_file: str, backend: str, request: pytest.FixtureRequest
) -> None:
    """Over --max-store-mb, evidence of the inbox whose lease ended first goes first; live stays."""
    db = None
    if backend == "postgres":
        cluster = request.getfixturevalue("pg_cluster")
        db = cluster.dsn(cluster.new_database("runsink_template"))
    capped = InProcess(tmp_path, "--policy-file", policy_file, "--max-store-mb", "1", db=db)
    run_id = new_run_id("cap")
    try:
        with capped.http() as client:
            oldest = create_inbox(client, run_id, purpose="a", policy="kept", ttl_s=1)
            newer = create_inbox(client, run_id, purpose="b", policy="kept", ttl_s=2)
            live = create_inbox(client, run_id, purpose="c", policy="kept", ttl_s=600)
            capped.send(oldest["address"], subject="big", body="a" * 600_000)
            capped.send(newer["address"], subject="mid", body="b" * 300_000)
            capped.send(live["address"], subject="live", body="c" * 300_000)
            ids = {
                name: _message_id(client, box)
                for name, box in (("oldest", oldest), ("newer", newer), ("live", live))
            }
            _until(lambda: _released(client, ids["oldest"]))
            # Give the sweeper a few more rounds: nothing else may go once under the cap.
            _until(
                lambda: client.get(f"/v1/inboxes/{newer['inbox_id']}").json()["state"] == "expired"
            )
            # Two more full sweeper rounds must release nothing more.
            rounds = _sweeps(client)
            _until(lambda: _sweeps(client) >= rounds + 2)
            newer_released = _released(client, ids["newer"])
            live_released = _released(client, ids["live"])
    finally:
        capped.stop()
    assert not newer_released
    assert not live_released
