"""The memory adapter: ``Store``, ``Maintenance`` and the v2 mail ports (``CaughtMail``,
``SearchIndex``) over dicts, for the fake and the fuzz tests.

Nothing here awaits anything, so each operation is atomic on the event loop, which is
how it keeps the rules SQLite keeps with ``UPDATE ... WHERE``: one claim per message, one
inbox per idempotency key, a poll recorded only over the snapshot it was made from. The
shared storage suite (``tests/test_storage.py``) runs against it and SQLite alike.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sink import event_shapes
from sink.envelope import NearMiss
from sink.errors import StorageError
from sink.event_ids import EventIds
from sink.inbox import Claim, Delivery, Evidence, Inbox
from sink.message import Summary, search_fields
from sink.nearmiss import LiveAddress, NearIndex
from sink.search import Query, texts_match
from sink.storage.backend import Announced, Backend
from sink.storage.base import (
    RUN_RELEASED,
    CaughtMessage,
    CreateOutcome,
    CreateResult,
    Deleted,
    Event,
    InboxReport,
    Incoming,
    Listed,
    NewInbox,
    Route,
    RunSummary,
    StoredMessage,
)
from sink.storage.memory_webhooks import MemoryWebhooks
from sink.storage.rows import (
    accepted_event,
    claimed_event,
    expired_event,
    late_events,
    near_miss_event,
)
from sink.vocabulary import Reason, State

if TYPE_CHECKING:
    from sink.config import Settings

_NEVER = 1e18  # evidence_release_at of an inbox whose expiry set no retention


@dataclass(slots=True)
class _Inbox:
    inbox: Inbox  # its evidence is rebuilt on every load (the claim may have changed)
    local_part: str
    evidence_message_id: str | None
    evidence_release_at: float
    last_change_reason: str | None


@dataclass(slots=True)
class _Message:
    raw: bytes | None
    size: int
    summary: Summary
    mail_from: str
    received_at: float
    released_at: float | None = None
    pk: int = 0
    rcpts: tuple[str, ...] = ()  # every envelope recipient (deliveries' and caught)
    document: dict[str, str] | None = None  # the search text, made at the first search
    has_attachment: bool = False
    analysis: str | None = None  # kept at the first read (keep_analysis)
    auth_user: str | None = None


@dataclass(slots=True)
class _Delivery:
    seq: int
    message_id: str
    inbox_id: str
    message: _Message
    rcpts: tuple[str, ...]
    claim: Claim | None = None


@dataclass(slots=True)
class _Entry:
    """One entry of the listing: an inbox's delivery, or caught mail."""

    seq: int
    id: str
    message: _Message
    inbox_id: str | None
    run_id: str | None
    rcpts: tuple[str, ...]
    expires_at: float = _NEVER  # caught mail's retention


