"""Expiry and release inside a transaction: the statements the store's expire, claim,
release and sweeper moves share. Evidence is kept until its retention ends or its run is
released; a message stored once for several inboxes (and caught mail) keeps its body until
nothing needs it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from sink.inbox import Inbox
from sink.storage.base import Event
from sink.storage.postgres.driver import insert_events
from sink.storage.postgres.mail import lock_messages
from sink.storage.rows import expired_event
from sink.vocabulary import State

if TYPE_CHECKING:
    from sink.storage.postgres.driver import Connection

# How events are written (the store's: handing their webhook deliveries over, webhooks.py).
InsertEvents = Callable[["Connection", Iterable[Event]], Awaitable[None]]


async def persist_expiry(
    db: Connection,
    inbox: Inbox,
    retention_s: int,
    cause: str | None = None,
    insert: InsertEvents = insert_events,
) -> bool:
    """Record ``inbox``'s expiry (if it is expired and not yet recorded): True if it was."""
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
    await insert(db, [expired_event(inbox, cause)])
    return True


async def release(
    db: Connection,
    inbox_ids: list[str],
    now: float,
    runs: dict[str, str],
    insert: InsertEvents = insert_events,
) -> None:
    """Release these inboxes' evidence: bodies nothing else needs go, a ``released`` event each."""
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
    await insert(
        db, [Event(run_id=runs[i], type="released", at=now, inbox_id=i) for i in inbox_ids]
    )
