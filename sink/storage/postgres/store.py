"""The PostgreSQL adapter: any number of runsink processes share one database.

Every rule that must hold across replicas is the database's to enforce, never a
check-then-write here:

- one inbox per idempotency key: the key is a primary key; creators race on
  ``INSERT ... ON CONFLICT DO NOTHING RETURNING``, and the losers lock the winner's row;
- the per-purpose inbox limit: a counter row raised by a conditional upsert
  (``ON CONFLICT ... DO UPDATE ... WHERE used < limit RETURNING``);
- one claim per message: ``UPDATE ... WHERE claim_id IS NULL RETURNING``;
- one poll budget: ``save_poll`` is conditional on ``polls_used``, and a wait first takes
  its inbox's one wait slot (``slots.py``: conditional on ``poll_until`` and
  ``next_poll_at``), so two waits at once on two replicas: one is too early;
- one breaker per (run, inbox, operation) with one half-open probe: a ``breakers`` row
  moved by conditional updates on the database's clock (``breakers.py``);
- deliveries are numbered per inbox under the inbox row's lock, so an inbox's numbers
  follow commit order and a cursor never skips a delivery that commits late.

Durability: a delivery returns only after PostgreSQL's COMMIT, concurrent deliveries
sharing commits (``batch.py``). Wake-ups cross replicas (``listener.py``); driver errors
never leave the adapter (``driver.py``).
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
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg

if TYPE_CHECKING:
    from sink.storage.postgres.driver import Connection

    pass

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
    LiveTarget,
    NewInbox,
    Route,
    StoredMessage,
    WakeTarget,
)
from sink.storage.postgres.batch import Deliveries, insert_batch
from sink.storage.postgres.breakers import PostgresBreakers
from sink.storage.postgres.driver import (
    CHANNEL,
    CONNECT_TIMEOUT_S,
    DRIVER_ERRORS,
    NAMED,
    NOTIFY_IDS_PER_PAYLOAD,
    Record,
    event_tuples,
    insert_events,
    noted,
    translate,
    translated,
    unnest_columns,
    writing,
)
from sink.storage.postgres.feed import EventFeed
from sink.storage.postgres.listener import Ends, Listener
from sink.storage.postgres.mail import PostgresMail
from sink.storage.postgres.migrate import migrate
from sink.storage.postgres.retention import persist_expiry, release
from sink.storage.postgres.runs import PostgresRuns
from sink.storage.postgres.slots import PostgresPollSlots
from sink.storage.postgres.space import SpaceGate, probe
from sink.storage.postgres.webhooks import PostgresWebhooks, handed_over, handing
from sink.storage.routecache import RouteCache
from sink.storage.rows import (
    LIVE_ADDRESSES,
    claimed_event,
    delivery_from_row,
    expired_event,
    inbox_from_row,
    inbox_values,
    live_from_row,
    match_json_or_none,
    route_from_row,
    stored_message_from_row,
)
from sink.vocabulary import Reason, State

T = TypeVar("T")

_SWEEPER_LOCK = zlib.crc32(b"runsink:sweeper")
_KEYS_LOCK = zlib.crc32(b"runsink:server_keys")
_START_DEADLINE_S = 30.0
_PROBE_TRUSTED_S = 1.0


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

# The run's latest release: the type a literal, so that the partial index of
# sql/012_released_index.sql (WHERE type = 'run_released') serves it.
_RELEASED_AT = "SELECT MAX(at) FROM events WHERE run_id = $1 AND type = 'run_released'"


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
        self._deliveries = Deliveries(self._write_batch)
        self._listener: Listener | None = None
        self._routes = RouteCache()
        # The live inboxes' local parts, for near misses (sink/nearmiss.py): loaded at open,
        # kept by this replica's commits and, through the listener, by every other
        # replica's creates ("c") and ends ("e"); loaded again on every reconnect.
        self._near = NearIndex()
        self._committed_at = -_PROBE_TRUSTED_S  # when ping last saw a commit succeed
        # After a disk-full error, new mail and inboxes wait for a probe to find space.
        self._space = SpaceGate(self._probe_space)
        # Caught mail, search and deletes (the v2 mail ports): mail.py.
        self.mail = PostgresMail(self)
        # Webhooks and their outbox (written by a trigger with the events: webhooks.py).
        self.webhooks = PostgresWebhooks(
            self.transaction, self.fetch, self._insert_events, self._connect_alone
        )
        # The fleet's breakers (breakers.py) and the web UI's run index (runs.py).
        self.breakers = PostgresBreakers(self)
        self.runs = PostgresRuns(self)
        # Each inbox's one wait in progress, fleet-wide (slots.py), on the leases pool.
        self.slots = PostgresPollSlots(lambda: self._leases_pool)

    # -- lifecycle ---------------------------------------------------------------

    async def open(self) -> None:
        """Connect (retrying while the database starts), migrate, then open the pool."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._start_deadline_s
        while True:
            try:
                connection = await asyncpg.connect(
                    self._dsn, timeout=CONNECT_TIMEOUT_S, server_settings=NAMED
                )
                try:
                    await migrate(connection)
                finally:
                    await connection.close()
                self._pool = await asyncpg.create_pool(
                    self._dsn,
                    min_size=1,
                    max_size=self._pool_size,
                    timeout=CONNECT_TIMEOUT_S,
                    max_inactive_connection_lifetime=60.0,
                    server_settings=NAMED,
                    reset=_as_it_is,
                )
                self._leases = await asyncpg.create_pool(
                    self._dsn,
                    min_size=1,
                    max_size=4,
                    timeout=CONNECT_TIMEOUT_S,
                    max_inactive_connection_lifetime=60.0,
                    server_settings={**NAMED, "synchronous_commit": "off"},
                    reset=_as_it_is,
                )
                break
            except DRIVER_ERRORS as exc:
                error = translate(exc, "opening the store")
                if not isinstance(error, StorageUnavailable) or loop.time() > deadline:
                    raise error from exc
                await asyncio.sleep(0.5)
        async with translated("loading the live inboxes"):
            self._near.keep_only(await self._live_addresses(self.pool))
        self.webhooks.keyed(await self.signing_key())
        self._deliveries.start()

    def follow(self, target: WakeTarget, live: LiveTarget | None = None) -> None:
        """Wake ``target``'s waits on mail (and end them on expiry) from any replica; and
        publish to ``live`` the events every replica commits, in commit order (``feed.py``)."""
        feed = EventFeed(live) if live is not None else None
        self._listener = Listener(
            self._dsn, self.replica_id, Ends(target, self), feed, self.webhooks.notified
        )
        self._listener.start()

    async def until_listening(self) -> None:
        """Returns once the listener is connected (and has caught up)."""
        if self._listener is None:
            raise StorageError("this store follows no waiters")
        await self._listener.connected.wait()

    async def close(self) -> None:
        await self.webhooks.close()
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
            except (TimeoutError, *DRIVER_ERRORS):
                pool.terminate()
        self._pool = self._leases = None

    # -- plumbing ----------------------------------------------------------------

    async def _connect_alone(self) -> asyncpg.Connection[Record]:
        """A connection of its own, outside the pools (a worker's presence lock)."""
        async with translated("connecting"):
            connection: asyncpg.Connection[Record] = await asyncpg.connect(
                self._dsn, timeout=CONNECT_TIMEOUT_S, server_settings=NAMED
            )
        return connection

    @staticmethod
    async def _live_addresses(db: Connection | asyncpg.Pool) -> list[LiveAddress]:
        return [live_from_row(row) for row in await db.fetch(LIVE_ADDRESSES, timeout=30)]

    # What the listener (listener.py's ``Ends``) keeps of this store's caches: ``Followed``.

    def ended(self, inbox_ids: list[str]) -> None:
        """Inboxes that just expired (or were released), here or on another replica: no
        route, no near misses any more."""
        self._routes.forget(inbox_ids)
        self._near.remove(inbox_ids)

    def created(self, live: LiveAddress) -> None:
        self._near.add(live)

    def forget_routes(self) -> None:
        self._routes = RouteCache()

    async def reload_live(self, connection: Connection) -> None:
        self._near.keep_only(await self._live_addresses(connection))

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

    async def fetch(self, what: str, sql: str, *args: Any) -> list[Record]:
        async with translated(what):
            return list(await self.pool.fetch(sql, *args, timeout=30))

    async def transaction(self, what: str, work: Callable[[Connection], Awaitable[T]]) -> T:
        """``work`` in one transaction; it returns after COMMIT (then its events are told,
        and the webhook deliveries it handed over go to the worker)."""
        with writing() as written, handed_over() as handed:
            async with (
                translated(what),
                self.pool.acquire() as connection,
                connection.transaction(),
            ):
                result = await work(connection)
        if handed:
            # Its attempts start once the callers this commit answers have run (a 250 first).
            asyncio.get_running_loop().call_soon(self.webhooks.handed, handed)
        self._committed(written)
        return result

    async def _write_batch(self, items: list[Incoming]) -> None:
        """One transaction storing a batch of deliveries (``batch.py``'s group commit)."""
        hooks = self.webhooks if self.webhooks.handing_over else None
        await self.transaction(
            "save_message", lambda db: insert_batch(db, items, self.replica_id, hooks)
        )

    async def _insert_events(self, db: Connection, events: Iterable[Event]) -> None:
        """Inside a transaction: ``insert_events``, handing their webhook deliveries over
        (``webhooks.py``) while a worker runs here and an enabled webhook exists."""
        events = list(events)
        if not self.webhooks.handing_over or not events:
            await insert_events(db, events)
            return
        noted(events)
        row = await db.fetchrow(_EVENTS_HANDING, *unnest_columns(event_tuples(events), 6))
        await self.webhooks.handing_said(db, row, [(e, None, None) for e in events])

    def _committed(self, events: list[Event]) -> None:
        if events and self._on_events is not None:
            try:
                self._on_events(events)
            except Exception as exc:  # a listener's trouble must not undo a durable write
                warn("event_listener_failed", error=type(exc).__name__)

    @contextlib.asynccontextmanager
    async def sweeper_turn(self) -> AsyncIterator[bool]:
        """True for the one replica whose turn it is to sweep (a session advisory lock)."""
        async with translated("taking the sweeper lock"), self.pool.acquire() as connection:
            got = bool(await connection.fetchval("SELECT pg_try_advisory_lock($1)", _SWEEPER_LOCK))
            try:
                yield got
            finally:
                if got:
                    try:
                        await connection.execute("SELECT pg_advisory_unlock($1)", _SWEEPER_LOCK)
                    except BaseException:
                        # Not back to the pool holding it (_as_it_is): closed, which frees it.
                        connection.terminate()
                        raise

    async def _notify(self, connection: Connection, kind: str, inbox_ids: Sequence[str]) -> None:
        """Inside the writing transaction: delivered to every listener at COMMIT."""
        ids = sorted(set(inbox_ids))
        for start in range(0, len(ids), NOTIFY_IDS_PER_PAYLOAD):
            chunk = ",".join(ids[start : start + NOTIFY_IDS_PER_PAYLOAD])
            await connection.execute(
                "SELECT pg_notify($1, $2)", CHANNEL, f"{self.replica_id} {kind} {chunk}"
            )

    # -- inboxes -----------------------------------------------------------------

    async def ping(self) -> None:
        """The store can commit: the database answers, is no read-only standby, and its
        files can grow (a full disk or tablespace fails it: ``space.py``). A success is
        trusted for a second, so a caller polling readiness costs at most one tiny commit
        per second."""
        rows = await self.fetch("ping", "SELECT pg_is_in_recovery()")
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
        await self.transaction("ping", partial(probe, replica_id=self.replica_id))

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
                *inbox_values(new),
            )
            if mine is None:
                await db.execute(
                    "UPDATE idempotency SET inbox_id = $2, request_json = $3 WHERE key = $1",
                    new.idempotency_key,
                    inbox.inbox_id,
                    new.request_json,
                )
            await self._insert_events(db, [event])
            # Every other replica's near-miss index learns of it at COMMIT (see listener.py).
            await db.execute("SELECT pg_notify($1, $2)", CHANNEL, self._created_payload(inbox))
            return CreateResult(CreateOutcome.CREATED, inbox)

        await self._space.admit()
        try:
            result = await self.transaction("create_inbox", work)
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
        rows = await self.fetch("load_inbox", _INBOX_SELECT + " WHERE i.inbox_id = $1", inbox_id)
        return inbox_from_row(rows[0]) if rows else None

    async def count_inboxes(self, run_id: str, purpose: str) -> int:
        rows = await self.fetch(
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
        rows = await self.fetch(
            "route",
            "SELECT inbox_id, run_id, policy, expires_at, state FROM inboxes WHERE local_part = $1",
            local_part,
        )
        if not rows:
            return None
        route = route_from_row(rows[0])
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
        rows = await self.fetch(
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
            *unnest_columns(event_tuples(events), 6),
            CHANNEL,
            payloads,
            match_json_or_none(after.wait_match),
            after.rescan_seq,
        )
        saved = bool(rows[0][0])
        if saved:
            self._committed(events)
        if saved and after.state is State.EXPIRED:
            self.ended([after.inbox_id])
        return saved

    async def expire(self, inbox: Inbox, retention_s: int) -> None:
        async def work(db: Connection) -> None:
            if await persist_expiry(db, inbox, retention_s, insert=self._insert_events):
                await self._notify(db, "e", [inbox.inbox_id])

        await self.transaction("expire", work)
        self.ended([inbox.inbox_id])

    async def expire_due(self, now: float, limit: int) -> list[Inbox]:
        rows = await self.fetch(
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

        await self.transaction("set_last_error", work)

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
        rows = await self.fetch(
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
        rows = await self.fetch(
            "deliveries_after",
            _DELIVERY_SELECT + " WHERE d.inbox_id = $1 AND d.seq > $2 ORDER BY d.seq LIMIT $3",
            inbox_id,
            after_seq,
            limit,
        )
        return [delivery_from_row(row) for row in rows]

    async def delivery(self, message_id: str) -> Delivery | None:
        rows = await self.fetch(
            "delivery", _DELIVERY_SELECT + " WHERE d.message_id = $1", message_id
        )
        return delivery_from_row(rows[0]) if rows else None

    async def raw(self, message_id: str) -> bytes | None:
        rows = await self.fetch(
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
        rows = await self.fetch(
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
        return stored_message_from_row(rows[0])

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

        await self.transaction("keep_analysis", work)

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
            await self._insert_events(db, [claimed_event(claim, delivery.inbox_id)])
            return claim

        return await self.transaction("claim", work)

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
                    await persist_expiry(
                        db,
                        inbox.expire(Reason.LEASE, now),
                        0,
                        cause="released",
                        insert=self._insert_events,
                    )
                else:
                    await persist_expiry(db, inbox.effective(now), 0, insert=self._insert_events)
            ids = [i.inbox_id for i in inboxes]
            await release(db, ids, now, {i: run_id for i in ids}, self._insert_events)
            await self._notify(db, "e", ids)
            return ids

        released = await self.transaction("release_run", work)
        self.ended(released)
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
                await persist_expiry(db, inbox.effective(now), 0, insert=self._insert_events)
            ids = [i.inbox_id for i in inboxes]
            await release(
                db, ids, now, {i.inbox_id: i.run_id for i in inboxes}, self._insert_events
            )
            await self._notify(db, "e", ids)
            return ids

        released = await self.transaction("release", work)
        self.ended(released)
        return len(released)

    async def used_bytes(self) -> int:
        """Bytes of bodies kept (what --max-store-mb caps); the table's own pages follow
        PostgreSQL's vacuum, not this figure."""
        rows = await self.fetch(
            "used_bytes", "SELECT COALESCE(SUM(size), 0) FROM messages WHERE raw IS NOT NULL"
        )
        return int(rows[0][0])

    # -- reports -----------------------------------------------------------------

    async def add_events(self, events: list[Event]) -> None:
        async def work(db: Connection) -> None:
            await self._insert_events(db, events)

        await self.transaction("add_events", work)

    async def run_report(self, run_id: str) -> tuple[list[InboxReport], list[Event]]:
        rows = await self.fetch(
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
        event_rows = await self.fetch(
            "run_report",
            "SELECT run_id, type, at, inbox_id, message_id, detail_json FROM events "
            "WHERE run_id = $1 ORDER BY at, id LIMIT 10000",
            run_id,
        )
        events = [Event(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])) for r in event_rows]
        return reports, events

    async def run_released_at(self, run_id: str) -> float | None:
        rows = await self.fetch("run_released_at", _RELEASED_AT, run_id)
        return None if rows[0][0] is None else float(rows[0][0])

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

        return await self.transaction("signing_key", work)


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


# insert_events' rows in one statement that also says whether their webhook deliveries are
# handed over (webhooks.py's handing).
_EVENTS_HANDING = f"""
WITH e AS (
    INSERT INTO events (run_id, inbox_id, message_id, at, type, detail_json)
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::text[],
                         $6::text[])
    RETURNING id
)
SELECT {handing("$1::text[]")}
"""


async def _as_it_is(connection: asyncpg.Connection[Record]) -> None:
    """A pool connection goes back as it is (asyncpg still rolls back a transaction left open):
    none of ours keeps session state (no LISTEN, no session SET, no cursor held; the sweeper
    unlocks its advisory lock or closes the connection), so the default reset query
    (pg_advisory_unlock_all, CLOSE ALL, UNLISTEN *, RESET ALL) was a round trip per use for
    nothing: ~3% of the server's CPU under ingest, more beside a webhook."""


def _live(inbox: Inbox) -> LiveAddress:
    return LiveAddress(
        inbox.inbox_id, inbox.run_id, inbox.address, inbox.created_at, inbox.expires_at
    )


# -- row mapping and statements (inside a transaction) ------------------------------


async def _load_inbox(db: Connection, inbox_id: str) -> Inbox | None:
    row = await db.fetchrow(_INBOX_SELECT + " WHERE i.inbox_id = $1", inbox_id)
    return inbox_from_row(row) if row is not None else None
