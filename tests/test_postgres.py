"""What only the PostgreSQL store has to show: migrations under a lock, delivery numbers in
commit order, wake-ups through LISTEN/NOTIFY with a catch-up, and driver errors translated."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable

import asyncpg
import pytest

from sink import clock, ids
from sink.breaker import BreakerKey
from sink.errors import StorageUnavailable
from sink.message import summarize
from sink.storage.base import Event, Incoming
from sink.storage.postgres.migrate import migrate
from sink.storage.postgres.store import PostgresStore
from sink.vocabulary import Reason
from tests.pg_cluster import Cluster
from tests.test_storage import created_event, incoming, new_inbox


class Target:
    """A stand-in for the process's waiters: records what the listener asked."""

    def __init__(self, watched: list[str]) -> None:
        self._watched = watched
        self.woken: list[str] = []
        self.ended: list[str] = []
        self.changed = asyncio.Event()

    def wake(self, inbox_ids: Iterable[str]) -> None:
        self.woken.extend(inbox_ids)
        self.changed.set()

    def end(self, inbox_ids: Iterable[str]) -> None:
        self.ended.extend(inbox_ids)
        self.changed.set()

    def watched(self) -> list[str]:
        return list(self._watched)

    async def until(self, predicate: object, deadline_s: float = 10.0) -> None:
        async def loop() -> None:
            while not predicate():  # type: ignore[operator]
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(loop(), deadline_s)


def test_ten_replicas_starting_at_once_migrate_once(pg_cluster: Cluster) -> None:
    """Ten stores opening one empty database at once: one migration each, no error."""
    dsn = pg_cluster.dsn(pg_cluster.new_database())

    async def scenario() -> list[tuple[int, int]]:
        stores = [PostgresStore(dsn, pool_size=2) for _ in range(10)]
        await asyncio.gather(*(s.open() for s in stores))
        for store in stores:
            await store.close()
        connection = await asyncpg.connect(dsn)
        try:
            again = await migrate(connection)
            rows = await connection.fetch("SELECT version, 1 FROM runsink_migrations")
        finally:
            await connection.close()
        assert again == max(v for v, _ in rows)
        return [(r[0], r[1]) for r in rows]

    rows = asyncio.run(scenario())
    assert [v for v, _ in rows] == sorted({v for v, _ in rows})  # each version once


def test_deliveries_are_numbered_in_commit_order(pg_dsn: str) -> None:
    """200 concurrent deliveries to one inbox from two stores: numbers 1..200, no gap."""

    async def scenario() -> list[int]:
        a, b = PostgresStore(pg_dsn), PostgresStore(pg_dsn)
        await a.open()
        await b.open()
        try:
            new = new_inbox()
            await a.create_inbox(new, created_event(new))
            await asyncio.gather(
                *(
                    (a if n % 2 else b).save_message(incoming(new.inbox, subject=f"m{n}"))
                    for n in range(200)
                )
            )
            return [d.seq for d in await a.deliveries_after(new.inbox.inbox_id, 0, 500)]
        finally:
            await a.close()
            await b.close()

    assert asyncio.run(scenario()) == list(range(1, 201))


def test_mail_stored_by_one_replica_wakes_the_other(pg_dsn: str) -> None:
    """A delivery committed by store A is announced to store B's listener (not to A's own)."""

    async def scenario() -> tuple[list[str], list[str]]:
        a, b = PostgresStore(pg_dsn), PostgresStore(pg_dsn)
        await a.open()
        await b.open()
        new = new_inbox()
        on_a, on_b = Target([new.inbox.inbox_id]), Target([new.inbox.inbox_id])
        try:
            await a.create_inbox(new, created_event(new))
            a.follow(on_a)
            b.follow(on_b)
            await b.until_listening()
            await a.until_listening()
            on_a.woken.clear()
            on_b.woken.clear()  # the catch-up on connect wakes every watched inbox
            await a.save_message(incoming(new.inbox))
            await on_b.until(lambda: on_b.woken)
            await a.release_run(new.inbox.run_id, new.inbox.created_at + 1)
            await on_b.until(lambda: on_b.ended)
            return on_b.woken, on_b.ended
        finally:
            await a.close()
            await b.close()

    woken, ended = asyncio.run(scenario())
    assert woken == [ended[0]] and len(ended) == 1


