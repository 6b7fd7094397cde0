"""The storage port, one suite for every adapter: atomic claims, idempotent creates, release.

Each shared test takes ``backend`` and runs once per adapter in ``OPENERS``; to add an
adapter, add its opener there. The SQLite-only tests at the bottom check the file itself
(WAL, migrations, group commit).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

from sink import clock, ids
from sink.inbox import Claim, Inbox, ScanResult, after_poll
from sink.message import summarize
from sink.policy import CI
from sink.storage.base import (
    RUN_RELEASED,
    CreateOutcome,
    Delivered,
    Event,
    Incoming,
    NewInbox,
    Storage,
)
from sink.storage.memory import MemoryStore
from sink.storage.postgres.store import PostgresStore
from sink.storage.sqlite.migrate import migrations
from sink.storage.sqlite.store import SQLiteStore
from sink.vocabulary import Reason, State

T = TypeVar("T")
Opener = Callable[[Path], AbstractAsyncContextManager[Storage]]

LATEST_SQLITE = migrations()[-1][0]  # the schema version a migrated file has


@asynccontextmanager
async def _memory(folder: Path) -> AsyncIterator[Storage]:
    store = MemoryStore()
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def _sqlite(folder: Path) -> AsyncIterator[Storage]:
    store = SQLiteStore(folder / "s.db")
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def _postgres(dsn: str) -> Opener:
    @asynccontextmanager
    async def opener(folder: Path) -> AsyncIterator[Storage]:
        store = PostgresStore(dsn)
        await store.open()
        try:
            yield store
        finally:
            await store.close()

    return opener


OPENERS: dict[str, Opener] = {"memory": _memory, "sqlite": _sqlite, "postgres": _sqlite}
"""``postgres`` is opened on a fresh database of the session's server (see ``backend``)."""


class Backend:
    """One adapter, on a fresh database in a test's folder."""

    def __init__(self, name: str, opener: Opener, folder: Path) -> None:
        self.name = name
        self._opener = opener
        self._folder = folder

    def run(self, scenario: Callable[[Storage], Awaitable[T]]) -> T:
        async def main() -> T:
            async with self._opener(self._folder) as store:
                return await scenario(store)

        return asyncio.run(main())


