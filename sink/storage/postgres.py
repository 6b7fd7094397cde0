"""The PostgreSQL adapter: any number of runsink processes share one database.

Every rule that must hold across replicas is the database's to enforce, never a
check-then-write here:

- one inbox per idempotency key: the key is a primary key; creators race on
  ``INSERT ... ON CONFLICT DO NOTHING RETURNING``, and the losers lock the winner's row;
- the per-purpose inbox limit: a counter row raised by a conditional upsert
  (``ON CONFLICT ... DO UPDATE ... WHERE used < limit RETURNING``);
- one claim per message: ``UPDATE ... WHERE claim_id IS NULL RETURNING``;
- one poll budget: ``save_poll`` is conditional on ``polls_used``, and a wait first takes
  its inbox's one wait slot (``take_poll_slot``: conditional on ``poll_until`` and
  ``next_poll_at``), so two waits at once on two replicas: one is too early;
- one breaker per (run, inbox, operation) with one half-open probe: a ``breakers`` row
  moved by conditional updates on the database's clock (``breaker_*``);
- deliveries are numbered per inbox under the inbox row's lock, so an inbox's numbers
  follow commit order and a cursor never skips a delivery that commits late.

Durability: a delivery returns only after PostgreSQL's COMMIT (``synchronous_commit``
as the server has it, ``on`` by default). Concurrent deliveries share commits: a small
group-commit batcher (``_Deliveries``) puts every delivery that arrives while a commit
is in flight into the next one, and a few batches commit at once on the pool.

Wake-ups cross replicas: the delivering transaction NOTIFYs ``runsink`` with the inbox
ids, delivered at COMMIT; each replica LISTENs on a dedicated connection
(``_Listener``) and, on every (re)connect, wakes every wait it holds so that a
notification lost while it was down costs latency, never a wake-up.

Driver errors never leave this module: a full disk becomes ``StoreFull``, a write's own
bad data (SQLSTATE classes 22, 23) ``StorageError``, and everything else the driver raises
(its whole tree, client-side errors included) ``StorageUnavailable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import replace
from functools import partial
from importlib import resources
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import asyncpg

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

from sink.breaker import (
    MIN_RETRY_AFTER_S,
    Admission,
    BreakerKey,
    BreakerSettings,
    BreakerState,
    Transition,
)
from sink.envelope import NearMiss
from sink.errors import StorageError, StorageUnavailable, StoreFull
from sink.inbox import Claim, Delivery, Inbox
from sink.logs import warn
from sink.nearmiss import LiveAddress, NearIndex
from sink.storage.base import (
    CreateOutcome,
    CreateResult,
    Event,
    InboxReport,
    Incoming,
    Late,
    LiveTarget,
    NewInbox,
    Route,
    RunSummary,
    StoredMessage,
    WakeTarget,
)
from sink.storage.pg_events import CAUGHT, EventFeed
from sink.storage.pg_space import DISK_FULL, SpaceGate, probe
from sink.storage.pg_webhooks import PostgresWebhooks
from sink.storage.postgres_mail import PostgresMail, lock_messages
from sink.storage.routecache import RouteCache
from sink.storage.rows import (
    LIVE_ADDRESSES,
    accepted_event,
    claimed_event,
    delivery_from_row,
    expired_event,
    inbox_from_row,
    json_strings,
    late_events,
    live_from_row,
    match_json_or_none,
    near_miss_event,
)
from sink.vocabulary import Reason, State

T = TypeVar("T")
Record = asyncpg.Record
if TYPE_CHECKING:  # the driver's classes are generic only in its stubs
    Connection: TypeAlias = asyncpg.Connection[Record] | PoolConnectionProxy[Record]

CHANNEL = "runsink"
_MIGRATION_LOCK = zlib.crc32(b"runsink:migrations")
_SWEEPER_LOCK = zlib.crc32(b"runsink:sweeper")
_KEYS_LOCK = zlib.crc32(b"runsink:server_keys")
_BATCH_MAX = 256
_BATCHES_IN_FLIGHT = 3
_NOTIFY_IDS_PER_PAYLOAD = 200  # a NOTIFY payload is at most 8000 bytes
_CONNECT_TIMEOUT_S = 5.0
_LISTENER_CHECK_S = 2.0
_START_DEADLINE_S = 30.0
_PROBE_TRUSTED_S = 1.0
_NAMED = {"application_name": "runsink"}
_DB_NOW = "extract(epoch FROM clock_timestamp())::double precision"
_ALLOWED = Admission(allowed=True, probe=False, retry_after=None, transition=None)


def _refused(retry_after: float) -> Admission:
    return Admission(
        allowed=False,
        probe=False,
        retry_after=max(retry_after, MIN_RETRY_AFTER_S),
        transition=None,
    )


def is_postgres_url(text: str) -> bool:
    return text.startswith(("postgresql://", "postgres://"))


# SQLSTATE classes that are about the data a statement was given (22: data exception, 23:
# integrity constraint): the one write is wrong, not the database (a batch retries alone).
_DATA_CLASSES = ("22", "23")


def _translate(exc: BaseException, what: str) -> StorageError:
    """Every driver error is ours: a full store, one write's own fault (``StorageError``), or
    the database unavailable, which is everything else asyncpg can raise, on the server's side
    (shutdown, restart, a standby) or the client's (``InterfaceError``, ``InternalClientError``
    as in a ``pg_ctl stop -m fast``, a reset socket)."""
    if isinstance(exc, StorageError):
        return exc
    state = getattr(exc, "sqlstate", None) or ""
    if state == DISK_FULL:
        return StoreFull(f"{what}: the database has no space left")
    if isinstance(exc, asyncpg.PostgresError) and state.startswith(_DATA_CLASSES):
        return StorageError(f"{what} failed ({type(exc).__name__}: {state})")
    return StorageUnavailable(f"{what}: the database is unavailable ({type(exc).__name__})")


_DRIVER_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,  # ConnectionError included
    EOFError,  # asyncio.IncompleteReadError: the server went away mid-message
    TimeoutError,
)


@contextlib.asynccontextmanager
async def _translated(what: str) -> AsyncIterator[None]:
    try:
        yield
    except _DRIVER_ERRORS as exc:
        raise _translate(exc, what) from exc


def _migrations() -> list[tuple[int, str]]:
    folder = resources.files("sink.storage") / "sql" / "postgres"
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            found.append((int(entry.name.split("_", 1)[0]), entry.read_text(encoding="utf-8")))
    return sorted(found)


async def migrate(connection: Connection) -> int:
    """Apply the pending migrations under an advisory lock: replicas starting at once queue."""
    await connection.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK)
    try:
        await connection.execute(
            "CREATE TABLE IF NOT EXISTS runsink_migrations ("
            " version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        applied = {r[0] for r in await connection.fetch("SELECT version FROM runsink_migrations")}
        for number, script in _migrations():
            if number in applied:
                continue
            async with connection.transaction():
                await connection.execute(script)
                await connection.execute(
                    "INSERT INTO runsink_migrations (version) VALUES ($1)", number
                )
        version = await connection.fetchval("SELECT MAX(version) FROM runsink_migrations")
        return int(version or 0)
    finally:
        await connection.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK)


_INBOX_SELECT = """
SELECT i.*, d.seq AS ev_seq, d.claim_id AS ev_claim_id, d.claim_run_id AS ev_claim_run_id,
       d.claimed_at AS ev_claimed_at, m.subject AS ev_subject, m.from_addr AS ev_from,
       m.received_at AS ev_received_at
FROM inboxes i
LEFT JOIN deliveries d ON d.message_id = i.evidence_message_id
LEFT JOIN messages m ON m.message_key = d.message_key
"""

_DELIVERY_SELECT = """
SELECT d.seq, d.message_id, d.inbox_id, m.subject, m.from_addr, m.received_at, m.size,
       d.claim_id, d.claim_run_id, d.claimed_at
FROM deliveries d JOIN messages m ON m.message_key = d.message_key
"""


class _Forbidden(Exception):
    """Rolls back a create that the per-purpose limit refused."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.count = count