def test_a_listener_that_reconnects_catches_up(pg_dsn: str) -> None:
    """The listener cut off: on reconnect it wakes every watched wait and ends the expired."""

    async def scenario() -> tuple[list[str], list[str]]:
        store = PostgresStore(pg_dsn)
        await store.open()
        live, gone = new_inbox("r1"), new_inbox("r2")
        target = Target([live.inbox.inbox_id, gone.inbox.inbox_id])
        try:
            for new in (live, gone):
                await store.create_inbox(new, created_event(new))
            store.follow(target)
            await store.until_listening()
            await store.expire(gone.inbox.expire(Reason.LEASE, gone.inbox.created_at), 60)
            target.woken.clear()
            target.ended.clear()
            connection = await asyncpg.connect(pg_dsn)
            try:  # the database drops the listener (as a restart or a failover would)
                await connection.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = 'runsink-listener'"
                    " AND datname = current_database()"
                )
            finally:
                await connection.close()
            await target.until(lambda: len(set(target.woken)) == 2)
            return sorted(set(target.woken)), target.ended
        finally:
            await store.close()

    woken, ended = asyncio.run(scenario())
    assert len(woken) == 2
    assert len(ended) == 1 and ended[0] in woken


def test_an_unreachable_database_is_storage_unavailable(pg_cluster: Cluster) -> None:
    """Nothing listening: opening fails with StorageUnavailable, never a driver error."""
    from tests.pg_cluster import _free_port

    dsn = f"postgresql://postgres@127.0.0.1:{_free_port()}/postgres"

    async def scenario() -> None:
        await PostgresStore(dsn, start_deadline_s=0.2).open()

    with pytest.raises(StorageUnavailable):
        asyncio.run(scenario())


def _driver_errors() -> list[type[BaseException]]:
    """Every exception class asyncpg defines (its whole tree), but its warnings."""
    found = []
    for name in dir(asyncpg.exceptions):
        cls = getattr(asyncpg.exceptions, name)
        if isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, Warning):
            found.append(cls)
    return found


@pytest.mark.parametrize("error", _driver_errors(), ids=lambda cls: cls.__name__)
def test_every_driver_error_becomes_one_of_ours(error: type[BaseException]) -> None:
    """Whatever asyncpg raises leaves the adapter as a StorageError: client-side errors
    (InternalClientError, as in a fast shutdown) and the server's trouble as
    StorageUnavailable, only a write's own bad data (SQLSTATE 22, 23) as StorageError."""
    from sink.errors import StorageError
    from sink.storage.postgres.driver import translated

    async def scenario() -> None:
        async with translated("save_message"):
            raise error("driver trouble")

    with pytest.raises(StorageError) as raised:
        asyncio.run(scenario())
    state = getattr(error, "sqlstate", None) or ""
    if not state.startswith(("22", "23")):
        assert isinstance(raised.value, StorageUnavailable), (error, type(raised.value))


@pytest.mark.parametrize(
    "error", [ConnectionResetError, BrokenPipeError, asyncio.IncompleteReadError], ids=str
)
def test_a_socket_lost_under_the_driver_is_storage_unavailable(error: type[Exception]) -> None:
    """A reset, a broken pipe or a message cut short is StorageUnavailable (451), never raw."""
    from sink.storage.postgres.driver import translated

    async def scenario() -> None:
        async with translated("save_message"):
            if error is asyncio.IncompleteReadError:
                raise asyncio.IncompleteReadError(b"", 5)
            raise error()

    with pytest.raises(StorageUnavailable):
        asyncio.run(scenario())


def test_a_bad_database_url_names_the_flag_and_never_the_password() -> None:
    """--db postgresql://... without a database name stops start-up; the message hides the URL."""
    import argparse

    from sink.config import settings_from
    from sink.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        settings_from(argparse.Namespace(db="postgresql://u:s3cret@db.example:5432/"), {})
    assert "--db" in str(refused.value) and "s3cret" not in str(refused.value)


