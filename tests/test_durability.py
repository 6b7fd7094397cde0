"""Nothing acknowledged is lost: SIGKILL under concurrent senders, and a clean SIGTERM."""

from __future__ import annotations

import signal
import smtplib
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.support import Server, create_inbox, new_run_id, start_server

SENDERS = 8


def _sender(
    server: Server, address: str, index: int, acked: list[str], stop: threading.Event
) -> None:
    """Send until the server dies; remember every subject that got its 250 after DATA."""
    n = 0
    try:
        client = smtplib.SMTP("127.0.0.1", server.smtp_port, timeout=10)
    except (smtplib.SMTPException, OSError):
        return
    try:
        while not stop.is_set():
            subject = f"s{index}-{n}"
            message = f"From: a@app.test\r\nTo: {address}\r\nSubject: {subject}\r\n\r\nbody {n}\r\n"
            client.sendmail("a@app.test", [address], message.encode())
            acked.append(subject)  # sendmail returned: the server answered 250 after DATA
            n += 1
    except (smtplib.SMTPException, OSError):
        return
    finally:
        client.close()  # the server died mid-session: an unclosed socket warns in a later test


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """A fresh store on each persistent backend: a SQLite file, or a PostgreSQL database."""
    if request.param == "postgres":
        dsn: str = request.getfixturevalue("pg_dsn")
        return dsn
    return tmp_path / "runsink.db"


@pytest.mark.slow
def test_sigkill_loses_nothing_acknowledged(
    tmp_path: Path, policy_file: str, db: Path | str
) -> None:
    """SIGKILL while 8 clients send: after restart every message that got a 250 is stored."""
    server = start_server(tmp_path, "--policy-file", policy_file, db=db)
    run_id = new_run_id("crash")
    with server.http() as client:
        inbox = create_inbox(client, run_id, ttl_s=3600)
    acked: list[str] = []
    stop = threading.Event()
    threads = [
        threading.Thread(target=_sender, args=(server, inbox["address"], i, acked, stop))
        for i in range(SENDERS)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 20
    while len(acked) < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    server.kill()  # SIGKILL: no flush, no goodbye
    stop.set()
    for thread in threads:
        thread.join(10)
    acknowledged = set(acked)
    assert len(acknowledged) >= 50

    restarted = start_server(tmp_path, "--policy-file", policy_file, db=server.db)
    try:
        stored: set[str] = set()
        with restarted.http() as client:
            after = None
            while True:
                params = {"limit": 500, **({"after": after} if after else {})}
                page = client.get(f"/v1/inboxes/{inbox['inbox_id']}/messages", params=params).json()
                stored.update(m["subject"] for m in page["messages"])
                after = page["next_cursor"]
                if not page["has_more"]:
                    break
    finally:
        restarted.stop()
    lost = acknowledged - stored
    print(
        f"\nSIGKILL with {SENDERS} senders: acknowledged={len(acknowledged)} "
        f"recovered={len(stored)} lost={len(lost)}"
    )
    assert not lost


def test_sigterm_answers_waits_and_exits_cleanly(
    tmp_path: Path, policy_file: str, db: Path | str
) -> None:
    """SIGTERM: a long-poll in progress gets its current envelope, and the process exits 0."""
    server = start_server(tmp_path, "--policy-file", policy_file, db=db)
    with server.http() as client:
        inbox = create_inbox(client, ttl_s=3600)
    answers: list[httpx.Response] = []

    def long_poll() -> None:
        with server.http() as c:
            answers.append(c.post(f"/v1/inboxes/{inbox['inbox_id']}/wait", json={"timeout_s": 9}))

    poller = threading.Thread(target=long_poll)
    poller.start()
    deadline = time.monotonic() + 10
    # Wait until the long-poll is registered (it shows in the metrics), then stop the server.
    while time.monotonic() < deadline:
        metrics = httpx.get(f"{server.url}/metrics").text
        if "runsink_active_long_polls 1.0" in metrics:
            break
        time.sleep(0.02)
    started = time.monotonic()
    code = server.stop(signal.SIGTERM)
    poller.join(10)
    assert code == 0
    assert time.monotonic() - started < 8
    assert answers and answers[0].status_code == 200
    body = answers[0].json()
    assert body["inbox_id"] == inbox["inbox_id"] and body["attempt"] == 0
    # Our own last word is "stopped" (asyncio's debug mode may add notes of its own).
    events = [line["event"] for line in server.log_lines() if line["event"] != "library_log"]
    assert events[-1] == "stopped"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.smtp_port), timeout=1)
