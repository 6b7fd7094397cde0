"""The stores' run index (RunIndex) and their commit hook for live events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import pytest

from sink import clock, ids
from sink.errors import StorageError
from sink.inbox import Claim, Inbox, after_claim
from sink.mailbox import MailStore
from sink.message import summarize
from sink.search import parse_query
from sink.storage.base import Delivered, Event, Incoming, NewInbox, RunIndex
from sink.storage.memory import MemoryStore
from sink.storage.postgres.store import PostgresStore
from sink.storage.sqlite.store import SQLiteStore

T = TypeVar("T")


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """A SQLite folder, or a fresh PostgreSQL database."""
    if request.param == "postgres":
        dsn: str = request.getfixturevalue("pg_dsn")
        return dsn
    return tmp_path


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str | None:
    """A SQLite folder, a fresh PostgreSQL database, or None: the memory store."""
    if request.param == "memory":
        return None
    if request.param == "postgres":
        dsn: str = request.getfixturevalue("pg_dsn")
        return dsn
    return tmp_path


def _run(
    where: Path | str | None, work: Callable[[SQLiteStore], Awaitable[T]], hook: list[Event]
) -> T:
    async def main() -> T:
        store: SQLiteStore = (
            MemoryStore(hook.extend)  # type: ignore[assignment]
            if where is None
            else PostgresStore(where, hook.extend)
            if isinstance(where, str)
            else SQLiteStore(where / "index.db", hook.extend)
        )
        await store.open()
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(main())


async def _inbox(
    store: SQLiteStore, run_id: str, purpose: str, at: float, ttl: float = 600
) -> Inbox:
    local = ids.new_local_part()
    inbox = Inbox.fresh(
        inbox_id=ids.new_inbox_id(),
        run_id=run_id,
        purpose=purpose,
        address=f"{local}@sink.test",
        policy_name="ci",
        now=at,
        ttl_s=ttl,
        poll_budget=12,
        trace_id=ids.new_trace_id(),
    )
    new = NewInbox(inbox, local, f"{purpose}:{run_id}", json.dumps([run_id, purpose]), 3, 86400)
    await store.create_inbox(new, Event(run_id, "created", at, inbox.inbox_id))
    return inbox


async def _mail(store: SQLiteStore, inbox: Inbox, subject: str, at: float) -> str:
    raw = f"From: a@example.test\r\nTo: {inbox.address}\r\nSubject: {subject}\r\n\r\nx\r\n"
    message_id = ids.new_message_id()
    delivered = Delivered(inbox.inbox_id, inbox.run_id, message_id, (inbox.address,))
    await store.save_message(
        Incoming(raw.encode(), summarize(raw.encode()), "a@example.test", at, (delivered,))
    )
    return message_id


def test_recent_runs_newest_first_with_counts(any_store: Path | str | None) -> None:
    """States with the lease applied, messages, claims and the last event, newest run first."""
    hook: list[Event] = []

    async def work(store: SQLiteStore) -> None:
        index: RunIndex = store.runs
        now = clock.now()
        old = await _inbox(store, "run-old", "signup", now - 100, ttl=10)  # lease over
        live = await _inbox(store, "run-new", "signup", now - 50)
        await _inbox(store, "run-new", "reset", now - 40)
        await _mail(store, live, "one", now - 30)
        await _mail(store, live, "two", now - 20)
        delivery = (await store.deliveries_after(live.inbox_id, 0, 10))[0]
        claim = Claim(ids.new_claim_id(), delivery.message_id, "run-new", now - 10)
        await store.claim(delivery, claim, after_claim(live, delivery, claim))
        runs = await index.recent_runs(now, 10)
        assert [r.run_id for r in runs] == ["run-new", "run-old"]
        new, gone = runs
        assert new.states == {"created": 1, "received": 1}
        assert (new.messages, new.claims, new.last_event) == (2, 1, "claimed")
        assert sorted(new.purposes) == ["reset", "signup"]
        assert gone.states == {"expired": 1} and gone.messages == 0
        assert old.inbox_id  # the expired one is counted by its lease, not a sweep
        later = await index.recent_runs(now, 10, before=(new.started_at, new.run_id))
        assert [r.run_id for r in later] == ["run-old"]
        assert [r.run_id for r in await index.recent_runs(now, 10, purpose="reset")] == ["run-new"]
        assert [r.run_id for r in await index.recent_runs(now, 10, run_contains="OLD")] == [
            "run-old"
        ]
        assert [d.message_id for d in await index.run_deliveries("run-new", 10)][1] == (
            delivery.message_id
        )  # newest first
        # Finding a delivery by its subject (any case) or a recipient: the search port's.
        mail: MailStore = store.mail
        found = await mail.search(parse_query("subject:TWO"), None, None, 10)
        assert [f.subject for f in found] == ["two"] and found[0].run_id == "run-new"
        assert await mail.search(parse_query(f"to:{live.address[:8]}"), None, None, 10)

    _run(any_store, work, hook)


def test_events_reach_the_hook_after_their_commit_only(where: Path | str) -> None:
    """Every recorded event is handed over once committed; a failed write's are not."""
    hook: list[Event] = []

    async def work(store: SQLiteStore) -> None:
        now = clock.now()
        inbox = await _inbox(store, "hooked", "signup", now)
        assert [e.type for e in hook] == ["created"]
        await _mail(store, inbox, "hello", now)
        assert [e.type for e in hook][-1] == "message_accepted"
        before = len(hook)
        clash = replace(inbox, inbox_id=ids.new_inbox_id())  # same local part: UNIQUE fails
        new = NewInbox(clash, inbox.address.split("@")[0], "other-key", "{}", 3, 86400)
        with pytest.raises(StorageError):
            await store.create_inbox(new, Event("hooked", "created", now, clash.inbox_id))
        assert len(hook) == before  # rolled back: nothing announced
        await store.release_run("hooked", now)
        assert {"expired", "released"} <= {e.type for e in hook[before:]}

    _run(where, work, hook)
