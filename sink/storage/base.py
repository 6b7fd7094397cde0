"""The storage port: the handful of operations the domain needs, shaped like it.

``Store`` is what the agent and ingest call; ``Maintenance`` is what only the sweeper
calls (expiry, retention, the size cap). Adapters (``sqlite/``, ``memory.py``,
``postgres/``) implement both and translate their driver's errors into
``sink.errors.StorageError``. Atomic rules (one claim per message, one inbox per
idempotency key, the per-purpose inbox limit) are the adapter's to enforce inside the
database, not check-then-write above it. ``PollSlots`` is for adapters that several
processes share (PostgreSQL): the one wait in progress per inbox lives there too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from sink.envelope import NearMiss
from sink.inbox import Claim, Delivery, Inbox
from sink.message import Summary
from sink.nearmiss import NearMissFound
from sink.search import Query


@dataclass(frozen=True, slots=True)
class NewInbox:
    inbox: Inbox
    local_part: str
    idempotency_key: str
    request_json: str  # the create body, canonical JSON, compared on replay
    inboxes_per_purpose: int
    retention_s: int


class CreateOutcome(StrEnum):
    CREATED = "created"
    REPLAYED = "replayed"
    CONFLICT = "conflict"
    FORBIDDEN = "forbidden"


@dataclass(frozen=True, slots=True)
class CreateResult:
    outcome: str
    inbox: Inbox | None = None
    count: int = 0  # inboxes this run already has for the purpose (when forbidden)


@dataclass(frozen=True, slots=True)
class Route:
    """What SMTP needs to know about a recipient's inbox."""

    inbox_id: str
    run_id: str
    policy_name: str
    expires_at: float
    expired: bool


@dataclass(frozen=True, slots=True)
class Delivered:
    inbox_id: str
    run_id: str
    message_id: str
    rcpts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Late:
    inbox_id: str
    run_id: str
    rcpt: str


@dataclass(frozen=True, slots=True)
class Incoming:
    """One accepted SMTP transaction: the message stored once, delivered to each inbox."""

    raw: bytes
    summary: Summary
    mail_from: str
    received_at: float
    deliveries: tuple[Delivered, ...]
    unrouted: tuple[str, ...] = ()  # the caught recipients (no live inbox): caught mail
    late: tuple[Late, ...] = ()
    caught_id: str | None = None  # set when ``unrouted`` is: the caught mail's id
    caught_until: float = 0.0  # caught mail is kept until then (catch_all_retention_s)
    # The live inboxes the caught recipients nearly reached: the store finds them (its
    # ``NearIndex``) when it stores the caught mail, and records them with it.
    near_misses: tuple[NearMissFound, ...] = ()
    auth_user: str | None = None  # the SMTP AUTH user name (never a password); None: no AUTH


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One delivery with its message, for read_message."""

    delivery: Delivery
    run_id: str
    raw: bytes | None  # None once the evidence is released
    mail_from: str
    rcpts: tuple[str, ...]
    to: tuple[str, ...]
    cc: tuple[str, ...]
    date: str | None
    released_at: float | None
    analysis: str | None = None  # kept by keep_analysis at the first read; None once released
    auth_user: str | None = None


RUN_RELEASED = "run_released"  # the event type of a release (``run_released_at`` finds it)


@dataclass(frozen=True, slots=True)
class Event:
    run_id: str
    type: str
    at: float
    inbox_id: str | None = None
    message_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    seq: int | None = None  # the id of its ``events`` row, once stored (live event ids)


@dataclass(frozen=True, slots=True)
class InboxReport:
    inbox: Inbox
    accepted_message_id: str | None
    last_change_reason: str | None
    evidence_release_at: float | None


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One line of the runs list: what a person scans to find the run that failed."""

    run_id: str
    started_at: float  # its first inbox's creation
    purposes: tuple[str, ...]
    states: dict[str, int]  # inboxes by state, lease expiry applied
    messages: int
    claims: int
    last_event: str | None
    last_event_at: float | None


