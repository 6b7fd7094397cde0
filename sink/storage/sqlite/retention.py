"""Expiry and release inside a transaction: the statements the store's expire, claim,
release and sweeper moves share. Evidence is kept until its retention ends or its run is
released; a message stored once for several inboxes (and caught mail) keeps its body until
nothing needs it."""

from __future__ import annotations

import sqlite3

from sink.inbox import Inbox
from sink.storage.base import Event
from sink.storage.rows import expired_event
from sink.storage.sqlite.mail import drop_unneeded_bodies
from sink.storage.sqlite.writer import insert_events
from sink.vocabulary import State


def persist_expiry(
    db: sqlite3.Connection, inbox: Inbox, retention_s: int, cause: str | None = None
) -> None:
    """Record ``inbox``'s expiry, if it is expired and not yet recorded."""
    if inbox.state is not State.EXPIRED:
        return
    at = inbox.expired_at if inbox.expired_at is not None else inbox.expires_at
    cur = db.execute(
        """UPDATE inboxes SET state = 'expired', reason = ?, expired_at = ?,
               evidence_release_at = MIN(evidence_release_at, ?),
               last_change_reason = ?
           WHERE inbox_id = ? AND state != 'expired'""",
        (
            inbox.reason,
            at,
            at + retention_s if retention_s else 1e18,
            cause or inbox.reason,
            inbox.inbox_id,
        ),
    )
    if cur.rowcount == 1:
        insert_events(db, [expired_event(inbox, cause)])


def release(db: sqlite3.Connection, inbox_ids: list[str], now: float, runs: dict[str, str]) -> None:
    """Release these inboxes' evidence: bodies nothing else needs go, a ``released`` event each."""
    if not inbox_ids:
        return
    db.executemany(
        "UPDATE inboxes SET released_at = ?, evidence_release_at = ? "
        "WHERE inbox_id = ? AND released_at IS NULL",
        [(now, now, inbox_id) for inbox_id in inbox_ids],
    )
    # A message stored once for several inboxes (and caught mail) keeps its body until every
    # one is released.
    pks: set[int] = set()
    for inbox_id in inbox_ids:
        pks.update(
            row[0]
            for row in db.execute(
                "SELECT message_pk FROM deliveries WHERE inbox_id = ?", (inbox_id,)
            ).fetchall()
        )
    drop_unneeded_bodies(db, sorted(pks), now)
    insert_events(
        db, [Event(run_id=runs[i], type="released", at=now, inbox_id=i) for i in inbox_ids]
    )
