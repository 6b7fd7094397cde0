"""The delivery child (sink/webhooks/child.py): attempts made beside others in flight go to
a process of its own (alone, one is made in the server). Killed mid-delivery, the child is
started again and the attempt it had in flight is made again (not settled, so at least
once, under the same webhook-id); a SIGKILLed server leaves no child behind, and its
deliveries go out after the restart."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from sink import clock
from sink.webhook_signature import new_secret
from sink.webhooks.model import DeliveryState, Webhook, new_webhook_id
from tests.inproc import InProcess
from tests.support import create_inbox, new_run_id, start_server
from tests.webhook_receiver import Receiver


def _until(done: Callable[[], object], what: str, deadline_s: float = 20.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _children(pid: int) -> set[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return set()
    return {int(child) for child in text.split()}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_child_killed_mid_delivery_is_restarted_and_the_attempt_made_again(
    tmp_path: Path, own_db: str | None
) -> None:
    """The receiver holds each event's first POST. Two mails: the first attempt is made in
    the server (nothing else in flight), the second by the child, which is SIGKILLed
    meanwhile; a new child makes that attempt again (same webhook-id and body), listed
    delivered at attempt 1 (the killed attempt was never settled)."""
    secret = new_secret()
    receiver = Receiver(secret, answer=lambda n: (200, 30.0) if n == 1 else 200).start()
    server = InProcess(tmp_path / "s", "--webhook-retry-s", "0.3", db=own_db)
    try:
        run_id = new_run_id()
        hook = Webhook(
            new_webhook_id(), receiver.url, ("message",), run_id, None, None, secret, clock.now()
        )
        server.call(server.runtime.webhooks.create_webhook(hook))
        with server.http() as client:
            inbox = create_inbox(client, run_id)
        server.send(inbox["address"], subject="In the server")
        receiver.until(lambda got: len(got) >= 1)
        server.send(inbox["address"], subject="In the child")
        got = receiver.until(lambda got: len(got) >= 2)
        held = next(g for g in got if g.body["data"]["subject"] == "In the child")
        first = server.runtime.deliverer.child_pid
        assert first is not None and _alive(first)
        os.kill(first, signal.SIGKILL)
        got = receiver.until(lambda got: sum(g.webhook_id == held.webhook_id for g in got) >= 2)
        again = [g for g in got if g.webhook_id == held.webhook_id]
        assert again[0].raw == again[1].raw and all(g.verified for g in got)
        second = server.runtime.deliverer.child_pid
        assert second is not None and second != first

        def delivered() -> bool:
            rows = server.call(server.runtime.webhooks.deliveries(hook.webhook_id, None, 10))
            mine = [(r.attempt, r.state) for r in rows if r.event_id == held.webhook_id]
            return mine == [(1, DeliveryState.DELIVERED)]

        _until(delivered, "the attempt made again is not listed delivered")
    finally:
        server.stop()
        receiver.stop()


def test_a_sigkilled_server_leaves_no_child_and_loses_no_delivery(
    tmp_path: Path, own_db: str | None
) -> None:
    """Two deliveries held by the receiver (one in the server, one in its child) when the
    server is SIGKILLed: the child ends (its input closed), and after a restart both go out
    again, each under its own webhook-id."""
    db: Path | str = own_db or tmp_path / "runsink.db"
    receiver = Receiver("", answer=lambda n: (200, 30.0) if n == 1 else 200).start()
    run_id = new_run_id()
    server = start_server(tmp_path / "one", db=db)
    try:
        with server.http() as client:
            answer = client.post(
                "/v1/webhooks", json={"url": receiver.url, "run_id": run_id, "events": ["message"]}
            )
            assert answer.status_code == 201, answer.text
            receiver.secret = answer.json()["secret"]
            inbox = create_inbox(client, run_id)
        server.send(inbox["address"], subject="One")
        receiver.until(lambda got: len(got) >= 1)
        server.send(inbox["address"], subject="Two")
        receiver.until(lambda got: len(got) >= 2)
        children = _children(server.process.pid)
        assert children, "no delivery child"
    finally:
        server.stop(signal.SIGKILL)
    _until(lambda: not any(_alive(pid) for pid in children), "the child outlived its server")
    restarted = start_server(tmp_path / "two", db=db)
    try:
        got = receiver.until(lambda got: len(got) >= 4)
    finally:
        restarted.stop()
        receiver.stop()
    ids = [g.webhook_id for g in got]
    assert len(set(ids)) == 2 and all(ids.count(i) == 2 for i in ids)
    assert all(g.verified for g in got)