class PostgresStore:
    def __init__(
        self,
        dsn: str,
        on_events: Callable[[list[Event]], None] | None = None,
        *,
        pool_size: int = 10,
        start_deadline_s: float = _START_DEADLINE_S,
    ) -> None:
        self._dsn = dsn
        # on_events: every event this process records, once its commit is durable. (The
        # runtime publishes live events with ``follow(..., live=)`` instead: every replica's,
        # in the database's commit order.)
        self._on_events = on_events
        self._pool_size = pool_size
        self._start_deadline_s = start_deadline_s
        self._pool: asyncpg.Pool | None = None
        # Wait slots are leases, not evidence: losing one in a crash costs nothing (it lapses
        # at its time), so their commits need not wait for the disk.
        self._leases: asyncpg.Pool | None = None
        self.replica_id = uuid.uuid4().hex[:12]
        self._deliveries = _Deliveries(self)
        self._listener: _Listener | None = None
        self._routes = RouteCache()
        # The live inboxes' local parts, for near misses (sink/nearmiss.py): loaded at open,
        # kept by this replica's commits and, through the listener, by every other
        # replica's creates ("c") and ends ("e"); loaded again on every reconnect.
        self._near = NearIndex()
        self._committed_at = -_PROBE_TRUSTED_S  # when ping last saw a commit succeed
        # After a disk-full error, new mail and inboxes wait for a probe to find space.
        self._space = SpaceGate(self._probe_space)
        # Caught mail, search and deletes (the v2 mail ports): postgres_mail.py.
        self.mail = PostgresMail(lambda: self.pool, _translated)
        # Webhooks and their outbox (written by a trigger with the events: pg_webhooks.py).
        self.webhooks = PostgresWebhooks(self._transaction, self._fetch, _insert_events)

    # -- lifecycle ---------------------------------------------------------------

    async def open(self) -> None:
        """Connect (retrying while the database starts), migrate, then open the pool."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._start_deadline_s
        while True:
            try:
                connection = await asyncpg.connect(
                    self._dsn, timeout=_CONNECT_TIMEOUT_S, server_settings=_NAMED
                )
                try:
                    await migrate(connection)
                finally:
                    await connection.close()
                self._pool = await asyncpg.create_pool(
                    self._dsn,
                    min_size=1,
                    max_size=self._pool_size,
                    timeout=_CONNECT_TIMEOUT_S,
                    max_inactive_connection_lifetime=60.0,
                    server_settings=_NAMED,
                )
                self._leases = await asyncpg.create_pool(
                    self._dsn,
                    min_size=1,
                    max_size=4,
                    timeout=_CONNECT_TIMEOUT_S,
                    max_inactive_connection_lifetime=60.0,
                    server_settings={**_NAMED, "synchronous_commit": "off"},
                )
                break
            except _DRIVER_ERRORS as exc:
                error = _translate(exc, "opening the store")
                if not isinstance(error, StorageUnavailable) or loop.time() > deadline:
                    raise error from exc
                await asyncio.sleep(0.5)
        async with _translated("loading the live inboxes"):
            self._near.keep_only(await self._live_addresses(self.pool))
        self.webhooks.keyed(await self.signing_key())
        self._deliveries.start()

    def follow(self, target: WakeTarget, live: LiveTarget | None = None) -> None:
        """Wake ``target``'s waits on mail (and end them on expiry) from any replica; and
        publish to ``live`` the events every replica commits, in commit order (``pg_events.py``)."""
        feed = EventFeed(live) if live is not None else None
        self._listener = _Listener(
            self._dsn, self.replica_id, _Ends(target, self), feed, self.webhooks.notified
        )
        self._listener.start()

    async def until_listening(self) -> None:
        """Returns once the listener is connected (and has caught up)."""
        if self._listener is None:
            raise StorageError("this store follows no waiters")
        await self._listener.connected.wait()

    async def close(self) -> None:
        await self._deliveries.close()
        await self.mail.close()
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        for pool in (self._leases, self._pool):
            if pool is None:
                continue
            try:
                await asyncio.wait_for(pool.close(), 5.0)
            except (TimeoutError, *_DRIVER_ERRORS):
                pool.terminate()
        self._pool = self._leases = None

    # -- plumbing ----------------------------------------------------------------

    @staticmethod
    async def _live_addresses(db: Connection | asyncpg.Pool) -> list[LiveAddress]:
        return [live_from_row(row) for row in await db.fetch(LIVE_ADDRESSES, timeout=30)]

    def _ended(self, inbox_ids: list[str]) -> None:
        """Inboxes that just expired (or were released): no route, no near misses any more."""
        self._routes.forget(inbox_ids)
        self._near.remove(inbox_ids)

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StorageError("the store is closed")
        return self._pool

    @property
    def _leases_pool(self) -> asyncpg.Pool:
        if self._leases is None:
            raise StorageError("the store is closed")
        return self._leases

    async def _fetch(self, what: str, sql: str, *args: Any) -> list[Record]:
        async with _translated(what):
            return list(await self.pool.fetch(sql, *args, timeout=30))

    async def _transaction(self, what: str, work: Callable[[Connection], Awaitable[T]]) -> T:
        """``work`` in one transaction; it returns after COMMIT (then its events are told)."""
        written: list[Event] = []
        token = _WRITTEN.set(written)
        try:
            async with (
                _translated(what),
                self.pool.acquire() as connection,
                connection.transaction(),
            ):
                result = await work(connection)
        finally:
            _WRITTEN.reset(token)
        self._committed(written)
        return result

    def _committed(self, events: list[Event]) -> None:
        if events and self._on_events is not None:
            try:
                self._on_events(events)
            except Exception as exc:  # a listener's trouble must not undo a durable write
                warn("event_listener_failed", error=type(exc).__name__)

    @contextlib.asynccontextmanager
    async def sweeper_turn(self) -> AsyncIterator[bool]:
        """True for the one replica whose turn it is to sweep (a session advisory lock)."""
        async with _translated("taking the sweeper lock"), self.pool.acquire() as connection:
            got = bool(await connection.fetchval("SELECT pg_try_advisory_lock($1)", _SWEEPER_LOCK))
            try:
                yield got
            finally:
                if got:
                    await connection.execute("SELECT pg_advisory_unlock($1)", _SWEEPER_LOCK)

    async def _notify(self, connection: Connection, kind: str, inbox_ids: Sequence[str]) -> None:
        """Inside the writing transaction: delivered to every listener at COMMIT."""
        ids = sorted(set(inbox_ids))
        for start in range(0, len(ids), _NOTIFY_IDS_PER_PAYLOAD):
            chunk = ",".join(ids[start : start + _NOTIFY_IDS_PER_PAYLOAD])
            await connection.execute(
                "SELECT pg_notify($1, $2)", CHANNEL, f"{self.replica_id} {kind} {chunk}"
            )

    # -- inboxes -----------------------------------------------------------------

    async def ping(self) -> None:
        """The store can commit: the database answers, is no read-only standby, and its
        files can grow (a full disk or tablespace fails it: ``pg_space.py``). A success is
        trusted for a second, so a caller polling readiness costs at most one tiny commit
        per second."""
        rows = await self._fetch("ping", "SELECT pg_is_in_recovery()")
        if rows[0][0]:
            raise StorageUnavailable("ping: the database is a read-only standby")
        now = time.monotonic()
        if now - self._committed_at < _PROBE_TRUSTED_S:
            return
        try:
            await self._probe_space()
        except StoreFull:
            self._space.filled()
            raise
        self._space.freed()
        self._committed_at = now

    async def _probe_space(self) -> None:
        await self._transaction("ping", partial(probe, replica_id=self.replica_id))

    async def create_inbox(self, new: NewInbox, event: Event) -> CreateResult:
        inbox = new.inbox

        async def work(db: Connection) -> CreateResult:
            mine = await db.fetchval(
                "INSERT INTO idempotency (key, request_json, inbox_id) VALUES ($1, $2, $3) "
                "ON CONFLICT (key) DO NOTHING RETURNING inbox_id",
                new.idempotency_key,
                new.request_json,
                inbox.inbox_id,
            )
            if mine is None:
                # Another create holds the key: wait for it (row lock), then look.
                row = await db.fetchrow(
                    "SELECT request_json, inbox_id FROM idempotency WHERE key = $1 FOR UPDATE",
                    new.idempotency_key,
                )
                assert row is not None  # keys are never deleted
                existing = await _load_inbox(db, row["inbox_id"])
                # Once the key's inbox has expired, only inboxes_per_purpose judges the key.
                if existing is not None:
                    current = existing.effective(inbox.created_at)
                    if current.state is not State.EXPIRED:
                        if row["request_json"] != new.request_json:
                            return CreateResult(CreateOutcome.CONFLICT)
                        return CreateResult(CreateOutcome.REPLAYED, existing)
            used = await db.fetchval(
                """INSERT INTO purpose_counts (run_id, purpose, used) VALUES ($1, $2, 1)
                   ON CONFLICT (run_id, purpose) DO UPDATE SET used = purpose_counts.used + 1
                   WHERE purpose_counts.used < $3
                   RETURNING used""",
                inbox.run_id,
                inbox.purpose,
                new.inboxes_per_purpose,
            )
            if used is None or used > new.inboxes_per_purpose:
                count = await db.fetchval(
                    "SELECT used FROM purpose_counts WHERE run_id = $1 AND purpose = $2",
                    inbox.run_id,
                    inbox.purpose,
                )
                raise _Forbidden(int(count or 0))
            await db.execute(
                """INSERT INTO inboxes (inbox_id, run_id, purpose, local_part, address, policy,
                       created_at, expires_at, poll_budget, polls_used, cursor_seq, state,
                       match_json, trace_id, evidence_release_at, last_change_reason,
                       created_with)
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 0, 0, 'created', $10, $11, $12,
                           'created', $13)""",
                inbox.inbox_id,
                inbox.run_id,
                inbox.purpose,
                new.local_part,
                inbox.address,
                inbox.policy_name,
                inbox.created_at,
                inbox.expires_at,
                inbox.poll_budget,
                json.dumps(inbox.match.as_dict()),
                inbox.trace_id,
                inbox.expires_at + new.retention_s,
                inbox.created_with,
            )
            if mine is None:
                await db.execute(
                    "UPDATE idempotency SET inbox_id = $2, request_json = $3 WHERE key = $1",
                    new.idempotency_key,
                    inbox.inbox_id,
                    new.request_json,
                )
            await _insert_events(db, [event])
            # Every other replica's near-miss index learns of it at COMMIT (see _Listener).
            await db.execute("SELECT pg_notify($1, $2)", CHANNEL, self._created_payload(inbox))
            return CreateResult(CreateOutcome.CREATED, inbox)

        await self._space.admit()
        try:
            result = await self._transaction("create_inbox", work)
            if result.outcome == CreateOutcome.CREATED:
                self._near.add(_live(inbox))
            return result
        except _Forbidden as refused:
            return CreateResult(CreateOutcome.FORBIDDEN, count=refused.count)
        except StoreFull:
            self._space.filled()
            raise

    def _created_payload(self, inbox: Inbox) -> str:
        # Ids, run ids and addresses hold no spaces; times as repr (exact round trip).
        return (
            f"{self.replica_id} c {inbox.inbox_id} {inbox.run_id} {inbox.address} "
            f"{inbox.created_at!r} {inbox.expires_at!r}"
        )

    async def load_inbox(self, inbox_id: str) -> Inbox | None:
        rows = await self._fetch("load_inbox", _INBOX_SELECT + " WHERE i.inbox_id = $1", inbox_id)
        return inbox_from_row(rows[0]) if rows else None

    async def count_inboxes(self, run_id: str, purpose: str) -> int:
        rows = await self._fetch(
            "count_inboxes",
            "SELECT COUNT(*) FROM inboxes WHERE run_id = $1 AND purpose = $2",
            run_id,
            purpose,
        )
        return int(rows[0][0])

    async def route(self, local_part: str) -> Route | None:
        # Cached only while the listener is connected: it forgets a route the moment any
        # replica announces that inbox's end (and all of them on a reconnect). A route a
        # moment stale costs nothing worse than a late arrival: the delivery batch checks
        # the inbox's state again under its lock.
        listening = self._listener is not None and self._listener.connected.is_set()
        if listening:
            cached = self._routes.get(local_part)
            if cached is not None:
                return cached
        rows = await self._fetch(
            "route",
            "SELECT inbox_id, run_id, policy, expires_at, state FROM inboxes WHERE local_part = $1",
            local_part,
        )
        if not rows:
            return None
        row = rows[0]
        route = Route(
            row["inbox_id"],
            row["run_id"],
            row["policy"],
            row["expires_at"],
            row["state"] == "expired",
        )
        if listening and not route.expired:
            self._routes.remember(local_part, route)
        return route

    async def save_poll(self, before: Inbox, after: Inbox, event: Event) -> bool:
        # One statement, so one round trip and its own transaction: every wait ends here.
        events = [event]
        payloads: list[str] = []
        if after.state is State.EXPIRED:
            events.append(expired_event(after))
            payloads.append(f"{self.replica_id} e {after.inbox_id}")
        rows = await self._fetch(
            "save_poll",
            _SAVE_POLL,
            after.polls_used,
            after.next_poll_at,
            after.cursor_seq,
            after.state.value,
            after.reason,
            after.evidence.message_id if after.evidence else None,
            after.last_poll_at,
            after.last_poll_latency_ms,
            after.expired_at,
            after.last_error,
            after.reason or "evidence_found",
            after.inbox_id,
            before.polls_used,
            *_columns(_event_rows(events), 6),
            CHANNEL,
            payloads,
            match_json_or_none(after.wait_match),
            after.rescan_seq,
        )
        saved = bool(rows[0][0])
        if saved:
            self._committed(events)
        if saved and after.state is State.EXPIRED:
            self._ended([after.inbox_id])
        return saved

    async def take_poll_slot(self, inbox: Inbox, now: float, until: float) -> float | None:
        """Take the inbox's one wait-in-progress slot, fleet-wide, until ``until``.

        None: taken (free it with ``free_poll_slot``, or record the poll). Otherwise the
        moment to try again: another replica's wait holds the slot, or it is before
        ``next_poll_at``, or a poll was recorded since ``inbox`` was read.
        """
        async with _translated("take_poll_slot"):
            row = await self._leases_pool.fetchrow(
                _TAKE_POLL_SLOT, inbox.inbox_id, inbox.polls_used, until, now, timeout=30
            )
        if row is None or row["taken"]:
            return None if row is not None else now
        times = [t for t in (row["poll_until"], row["next_poll_at"]) if t]
        return float(max([now, *times]))

    async def free_poll_slot(self, inbox_id: str, until: float) -> None:
        """A wait that took the slot ends without recording a poll (cancelled, failed)."""
        async with _translated("free_poll_slot"):
            await self._leases_pool.execute(
                "UPDATE inboxes SET poll_until = NULL WHERE inbox_id = $1 AND poll_until = $2",
                inbox_id,
                until,
                timeout=30,
            )

    async def expire(self, inbox: Inbox, retention_s: int) -> None:
        async def work(db: Connection) -> None:
            if await _persist_expiry(db, inbox, retention_s):
                await self._notify(db, "e", [inbox.inbox_id])

        await self._transaction("expire", work)
        self._ended([inbox.inbox_id])

    async def expire_due(self, now: float, limit: int) -> list[Inbox]:
        rows = await self._fetch(
            "expire_due",
            _INBOX_SELECT + " WHERE i.state <> 'expired' AND i.expires_at <= $1 LIMIT $2",
            now,
            limit,
        )
        return [inbox_from_row(row) for row in rows]

    async def set_last_error(self, inbox_id: str, code: str | None) -> None:
        async def work(db: Connection) -> None:
            await db.execute(
                "UPDATE inboxes SET last_error = $1 WHERE inbox_id = $2", code, inbox_id
            )

        await self._transaction("set_last_error", work)

    # -- messages ----------------------------------------------------------------

    async def save_message(self, incoming: Incoming) -> None:
        if incoming.caught_id is not None:
            found = self._near.find(incoming.unrouted, incoming.received_at)
            incoming = replace(incoming, near_misses=tuple(found))
        await self._space.admit()
        try:
            await self._deliveries.save(incoming)
        except StoreFull:
            self._space.filled()
            raise
        self.mail.stored()

    async def near_misses(self, inbox_id: str, limit: int) -> list[NearMiss]:
        rows = await self._fetch(
            "near_misses",
            "SELECT address, received_at, distance FROM near_misses WHERE inbox_id = $1 "
            "AND received_at > (SELECT COALESCE(MAX(claimed_at), -1) FROM deliveries "
            "WHERE inbox_id = $1 AND claim_id IS NOT NULL) "
            "ORDER BY received_at DESC, id DESC LIMIT $2",
            inbox_id,
            limit,
        )
        return [NearMiss(r["address"], r["received_at"], r["distance"]) for r in rows]

    async def deliveries_after(self, inbox_id: str, after_seq: int, limit: int) -> list[Delivery]:
        rows = await self._fetch(
            "deliveries_after",
            _DELIVERY_SELECT + " WHERE d.inbox_id = $1 AND d.seq > $2 ORDER BY d.seq LIMIT $3",
            inbox_id,
            after_seq,
            limit,
        )
        return [delivery_from_row(row) for row in rows]

    async def delivery(self, message_id: str) -> Delivery | None:
        rows = await self._fetch(
            "delivery", _DELIVERY_SELECT + " WHERE d.message_id = $1", message_id
        )
        return delivery_from_row(rows[0]) if rows else None

    async def raw(self, message_id: str) -> bytes | None:
        rows = await self._fetch(
            "raw",
            """SELECT m.raw FROM deliveries d JOIN messages m ON m.message_key = d.message_key
               JOIN inboxes i ON i.inbox_id = d.inbox_id
               WHERE d.message_id = $1 AND i.released_at IS NULL""",
            message_id,
        )
        if not rows or rows[0]["raw"] is None:
            return None
        return bytes(rows[0]["raw"])

    async def message(self, message_id: str) -> StoredMessage | None:
        rows = await self._fetch(
            "message",
            """SELECT d.seq, d.message_id, d.inbox_id, m.subject, m.from_addr, m.received_at,
                      m.size, d.claim_id, d.claim_run_id, d.claimed_at, d.rcpt_json,
                      CASE WHEN i.released_at IS NULL THEN m.raw END AS raw,
                      CASE WHEN i.released_at IS NULL THEN m.analysis END AS analysis,
                      m.mail_from, m.to_json, m.cc_json, m.date, i.run_id, m.auth_user,
                      COALESCE(i.released_at, m.released_at) AS released_at
               FROM deliveries d JOIN messages m ON m.message_key = d.message_key
               JOIN inboxes i ON i.inbox_id = d.inbox_id
               WHERE d.message_id = $1""",
            message_id,
        )
        if not rows:
            return None
        row = rows[0]
        return StoredMessage(
            delivery=delivery_from_row(row),
            run_id=row["run_id"],
            raw=None if row["raw"] is None else bytes(row["raw"]),
            mail_from=row["mail_from"],
            rcpts=tuple(json.loads(row["rcpt_json"])),
            to=tuple(json.loads(row["to_json"])),
            cc=tuple(json.loads(row["cc_json"])),
            date=row["date"],
            released_at=row["released_at"],
            analysis=row["analysis"],
            auth_user=row["auth_user"],
        )

    async def keep_analysis(
        self, message_id: str, analysis: str, replacing: str | None = None
    ) -> None:
        async def work(db: Connection) -> None:
            await db.execute(
                """UPDATE messages SET analysis = $1
                   WHERE message_key = (SELECT message_key FROM deliveries WHERE message_id = $2)
                     AND raw IS NOT NULL AND analysis IS NOT DISTINCT FROM $3""",
                analysis,
                message_id,
                replacing,
            )

        await self._transaction("keep_analysis", work)

    async def claim(self, delivery: Delivery, claim: Claim, after: Inbox) -> Claim:
        async def work(db: Connection) -> Claim:
            won = await db.fetchval(
                """UPDATE deliveries SET claim_id = $1, claim_run_id = $2, claimed_at = $3
                   WHERE message_id = $4 AND claim_id IS NULL RETURNING claim_id""",
                claim.claim_id,
                claim.run_id,
                claim.claimed_at,
                claim.message_id,
            )
            if won is None:
                row = await db.fetchrow(
                    "SELECT claim_id, claim_run_id, claimed_at FROM deliveries "
                    "WHERE message_id = $1",
                    claim.message_id,
                )
                assert row is not None
                return Claim(row[0], claim.message_id, row[1], row[2])
            await db.execute(
                """UPDATE inboxes SET state = 'received', reason = NULL, evidence_message_id = $1,
                       cursor_seq = GREATEST(cursor_seq, $2),
                       last_change_reason = CASE WHEN state <> 'received' THEN 'claimed'
                                                 ELSE last_change_reason END
                   WHERE inbox_id = $3 AND state <> 'expired'""",
                claim.message_id,
                delivery.seq,
                delivery.inbox_id,
            )
            await _insert_events(
                db,
                [claimed_event(claim, delivery.inbox_id)],
            )
            return claim

        return await self._transaction("claim", work)

    # -- release and retention ---------------------------------------------------

    async def release_run(self, run_id: str, now: float) -> list[str]:
        async def work(db: Connection) -> list[str]:
            rows = await db.fetch(
                _INBOX_SELECT + " WHERE i.run_id = $1 AND i.released_at IS NULL ORDER BY i.inbox_id"
                " FOR UPDATE OF i",
                run_id,
            )
            inboxes = [inbox_from_row(row) for row in rows]
            for inbox in inboxes:
                if inbox.effective(now).state is not State.EXPIRED:
                    await _persist_expiry(db, inbox.expire(Reason.LEASE, now), 0, cause="released")
                else:
                    await _persist_expiry(db, inbox.effective(now), 0)
            ids = [i.inbox_id for i in inboxes]
            await _release(db, ids, now, {i: run_id for i in ids})
            await self._notify(db, "e", ids)
            return ids

        released = await self._transaction("release_run", work)
        self._ended(released)
        return released

    async def release_due(self, now: float, limit: int) -> int:
        return await self._release_where(
            "i.evidence_release_at <= $1 ORDER BY i.evidence_release_at", now, limit
        )

    async def release_oldest_expired(self, now: float, limit: int) -> int:
        return await self._release_where(
            "(i.state = 'expired' OR i.expires_at <= $1) "
            "ORDER BY COALESCE(i.expired_at, i.expires_at)",
            now,
            limit,
        )

    async def _release_where(self, where: str, now: float, limit: int) -> int:
        async def work(db: Connection) -> list[str]:
            rows = await db.fetch(
                f"{_INBOX_SELECT} WHERE i.released_at IS NULL AND {where} LIMIT $2"
                " FOR UPDATE OF i SKIP LOCKED",
                now,
                limit,
            )
            inboxes = [inbox_from_row(row) for row in rows]
            for inbox in inboxes:
                await _persist_expiry(db, inbox.effective(now), 0)
            ids = [i.inbox_id for i in inboxes]
            await _release(db, ids, now, {i.inbox_id: i.run_id for i in inboxes})
            await self._notify(db, "e", ids)
            return ids

        released = await self._transaction("release", work)
        self._ended(released)
        return len(released)

    async def used_bytes(self) -> int:
        """Bytes of bodies kept (what --max-store-mb caps); the table's own pages follow
        PostgreSQL's vacuum, not this figure."""
        rows = await self._fetch(
            "used_bytes", "SELECT COALESCE(SUM(size), 0) FROM messages WHERE raw IS NOT NULL"
        )
        return int(rows[0][0])

    # -- reports -----------------------------------------------------------------

    async def add_events(self, events: list[Event]) -> None:
        async def work(db: Connection) -> None:
            await _insert_events(db, events)

        await self._transaction("add_events", work)

    async def run_report(self, run_id: str) -> tuple[list[InboxReport], list[Event]]:
        rows = await self._fetch(
            "run_report",
            """SELECT x.*, (SELECT message_id FROM deliveries WHERE inbox_id = x.inbox_id
                               AND claim_id IS NOT NULL ORDER BY claimed_at DESC LIMIT 1)
                          AS accepted_message_id
               FROM ("""
            + _INBOX_SELECT
            + """ WHERE i.run_id = $1) x
               ORDER BY x.created_at, x.inbox_id""",
            run_id,
        )
        reports = [
            InboxReport(
                inbox=inbox_from_row(row),
                accepted_message_id=row["accepted_message_id"],
                last_change_reason=row["last_change_reason"],
                evidence_release_at=row["released_at"] or row["evidence_release_at"],
            )
            for row in rows
        ]
        event_rows = await self._fetch(
            "run_report",
            "SELECT run_id, type, at, inbox_id, message_id, detail_json FROM events "
            "WHERE run_id = $1 ORDER BY at, id LIMIT 10000",
            run_id,
        )
        events = [Event(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])) for r in event_rows]
        return reports, events

    async def signing_key(self) -> bytes:
        fresh = secrets.token_bytes(32)

        async def work(connection: Connection) -> bytes:
            # Outside the numbered migrations (as in SQLite), made under a transaction lock so
            # that replicas starting together make one table and agree on one key.
            await connection.execute("SELECT pg_advisory_xact_lock($1)", _KEYS_LOCK)
            await connection.execute(
                "CREATE TABLE IF NOT EXISTS server_keys (name TEXT PRIMARY KEY, key BYTEA NOT NULL)"
            )
            await connection.execute(
                "INSERT INTO server_keys (name, key) VALUES ('run_tokens', $1) "
                "ON CONFLICT (name) DO NOTHING",
                fresh,
            )
            key = await connection.fetchval("SELECT key FROM server_keys WHERE name = 'run_tokens'")
            return bytes(key)

        return await self._transaction("signing_key", work)

    # -- the run index (RunIndex: read-only views for the web UI) -------------------

    async def recent_runs(
        self,
        now: float,
        limit: int,
        before: tuple[float, str] | None = None,
        run_contains: str | None = None,
        purpose: str | None = None,
    ) -> list[RunSummary]:
        params: list[Any] = [now, limit]
        where: list[str] = []
        if run_contains:
            params.append(run_contains)
            where.append(f"strpos(lower(run_id), lower(${len(params)})) > 0")
        if purpose:
            params.append(purpose)
            where.append(f"run_id IN (SELECT run_id FROM inboxes WHERE purpose = ${len(params)})")
        having = ""
        if before is not None:
            params.extend(before)
            b, r = len(params) - 1, len(params)
            having = f"HAVING MIN(created_at) < ${b} OR (MIN(created_at) = ${b} AND run_id < ${r})"
        rows = await self._fetch(
            "recent_runs",
            f"""WITH page AS (
                    SELECT run_id, MIN(created_at) AS started FROM inboxes
                    {"WHERE " + " AND ".join(where) if where else ""}
                    GROUP BY run_id {having}
                    ORDER BY started DESC, run_id DESC LIMIT $2)
                SELECT p.run_id, p.started,
                    (SELECT string_agg(DISTINCT purpose, ' ') FROM inboxes
                        WHERE run_id = p.run_id) AS purposes,
                    (SELECT json_object_agg(st, n) FROM (
                        SELECT CASE WHEN state <> 'expired' AND expires_at <= $1 THEN 'expired'
                               ELSE state END AS st, COUNT(*) AS n
                        FROM inboxes WHERE run_id = p.run_id GROUP BY 1) s) AS states,
                    (SELECT COUNT(*) FROM deliveries d JOIN inboxes i ON i.inbox_id = d.inbox_id
                        WHERE i.run_id = p.run_id) AS messages,
                    (SELECT COUNT(d.claim_id) FROM deliveries d
                        JOIN inboxes i ON i.inbox_id = d.inbox_id
                        WHERE i.run_id = p.run_id) AS claims,
                    e.type AS last_event, e.at AS last_event_at
                FROM page p
                LEFT JOIN LATERAL (SELECT type, at FROM events WHERE run_id = p.run_id
                                   ORDER BY at DESC, id DESC LIMIT 1) e ON true
                ORDER BY p.started DESC, p.run_id DESC""",
            *params,
        )
        return [
            RunSummary(
                run_id=r["run_id"],
                started_at=r["started"],
                purposes=tuple((r["purposes"] or "").split()),
                states={str(k): int(v) for k, v in json.loads(r["states"] or "{}").items()},
                messages=int(r["messages"]),
                claims=int(r["claims"]),
                last_event=r["last_event"],
                last_event_at=r["last_event_at"],
            )
            for r in rows
        ]

    async def run_deliveries(self, run_id: str, limit: int) -> list[Delivery]:
        rows = await self._fetch(
            "run_deliveries",
            _DELIVERY_SELECT + " WHERE d.inbox_id IN (SELECT inbox_id FROM inboxes WHERE "
            "run_id = $1) ORDER BY m.received_at DESC, d.seq DESC LIMIT $2",
            run_id,
            limit,
        )
        return [delivery_from_row(row) for row in rows]

    # -- the fleet-wide circuit breaker ------------------------------------------------
    # The rules of sink/breaker.py, kept by the database: each move is one conditional
    # UPDATE on the breaker's row, so replicas never disagree and exactly one of them takes
    # the half-open probe. Times are the database's clock (``_DB_NOW``).

    async def breaker_admit(
        self, key: BreakerKey, base_cooldown_s: float, hold_s: float
    ) -> Admission:
        """May a call go to the provider now? May take the fleet's one half-open probe."""
        row = await self._fetch(
            "breaker_admit",
            f"SELECT state, opened_at, cooldown_s, probe_until, {_DB_NOW} AS now"
            " FROM breakers WHERE run_id = $1 AND inbox_id = $2 AND operation = $3",
            *key,
        )
        if not row or row[0]["state"] == "closed":
            return _ALLOWED
        state, opened_at, cooldown_s, _, now = row[0]
        if state == "open":
            left = opened_at + cooldown_s - now
            if left > 0:
                return _refused(min(left, cooldown_s))

        async def work(db: Connection) -> str | None:
            moved: str | None = await db.fetchval(
                f"""WITH old AS (
                        SELECT state FROM breakers
                        WHERE run_id = $1 AND inbox_id = $2 AND operation = $3 FOR UPDATE)
                    UPDATE breakers b SET state = 'half_open', probe_until = {_DB_NOW} + $4,
                                          touched_at = {_DB_NOW}
                    FROM old
                    WHERE b.run_id = $1 AND b.inbox_id = $2 AND b.operation = $3
                      AND ((b.state = 'open' AND b.opened_at + b.cooldown_s <= {_DB_NOW})
                           OR (b.state = 'half_open'
                               AND (b.probe_until IS NULL OR b.probe_until <= {_DB_NOW})))
                    RETURNING old.state""",
                *key,
                hold_s,
            )
            return moved

        moved = await self._transaction("breaker_admit", work)
        if moved is None:
            return _refused(base_cooldown_s)  # another call (on any replica) is the probe
        transition = (
            Transition(BreakerState.OPEN, BreakerState.HALF_OPEN) if moved == "open" else None
        )
        return Admission(allowed=True, probe=True, retry_after=None, transition=transition)

    async def breaker_success(self, key: BreakerKey) -> Transition | None:
        """The provider answered: a breaker that is not open settles (its row goes)."""

        rows = await self._fetch(
            "breaker_success",
            "DELETE FROM breakers WHERE run_id = $1 AND inbox_id = $2 AND operation = $3"
            " AND state <> 'open' RETURNING state",
            *key,
        )
        if rows and rows[0][0] == "half_open":
            return Transition(BreakerState.HALF_OPEN, BreakerState.CLOSED)
        return None

    async def breaker_failure(
        self, key: BreakerKey, settings: BreakerSettings
    ) -> Transition | None:
        """The provider failed (or the caller named the wrong run): count it; maybe open."""

        async def work(db: Connection) -> tuple[str, str, float] | None:
            await db.execute(
                f"""INSERT INTO breakers (run_id, inbox_id, operation, state, failures,
                                          cooldown_s, touched_at)
                    VALUES ($1, $2, $3, 'closed', 0, $4, {_DB_NOW})
                    ON CONFLICT DO NOTHING""",
                *key,
                settings.cooldown_s,
            )
            row = await db.fetchrow(
                f"""WITH old AS (
                        SELECT state FROM breakers
                        WHERE run_id = $1 AND inbox_id = $2 AND operation = $3 FOR UPDATE)
                    UPDATE breakers b SET
                        failures = b.failures + 1,
                        cooldown_s = CASE WHEN b.state = 'half_open'
                                          THEN LEAST(b.cooldown_s * 2, $5) ELSE b.cooldown_s END,
                        state = CASE WHEN b.state = 'half_open' OR b.failures + 1 >= $4
                                     THEN 'open' ELSE b.state END,
                        opened_at = CASE WHEN b.state = 'half_open' OR b.failures + 1 >= $4
                                         THEN {_DB_NOW} ELSE b.opened_at END,
                        probe_until = NULL,
                        touched_at = {_DB_NOW}
                    FROM old
                    WHERE b.run_id = $1 AND b.inbox_id = $2 AND b.operation = $3
                      AND b.state <> 'open'
                    RETURNING old.state, b.state, b.cooldown_s""",
                *key,
                settings.failure_threshold,
                settings.cooldown_max_s,
            )
            return None if row is None else (row[0], row[1], float(row[2]))

        moved = await self._transaction("breaker_failure", work)
        if moved is None or moved[0] == moved[1]:
            return None  # a straggler while open, or still under the threshold
        return Transition(BreakerState(moved[0]), BreakerState(moved[1]), moved[2])

    async def breaker_abandon(self, key: BreakerKey) -> None:
        """The probe was cancelled without an answer: the next call may probe at once."""

        await self._fetch(
            "breaker_abandon",
            "UPDATE breakers SET probe_until = NULL WHERE run_id = $1 AND inbox_id = $2"
            " AND operation = $3 AND state = 'half_open' RETURNING 1",
            *key,
        )

    async def breaker_cooldown_left(self, key: BreakerKey) -> float | None:
        rows = await self._fetch(
            "breaker_cooldown_left",
            f"SELECT opened_at + cooldown_s - {_DB_NOW} FROM breakers"
            " WHERE run_id = $1 AND inbox_id = $2 AND operation = $3 AND state <> 'closed'",
            *key,
        )
        if not rows or rows[0][0] is None:
            return None
        return max(MIN_RETRY_AFTER_S, float(rows[0][0]))

    async def forget_breakers(self, untouched_s: float) -> int:
        """Rows nobody touched for ``untouched_s``: their inboxes' leases are long over."""

        async def work(db: Connection) -> int:
            status = await db.execute(
                f"DELETE FROM breakers WHERE touched_at < {_DB_NOW} - $1", untouched_s
            )
            return int(status.split()[-1])

        return await self._transaction("forget_breakers", work)

    # -- the delivery batch (run by _Deliveries inside one transaction) ------------

    async def _insert_batch(self, db: Connection, items: Sequence[Incoming]) -> None:
        per_inbox: dict[str, int] = {}
        for item in items:
            for d in item.deliveries:
                per_inbox[d.inbox_id] = per_inbox.get(d.inbox_id, 0) + 1
        next_seq: dict[str, int] = {}
        if per_inbox:
            # Lock the inboxes in one order (no deadlock between batches), then number this
            # batch's deliveries: the lock is held to COMMIT, so numbers follow commit order.
            # An inbox that expired since RCPT (another replica released it) gets none: its
            # mail is a late arrival, decided here, under the lock, not from a cached route.
            ids = sorted(per_inbox)
            rows = await db.fetch(
                """WITH locked AS (
                       SELECT inbox_id, state FROM inboxes WHERE inbox_id = ANY($1::text[])
                       ORDER BY inbox_id FOR UPDATE)
                   UPDATE inboxes i SET last_seq = i.last_seq + n.count
                   FROM locked, unnest($1::text[], $2::int[]) AS n(inbox_id, count)
                   WHERE i.inbox_id = locked.inbox_id AND n.inbox_id = i.inbox_id
                     AND locked.state <> 'expired'
                   RETURNING i.inbox_id, i.last_seq""",
                ids,
                [per_inbox[i] for i in ids],
            )
            for row in rows:
                next_seq[row[0]] = int(row[1]) - per_inbox[row[0]] + 1
        # Near misses only of inboxes still live now (this replica's index may be a moment
        # behind another's expiry).
        near_ids = sorted({n.inbox_id for item in items for n in item.near_misses})
        still_live: set[str] = set()
        if near_ids:
            rows = await db.fetch(
                "SELECT inbox_id FROM inboxes WHERE inbox_id = ANY($1::text[]) "
                "AND state <> 'expired' AND released_at IS NULL",
                near_ids,
            )
            still_live = {r[0] for r in rows}
        near: list[tuple[Any, ...]] = []
        messages: list[tuple[Any, ...]] = []
        deliveries: list[tuple[Any, ...]] = []
        caught: list[tuple[Any, ...]] = []
        listing: list[tuple[Any, ...]] = []  # in arrival order: deliveries, then caught
        events: list[Event] = []  # the runs' events (run reports; told to on_events)
        event_rows: list[tuple[Any, ...]] = []  # those, and caught mail's, in arrival order
        for item in items:
            size = len(item.raw)
            live = [d for d in item.deliveries if d.inbox_id in next_seq]
            dropped = [
                *item.late,
                *(Late(d.inbox_id, d.run_id, d.rcpts[0]) for d in item.deliveries if d not in live),
            ]
            # The message is stored once, for its inboxes and as caught mail alike.
            key = live[0].message_id if live else item.caught_id
            if key is not None:
                s = item.summary
                messages.append(
                    (
                        key,
                        item.raw,
                        size,
                        s.subject,
                        s.from_addr,
                        json_strings(s.to),
                        json_strings(s.cc),
                        s.date,
                        item.mail_from,
                        item.received_at,
                        item.auth_user,
                    )
                )
                for d in live:
                    seq = next_seq[d.inbox_id]
                    next_seq[d.inbox_id] = seq + 1
                    deliveries.append((d.inbox_id, seq, d.message_id, key, json_strings(d.rcpts)))
                    listing.append((d.message_id, key, d.inbox_id, d.run_id))
                    accepted = accepted_event(d, item.received_at, size)
                    events.append(accepted)
                    event_rows += _event_rows([accepted])
            if item.caught_id:
                rcpts = json_strings(item.unrouted)
                caught.append((item.caught_id, key, rcpts, item.caught_until))
                listing.append((item.caught_id, key, None, None))
                # No run's event: the live feed's row for caught mail (pg_events.py).
                detail = json.dumps({"size": size})
                event_rows.append((None, None, item.caught_id, item.received_at, CAUGHT, detail))
            for found in item.near_misses:
                if found.inbox_id in still_live:
                    near.append((found.inbox_id, found.address, item.received_at, found.distance))
                    missed = near_miss_event(found, item.received_at)
                    events.append(missed)
                    event_rows += _event_rows([missed])
            lates = late_events(dropped, item.received_at, size)
            events += lates
            event_rows += _event_rows(lates)
        # The rest in one statement (one round trip): the rows as parallel arrays, and the
        # NOTIFY, delivered at COMMIT, naming the inboxes that got mail.
        ids = sorted(next_seq)
        payloads = [
            f"{self.replica_id} w " + ",".join(ids[i : i + _NOTIFY_IDS_PER_PAYLOAD])
            for i in range(0, len(ids), _NOTIFY_IDS_PER_PAYLOAD)
        ]
        _noted(events)
        await db.execute(
            _BATCH_INSERT,
            *_columns(messages, 11),
            *_columns(deliveries, 5),
            *_columns(caught, 4),
            *_columns(listing, 4),
            *_columns(event_rows, 6),
            CHANNEL,
            payloads,
        )
        if near:
            await db.executemany(
                "INSERT INTO near_misses (inbox_id, address, received_at, distance) "
                "VALUES ($1, $2, $3, $4)",
                near,
            )