def test_mail_for_an_inbox_expired_since_rcpt_is_a_late_arrival(pg_dsn: str) -> None:
    """Another replica expired the inbox between RCPT and the commit: no delivery, an event."""

    async def scenario() -> tuple[int, list[str]]:
        store = PostgresStore(pg_dsn)
        await store.open()
        try:
            new = new_inbox()
            await store.create_inbox(new, created_event(new))
            await store.expire(new.inbox.expire(Reason.LEASE, new.inbox.created_at), 60)
            await store.save_message(incoming(new.inbox))
            listed = await store.deliveries_after(new.inbox.inbox_id, 0, 10)
            _, events = await store.run_report(new.inbox.run_id)
            return len(listed), [e.type for e in events]
        finally:
            await store.close()

    listed, types = asyncio.run(scenario())
    assert listed == 0 and types[-1] == "late_arrival"


def test_one_wait_in_progress_per_inbox_across_stores(pg_dsn: str) -> None:
    """Two stores race for an inbox's wait slot: one takes it; the other learns when to retry."""
    from sink import clock

    async def scenario() -> tuple[list[float | None], float | None]:
        a, b = PostgresStore(pg_dsn), PostgresStore(pg_dsn)
        await a.open()
        await b.open()
        try:
            new = new_inbox()
            await a.create_inbox(new, created_event(new))
            now = clock.now()
            until = now + 5
            got = list(
                await asyncio.gather(
                    *(
                        (a if n % 2 else b).slots.take_poll_slot(new.inbox, now, until)
                        for n in range(10)
                    )
                )
            )
            await a.slots.free_poll_slot(new.inbox.inbox_id, until)
            again = await b.slots.take_poll_slot(new.inbox, now, until)
            return got, again
        finally:
            await a.close()
            await b.close()

    got, again = asyncio.run(scenario())
    assert got.count(None) == 1
    assert again is None


def test_the_breaker_lives_in_the_database_with_one_probe(pg_dsn: str) -> None:
    """Failures through store A open the breaker for store B; after the cooldown exactly one
    of many concurrent admissions is the probe; its success removes the row."""
    from sink.breaker import BreakerSettings, BreakerState

    settings = BreakerSettings(failure_threshold=2, cooldown_s=0.3, cooldown_max_s=1.0)
    key = BreakerKey("run-b", "ib_x", "wait")

    async def scenario() -> None:
        a, b = PostgresStore(pg_dsn), PostgresStore(pg_dsn)
        await a.open()
        await b.open()
        try:
            assert (await b.breakers.breaker_admit(key, 0.3, 2.0)).allowed
            assert await a.breakers.breaker_failure(key, settings) is None
            opened = await a.breakers.breaker_failure(key, settings)
            assert opened is not None and opened.to_state is BreakerState.OPEN
            refused = await b.breakers.breaker_admit(key, 0.3, 2.0)
            assert not refused.allowed and 0 < (refused.retry_after or 0) <= 0.3
            left = await b.breakers.breaker_cooldown_left(key)
            assert left is not None and left <= 0.3
            await asyncio.sleep(0.35)  # the cooldown is the database's clock: let it pass
            admissions = await asyncio.gather(
                *((a if n % 2 else b).breakers.breaker_admit(key, 0.3, 2.0) for n in range(20))
            )
            probes = [x for x in admissions if x.allowed]
            assert len(probes) == 1 and probes[0].probe
            assert probes[0].transition is not None
            failed = await b.breakers.breaker_failure(
                key, settings
            )  # the probe fails: doubled cooldown
            assert failed is not None and failed.cooldown_s == 0.6
            await asyncio.sleep(0.65)
            probe = await a.breakers.breaker_admit(key, 0.3, 2.0)
            assert probe.probe
            await a.breakers.breaker_abandon(key)  # handed back: the next call probes at once
            probe = await b.breakers.breaker_admit(key, 0.3, 2.0)
            assert probe.probe and probe.transition is None
            closed = await b.breakers.breaker_success(key)
            assert closed is not None and closed.to_state is BreakerState.CLOSED
            connection = await asyncpg.connect(pg_dsn)
            try:
                assert await connection.fetchval("SELECT COUNT(*) FROM breakers") == 0
            finally:
                await connection.close()
        finally:
            await a.close()
            await b.close()

    asyncio.run(scenario())