class MemoryStore:
    def __init__(self, on_events: Callable[[list[Event]], None] | None = None) -> None:
        self._open = True
        # on_events: every event recorded, as it is recorded (the live events).
        self._on_events = on_events
        self._inboxes: dict[str, _Inbox] = {}
        self._by_local: dict[str, str] = {}
        self._keys: dict[str, tuple[str, str]] = {}  # idempotency key -> (request_json, inbox)
        self._deliveries: dict[str, _Delivery] = {}  # by message_id
        self._by_inbox: dict[str, list[_Delivery]] = {}  # oldest first
        self._seq = itertools.count(1)  # one sequence over every inbox, as in SQLite
        self._listing: dict[str, _Entry] = {}  # by id, oldest first (insertion order)
        self._caught: dict[str, _Entry] = {}  # the listing's caught mail, by id
        self._pks = itertools.count(1)
        self._listing_seq = itertools.count(1)
        self._events: list[Event] = []
        self._release_at: dict[str, float] = {}  # run -> its latest release (run_released_at)
        self._near = NearIndex()  # the live inboxes' local parts, for near misses
        self._near_misses: dict[str, list[NearMiss]] = {}  # by inbox, in arrival order
        self._signing_key = secrets.token_bytes(32)  # lives as long as the store, as its data
        self._ids = EventIds(self._signing_key)
        self._event_rows = itertools.count(1)  # the events' row ids (their live events' ids)
        # Webhooks and their outbox: deliveries added in the same step as their events.
        self.webhooks = MemoryWebhooks(self._ids, self._record)

    async def open(self) -> None:
        self._open = True

    async def close(self) -> None:
        self._open = False

    async def ping(self) -> None:
        self._check()

    # -- inboxes -----------------------------------------------------------------

    async def create_inbox(self, new: NewInbox, event: Event) -> CreateResult:
        self._check()
        inbox = new.inbox
        known = self._keys.get(new.idempotency_key)
        if known is not None:
            request_json, inbox_id = known
            existing = self._load(inbox_id)
            # Once the key's inbox has expired, only inboxes_per_purpose judges the key.
            if existing.effective(inbox.created_at).state is not State.EXPIRED:
                if request_json != new.request_json:
                    return CreateResult(CreateOutcome.CONFLICT)
                return CreateResult(CreateOutcome.REPLAYED, existing)
        count = self._count(inbox.run_id, inbox.purpose)
        if count >= new.inboxes_per_purpose:
            return CreateResult(CreateOutcome.FORBIDDEN, count=count)
        stored = replace(inbox, polls_used=0, cursor_seq=0, state=State.CREATED, evidence=None)
        self._inboxes[inbox.inbox_id] = _Inbox(
            stored, new.local_part, None, inbox.expires_at + new.retention_s, "created"
        )
        self._by_local[new.local_part] = inbox.inbox_id
        self._by_inbox[inbox.inbox_id] = []
        self._keys[new.idempotency_key] = (new.request_json, inbox.inbox_id)
        self._record([event])
        self._near.add(
            LiveAddress(
                inbox.inbox_id, inbox.run_id, inbox.address, inbox.created_at, inbox.expires_at
            )
        )
        return CreateResult(CreateOutcome.CREATED, stored)

    async def load_inbox(self, inbox_id: str) -> Inbox | None:
        self._check()
        return self._load(inbox_id) if inbox_id in self._inboxes else None

    async def count_inboxes(self, run_id: str, purpose: str) -> int:
        self._check()
        return self._count(run_id, purpose)

    async def route(self, local_part: str) -> Route | None:
        self._check()
        inbox_id = self._by_local.get(local_part)
        if inbox_id is None:
            return None
        inbox = self._inboxes[inbox_id].inbox
        return Route(
            inbox_id,
            inbox.run_id,
            inbox.policy_name,
            inbox.expires_at,
            inbox.state is State.EXPIRED,
        )

    async def save_poll(self, before: Inbox, after: Inbox, event: Event) -> bool:
        self._check()
        row = self._inboxes[after.inbox_id]
        if row.inbox.polls_used != before.polls_used or row.inbox.state is State.EXPIRED:
            return False
        if row.inbox.state is not after.state:
            row.last_change_reason = after.reason or "evidence_found"
        row.inbox = replace(
            row.inbox,
            polls_used=after.polls_used,
            next_poll_at=after.next_poll_at,
            cursor_seq=after.cursor_seq,
            state=after.state,
            reason=after.reason,
            last_poll_at=after.last_poll_at,
            last_poll_latency_ms=after.last_poll_latency_ms,
            expired_at=after.expired_at,
            last_error=after.last_error,
            wait_match=after.wait_match,
            rescan_seq=after.rescan_seq,
        )
        row.evidence_message_id = after.evidence.message_id if after.evidence else None
        self._record([event])
        if after.state is State.EXPIRED:
            self._record([expired_event(after)])
            self._near.remove([after.inbox_id])
        return True

    async def set_last_error(self, inbox_id: str, code: str | None) -> None:
        self._check()
        row = self._inboxes.get(inbox_id)
        if row is not None:
            row.inbox = replace(row.inbox, last_error=code)

    async def expire(self, inbox: Inbox, retention_s: int) -> None:
        self._check()
        self._persist_expiry(inbox, retention_s)

    async def expire_due(self, now: float, limit: int) -> list[Inbox]:
        self._check()
        due = [
            row.inbox.inbox_id
            for row in self._inboxes.values()
            if row.inbox.state is not State.EXPIRED and row.inbox.expires_at <= now
        ]
        return [self._load(inbox_id) for inbox_id in due[:limit]]

    # -- messages ----------------------------------------------------------------

    async def save_message(self, incoming: Incoming) -> None:
        self._check()
        size = len(incoming.raw)
        if incoming.deliveries or incoming.caught_id:
            rcpts = (*(r for d in incoming.deliveries for r in d.rcpts), *incoming.unrouted)
            message = _Message(
                incoming.raw,
                size,
                incoming.summary,
                incoming.mail_from,
                incoming.received_at,
                pk=next(self._pks),
                rcpts=rcpts,
                auth_user=incoming.auth_user,
            )
            for d in incoming.deliveries:
                delivery = _Delivery(next(self._seq), d.message_id, d.inbox_id, message, d.rcpts)
                self._deliveries[d.message_id] = delivery
                self._by_inbox.setdefault(d.inbox_id, []).append(delivery)
                self._listing[d.message_id] = _Entry(
                    next(self._listing_seq), d.message_id, message, d.inbox_id, d.run_id, d.rcpts
                )
                self._record([accepted_event(d, incoming.received_at, size)])
            if incoming.caught_id:
                self._record_near_misses(incoming)
                entry = _Entry(
                    next(self._listing_seq),
                    incoming.caught_id,
                    message,
                    None,
                    None,
                    incoming.unrouted,
                    incoming.caught_until,
                )
                self._listing[entry.id] = self._caught[entry.id] = entry
        self._record(late_events(incoming.late, incoming.received_at, size))
        if self.webhooks.any:
            live = event_shapes.of_incoming(incoming, self._ids)
            self.webhooks.add(live, incoming.received_at)

    def _record_near_misses(self, incoming: Incoming) -> None:
        at = incoming.received_at
        for found in self._near.find(incoming.unrouted, at):
            seen = NearMiss(found.address, at, found.distance)
            self._near_misses.setdefault(found.inbox_id, []).append(seen)
            self._record([near_miss_event(found, at)])

    async def near_misses(self, inbox_id: str, limit: int) -> list[NearMiss]:
        self._check()
        # Since the inbox's evidence was last claimed: earlier ones were told before it.
        claimed = [d.claim.claimed_at for d in self._by_inbox.get(inbox_id, []) if d.claim]
        since = max(claimed, default=-1.0)
        recorded = [m for m in self._near_misses.get(inbox_id, []) if m.received_at > since]
        order = {id(m): n for n, m in enumerate(recorded)}
        newest = sorted(recorded, key=lambda m: (m.received_at, order[id(m)]), reverse=True)
        return newest[:limit]

    async def deliveries_after(self, inbox_id: str, after_seq: int, limit: int) -> list[Delivery]:
        self._check()
        rows = self._by_inbox.get(inbox_id, [])
        return [_delivery(d) for d in rows if d.seq > after_seq][:limit]

    async def delivery(self, message_id: str) -> Delivery | None:
        self._check()
        found = self._deliveries.get(message_id)
        return None if found is None else _delivery(found)

    async def raw(self, message_id: str) -> bytes | None:
        self._check()
        found = self._deliveries.get(message_id)
        if found is None or self._inboxes[found.inbox_id].inbox.released_at is not None:
            return None
        return found.message.raw

    async def message(self, message_id: str) -> StoredMessage | None:
        self._check()
        found = self._deliveries.get(message_id)
        if found is None:
            return None
        inbox = self._inboxes[found.inbox_id].inbox
        message = found.message
        return StoredMessage(
            delivery=_delivery(found),
            run_id=inbox.run_id,
            raw=message.raw if inbox.released_at is None else None,
            mail_from=message.mail_from,
            rcpts=found.rcpts,
            to=tuple(message.summary.to),
            cc=tuple(message.summary.cc),
            date=message.summary.date,
            released_at=inbox.released_at or message.released_at,
            analysis=message.analysis if inbox.released_at is None else None,
            auth_user=message.auth_user,
        )

    async def keep_analysis(
        self, message_id: str, analysis: str, replacing: str | None = None
    ) -> None:
        self._check()
        found = self._deliveries.get(message_id)
        message = found.message if found is not None else None
        if message is not None and message.raw is not None and message.analysis == replacing:
            message.analysis = analysis

    async def claim(self, delivery: Delivery, claim: Claim, after: Inbox) -> Claim:
        self._check()
        found = self._deliveries[claim.message_id]
        if found.claim is not None:
            return found.claim
        found.claim = claim
        row = self._inboxes[delivery.inbox_id]
        if row.inbox.state is not State.EXPIRED:
            if row.inbox.state is not State.RECEIVED:
                row.last_change_reason = "claimed"
            row.inbox = replace(
                row.inbox,
                state=State.RECEIVED,
                reason=None,
                cursor_seq=max(row.inbox.cursor_seq, delivery.seq),
            )
            row.evidence_message_id = claim.message_id
        self._record([claimed_event(claim, delivery.inbox_id)])
        return claim

    # -- release and retention ---------------------------------------------------

    async def release_run(self, run_id: str, now: float) -> list[str]:
        self._check()
        inboxes = [
            self._load(row.inbox.inbox_id)
            for row in self._inboxes.values()
            if row.inbox.run_id == run_id and row.inbox.released_at is None
        ]
        for inbox in inboxes:
            if inbox.effective(now).state is not State.EXPIRED:
                self._persist_expiry(inbox.expire(Reason.LEASE, now), 0, cause="released")
            else:
                self._persist_expiry(inbox.effective(now), 0)
        released = [i.inbox_id for i in inboxes]
        self._release(released, now)
        return released

    async def release_due(self, now: float, limit: int) -> int:
        self._check()
        due = sorted(
            (r for r in self._unreleased() if r.evidence_release_at <= now),
            key=lambda r: r.evidence_release_at,
        )
        return self._release_rows(due[:limit], now)

    async def release_oldest_expired(self, now: float, limit: int) -> int:
        self._check()
        over = sorted(
            (
                r
                for r in self._unreleased()
                if r.inbox.state is State.EXPIRED or r.inbox.expires_at <= now
            ),
            key=lambda r: r.inbox.expired_at or r.inbox.expires_at,
        )
        return self._release_rows(over[:limit], now)

    async def used_bytes(self) -> int:
        self._check()
        messages = {id(d.message): d.message for d in self._deliveries.values()}
        messages.update((id(e.message), e.message) for e in self._caught.values())
        return sum(m.size for m in messages.values() if m.raw is not None)

    # -- reports -----------------------------------------------------------------

    async def add_events(self, events: list[Event]) -> None:
        self._check()
        self._record(events)

    async def run_report(self, run_id: str) -> tuple[list[InboxReport], list[Event]]:
        self._check()
        rows = sorted(
            (r for r in self._inboxes.values() if r.inbox.run_id == run_id),
            key=lambda r: (r.inbox.created_at, r.inbox.inbox_id),
        )
        reports = []
        for row in rows:
            claimed = [d for d in self._by_inbox[row.inbox.inbox_id] if d.claim is not None]
            accepted = max(claimed, key=lambda d: _claimed_at(d), default=None)
            reports.append(
                InboxReport(
                    inbox=self._load(row.inbox.inbox_id),
                    accepted_message_id=accepted.message_id if accepted else None,
                    last_change_reason=row.last_change_reason,
                    evidence_release_at=row.inbox.released_at or row.evidence_release_at,
                )
            )
        order = {id(e): n for n, e in enumerate(self._events)}
        events = sorted(
            (e for e in self._events if e.run_id == run_id), key=lambda e: (e.at, order[id(e)])
        )
        return reports, events[:10_000]

    async def run_released_at(self, run_id: str) -> float | None:
        self._check()
        return self._release_at.get(run_id)

    async def signing_key(self) -> bytes:
        self._check()
        return self._signing_key

    # -- the run index (RunIndex: read-only views for the web UI) -------------------

    @property
    def runs(self) -> MemoryStore:
        """The run index (on the SQL stores an object of its own: here the store itself)."""
        return self

    @property
    def mail(self) -> MemoryStore:
        """The v2 mail ports (on the SQL stores an object of its own: here the store itself)."""
        return self

    async def recent_runs(
        self,
        now: float,
        limit: int,
        before: tuple[float, str] | None = None,
        run_contains: str | None = None,
        purpose: str | None = None,
    ) -> list[RunSummary]:
        self._check()
        by_run: dict[str, list[Inbox]] = {}
        for row in self._inboxes.values():
            by_run.setdefault(row.inbox.run_id, []).append(row.inbox)
        order = {id(e): n for n, e in enumerate(self._events)}
        last: dict[str, Event] = {}
        for event in self._events:
            known = last.get(event.run_id)
            if known is None or (event.at, order[id(event)]) >= (known.at, order[id(known)]):
                last[event.run_id] = event
        pages = []
        for run_id, inboxes in by_run.items():
            started = min(i.created_at for i in inboxes)
            if run_contains and run_contains.lower() not in run_id.lower():
                continue
            if purpose and all(i.purpose != purpose for i in inboxes):
                continue
            if before is not None and (started, run_id) >= before:
                continue
            pages.append((started, run_id))
        pages.sort(reverse=True)
        summaries = []
        for started, run_id in pages[:limit]:
            inboxes = by_run[run_id]
            states: dict[str, int] = {}
            for inbox in inboxes:
                state = "expired" if inbox.expires_at <= now else inbox.state.value
                states[state] = states.get(state, 0) + 1
            deliveries = [d for i in inboxes for d in self._by_inbox[i.inbox_id]]
            latest = last.get(run_id)
            summaries.append(
                RunSummary(
                    run_id=run_id,
                    started_at=started,
                    purposes=tuple(sorted({i.purpose for i in inboxes})),
                    states=states,
                    messages=len(deliveries),
                    claims=sum(1 for d in deliveries if d.claim is not None),
                    last_event=latest.type if latest else None,
                    last_event_at=latest.at if latest else None,
                )
            )
        return summaries

    async def run_deliveries(self, run_id: str, limit: int) -> list[Delivery]:
        """A run's deliveries, across its inboxes, newest first."""
        self._check()
        found = [
            d
            for row in self._inboxes.values()
            if row.inbox.run_id == run_id
            for d in self._by_inbox[row.inbox.inbox_id]
        ]
        found.sort(key=lambda d: d.seq, reverse=True)
        return [_delivery(d) for d in found[:limit]]

    # -- caught mail and search (v2) ----------------------------------------------

    async def caught_page(self, before: tuple[int, int] | None, limit: int) -> list[Listed]:
        self._check()
        return self._walk(lambda e: e.inbox_id is None, before, limit)

    async def caught_message(self, caught_id: str) -> CaughtMessage | None:
        self._check()
        entry = self._caught.get(caught_id)
        if entry is None:
            return None
        _document(entry.message)  # has_attachment is known from then on
        message = entry.message
        return CaughtMessage(
            self._listed(entry),
            message.raw,
            message.summary.date,
            entry.expires_at,
            auth_user=message.auth_user,
        )

    async def expire_caught(self, now: float, limit: int) -> int:
        self._check()
        due = sorted((e for e in self._caught.values() if e.expires_at <= now), key=_expiry)
        return self._delete_entries([e.id for e in due[:limit]], now)

    async def drop_oldest_caught(self, now: float, limit: int) -> int:
        self._check()
        return self._delete_entries(list(self._caught)[:limit], now)

    async def search(
        self,
        query: Query,
        run_scope: str | None,
        before: tuple[int, int] | None,
        limit: int,
        offset: int = 0,
    ) -> list[Listed]:
        self._check()
        return self._walk(lambda e: self._matches(e, query, run_scope), before, offset + limit)[
            offset:
        ]

    async def count(self, query: Query, run_scope: str | None, cap: int) -> int:
        self._check()
        return len(self._walk(lambda e: self._matches(e, query, run_scope), None, cap))

    async def listed(self, entry_id: str) -> Listed | None:
        self._check()
        entry = self._listing.get(entry_id)
        if entry is None:
            return None
        _document(entry.message)
        return self._listed(entry)

    async def listed_raw(self, entry_id: str) -> bytes | None:
        self._check()
        entry = self._listing.get(entry_id)
        if entry is None or self._released(entry):
            return None
        return entry.message.raw

    async def delete_listed(self, ids: list[str] | None, now: float) -> Deleted:
        self._check()
        if ids is None:
            gone = [e.id for e in self._listing.values() if not self._live(e, now)]
            return Deleted(self._delete_entries(gone, now))
        live = tuple(i for i in ids if i in self._listing and self._live(self._listing[i], now))
        if live:
            return Deleted(0, live)
        return Deleted(self._delete_entries(ids, now))

    def _walk(
        self, wanted: Callable[[_Entry], bool], before: tuple[int, int] | None, limit: int
    ) -> list[Listed]:
        """Newest first, strictly before a position, up to ``limit`` entries."""
        found: list[Listed] = []
        for entry in reversed(self._listing.values()):
            if len(found) >= limit:
                break
            if (before is None or entry.seq < before[1]) and wanted(entry):
                found.append(self._listed(entry))
        return found

    def _matches(self, entry: _Entry, query: Query, run_scope: str | None) -> bool:
        if run_scope is not None and entry.run_id != run_scope:
            return False
        for item in query.filters:
            if self._passes(entry, item.kind, item.value) == item.negated:
                return False
        if not query.texts:
            return True
        return texts_match(query.texts, _document(entry.message), self._released(entry))

    def _passes(self, entry: _Entry, kind: str, value: str | float | int) -> bool:
        message = entry.message
        if kind == "run":
            return entry.run_id == value
        if kind == "inbox":
            return entry.inbox_id == value
        if kind == "is":
            claimed = self._claimed(entry)
            return {
                "caught": entry.inbox_id is None,
                "claimed": claimed,
                "unclaimed": entry.inbox_id is not None and not claimed,
            }[str(value)]
        if kind == "has":
            _document(message)
            return message.has_attachment
        return {
            "before": lambda: message.received_at < float(value),
            "after": lambda: message.received_at > float(value),
            "larger": lambda: message.size > int(value),
            "smaller": lambda: message.size < int(value),
        }[kind]()

    def _claimed(self, entry: _Entry) -> bool:
        delivery = self._deliveries.get(entry.id) if entry.inbox_id is not None else None
        return delivery is not None and delivery.claim is not None

    def _released(self, entry: _Entry) -> bool:
        inbox = self._inboxes[entry.inbox_id].inbox if entry.inbox_id is not None else None
        return entry.message.raw is None or (inbox is not None and inbox.released_at is not None)

    def _live(self, entry: _Entry, now: float) -> bool:
        if entry.inbox_id is None:
            return False
        inbox = self._inboxes[entry.inbox_id].inbox
        return (
            inbox.state is not State.EXPIRED
            and inbox.expires_at > now
            and (inbox.released_at is None)
        )

    def _listed(self, entry: _Entry) -> Listed:
        message, s = entry.message, entry.message.summary
        return Listed(
            id=entry.id,
            position=(message.pk, entry.seq),
            caught=entry.inbox_id is None,
            inbox_id=entry.inbox_id,
            run_id=entry.run_id,
            subject=s.subject,
            from_addr=s.from_addr,
            to=tuple(s.to),
            cc=tuple(s.cc),
            mail_from=message.mail_from,
            rcpts=entry.rcpts,
            received_at=message.received_at,
            size=message.size,
            has_attachment=message.has_attachment,
            claimed=self._claimed(entry),
            released=self._released(entry),
        )

    def _delete_entries(self, ids: list[str], now: float) -> int:
        """Take entries off the listing (caught mail off the store); unneeded bodies go."""
        gone = [e for e in (self._listing.pop(i, None) for i in dict.fromkeys(ids)) if e]
        for entry in gone:
            self._caught.pop(entry.id, None)
        for message in {id(e.message): e.message for e in gone}.values():
            if message.raw is not None and not self._needed(message):
                message.raw = None
                message.analysis = None
                message.released_at = now
        return len(gone)

    def _needed(self, message: _Message) -> bool:
        """Caught mail, or a listed delivery of an unreleased inbox, still needs the body."""
        if any(e.message is message for e in self._caught.values()):
            return True
        return any(
            d.message is message
            and d.message_id in self._listing
            and self._inboxes[d.inbox_id].inbox.released_at is None
            for d in self._deliveries.values()
        )

    # -- rows --------------------------------------------------------------------

    def _record(self, events: list[Event]) -> None:
        """Keep run events (the run report's), announce them (the memory's commit is the write
        itself), and queue their webhook deliveries with them, under the same ids."""
        if not events:
            return
        self._events.extend(events)
        for event in events:
            if event.type == RUN_RELEASED:
                last = self._release_at.get(event.run_id, event.at)
                self._release_at[event.run_id] = max(last, event.at)
        stored = [replace(e, seq=next(self._event_rows)) for e in events]
        if self._on_events is not None:
            self._on_events(stored)
        if self.webhooks.any:
            self.webhooks.add(event_shapes.of_events(stored, self._ids), events[0].at)

    def _check(self) -> None:
        if not self._open:
            raise StorageError("the store is closed")

    def _load(self, inbox_id: str) -> Inbox:
        row = self._inboxes[inbox_id]
        found = self._deliveries.get(row.evidence_message_id or "")
        if found is None:
            return row.inbox  # stored with evidence=None
        evidence = Evidence(
            found.message_id,
            found.seq,
            found.message.summary.subject,
            found.message.summary.from_addr,
            found.message.received_at,
            found.claim,
        )
        return replace(row.inbox, evidence=evidence)

    def _count(self, run_id: str, purpose: str) -> int:
        wanted = (run_id, purpose)
        return sum(1 for r in self._inboxes.values() if (r.inbox.run_id, r.inbox.purpose) == wanted)

    def _unreleased(self) -> list[_Inbox]:
        return [r for r in self._inboxes.values() if r.inbox.released_at is None]

    def _persist_expiry(self, inbox: Inbox, retention_s: int, cause: str | None = None) -> None:
        if inbox.state is not State.EXPIRED:
            return
        row = self._inboxes[inbox.inbox_id]
        if row.inbox.state is State.EXPIRED:
            return
        at = inbox.expired_at if inbox.expired_at is not None else inbox.expires_at
        row.inbox = replace(row.inbox, state=State.EXPIRED, reason=inbox.reason, expired_at=at)
        row.evidence_release_at = min(
            row.evidence_release_at, at + retention_s if retention_s else _NEVER
        )
        row.last_change_reason = cause or inbox.reason
        self._record([expired_event(inbox, cause)])
        self._near.remove([inbox.inbox_id])

    def _release_rows(self, rows: list[_Inbox], now: float) -> int:
        inboxes = [self._load(r.inbox.inbox_id) for r in rows]
        for inbox in inboxes:
            self._persist_expiry(inbox.effective(now), 0)
        self._release([i.inbox_id for i in inboxes], now)
        return len(inboxes)

    def _release(self, inbox_ids: list[str], now: float) -> None:
        for inbox_id in inbox_ids:
            row = self._inboxes[inbox_id]
            if row.inbox.released_at is not None:
                continue
            row.inbox = replace(row.inbox, released_at=now)
            row.evidence_release_at = now
        for inbox_id in inbox_ids:
            for delivery in self._by_inbox[inbox_id]:
                message = delivery.message
                # A message stored once for several inboxes (and caught mail) keeps its body
                # until every one is released.
                if message.raw is not None and not self._needed(message):
                    message.raw = None
                    message.analysis = None
                    message.released_at = now
            run_id = self._inboxes[inbox_id].inbox.run_id
            self._record([Event(run_id=run_id, type="released", at=now, inbox_id=inbox_id)])