# One statement: the conditional take, and what the inbox held when it was refused (a
# concurrent winner's own take is not visible to it: then "retry at once" is the answer).
_TAKE_POLL_SLOT = """
WITH cur AS (
    SELECT poll_until, next_poll_at FROM inboxes WHERE inbox_id = $1
), took AS (
    UPDATE inboxes SET poll_until = $3
    WHERE inbox_id = $1 AND polls_used = $2 AND state <> 'expired'
      AND (poll_until IS NULL OR poll_until <= $4)
      AND (next_poll_at IS NULL OR next_poll_at <= $4)
    RETURNING inbox_id
)
SELECT EXISTS (SELECT 1 FROM took) AS taken, cur.poll_until, cur.next_poll_at FROM cur
"""

_SAVE_POLL = """
WITH u AS (
    UPDATE inboxes SET polls_used = $1, next_poll_at = $2, cursor_seq = $3,
        state = $4, reason = $5, evidence_message_id = $6, last_poll_at = $7,
        last_poll_latency_ms = $8, expired_at = $9, last_error = $10,
        last_change_reason = CASE WHEN state <> $4 THEN $11 ELSE last_change_reason END,
        poll_until = NULL, wait_match_json = $22, rescan_seq = $23
    WHERE inbox_id = $12 AND polls_used = $13 AND state <> 'expired'
    RETURNING inbox_id
), e AS (
    INSERT INTO events (run_id, inbox_id, message_id, at, type, detail_json)
    SELECT * FROM unnest($14::text[], $15::text[], $16::text[], $17::float8[], $18::text[],
                         $19::text[])
    WHERE EXISTS (SELECT 1 FROM u)
)
SELECT (SELECT COUNT(*) FROM u),
       (SELECT COUNT(*) FROM (SELECT pg_notify($20, p) FROM unnest($21::text[]) AS p
                              WHERE EXISTS (SELECT 1 FROM u)) AS n)
"""