def test_one_replica_sweeps_at_a_time(pg_dsn: str) -> None:
    """While one store holds the sweeper's turn, another's is refused; released, it is free."""

    async def scenario() -> tuple[bool, bool, bool]:
        a, b = PostgresStore(pg_dsn), PostgresStore(pg_dsn)
        await a.open()
        await b.open()
        try:
            async with a.sweeper_turn() as first, b.sweeper_turn() as meanwhile:
                pass
            async with b.sweeper_turn() as after:
                pass
            return first, meanwhile, after
        finally:
            await a.close()
            await b.close()

    assert asyncio.run(scenario()) == (True, False, True)


def test_a_pool_connection_goes_back_without_a_reset_round_trip(pg_dsn: str) -> None:
    """A statement on the store's pool stays its connection's last query: no reset query
    (asyncpg's default: a round trip per use) follows it."""

    async def scenario() -> list[str]:
        store = PostgresStore(pg_dsn)
        await store.open()
        watcher = await asyncpg.connect(pg_dsn)
        try:
            probe = f"SELECT 'probe {uuid.uuid4().hex}'"
            await store.fetch("probe", probe)
            rows = await watcher.fetch(
                "SELECT query FROM pg_stat_activity "
                "WHERE application_name = 'runsink' AND pid <> pg_backend_pid()"
            )
            return [r[0] for r in rows if r[0] == probe]
        finally:
            await watcher.close()
            await store.close()

    assert len(asyncio.run(scenario())) == 1


