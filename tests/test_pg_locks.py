"""PostgreSQL: every path that locks several messages locks them in one order.

Releases (a run's, the retention sweep's), deletes (the Mailpit subset's, the UI's) and the
caught-mail sweeps run at once on three stores (three pools, as on three replicas) over the
same messages, many times: no deadlock, and no body kept that nothing needs.
"""

from __future__ import annotations

import asyncio

import asyncpg

from sink import clock, ids
from sink.message import summarize
from sink.storage.base import Delivered, Incoming
from sink.storage.postgres.store import PostgresStore
from sink.vocabulary import Reason
from tests.test_storage import created_event, new_inbox

ROUNDS = 25
MESSAGES = 12


def _shared(n: int, to: list[Delivered], now: float) -> Incoming:
    """Mail stored once: evidence for each of ``to`` and caught mail as well."""
    raw = f"From: app@x.test\r\nSubject: shared {n}\r\n\r\nbody {n}\r\n".encode()
    return Incoming(
        raw=raw,
        summary=summarize(raw),
        mail_from="app@x.test",
        received_at=now,
        deliveries=tuple(to),
        unrouted=("someone@gmail.com",),
        caught_id=ids.new_caught_id(),
        caught_until=now + 3600,
    )


async def _round(stores: list[PostgresStore], n: int) -> list[str]:
    """One round: MESSAGES messages, each evidence for an inbox of a live run (inboxes
    numbered against the messages' order, so a release walks them backwards) and for one
    expired inbox, and caught; then release, delete and sweep them all at once."""
    a, b, c = stores
    now = clock.now()
    live_run, done_run = f"live-{n}", f"done-{n}"
    lives = [new_inbox(live_run, purpose=f"p{i}") for i in range(MESSAGES)]
    lives.sort(key=lambda new: new.inbox.inbox_id, reverse=True)
    done = new_inbox(done_run)
    for new in [*lives, done]:
        await a.create_inbox(new, created_event(new))
    mail = [
        _shared(
            i,
            [
                Delivered(lives[i].inbox.inbox_id, live_run, ids.new_message_id(), ()),
                Delivered(done.inbox.inbox_id, done_run, ids.new_message_id(), ()),
            ],
            now,
        )
        for i in range(MESSAGES)
    ]
    for item in mail:  # one at a time: message_pk follows this order
        await a.save_message(item)
    await a.expire(done.inbox.expire(Reason.LEASE, now), 3600)
    entries = [item.deliveries[1].message_id for item in mail]
    entries += [item.caught_id for item in mail if item.caught_id is not None]
    released, deleted, swept = await asyncio.gather(
        a.release_run(live_run, now),
        b.mail.delete_listed(entries[::-1], now),
        c.mail.drop_oldest_caught(now, MESSAGES),
    )
    assert len(released) == MESSAGES
    assert deleted.refused == () and deleted.deleted + swept == 2 * MESSAGES
    return [item.deliveries[0].message_id for item in mail]


def test_releases_deletes_and_sweeps_of_the_same_messages_never_deadlock(pg_dsn: str) -> None:
    """25 rounds of a run's release, a delete and a caught-mail sweep over the same 12
    messages on three stores at once: no deadlock (no error at all), and every body that
    nothing needs any more is gone."""

    async def scenario() -> int:
        stores = [PostgresStore(pg_dsn) for _ in range(3)]
        for store in stores:
            await store.open()
        try:
            keys: list[str] = []
            for n in range(ROUNDS):
                keys += await _round(stores, n)
        finally:
            for store in stores:
                await store.close()
        connection = await asyncpg.connect(pg_dsn)
        try:
            kept = await connection.fetchval(
                "SELECT COUNT(*) FROM messages WHERE message_key = ANY($1::text[])"
                " AND raw IS NOT NULL",
                keys,
            )
        finally:
            await connection.close()
        return int(kept)

    assert asyncio.run(scenario()) == 0