# The events a transaction wrote, told to ``on_events`` once it commits (dropped with a
# rollback). Set by ``_transaction`` for the task running the transaction.
_WRITTEN: ContextVar[list[Event] | None] = ContextVar("runsink_pg_written", default=None)


def _noted(events: list[Event]) -> None:
    written = _WRITTEN.get()
    if written is not None:
        written.extend(events)


_BATCH_INSERT = """
WITH m AS (
    INSERT INTO messages (message_key, raw, size, subject, from_addr, to_json, cc_json, date,
                          mail_from, received_at, auth_user)
    SELECT * FROM unnest($1::text[], $2::bytea[], $3::int[], $4::text[], $5::text[],
                         $6::text[], $7::text[], $8::text[], $9::text[], $10::float8[],
                         $11::text[])
), d AS (
    INSERT INTO deliveries (inbox_id, seq, message_id, message_key, rcpt_json)
    SELECT * FROM unnest($12::text[], $13::bigint[], $14::text[], $15::text[], $16::text[])
), c AS (
    INSERT INTO caught (caught_id, message_key, rcpt_json, expires_at)
    SELECT * FROM unnest($17::text[], $18::text[], $19::text[], $20::float8[])
), v AS (
    -- The listing (search, the Mailpit subset): cheap rows, numbered in arrival order; the
    -- search text comes later (postgres_mail.py's indexer), off the 250's path.
    INSERT INTO listing (id, message_key, inbox_id, run_id)
    SELECT id, k, i, r FROM unnest($21::text[], $22::text[], $23::text[], $24::text[])
        WITH ORDINALITY AS l(id, k, i, r, n) ORDER BY n
), e AS (
    INSERT INTO events (run_id, inbox_id, message_id, at, type, detail_json)
    SELECT * FROM unnest($25::text[], $26::text[], $27::text[], $28::float8[], $29::text[],
                         $30::text[])
)
SELECT pg_notify($31, p) FROM unnest($32::text[]) AS p
"""