class RunIndex(Protocol):
    """Read-only views across runs, for people (the web UI); apart from ``Store`` on purpose:
    the agent never needs them, and a backend can offer them by its own indexes."""

    async def recent_runs(
        self,
        now: float,
        limit: int,
        before: tuple[float, str] | None = None,
        run_contains: str | None = None,
        purpose: str | None = None,
    ) -> list[RunSummary]:
        """Newest first (by ``started_at``, then ``run_id``), strictly after ``before``."""

    async def run_deliveries(self, run_id: str, limit: int) -> list[Delivery]:
        """A run's deliveries, across its inboxes, newest first."""


class Store(Protocol):
    """What the domain needs: inboxes, deliveries, polls, claims, releases, reports."""

    async def ping(self) -> None:
        """Raise StorageError unless the store can commit now (``/readyz`` asks)."""
        ...

    async def create_inbox(self, new: NewInbox, event: Event) -> CreateResult: ...

    async def load_inbox(self, inbox_id: str) -> Inbox | None: ...

    async def count_inboxes(self, run_id: str, purpose: str) -> int: ...

    async def route(self, local_part: str) -> Route | None: ...

    async def save_message(self, incoming: Incoming) -> None:
        """Durable when it returns (the caller answers 250 after it)."""

    async def deliveries_after(self, inbox_id: str, after_seq: int, limit: int) -> list[Delivery]:
        """An inbox's deliveries beyond a position, oldest first."""

    async def delivery(self, message_id: str) -> Delivery | None: ...

    async def raw(self, message_id: str) -> bytes | None: ...

    async def message(self, message_id: str) -> StoredMessage | None: ...

    async def keep_analysis(
        self, message_id: str, analysis: str, replacing: str | None = None
    ) -> None:
        """Keep what a read worked out from the message's content (sink.message Analysis, as
        JSON) with the message, until its body is released: when none is kept, or in place of
        ``replacing`` (one of an older version); a kept one is never overwritten otherwise."""

    async def save_poll(self, before: Inbox, after: Inbox, event: Event) -> bool:
        """Record a poll unless another poll of the inbox was recorded since ``before``."""

    async def claim(self, delivery: Delivery, claim: Claim, after: Inbox) -> Claim:
        """Claim atomically; returns the claim that stands (ours, or one made before)."""

    async def set_last_error(self, inbox_id: str, code: str | None) -> None: ...

    async def expire(self, inbox: Inbox, retention_s: int) -> None:
        """Persist an expiry (idempotent) with its event."""

    async def release_run(self, run_id: str, now: float) -> list[str]:
        """Expire the run's live inboxes (lease) and release their bodies now."""

    async def add_events(self, events: list[Event]) -> None: ...

    async def near_misses(self, inbox_id: str, limit: int) -> list[NearMiss]:
        """Caught mail recorded as near misses of the inbox (when it was stored) since its
        evidence was last claimed, newest first (ties by arrival order)."""

    async def run_report(self, run_id: str) -> tuple[list[InboxReport], list[Event]]: ...

    async def run_released_at(self, run_id: str) -> float | None:
        """When the run was last released (its latest ``run_released`` event), or None: one
        indexed look-up, read from the store itself (so every process sharing it agrees)."""

    async def signing_key(self) -> bytes:
        """The server's secret for run tokens: 32 random bytes made at the first call, then
        the same ones for every process sharing the store, across restarts."""

    async def close(self) -> None: ...


class Maintenance(Protocol):
    """What only the sweeper needs: leases that ended, retention, the size cap."""

    async def expire(self, inbox: Inbox, retention_s: int) -> None:
        """Persist an expiry (idempotent) with its event."""

    async def expire_due(self, now: float, limit: int) -> list[Inbox]:
        """Live inboxes whose lease ended: for the sweeper to persist."""

    async def release_due(self, now: float, limit: int) -> int:
        """Release bodies whose retention ended; returns how many inboxes were released."""

    async def release_oldest_expired(self, now: float, limit: int) -> int:
        """Release the oldest evidence whose lease is over (for the store size cap)."""

    async def used_bytes(self) -> int: ...


