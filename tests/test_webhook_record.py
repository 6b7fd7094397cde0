"""The delivery child writes the delivered attempts itself (SQLite: ``record_delivered`` on
its own connection, ``RECORD_S`` late at most), so the writer that takes the mail never
sees them. What it could not write is settled by the server; what it delivered but had not
written when it died is settled by the server once a new child runs; what it holds when the
server stops is written before it exits. None of it is made twice."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sink import clock
from sink.storage.sqlite.store import SQLiteStore
from sink.storage.sqlite.webhooks import Delivered, record_delivered
from sink.webhook_signature import new_secret
from sink.webhooks.model import DeliveryState, Due, Outcome, Webhook, new_webhook_id
from tests.inproc import InProcess
from tests.support import create_inbox, new_run_id
from tests.test_webhook_store import _hook, _mail
from tests.webhook_receiver import Receiver


def _until(done: Callable[[], object], what: str, deadline_s: float = 20.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


async def _handing(store: SQLiteStore, mails: int) -> tuple[Webhook, list[Due]]:
    """A webhook of a new run, and ``mails`` messages to that run: the deliveries their
    commits hand over (the list goes on growing as the store hands more)."""
    handed: list[Due] = []
    store.webhooks.hand = handed.extend
    run_id = new_run_id()
    hook = _hook(events=("message",), run_id=run_id)
    await store.webhooks.create_webhook(hook)
    for _ in range(mails):
        await _mail(store, run_id)
    return hook, handed


def _written_by_a_child(path: Path, batch: list[Delivered]) -> set[str]:
    """``record_delivered`` on a connection of its own, as the delivery child writes."""
    child = sqlite3.connect(path, isolation_level=None)
    try:
        return record_delivered(child, batch)
    finally:
        child.close()


def test_record_delivered_writes_what_is_still_pending_at_that_attempt(tmp_path: Path) -> None:
    """From a second connection (the child's): a handed-over delivery is written delivered
    with its attempt row; one whose attempt number moved on, and one a settle failed
    meanwhile, are left to the server (not among the ids written)."""

    async def scenario() -> None:
        store = SQLiteStore(tmp_path / "runsink.db")
        await store.open()
        try:
            hook, handed = await _handing(store, mails=3)
            ok, moved, failed = handed
            await store.webhooks.settle(
                Outcome(failed.delivery_id, 1, clock.now(), 500, "http_500", DeliveryState.FAILED)
            )
            at = clock.now()
            written = _written_by_a_child(
                tmp_path / "runsink.db",
                [
                    Delivered(ok.delivery_id, 1, 204, at),
                    Delivered(moved.delivery_id, 2, 204, at),
                    Delivered(failed.delivery_id, 1, 204, at),
                ],
            )
            assert written == {ok.delivery_id}
            store.webhooks.recorded([ok], clock.now())
            rows = await store.webhooks.deliveries(hook.webhook_id, None, 10)
            states = {(r.delivery_id, r.attempt): (r.state, r.status_code) for r in rows}
            assert states[(ok.delivery_id, 1)] == (DeliveryState.DELIVERED, 204)
            assert states[(moved.delivery_id, 1)] == (DeliveryState.PENDING, None)
            assert states[(failed.delivery_id, 1)] == (DeliveryState.FAILED, 500)
        finally:
            await store.close()

    asyncio.run(scenario())


def _server_with_a_held_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record_s: float
) -> tuple[InProcess, Receiver, Webhook, Any]:
    """A server (SQLite) whose child writes ``record_s`` late; two mails to a webhook: the
    first attempt is made in the server and held 1 s by the receiver, so the second goes to
    the child, which delivers it."""
    monkeypatch.setattr("sink.webhooks.child.RECORD_S", record_s)
    secret = new_secret()
    seen: list[int] = []

    def answer(n: int) -> int | tuple[int, float]:
        seen.append(n)
        return (200, 1.0) if len(seen) == 1 else 204

    receiver = Receiver(secret, answer=answer).start()
    server = InProcess(tmp_path / "s")
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
    in_child = next(g for g in got if g.body["data"]["subject"] == "In the child")
    # The child's answer reached the worker: delivered, its write held by the child.
    _until(lambda: server.runtime.deliverer._recording, "the child's answer did not come")
    return server, receiver, hook, in_child


def _listed(server: InProcess, hook: Webhook) -> dict[str, tuple[int, DeliveryState]]:
    rows = server.call(server.runtime.webhooks.deliveries(hook.webhook_id, None, 10))
    return {r.event_id: (r.attempt, r.state) for r in rows}


def test_the_child_writes_a_stream_s_delivered_attempts_and_the_server_those_it_could_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child's delivered attempt stays pending in the listing while the child holds its
    write (30 s here); the child SIGKILLed then, the server settles it itself once a new
    child runs: delivered at attempt 1, and the receiver saw it once."""
    server, receiver, hook, in_child = _server_with_a_held_first(tmp_path, monkeypatch, 30.0)
    try:
        _until(
            lambda: _listed(server, hook).get(in_child.webhook_id) is not None,
            "the child's delivery is not listed",
        )
        assert _listed(server, hook)[in_child.webhook_id] == (1, DeliveryState.PENDING)
        child = server.runtime.deliverer.child_pid
        assert child is not None
        os.kill(child, signal.SIGKILL)
        _until(
            lambda: _listed(server, hook).get(in_child.webhook_id) == (1, DeliveryState.DELIVERED),
            "the server did not settle what the dead child delivered",
        )
        assert [g.webhook_id for g in receiver.got].count(in_child.webhook_id) == 1
    finally:
        server.stop()
        receiver.stop()


def test_what_the_child_holds_when_the_server_stops_is_written_before_it_exits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server stops while the child holds a delivered attempt's write (30 s): it is
    written before the stop ends (the child writes it as its input closes, the server too:
    the second changes nothing), so after a restart it is listed delivered at attempt 1 and
    not made again."""
    server, receiver, hook, in_child = _server_with_a_held_first(tmp_path, monkeypatch, 30.0)
    try:
        _until(
            lambda: _listed(server, hook).get(in_child.webhook_id) == (1, DeliveryState.PENDING),
            "the child's delivery is not listed pending",
        )
    finally:
        server.stop()
    again = InProcess(tmp_path / "s")
    try:
        _until(
            lambda: _listed(again, hook).get(in_child.webhook_id) == (1, DeliveryState.DELIVERED),
            "the child's delivered attempt was not written at the stop",
            deadline_s=5.0,
        )
        assert [g.webhook_id for g in receiver.got].count(in_child.webhook_id) == 1
    finally:
        again.stop()
        receiver.stop()


def test_what_the_child_writes_makes_room_for_what_its_webhook_held_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A webhook may hold HELD_MAX handed-over deliveries (8 here): twenty mails hand 8 over;
    once the child says it wrote them, the next 8 due are leased and handed over in one
    write, not left to worker rounds that the cap would keep to a few at a time."""
    monkeypatch.setattr("sink.storage.sqlite.webhooks.HELD_MAX", 8)

    async def scenario() -> None:
        store = SQLiteStore(tmp_path / "runsink.db")
        await store.open()
        try:
            _, handed = await _handing(store, mails=20)
            assert len(handed) == 8
            at = clock.now()
            _written_by_a_child(
                tmp_path / "runsink.db", [Delivered(d.delivery_id, 1, 204, at) for d in handed]
            )
            store.webhooks.recorded(list(handed), clock.now())
            deadline = time.monotonic() + 10
            while len(handed) < 16:
                assert time.monotonic() < deadline, len(handed)
                await asyncio.sleep(0.01)
            assert len({d.delivery_id for d in handed}) == 16
            assert await store.webhooks.take_due(clock.now() + 3600, 100) == []  # (8 held: the cap)
        finally:
            await store.close()

    asyncio.run(scenario())