def _event_rows(events: Iterable[Event]) -> list[tuple[Any, ...]]:
    return [
        (e.run_id, e.inbox_id, e.message_id, e.at, e.type, json.dumps(e.detail)) for e in events
    ]


def _columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """Rows as columns, for ``unnest`` of parallel arrays (empty rows: empty columns)."""
    return [[row[i] for row in rows] for i in range(width)]


class _Deliveries:
    """Group commit for deliveries: whatever arrives while a commit is in flight shares the
    next one. Up to ``_BATCHES_IN_FLIGHT`` batches commit at once, each on its own pooled
    connection. A batch that fails for a reason other than the database being unavailable
    is retried one delivery per transaction, so a failing delivery fails alone."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._pending: list[tuple[Incoming, asyncio.Future[None]]] = []
        self._arrived = asyncio.Event()
        self._closing = False
        self._loop_task: asyncio.Task[None] | None = None
        self._batches: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(_BATCHES_IN_FLIGHT)

    def start(self) -> None:
        self._closing = False
        self._loop_task = asyncio.create_task(self._run(), name="postgres-group-commit")

    async def save(self, incoming: Incoming) -> None:
        if self._loop_task is None or self._closing:
            raise StorageError("the store is closed")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((incoming, done))
        self._arrived.set()
        await done

    async def close(self) -> None:
        self._closing = True
        self._arrived.set()
        if self._loop_task is not None:
            await self._loop_task
            self._loop_task = None
        if self._batches:
            await asyncio.gather(*self._batches, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await self._arrived.wait()
            self._arrived.clear()
            while self._pending:
                await self._slots.acquire()
                batch = [item for item in self._pending[:_BATCH_MAX] if not item[1].cancelled()]
                del self._pending[:_BATCH_MAX]
                if not batch:
                    self._slots.release()
                    continue
                task = asyncio.create_task(self._commit(batch), name="postgres-batch")
                # Kept until done: a task nobody references may be collected mid-flight.
                self._batches.add(task)
                task.add_done_callback(self._batches.discard)
            if self._closing:
                return

    async def _commit(self, batch: list[tuple[Incoming, asyncio.Future[None]]]) -> None:
        try:
            try:
                await self._store._transaction(
                    "save_message",
                    lambda db: self._store._insert_batch(db, [incoming for incoming, _ in batch]),
                )
            except StorageUnavailable as exc:
                _settle(batch, exc)
                return
            except StorageError as exc:
                if len(batch) == 1:
                    _settle(batch, exc)
                    return
                for item in batch:  # find the one that fails; the others are stored
                    await self._commit_one(item)
                return
            except Exception as exc:  # never a sender left without an answer (nor a lost task)
                _settle(batch, StorageUnavailable(f"save_message: {type(exc).__name__}"))
                return
            _settle(batch, None)
        finally:
            # Cancelled (shutdown) or failed mid-retry: whoever has no answer yet gets a 451.
            _settle(batch, StorageUnavailable("save_message: the commit was interrupted"))
            self._slots.release()

    async def _commit_one(self, item: tuple[Incoming, asyncio.Future[None]]) -> None:
        incoming, _ = item
        try:
            await self._store._transaction(
                "save_message", lambda db: self._store._insert_batch(db, [incoming])
            )
        except StorageError as exc:
            _settle([item], exc)
            return
        _settle([item], None)


def _settle(batch: list[tuple[Incoming, asyncio.Future[None]]], error: Exception | None) -> None:
    for _, done in batch:
        if done.done():
            continue
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)


class _Ends:
    """The listener's target: the waiters, and this store's route cache beside them."""

    def __init__(self, target: WakeTarget, store: PostgresStore) -> None:
        self._target = target
        self._store = store

    def wake(self, inbox_ids: Iterable[str]) -> None:
        self._target.wake(inbox_ids)

    def end(self, inbox_ids: Iterable[str]) -> None:
        ids = list(inbox_ids)
        self._store._ended(ids)
        self._target.end(ids)

    def created(self, live: LiveAddress) -> None:
        """Another replica created an inbox: near misses of it are found here too."""
        self._store._near.add(live)

    def watched(self) -> list[str]:
        # Called on every (re)connect: what was announced meanwhile is unknown, so every
        # cached route goes too.
        self._store._routes = RouteCache()
        return self._target.watched()

    async def caught_up(self, connection: Connection) -> None:
        """On every (re)connect: creates and ends announced meanwhile are unknown, so the
        near-miss index becomes the live inboxes as the database has them now."""
        self._store._near.keep_only(await self._store._live_addresses(connection))


class _Listener:
    """A dedicated LISTEN connection: other replicas' deliveries wake this replica's waits.

    On every (re)connect it wakes every wait this replica holds (each re-reads the store
    beyond its cursor), and ends those whose inbox expired meanwhile: a notification lost
    while the connection was down costs latency, never a wake-up. A check every
    ``_LISTENER_CHECK_S`` notices a connection that died without a word.
    """

    def __init__(
        self,
        dsn: str,
        replica_id: str,
        target: _Ends,
        feed: EventFeed | None = None,
        on_deliveries: Callable[[], None] | None = None,
    ) -> None:
        self._dsn = dsn
        self._on_deliveries = on_deliveries  # "db h": some commit queued webhook deliveries
        self._replica_id = replica_id
        self._target = target
        self._feed = feed  # every replica's live events (this one's too), read on this connection
        self._idle = asyncio.Event()  # never set without a feed
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="postgres-listener")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _on_notify(self, _connection: Any, _pid: int, _channel: str, payload: object) -> None:
        sender, _, rest = str(payload).partition(" ")
        kind, _, ids = rest.partition(" ")
        if kind == "v":  # event rows committed, by any replica (pg_events.py)
            if self._feed is not None:
                self._feed.announced(ids)
            return
        if kind == "h":  # webhook deliveries queued, by any replica (pg_webhooks.py)
            if self._on_deliveries is not None:
                self._on_deliveries()
            return
        if sender == self._replica_id:
            return  # this replica already woke its own waits after its commit
        if kind == "c":
            self._target.created(_live_from_payload(ids))
            return
        inbox_ids = ids.split(",") if ids else []
        if kind == "e":
            self._target.end(inbox_ids)
        else:
            self._target.wake(inbox_ids)

    async def _run(self) -> None:
        backoff = 0.05
        while True:
            connection: asyncpg.Connection[Record] | None = None
            lost = asyncio.Event()
            try:
                connection = await asyncpg.connect(
                    self._dsn,
                    timeout=_CONNECT_TIMEOUT_S,
                    server_settings={"application_name": "runsink-listener"},
                )
                connection.add_termination_listener(partial(_set_on_termination, lost))
                await connection.add_listener(CHANNEL, self._on_notify)
                await self._catch_up(connection)
                self.connected.set()
                backoff = 0.05
                work = self._feed.work if self._feed is not None else self._idle
                while not lost.is_set():
                    if self._feed is not None and self._feed.pending:
                        await self._feed.pull(connection)
                        continue
                    if not await _either(lost, work, _LISTENER_CHECK_S):
                        await connection.fetchval("SELECT 1", timeout=_LISTENER_CHECK_S)
            except _DRIVER_ERRORS:
                pass  # the database is away: reconnect below, and catch up then
            except Exception as exc:  # the listener must outlive anything: wake-ups depend on it
                warn("listener_failed", error=type(exc).__name__)
            finally:
                self.connected.clear()
                if connection is not None:
                    connection.terminate()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def _catch_up(self, connection: Connection) -> None:
        if self._feed is not None:  # the events first: the wake-ups below come after them
            await self._feed.reconnected(connection)
        await self._target.caught_up(connection)
        watched = self._target.watched()
        if not watched:
            return
        rows = await connection.fetch(
            "SELECT inbox_id FROM inboxes WHERE inbox_id = ANY($1::text[])"
            " AND (state = 'expired' OR released_at IS NOT NULL)",
            watched,
        )
        ended = [r[0] for r in rows]
        self._target.end(ended)
        self._target.wake(watched)


def _live(inbox: Inbox) -> LiveAddress:
    return LiveAddress(
        inbox.inbox_id, inbox.run_id, inbox.address, inbox.created_at, inbox.expires_at
    )


def _live_from_payload(text: str) -> LiveAddress:
    """A "c" notification's inbox (``_created_payload``)."""
    inbox_id, run_id, address, created_at, expires_at = text.split(" ")
    return LiveAddress(inbox_id, run_id, address, float(created_at), float(expires_at))