def test_a_body_of_the_largest_allowed_size_is_stored_as_bytea(pg_dsn: str) -> None:
    """A message of max_message_bytes (25 MiB) is stored and read back byte for byte."""
    import os

    from sink.message import summarize
    from sink.policy import CI
    from sink.storage.base import Delivered, Incoming

    async def scenario() -> tuple[bytes, bytes | None]:
        store = PostgresStore(pg_dsn)
        await store.open()
        try:
            new = new_inbox()
            await store.create_inbox(new, created_event(new))
            head = b"From: app@x.test\r\nSubject: big\r\n\r\n"
            raw = head + os.urandom((CI.max_message_bytes - len(head)) // 2).hex().encode()
            message_id = "msg_big"
            inbox = new.inbox
            await store.save_message(
                Incoming(
                    raw=raw,
                    summary=summarize(raw[:4096]),
                    mail_from="app@x.test",
                    received_at=inbox.created_at,
                    deliveries=(Delivered(inbox.inbox_id, inbox.run_id, message_id, ()),),
                )
            )
            return raw, await store.raw(message_id)
        finally:
            await store.close()

    sent, stored = asyncio.run(scenario())
    assert stored == sent and len(sent) > 26_000_000


def caught_mail(subject: str) -> Incoming:
    raw = f"From: app@x.test\r\nSubject: {subject}\r\n\r\nbody\r\n".encode()
    return Incoming(
        raw=raw,
        summary=summarize(raw),
        mail_from="app@x.test",
        received_at=clock.now(),
        deliveries=(),
        unrouted=("someone@gmail.com",),
        caught_id=ids.new_caught_id(),
        caught_until=clock.now() + 3600,
    )


class Live:
    """A stand-in for the live-event hub: records what the feed published."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.messages: list[tuple[str, str]] = []
        self.resyncs = 0
        self.changed = asyncio.Event()

    def heard(self) -> bool:
        return True

    def record(self, events: Iterable[Event]) -> None:
        self.events.extend(events)
        self.changed.set()

    def delivered(
        self, message_id: str, inbox_id: str, run_id: str, subject: str, received_at: float
    ) -> None:
        self.messages.append((message_id, subject))
        self.changed.set()

    def caught(self, caught_id: str, subject: str, received_at: float) -> None:
        self.messages.append((caught_id, subject))
        self.changed.set()

    def lost(self) -> None:
        self.resyncs += 1

    async def until(self, predicate: object, deadline_s: float = 10.0) -> None:
        async def loop() -> None:
            while not predicate():  # type: ignore[operator]
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(loop(), deadline_s)


def test_live_events_committed_while_the_listener_is_away_are_caught_up(pg_dsn: str) -> None:
    """B's listener cut off (and kept off) while A commits events (and caught mail): on
    reconnect B publishes them from the table, by id; every event (B's own too) once, in
    commit order."""

    async def scenario() -> tuple[list[tuple[str, str]], list[tuple[str, str]], int]:
        a, b = PostgresStore(pg_dsn), PostgresStore(pg_dsn)
        await a.open()
        await b.open()
        live = Live()
        b.follow(Target([]), live=live)
        base, database = pg_dsn.rsplit("/", 1)
        admin = await asyncpg.connect(f"{base}/postgres")  # a database may not lock itself
        try:
            await b.until_listening()
            own = new_inbox("r-b")
            await b.create_inbox(own, created_event(own))
            new = new_inbox("r-a")
            await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'runsink-listener' AND datname = $1",
                database,
            )
            assert b._listener is not None
            deadline = asyncio.get_running_loop().time() + 10
            while b._listener.connected.is_set():
                assert asyncio.get_running_loop().time() < deadline, "the listener stayed up"
                await asyncio.sleep(0.01)
            await a.create_inbox(new, created_event(new))
            await a.save_message(incoming(new.inbox, subject="while away"))
            await a.save_message(caught_mail("caught while away"))
            await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
            await live.until(lambda: len(live.messages) == 2)
            await a.release_run(new.inbox.run_id, new.inbox.created_at + 1)
            await live.until(lambda: len(live.events) >= 5)
            return (
                [(e.run_id, e.type) for e in live.events],
                live.messages,
                live.resyncs,
            )
        finally:
            await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
            await admin.close()
            await a.close()
            await b.close()

    events, messages, resyncs = asyncio.run(scenario())
    assert events == [
        ("r-b", "created"),
        ("r-a", "created"),
        ("r-a", "message_accepted"),
        ("r-a", "expired"),
        ("r-a", "released"),
    ]
    assert [subject for _, subject in messages] == ["while away", "caught while away"]
    assert messages[1][0].startswith("cm_") and resyncs == 0  # caught mail: no run's event


def test_the_live_feed_replays_ids_below_its_position_that_commit_late(pg_dsn: str) -> None:
    """Seen 1, 2 and 5: a catch-up publishes 3 (a transaction that took its id earlier and
    committed later) and 6, then 4 when it commits too; nothing is published twice."""
    from sink.storage.postgres.feed import EventFeed

    async def insert(connection: asyncpg.Connection, *ids: int) -> None:
        await connection.executemany(
            "INSERT INTO events (id, run_id, at, type, detail_json)"
            " VALUES ($1, $2, 0, 'created', '{}')",
            [(n, f"run-{n}") for n in ids],
        )

    async def scenario() -> list[list[str]]:
        connection = await asyncpg.connect(pg_dsn)
        live = Live()
        feed = EventFeed(live)
        seen: list[list[str]] = []
        try:
            await feed.reconnected(connection)  # an empty table: from id 0
            await insert(connection, 1, 2, 5)
            feed.announced("1,2,5")
            await feed.pull(connection)
            seen.append([e.run_id for e in live.events])
            await insert(connection, 3, 6)
            await feed.reconnected(connection)
            seen.append([e.run_id for e in live.events])
            await insert(connection, 4)
            await feed.reconnected(connection)
            seen.append([e.run_id for e in live.events])
        finally:
            await connection.close()
        return seen

    first, second, third = asyncio.run(scenario())
    assert first == ["run-1", "run-2", "run-5"]
    assert second == [*first, "run-3", "run-6"]
    assert third == [*second, "run-4"]
