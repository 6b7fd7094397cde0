"""The v2 storage ports over SQLite (CaughtMail, SearchIndex): upgrade, deletes, shared bodies."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import TypeVar

import pytest

from sink import ids
from sink.message import summarize
from sink.search import parse_query
from sink.storage.base import Delivered, Incoming
from sink.storage.sqlite import SQLiteStore
from tests.test_storage import created_event, new_inbox

T = TypeVar("T")
RAW = b"From: Acme <a@acme.example>\r\nTo: x@gmail.com\r\nSubject: Hello there\r\n\r\nbody text\r\n"


def run(path: Path, work: Callable[[SQLiteStore], Awaitable[T]]) -> T:
    async def main() -> T:
        store = SQLiteStore(path)
        await store.open()
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(main())


def caught(raw: bytes = RAW, until: float | None = None) -> Incoming:
    now = time.time()
    return Incoming(
        raw,
        summarize(raw),
        "app@example.test",
        now,
        (),
        unrouted=("x@gmail.com",),
        caught_id=ids.new_caught_id(),
        caught_until=now + 60 if until is None else until,
    )


def test_a_v1_store_is_indexed_at_the_upgrade(tmp_path: Path) -> None:
    """Mail stored before v2 is searchable after it (the index is filled once, at migration)."""
    path = tmp_path / "v1.db"
    v1 = (resources.files("sink.storage") / "sql" / "001_init.sql").read_text()
    with sqlite3.connect(path) as db:
        db.executescript(v1 + "\nPRAGMA user_version = 1;")
        db.execute(
            "INSERT INTO messages (message_pk, raw, size, subject, from_addr, to_json, cc_json, "
            "mail_from, received_at) VALUES (1, ?, ?, 'Hello there', 'a@acme.example', '[]', "
            "'[]', 'app@example.test', 1.0)",
            (RAW, len(RAW)),
        )
        db.execute(
            "INSERT INTO inboxes (inbox_id, run_id, purpose, local_part, address, policy, "
            "created_at, expires_at, poll_budget, state, match_json, trace_id, "
            "evidence_release_at) VALUES ('ib_aaaaaaaaaaaaaaaaaaaa', 'r1', 'p', 'l', "
            "'l@sink.test', 'ci', 0, 9e9, 5, 'created', '{}', 't', 9e9)"
        )
        db.execute(
            "INSERT INTO deliveries (message_id, inbox_id, message_pk, rcpt_json) VALUES "
            "('msg_aaaaaaaaaaaaaaaaaaaaaaaa', 'ib_aaaaaaaaaaaaaaaaaaaa', 1, '[\"l@sink.test\"]')"
        )

    async def search(store: SQLiteStore) -> list[str]:
        found = await store.search(parse_query("body from:acme"), None, None, 10)
        return [f.id for f in found]

    assert run(path, search) == ["msg_aaaaaaaaaaaaaaaaaaaaaaaa"]
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2


def test_caught_mail_expires_and_its_message_goes(tmp_path: Path) -> None:
    """After its retention the caught mail, its message row and its index row are gone."""
    path = tmp_path / "s.db"

    async def work(store: SQLiteStore) -> tuple[int, int, int]:
        await store.save_message(caught(until=time.time() - 1))
        await store.save_message(caught(until=time.time() + 600))
        expired = await store.expire_caught(time.time(), 100)
        left = len(await store.caught_page(None, 10))
        indexed = await store.count(parse_query("hello"), None, 100)
        return expired, left, indexed

    assert run(path, work) == (1, 1, 1)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 1
        assert db.execute("SELECT COUNT(*) FROM message_text").fetchone()[0] == 1


def test_the_sweepers_turn_with_no_caught_mail_due_leaves_the_index_to_the_pause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """expire_caught with nothing due indexes nothing (the sweeper asks every second, ingest
    or not); with mail due, it catches the index up and deletes."""
    import sink.storage.sqlite as adapter

    monkeypatch.setattr(adapter, "_INDEX_QUIET_S", 3600.0)  # no pause in this test
    path = tmp_path / "s.db"

    async def listed(store: SQLiteStore) -> int:
        return len(await store._read("SELECT seq FROM listing"))

    async def work(store: SQLiteStore) -> tuple[int, int, int, int]:
        await store.save_message(caught(until=time.time() + 600))
        await store.save_message(caught(until=time.time() + 600))
        none_due = await store.expire_caught(time.time(), 100)
        before = await listed(store)
        due = await store.expire_caught(time.time() + 601, 1)
        return none_due, before, due, await listed(store)

    assert run(path, work) == (0, 0, 1, 1)


def test_a_shared_body_stays_while_either_use_needs_it(tmp_path: Path) -> None:
    """Evidence released: the caught copy keeps the body; caught mail gone too: body released."""
    path = tmp_path / "s.db"

    async def work(store: SQLiteStore) -> tuple[bytes | None, bytes | None, bytes | None]:
        new = new_inbox()
        await store.create_inbox(new, created_event(new))
        inbox = new.inbox
        message_id = ids.new_message_id()
        both = caught()
        both = Incoming(
            both.raw,
            both.summary,
            both.mail_from,
            both.received_at,
            (Delivered(inbox.inbox_id, inbox.run_id, message_id, (inbox.address,)),),
            unrouted=both.unrouted,
            caught_id=both.caught_id,
            caught_until=both.caught_until,
        )
        await store.save_message(both)
        await store.release_run(inbox.run_id, time.time())
        assert both.caught_id is not None
        kept = await store.caught_message(both.caught_id)
        evidence = await store.raw(message_id)
        await store.expire_caught(both.caught_until + 1, 10)
        after = await store.message(message_id)
        return (kept.raw if kept else None), evidence, (after.raw if after else b"gone")

    kept, evidence, after = run(path, work)
    assert kept == RAW  # the caught copy still reads whole
    assert evidence is None  # the released evidence does not
    assert after is None  # both uses over: the body is gone, the delivery's metadata stays


def test_delete_refuses_live_evidence_and_deletes_nothing(tmp_path: Path) -> None:
    """Naming live evidence refuses the whole delete; with no names, live evidence stays."""
    path = tmp_path / "s.db"

    async def work(store: SQLiteStore) -> tuple[tuple[str, ...], int, int, list[str]]:
        new = new_inbox()
        await store.create_inbox(new, created_event(new))
        inbox = new.inbox
        message_id = ids.new_message_id()
        raw = RAW.replace(b"x@gmail.com", inbox.address.encode())
        delivered = (Delivered(inbox.inbox_id, inbox.run_id, message_id, (inbox.address,)),)
        await store.save_message(
            Incoming(raw, summarize(raw), "app@example.test", time.time(), delivered)
        )
        other = caught()
        await store.save_message(other)
        assert other.caught_id is not None
        refused = await store.delete_listed([other.caught_id, message_id], time.time())
        after_refusal = await store.count(parse_query(""), None, 100)
        everything = await store.delete_listed(None, time.time())
        left = [f.id for f in await store.search(parse_query(""), None, None, 10)]
        return refused.refused, after_refusal, everything.deleted, left

    refused, after_refusal, deleted, left = run(path, work)
    assert len(refused) == 1 and refused[0].startswith("msg_")
    assert after_refusal == 2
    assert deleted == 1
    assert len(left) == 1 and left[0].startswith("msg_")