@pytest.fixture(params=list(OPENERS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "postgres":
        dsn: str = request.getfixturevalue("pg_dsn")
        return Backend("postgres", _postgres(dsn), tmp_path)
    return Backend(request.param, OPENERS[request.param], tmp_path)


def run(path: Path, scenario: Callable[[SQLiteStore], Awaitable[T]]) -> T:
    """A scenario on the SQLite file at ``path`` (for the SQLite-only tests)."""

    async def main() -> T:
        store = SQLiteStore(path)
        await store.open()
        try:
            return await scenario(store)
        finally:
            await store.close()

    return asyncio.run(main())


def new_inbox(run_id: str = "run-1", purpose: str = "signup", key: str | None = None) -> NewInbox:
    now = clock.now()
    local = ids.new_local_part()
    inbox = Inbox.fresh(
        inbox_id=ids.new_inbox_id(),
        run_id=run_id,
        purpose=purpose,
        address=f"{local}@sink.test",
        policy_name="ci",
        now=now,
        ttl_s=600,
        poll_budget=12,
        trace_id="t",
    )
    return NewInbox(
        inbox=inbox,
        local_part=local,
        idempotency_key=key or f"{purpose}:{run_id}",
        request_json=f'{{"purpose":"{purpose}","run_id":"{run_id}"}}',
        inboxes_per_purpose=3,
        retention_s=86400,
    )


def created_event(new: NewInbox) -> Event:
    return Event(new.inbox.run_id, "created", new.inbox.created_at, new.inbox.inbox_id)


def incoming(*inboxes: Inbox, subject: str = "Hello") -> Incoming:
    raw = f"From: app@x.test\r\nSubject: {subject}\r\n\r\nbody\r\n".encode()
    return Incoming(
        raw=raw,
        summary=summarize(raw),
        mail_from="app@x.test",
        received_at=clock.now(),
        deliveries=tuple(
            Delivered(i.inbox_id, i.run_id, ids.new_message_id(), (i.address,)) for i in inboxes
        ),
    )


def test_concurrent_creates_with_one_key_make_one_inbox(backend: Backend) -> None:
    """Ten concurrent creates with the same key: one is created, nine replay it."""

    async def scenario(store: Storage) -> list[tuple[str, str | None]]:
        news = [new_inbox(key="same-key") for _ in range(10)]
        results = await asyncio.gather(*(store.create_inbox(n, created_event(n)) for n in news))
        return [(r.outcome, r.inbox.inbox_id if r.inbox else None) for r in results]

    results = backend.run(scenario)
    assert [o for o, _ in results].count(CreateOutcome.CREATED) == 1
    assert [o for o, _ in results].count(CreateOutcome.REPLAYED) == 9
    assert len({inbox_id for _, inbox_id in results}) == 1


def test_the_same_key_with_another_body_is_a_conflict(backend: Backend) -> None:
    """An idempotency key replays only the body it was first used with."""

    async def scenario(store: Storage) -> str:
        first = new_inbox(key="k")
        await store.create_inbox(first, created_event(first))
        other = replace(new_inbox(key="k"), request_json='{"other":1}')
        return (await store.create_inbox(other, created_event(other))).outcome

    assert backend.run(scenario) == CreateOutcome.CONFLICT


def test_an_inbox_keeps_the_arguments_it_was_created_with(backend: Backend) -> None:
    """An inbox loads with the create arguments it was stored with (v3: create_new_inbox)."""
    given = '{"match":{"subject_contains":"Code"},"purpose":"signup","run_id":"run-1","ttl_s":60}'

    async def scenario(store: Storage) -> tuple[str | None, str | None]:
        new = new_inbox()
        new = replace(new, inbox=replace(new.inbox, created_with=given))
        created = await store.create_inbox(new, created_event(new))
        loaded = await store.load_inbox(new.inbox.inbox_id)
        assert created.inbox is not None and loaded is not None
        return created.inbox.created_with, loaded.created_with

    assert backend.run(scenario) == (given, given)


def test_a_key_whose_inbox_expired_is_judged_only_by_inboxes_per_purpose(backend: Backend) -> None:
    """Once its inbox expired, a key takes another body: the run's next inbox, then replays."""

    async def scenario(store: Storage) -> list[str]:
        first = new_inbox(key="k")
        await store.create_inbox(first, created_event(first))
        await store.expire(first.inbox.expire(Reason.LEASE, clock.now()), 86400)
        other = replace(new_inbox(key="k"), request_json='{"other":1}')
        again = replace(new_inbox(key="k"), request_json='{"other":1}')
        return [
            (await store.create_inbox(other, created_event(other))).outcome,
            (await store.create_inbox(again, created_event(again))).outcome,
        ]

    assert backend.run(scenario) == [CreateOutcome.CREATED, CreateOutcome.REPLAYED]


def test_inboxes_per_purpose_holds_under_concurrency(backend: Backend) -> None:
    """Concurrent creates with different keys never exceed inboxes_per_purpose."""

    async def scenario(store: Storage) -> list[str]:
        news = [new_inbox(key=f"k{n}") for n in range(10)]
        results = await asyncio.gather(*(store.create_inbox(n, created_event(n)) for n in news))
        return [r.outcome for r in results]

    outcomes = backend.run(scenario)
    assert outcomes.count(CreateOutcome.CREATED) == 3
    assert outcomes.count(CreateOutcome.FORBIDDEN) == 7


def test_a_message_is_claimed_at_most_once(backend: Backend) -> None:
    """Concurrent claims by different runs: exactly one claim stands, and all see it."""

    async def scenario(store: Storage) -> tuple[set[str], str, Inbox | None]:
        new = new_inbox()
        await store.create_inbox(new, created_event(new))
        await store.save_message(incoming(new.inbox))
        (delivery,) = await store.deliveries_after(new.inbox.inbox_id, 0, 10)
        claims = [
            Claim(ids.new_claim_id(), delivery.message_id, f"run-{n}", clock.now())
            for n in range(8)
        ]
        standing = await asyncio.gather(*(store.claim(delivery, c, new.inbox) for c in claims))
        stored = await store.delivery(delivery.message_id)
        assert stored is not None and stored.claim is not None
        inbox = await store.load_inbox(new.inbox.inbox_id)
        return {c.claim_id for c in standing}, stored.claim.claim_id, inbox

    standing, stored, inbox = backend.run(scenario)
    assert standing == {stored}
    assert inbox is not None and inbox.state is State.RECEIVED
    assert inbox.evidence is not None and inbox.evidence.claim is not None
    assert inbox.evidence.claim.claim_id == stored


def test_concurrent_deliveries_are_all_kept(backend: Backend) -> None:
    """200 concurrent saves all return stored, in one sequence, oldest first."""

    async def scenario(store: Storage) -> list[int]:
        new = new_inbox()
        await store.create_inbox(new, created_event(new))
        await asyncio.gather(
            *(store.save_message(incoming(new.inbox, subject=f"m{n}")) for n in range(200))
        )
        first = await store.deliveries_after(new.inbox.inbox_id, 0, 150)
        rest = await store.deliveries_after(new.inbox.inbox_id, first[-1].seq, 150)
        return [d.seq for d in first + rest]

    seqs = backend.run(scenario)
    assert len(seqs) == 200 and seqs == sorted(set(seqs))


def test_a_shared_message_keeps_its_body_until_every_inbox_is_released(backend: Backend) -> None:
    """A message stored once for two runs' inboxes: releasing one run keeps the other's body."""

    async def scenario(store: Storage) -> tuple[bytes | None, bytes | None]:
        first, second = new_inbox("run-a"), new_inbox("run-b")
        for new in (first, second):
            await store.create_inbox(new, created_event(new))
        await store.save_message(incoming(first.inbox, second.inbox))
        (a,) = await store.deliveries_after(first.inbox.inbox_id, 0, 10)
        (b,) = await store.deliveries_after(second.inbox.inbox_id, 0, 10)
        await store.release_run("run-a", clock.now())
        return await store.raw(a.message_id), await store.raw(b.message_id)

    released, kept = backend.run(scenario)
    assert released is None and kept is not None and kept.startswith(b"From:")


def test_a_kept_analysis_is_read_back_until_the_body_is_released(backend: Backend) -> None:
    """keep_analysis keeps the first analysis (a second does not replace it, unless it names
    the one it replaces), message() returns it, and releasing the run clears it with the body."""

    async def scenario(store: Storage) -> list[str | None]:
        new = new_inbox("run-k")
        await store.create_inbox(new, created_event(new))
        await store.save_message(incoming(new.inbox))
        (delivery,) = await store.deliveries_after(new.inbox.inbox_id, 0, 10)
        seen = []
        for analysis in ('{"v":0,"old":true}', '{"v":1,"second":true}'):
            await store.keep_analysis(delivery.message_id, analysis)
            stored = await store.message(delivery.message_id)
            seen.append(stored.analysis if stored else "missing")
        await store.keep_analysis(delivery.message_id, '{"v":1,"first":true}', seen[0])
        stored = await store.message(delivery.message_id)
        seen[1] = stored.analysis if stored else "missing"
        await store.release_run("run-k", clock.now())
        stored = await store.message(delivery.message_id)
        seen.append(stored.analysis if stored else "missing")
        await store.keep_analysis(delivery.message_id, '{"v":1,"late":true}')
        stored = await store.message(delivery.message_id)
        seen.append(stored.analysis if stored else "missing")
        return seen

    first, replaced, released, late = backend.run(scenario)
    assert first == '{"v":0,"old":true}' and replaced == '{"v":1,"first":true}'
    assert released is None and late is None


def test_the_auth_user_is_kept_with_evidence_and_caught_mail(backend: Backend) -> None:
    """The SMTP AUTH user name comes back with the delivery and the caught mail; None without."""

    async def scenario(store: Storage) -> list[str | None]:
        new = new_inbox()
        await store.create_inbox(new, created_event(new))
        authed = replace(
            incoming(new.inbox),
            unrouted=("else@elsewhere.test",),
            caught_id=ids.RANDOM.caught_id(),
            caught_until=clock.now() + 60,
            auth_user="ci-app@example.test",
        )
        await store.save_message(authed)
        await store.save_message(incoming(new.inbox))
        first, second = await store.deliveries_after(new.inbox.inbox_id, 0, 10)
        users = []
        for delivery in (first, second):
            stored = await store.message(delivery.message_id)
            assert stored is not None
            users.append(stored.auth_user)
        assert authed.caught_id is not None
        mail: Any = store if isinstance(store, MemoryStore) else store.mail  # memory: one object
        caught = await mail.caught_message(authed.caught_id)
        assert caught is not None
        return [*users, caught.auth_user]

    assert backend.run(scenario) == ["ci-app@example.test", None, "ci-app@example.test"]


def test_save_poll_refuses_a_stale_snapshot(backend: Backend) -> None:
    """A poll recorded from a stale snapshot (another poll got there first) is refused."""

    async def scenario(store: Storage) -> tuple[bool, bool]:
        new = new_inbox()
        await store.create_inbox(new, created_event(new))
        before = new.inbox
        now = clock.now()
        after = after_poll(before, CI, ScanResult(None, 0, False), now, now)
        event = Event(before.run_id, "polled", now, before.inbox_id)
        return await store.save_poll(before, after, event), await store.save_poll(
            before, after, event
        )

    first, second = backend.run(scenario)
    assert first and not second


def test_a_route_is_never_served_stale_after_its_inbox_expires(backend: Backend) -> None:
    """After a poll, a release or the sweeper expires an inbox, its route says expired."""

    async def scenario(store: Storage) -> list[bool]:
        seen = []
        polled, released, swept = new_inbox("a"), new_inbox("b"), new_inbox("c")
        for new in (polled, released, swept):
            await store.create_inbox(new, created_event(new))
            route = await store.route(new.local_part)  # now cached
            assert route is not None and not route.expired
        now = clock.now()
        last = replace(polled.inbox, polls_used=11)
        await store.save_poll(
            polled.inbox,
            after_poll(last, CI, ScanResult(None, 0, False), now, now),
            Event("a", "polled", now, polled.inbox.inbox_id),
        )
        await store.release_run("b", now)
        await store.expire(swept.inbox.expire(Reason.LEASE, now), 60)
        for new in (polled, released, swept):
            route = await store.route(new.local_part)
            seen.append(route is not None and route.expired)
        return seen

    assert backend.run(scenario) == [True, True, True]


def test_the_sweeper_expires_due_leases_and_releases_due_evidence(backend: Backend) -> None:
    """expire_due lists ended leases; once their retention is over, release_due frees them."""

    async def scenario(store: Storage) -> tuple[list[str], int, bytes | None, list[str]]:
        new = new_inbox("run-s")
        await store.create_inbox(new, created_event(new))
        await store.save_message(incoming(new.inbox))
        (delivery,) = await store.deliveries_after(new.inbox.inbox_id, 0, 10)
        later = new.inbox.expires_at + 1
        due = await store.expire_due(later, 10)
        for inbox in due:
            await store.expire(inbox.effective(later), 1)
        released = await store.release_due(later, 10)
        _, events = await store.run_report("run-s")
        return (
            [i.inbox_id for i in due],
            released,
            await store.raw(delivery.message_id),
            [e.type for e in events],
        )

    due, released, raw, events = backend.run(scenario)
    assert due == [due[0]] and released == 1 and raw is None
    assert events == ["created", "message_accepted", "expired", "released"]


def test_the_run_report_lists_inboxes_and_events_in_order(backend: Backend) -> None:
    """A run report: the run's inboxes with their accepted message, and its events by time."""

    async def scenario(store: Storage) -> tuple[list[str | None], list[str]]:
        new = new_inbox("run-r")
        await store.create_inbox(new, created_event(new))
        await store.save_message(incoming(new.inbox))
        (delivery,) = await store.deliveries_after(new.inbox.inbox_id, 0, 10)
        claim = Claim(ids.new_claim_id(), delivery.message_id, "run-r", clock.now())
        await store.claim(delivery, claim, new.inbox)
        reports, events = await store.run_report("run-r")
        return [r.accepted_message_id for r in reports], [e.type for e in events]

    accepted, events = backend.run(scenario)
    assert len(accepted) == 1 and accepted[0] is not None
    assert events == ["created", "message_accepted", "claimed"]


def test_the_signing_key_is_made_once_and_kept(backend: Backend) -> None:
    """signing_key: 32 random bytes, the same on every call (even concurrent first calls)."""

    async def scenario(store: Storage) -> list[bytes]:
        return list(await asyncio.gather(*(store.signing_key() for _ in range(5))))

    keys = backend.run(scenario)
    assert len(keys[0]) == 32 and len(set(keys)) == 1


def test_run_released_at_is_the_runs_latest_release_past_the_reports_cap(
    backend: Backend,
) -> None:
    """run_released_at: None before any release, then the run's latest release (in any
    order, however many events came before it), never another run's."""

    async def scenario(store: Storage) -> list[float | None]:
        seen = [await store.run_released_at("run-x")]
        many = [Event("run-x", "token_minted", 10.0 + n / 1e4) for n in range(10_001)]
        await store.add_events(many)  # more than the run report shows (it keeps the oldest)
        seen.append(await store.run_released_at("run-x"))
        await store.add_events([Event("run-x", RUN_RELEASED, 300.0)])
        await store.add_events([Event("run-x", RUN_RELEASED, 200.0)])
        await store.add_events([Event("run-y", RUN_RELEASED, 400.0)])
        seen.append(await store.run_released_at("run-x"))
        seen.append(await store.run_released_at("run-z"))
        return seen

    assert backend.run(scenario) == [None, None, 300.0, None]


# -- SQLite only: the file itself ---------------------------------------------------------


def test_the_signing_key_survives_reopening_and_differs_per_database(tmp_path: Path) -> None:
    """Run tokens hold across restarts: the key is in the file; another file has another."""

    async def key(store: SQLiteStore) -> bytes:
        return await store.signing_key()

    first = run(tmp_path / "a.db", key)
    assert run(tmp_path / "a.db", key) == first
    assert run(tmp_path / "b.db", key) != first


def test_concurrent_deliveries_are_durable_in_wal(tmp_path: Path) -> None:
    """200 concurrent saves: a fresh connection sees every one, and the file is in WAL mode."""
    path = tmp_path / "s.db"

    async def scenario(store: SQLiteStore) -> str:
        new = new_inbox()
        await store.create_inbox(new, created_event(new))
        await asyncio.gather(
            *(store.save_message(incoming(new.inbox, subject=f"m{n}")) for n in range(200))
        )
        return new.inbox.inbox_id

    inbox_id = run(path, scenario)
    with sqlite3.connect(path) as db:
        count = db.execute(
            "SELECT COUNT(*) FROM deliveries WHERE inbox_id = ?", (inbox_id,)
        ).fetchone()[0]
        mode = db.execute("PRAGMA journal_mode").fetchone()[0]
    assert count == 200 and mode == "wal"


def _indexed(store: SQLiteStore) -> Awaitable[list[sqlite3.Row]]:
    return store._read("SELECT message_pk FROM listing ORDER BY seq")


def test_an_index_batch_stops_at_its_bytes_and_the_rest_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch takes messages up to its byte bound (one at least, however large): a search
    still finds every message, each once, in the order it was stored."""
    import sink.storage.sqlite.fts as adapter

    monkeypatch.setattr(adapter, "_INDEX_BATCH_BYTES", 1)  # every message is over it
    monkeypatch.setattr(adapter, "_INDEX_QUIET_S", 3600.0)  # only the search indexes
    batches: list[int] = []
    index_pending = adapter.index_pending

    def counted(db: sqlite3.Connection, limit: int = adapter._INDEX_BATCH) -> tuple[int, bool]:
        indexed, more = index_pending(db, limit)
        batches.append(indexed)
        return indexed, more

    monkeypatch.setattr(adapter, "index_pending", counted)

    async def scenario(store: SQLiteStore) -> None:
        new = new_inbox()
        await store.create_inbox(new, created_event(new))
        for n in range(5):
            await store.save_message(incoming(new.inbox, subject=f"m{n}"))
        await store.indexer.caught_up()  # what a search does first
        rows = [row[0] for row in await _indexed(store)]
        assert rows == sorted(rows) and len(rows) == 5
        assert [size for size in batches if size] == [1, 1, 1, 1, 1]  # one a batch

    run(tmp_path / "s.db", scenario)


def test_the_index_follows_ingest_after_a_pause_and_at_a_backlog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a search, stored mail reaches the listing once ingest pauses, and while it
    goes on once the backlog is at its bound; a search then finds all of it, in order."""
    import sink.storage.sqlite.fts as adapter

    monkeypatch.setattr(adapter, "_INDEX_BATCH", 4)
    monkeypatch.setattr(adapter, "_INDEX_BATCH_IDLE", 4)
    monkeypatch.setattr(adapter, "_INDEX_QUIET_S", 0.05)
    monkeypatch.setattr(adapter, "_INDEX_BACKLOG", 6)

    async def scenario(store: SQLiteStore) -> None:
        loop = asyncio.get_running_loop()
        new = new_inbox()
        await store.create_inbox(new, created_event(new))
        for n in range(10):
            await store.save_message(incoming(new.inbox, subject=f"m{n}"))
        deadline = loop.time() + 10
        while len(await _indexed(store)) < 10:  # the pause after them
            assert loop.time() < deadline, "the index never caught up after a pause"
            await asyncio.sleep(0.01)
        # Ingest that never pauses for long enough: the backlog bound starts the index.
        sent = 10
        deadline = loop.time() + 10
        while len(await _indexed(store)) <= 10:
            assert loop.time() < deadline, "the index never started under a backlog"
            await store.save_message(incoming(new.inbox, subject=f"m{sent}"))
            sent += 1
            await asyncio.sleep(0.005)
        await store.indexer.caught_up()  # what a search does first
        rows = [row[0] for row in await _indexed(store)]
        assert rows == sorted(rows) and len(rows) == sent

    run(tmp_path / "s.db", scenario)


def test_reopening_applies_no_migration_twice(tmp_path: Path) -> None:
    """Opening an existing store keeps its data and its schema version."""
    path = tmp_path / "s.db"

    async def first(store: SQLiteStore) -> str:
        new = new_inbox()
        await store.create_inbox(new, created_event(new))
        return new.inbox.inbox_id

    async def second(store: SQLiteStore, inbox_id: str) -> bool:
        return await store.load_inbox(inbox_id) is not None

    inbox_id = run(path, first)
    assert run(path, lambda store: second(store, inbox_id))
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == LATEST_SQLITE


def test_a_failing_write_fails_alone_in_its_group_commit(tmp_path: Path) -> None:
    """Writes sharing a commit: one that fails rolls back alone; the others are durable."""
    from sink.errors import StorageError
    from sink.storage.sqlite.writer import Writer

    path = tmp_path / "w.db"

    def setup(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE IF NOT EXISTS t (n INTEGER PRIMARY KEY)")

    def insert(n: int) -> Callable[[sqlite3.Connection], int]:
        def work(db: sqlite3.Connection) -> int:
            db.execute("INSERT INTO t (n) VALUES (?)", (n,))
            if n == 13:
                db.execute("INSERT INTO t (n) VALUES (?)", (n,))  # a duplicate key: fails
            return n

        return work

    async def scenario() -> list[object]:
        writer = Writer(path)
        await writer.open(setup)
        try:
            return await asyncio.gather(
                *(writer.transaction(insert(n)) for n in range(20)), return_exceptions=True
            )
        finally:
            await writer.close()

    results = asyncio.run(scenario())
    assert isinstance(results[13], StorageError)
    assert [r for i, r in enumerate(results) if i != 13] == [n for n in range(20) if n != 13]
    with sqlite3.connect(path) as db:
        stored = [row[0] for row in db.execute("SELECT n FROM t ORDER BY n")]
    assert stored == [n for n in range(20) if n != 13]


def test_shared_writes_run_as_one_and_a_failing_one_fails_alone(tmp_path: Path) -> None:
    """Shared writes side by side in a commit run as one call; when it fails, each alone."""
    from sink.errors import StorageError
    from sink.storage.sqlite.writer import Writer

    path = tmp_path / "w.db"
    calls: list[list[int]] = []

    def setup(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE IF NOT EXISTS t (n INTEGER PRIMARY KEY)")

    def insert_many(db: sqlite3.Connection, items: list[int]) -> None:
        calls.append(list(items))
        db.executemany("INSERT INTO t (n) VALUES (?)", [(n,) for n in items])
        if 13 in items:
            db.execute("INSERT INTO t (n) VALUES (13)")  # a duplicate key: fails

    async def scenario(numbers: range) -> list[object]:
        writer = Writer(path)
        await writer.open(setup)
        try:
            return await asyncio.gather(
                *(writer.shared(insert_many, n) for n in numbers), return_exceptions=True
            )
        finally:
            await writer.close()

    assert asyncio.run(scenario(range(10))) == [None] * 10
    assert calls == [list(range(10))]  # all ten waited for one commit: one call
    calls.clear()
    results = asyncio.run(scenario(range(10, 20)))
    assert isinstance(results[3], StorageError)
    assert [r for i, r in enumerate(results) if i != 3] == [None] * 9
    assert calls == [list(range(10, 20)), *([n] for n in range(10, 20))]
    with sqlite3.connect(path) as db:
        stored = [row[0] for row in db.execute("SELECT n FROM t ORDER BY n")]
    assert stored == [n for n in range(20) if n != 13]


def test_every_migration_has_a_number_of_its_own() -> None:
    """Two migrations with one number would leave one unapplied on an upgraded store."""
    from sink.storage.postgres import migrate

    for found in (migrations(), migrate.migrations()):
        numbers = [number for number, _ in found]
        assert len(numbers) == len(set(numbers)), numbers