def _set_on_termination(lost: asyncio.Event, _connection: object) -> None:
    lost.set()


async def _either(a: asyncio.Event, b: asyncio.Event, within_s: float) -> bool:
    """Until either event is set (True) or ``within_s`` seconds pass (False)."""
    if a.is_set() or b.is_set():
        return True
    waits = {asyncio.ensure_future(a.wait()), asyncio.ensure_future(b.wait())}
    try:
        done, _ = await asyncio.wait(waits, timeout=within_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
    return bool(done)


# -- row mapping and statements (inside a transaction) ------------------------------


async def _load_inbox(db: Connection, inbox_id: str) -> Inbox | None:
    row = await db.fetchrow(_INBOX_SELECT + " WHERE i.inbox_id = $1", inbox_id)
    return inbox_from_row(row) if row is not None else None


async def _persist_expiry(
    db: Connection, inbox: Inbox, retention_s: int, cause: str | None = None
) -> bool:
    if inbox.state is not State.EXPIRED:
        return False
    at = inbox.expired_at if inbox.expired_at is not None else inbox.expires_at
    status = await db.execute(
        """UPDATE inboxes SET state = 'expired', reason = $1, expired_at = $2,
               evidence_release_at = LEAST(evidence_release_at, $3),
               last_change_reason = $4
           WHERE inbox_id = $5 AND state <> 'expired'""",
        inbox.reason,
        at,
        at + retention_s if retention_s else 1e18,
        cause or inbox.reason,
        inbox.inbox_id,
    )
    if status != "UPDATE 1":
        return False
    await _insert_events(db, [expired_event(inbox, cause)])
    return True


async def _release(db: Connection, inbox_ids: list[str], now: float, runs: dict[str, str]) -> None:
    if not inbox_ids:
        return
    await db.execute(
        "UPDATE inboxes SET released_at = $1, evidence_release_at = $1 "
        "WHERE inbox_id = ANY($2::text[]) AND released_at IS NULL",
        now,
        inbox_ids,
    )
    # A message stored once for several inboxes (and caught mail) keeps its body until every
    # one is released; a delivery deleted from the listing needs it no more. Its rows are
    # locked first, in the one order deletes and the indexers use (no deadlock with them),
    # so the UPDATE below sees a concurrent delete's outcome, not a snapshot from before it.
    held = (
        "raw IS NOT NULL AND message_key IN (SELECT message_key FROM deliveries"
        " WHERE inbox_id = ANY($1::text[]))"
    )
    await lock_messages(db, held, inbox_ids)
    await db.execute(
        """UPDATE messages SET raw = NULL, analysis = NULL, released_at = $1
           WHERE raw IS NOT NULL
             AND message_key IN (SELECT message_key FROM deliveries
                                 WHERE inbox_id = ANY($2::text[]))
             AND NOT EXISTS (SELECT 1 FROM caught c WHERE c.message_key = messages.message_key)
             AND NOT EXISTS (SELECT 1 FROM deliveries d JOIN inboxes i ON i.inbox_id = d.inbox_id
                             JOIN listing v ON v.id = d.message_id
                             WHERE d.message_key = messages.message_key
                               AND i.released_at IS NULL)""",
        now,
        inbox_ids,
    )
    await _insert_events(
        db, [Event(run_id=runs[i], type="released", at=now, inbox_id=i) for i in inbox_ids]
    )


async def _insert_events(db: Connection, events: Iterable[Event]) -> None:
    events = list(events)
    _noted(events)
    rows = [
        (e.run_id, e.inbox_id, e.message_id, e.at, e.type, json.dumps(e.detail)) for e in events
    ]
    if rows:
        await db.executemany(
            "INSERT INTO events (run_id, inbox_id, message_id, at, type, detail_json) "
            "VALUES ($1, $2, $3, $4, $5, $6)",
            rows,
        )
