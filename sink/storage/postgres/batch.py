"""Group commit on PostgreSQL: concurrent deliveries share commits.

A delivery returns only after PostgreSQL's COMMIT (``synchronous_commit`` as the server has
it, ``on`` by default). ``Deliveries`` puts every delivery that arrives while a commit is in
flight into the next one, and a few batches commit at once on the pool; ``insert_batch``
writes a whole batch in one statement (one round trip): the messages, their deliveries
numbered per inbox under the inbox row's lock (so an inbox's numbers follow commit order and
a cursor never skips a delivery that commits late), caught mail, the listing, the events,
and the NOTIFY naming the inboxes that got mail, delivered at COMMIT.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from sink.errors import StorageError, StorageUnavailable
from sink.storage.base import Event, Incoming, Late
from sink.storage.postgres.driver import (
    CHANNEL,
    NOTIFY_IDS_PER_PAYLOAD,
    event_tuples,
    noted,
    unnest_columns,
)
from sink.storage.postgres.feed import CAUGHT
from sink.storage.postgres.webhooks import handing
from sink.storage.rows import (
    accepted_event,
    json_strings,
    late_events,
    message_values,
    near_miss_event,
)

if TYPE_CHECKING:
    from sink.storage.postgres.driver import Connection
    from sink.storage.postgres.webhooks import PostgresWebhooks, Source

_BATCH_MAX = 256
_BATCHES_IN_FLIGHT = 3


async def insert_batch(
    db: Connection,
    items: Sequence[Incoming],
    replica_id: str,
    hooks: PostgresWebhooks | None = None,
) -> None:
    """Store ``items`` in one statement (inside the batch's transaction); NOTIFY their inboxes.
    With ``hooks`` (a worker runs here), their webhook deliveries are handed over to it."""
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
    sources: list[Source] = []  # what each of those rows is (only to hand deliveries over)
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
            messages.append(message_values(key, item, size))
            for d in live:
                seq = next_seq[d.inbox_id]
                next_seq[d.inbox_id] = seq + 1
                deliveries.append((d.inbox_id, seq, d.message_id, key, json_strings(d.rcpts)))
                listing.append((d.message_id, key, d.inbox_id, d.run_id))
                accepted = accepted_event(d, item.received_at, size)
                events.append(accepted)
                event_rows += event_tuples([accepted])
                if hooks is not None:
                    sources.append((accepted, item, d))
        if item.caught_id:
            rcpts = json_strings(item.unrouted)
            caught.append((item.caught_id, key, rcpts, item.caught_until))
            listing.append((item.caught_id, key, None, None))
            # No run's event: the live feed's row for caught mail (feed.py).
            detail = json.dumps({"size": size})
            event_rows.append((None, None, item.caught_id, item.received_at, CAUGHT, detail))
            if hooks is not None:
                sources.append((None, item, None))
        for found in item.near_misses:
            if found.inbox_id in still_live:
                near.append((found.inbox_id, found.address, item.received_at, found.distance))
                missed = near_miss_event(found, item.received_at)
                events.append(missed)
                event_rows += event_tuples([missed])
                if hooks is not None:
                    sources.append((missed, None, None))
        lates = late_events(dropped, item.received_at, size)
        events += lates
        event_rows += event_tuples(lates)
        if hooks is not None:
            sources += [(late, None, None) for late in lates]
    # The rest in one statement (one round trip): the rows as parallel arrays, and the
    # NOTIFY, delivered at COMMIT, naming the inboxes that got mail.
    ids = sorted(next_seq)
    payloads = [
        f"{replica_id} w " + ",".join(ids[i : i + NOTIFY_IDS_PER_PAYLOAD])
        for i in range(0, len(ids), NOTIFY_IDS_PER_PAYLOAD)
    ]
    noted(events)
    args = (
        *unnest_columns(messages, 11),
        *unnest_columns(deliveries, 5),
        *unnest_columns(caught, 4),
        *unnest_columns(listing, 4),
        *unnest_columns(event_rows, 6),
        CHANNEL,
        payloads,
    )
    if hooks is None:
        await db.execute(_BATCH_INSERT, *args)
    else:
        await hooks.handing_said(db, await db.fetchrow(_BATCH_INSERT_HANDING, *args), sources)
    if near:
        await db.executemany(
            "INSERT INTO near_misses (inbox_id, address, received_at, distance) "
            "VALUES ($1, $2, $3, $4)",
            near,
        )


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
    -- search text comes later (mail.py's indexer), off the 250's path.
    INSERT INTO listing (id, message_key, inbox_id, run_id)
    SELECT id, k, i, r FROM unnest($21::text[], $22::text[], $23::text[], $24::text[])
        WITH ORDINALITY AS l(id, k, i, r, n) ORDER BY n
), e AS (
    INSERT INTO events (run_id, inbox_id, message_id, at, type, detail_json)
    SELECT * FROM unnest($25::text[], $26::text[], $27::text[], $28::float8[], $29::text[],
                         $30::text[])
    {returning}
)
"""
_NOTIFY = "SELECT pg_notify($31, p) FROM unnest($32::text[]) AS p"
# The same, saying whether the deliveries its events make are handed over (webhooks.py).
_BATCH_INSERT_HANDING = (
    _BATCH_INSERT.format(returning="RETURNING id")
    + f"SELECT {handing('$25::text[]')}, "
    + "(SELECT COUNT(pg_notify($31, p)) FROM unnest($32::text[]) p)"
)
_BATCH_INSERT = _BATCH_INSERT.format(returning="") + _NOTIFY


class Deliveries:
    """Group commit for deliveries: whatever arrives while a commit is in flight shares the
    next one. Up to ``_BATCHES_IN_FLIGHT`` batches commit at once, each on its own pooled
    connection. A batch that fails for a reason other than the database being unavailable
    is retried one delivery per transaction, so a failing delivery fails alone."""

    def __init__(self, write: Callable[[list[Incoming]], Awaitable[None]]) -> None:
        self._write = write  # one transaction storing a batch (the store's)
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
                await self._write([incoming for incoming, _ in batch])
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
            await self._write([incoming])
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