def _expiry(entry: _Entry) -> float:
    return entry.expires_at


def _delivery(d: _Delivery) -> Delivery:
    return Delivery(
        seq=d.seq,
        message_id=d.message_id,
        inbox_id=d.inbox_id,
        subject=d.message.summary.subject,
        from_addr=d.message.summary.from_addr,
        received_at=d.message.received_at,
        size=d.message.size,
        claim=d.claim,
    )


def _claimed_at(d: _Delivery) -> float:
    return d.claim.claimed_at if d.claim is not None else 0.0


def _document(message: _Message) -> dict[str, str]:
    """The search text of a message (made once; a released body's text is not searched)."""
    if message.document is None:
        s = message.summary
        if message.raw is not None:
            found = search_fields(message.raw)
            sender, recipients = found.sender, found.recipients
            message.document = {"subject": found.subject, "body": found.body}
            message.has_attachment = found.has_attachment
        else:
            sender, recipients = s.from_addr, ""
            message.document = {"subject": s.subject, "body": ""}
        message.document["sender"] = f"{sender} {message.mail_from}"
        message.document["rcpts"] = f"{recipients} {' '.join(message.rcpts)}"
    if message.raw is None:
        return {**message.document, "body": ""}
    return message.document


def memory_backend(settings: Settings | None = None, hub: Announced | None = None) -> Backend:
    """A backend over dicts, for tests: ``Runtime(settings, memory_backend)``."""
    store = MemoryStore(hub.record if hub is not None else None)
    return Backend(
        name="memory", store=store, mail=store.mail, webhooks=store.webhooks, runs=store.runs
    )