class Storage(Store, Maintenance, Protocol):
    """An adapter: the domain's port and the sweeper's, over one database."""

    async def open(self) -> None:
        """Connect and migrate; raises ``StorageError`` naming what failed."""


class PollSlots(Protocol):
    """Adapters that several processes share: one wait in progress per inbox, fleet-wide.

    (One process alone keeps this in memory: ``LongPolls.busy_until``.)
    """

    async def take_poll_slot(self, inbox: Inbox, now: float, until: float) -> float | None:
        """Take the inbox's wait slot until ``until``: None if taken, else when to retry."""

    async def free_poll_slot(self, inbox_id: str, until: float) -> None:
        """Give the slot back (the wait ended without recording a poll)."""


class WakeTarget(Protocol):
    """What a shared database's feed wakes: the process's waiters (``sink/waiters.py``)."""

    def wake(self, inbox_ids: Iterable[str]) -> None: ...

    def end(self, inbox_ids: Iterable[str]) -> None: ...

    def watched(self) -> list[str]: ...


class LiveTarget(Protocol):
    """Where a shared database's feed publishes: the live-event hub (``sink/events.py``)."""

    def heard(self) -> bool: ...

    def record(self, events: Iterable[Event]) -> None: ...

    def delivered(
        self, message_id: str, inbox_id: str, run_id: str, subject: str, received_at: float
    ) -> None: ...

    def caught(self, caught_id: str, subject: str, received_at: float) -> None: ...

    def lost(self) -> None: ...


# -- caught mail and search (v2): separate ports, beside Store ---------------------------


@dataclass(frozen=True, slots=True)
class Listed:
    """One entry of the listing of all captured mail: an inbox's delivery, or caught mail."""

    id: str  # a delivery's message_id, or a caught mail's id
    position: tuple[int, int]  # (message, listing) order: newest first is descending
    caught: bool
    inbox_id: str | None
    run_id: str | None
    subject: str
    from_addr: str
    to: tuple[str, ...]
    cc: tuple[str, ...]
    mail_from: str
    rcpts: tuple[str, ...]  # this entry's envelope recipients
    received_at: float
    size: int
    has_attachment: bool
    claimed: bool
    released: bool  # the body is gone (evidence released)


@dataclass(frozen=True, slots=True)
class CaughtMessage:
    listed: Listed
    raw: bytes | None
    date: str | None
    expires_at: float
    auth_user: str | None = None


@dataclass(frozen=True, slots=True)
class Deleted:
    """What a delete did: ``refused`` names live evidence (then nothing was deleted)."""

    deleted: int
    refused: tuple[str, ...] = ()


class CaughtMail(Protocol):
    async def caught_page(self, before: tuple[int, int] | None, limit: int) -> list[Listed]:
        """Caught mail, newest first, strictly before a position."""

    async def caught_message(self, caught_id: str) -> CaughtMessage | None: ...

    async def expire_caught(self, now: float, limit: int) -> int:
        """Delete caught mail whose retention ended; its body goes unless evidence needs it."""

    async def drop_oldest_caught(self, now: float, limit: int) -> int:
        """Delete the oldest caught mail (for the store size cap)."""


class SearchIndex(Protocol):
    async def search(
        self,
        query: Query,
        run_scope: str | None,
        before: tuple[int, int] | None,
        limit: int,
        offset: int = 0,
    ) -> list[Listed]:
        """Evidence and caught mail matching ``query``, newest first. With ``run_scope``,
        only that run's deliveries (never caught mail)."""

    async def count(self, query: Query, run_scope: str | None, cap: int) -> int:
        """How many entries match, counted up to ``cap``."""

    async def listed(self, entry_id: str) -> Listed | None: ...

    async def listed_raw(self, entry_id: str) -> bytes | None:
        """The body of a listed entry (None once released)."""

    async def delete_listed(self, ids: list[str] | None, now: float) -> Deleted:
        """Delete named entries (or, with None, all caught mail and all mail of expired or
        released inboxes). Live evidence is never deleted: naming it refuses the whole call."""
