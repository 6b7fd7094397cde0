"""The agent-side operations: create, get, wait, read, claim, and the run's report.

The HTTP API and the MCP tools both call this class, so the semantics are the
same everywhere. Every call checks, in the contract's order: input, ownership,
expiry, circuit breaker, too early, budget, provider. The breaker's bookkeeping is
``Guard.attempt``'s (``sink/guard.py``); the long-poll's mechanics are
``LongPolls.look``'s (``sink/longpoll.py``); the rules are the pure core's
(``sink/inbox.py``, ``sink/envelope.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, TypeVar

from sink import ids, run_tokens
from sink.breaker import BreakerKey
from sink.clock import Clock, SystemClock, rfc3339_or_none
from sink.config import Settings
from sink.envelope import (
    Envelope,
    Unmatched,
    already_claimed,
    blocked,
    describe,
    lease_expired,
    provider_trouble,
)
from sink.errors import (
    CircuitOpen,
    EvidenceReleased,
    ForbiddenScope,
    IdempotencyKeyConflict,
    InvalidCursor,
    NotFound,
    OwnershipRefused,
    PolicyForbids,
    ProviderTrouble,
    UnknownPolicy,
)
from sink.evidence import SHOWN, EvidenceFacts
from sink.guard import Guard
from sink.guidance import Call, Known, guide, needs_inbox_count, needs_mail_check
from sink.inbox import (
    Claim,
    Delivery,
    GateKind,
    Inbox,
    Match,
    after_claim,
    after_poll,
    wait_gate,
)
from sink.lastknown import LastKnown
from sink.logs import log
from sink.longpoll import Ending, LongPolls, Look
from sink.message import Analysis, ParsedMessage, parse
from sink.metrics import Metrics
from sink.policy import Policy
from sink.storage.base import (
    CreateOutcome,
    Event,
    InboxReport,
    NewInbox,
    PollSlots,
    Store,
    StoredMessage,
)
from sink.vocabulary import NextAction, Reason, State, Status, Tool
from sink.waiters import Waiters

T = TypeVar("T")

# The store could not be read at all: retry this soon (the database may be back in a moment;
# a second is what a 503 with Retry-After says too).
UNREADABLE_RETRY_S = 1.0
# The evidence facts of an answer (sink/evidence.py) are left out past this: the answer
# itself matters more.
_FACTS_WITHIN_S = 2.0
# Two times this close are one instant (a wait's deadline computed as start + (lease - start)
# may differ from the lease in its last bits).
_SAME_INSTANT_S = 1e-6


@dataclass(frozen=True, slots=True)
class CreateRequest:
    run_id: str
    purpose: str
    ttl_s: int | None = None
    poll_budget: int | None = None
    policy: str | None = None
    match: Match = field(default_factory=Match)


@dataclass(frozen=True, slots=True)
class WaitRequest:
    timeout_s: float | None = None  # None: the policy's long_poll_max_s
    cursor: str | None = None
    match: Match | None = None
    run_id: str | None = None
    # v3: "newest" returns the newest unclaimed match beyond the cursor (a resend's valid
    # code), passing the older ones over; "oldest" is v1's order.
    order: str = "oldest"


@dataclass(frozen=True, slots=True)
class Created:
    envelope: Envelope
    replayed: bool
    capped: tuple[str, ...] = ()  # the request's fields the policy lowered (ttl_s, poll_budget)


@dataclass(frozen=True, slots=True)
class ReadResult:
    stored: StoredMessage
    parsed: ParsedMessage | None  # None once released
    trace_id: str  # the inbox's: an answer continues it when the caller sent no trace
    withheld: bool = False  # an agent asked, under agent_body = "never": no bodies, no headers


@dataclass(frozen=True, slots=True)
class RawMessage:
    raw: bytes
    trace_id: str  # the inbox's, as above
    run_id: str
    inbox_id: str


@dataclass(frozen=True, slots=True)
class MessagePage:
    messages: list[Delivery]
    next_cursor: str
    has_more: bool
    trace_id: str  # the inbox's, as above


@dataclass(frozen=True, slots=True)
class RunReport:
    run_id: str
    inboxes: list[InboxReport]
    events: list[Event]


class Agent:
    def __init__(
        self,
        store: Store,
        waiters: Waiters,
        settings: Settings,
        guard: Guard,
        metrics: Metrics,
        clock: Clock | None = None,
        new_ids: ids.Ids = ids.RANDOM,
        poll_slots: PollSlots | None = None,
    ) -> None:
        self._store = store
        self._waiters = waiters
        self._settings = settings
        self._guard = guard
        self._metrics = metrics
        self._clock = clock or SystemClock()
        self._ids = new_ids
        self._polls = LongPolls(store, waiters, self._clock, metrics)
        self._facts = EvidenceFacts(store, self._polls)
        # Replicas sharing a database share each inbox's one wait in progress there.
        self._slots = poll_slots
        # What this process last knew of each inbox: the "unchanged" state of a provider-
        # trouble answer when the store cannot even be read (PostgreSQL down).
        self._known = LastKnown()

    # -- create / get ------------------------------------------------------------

    async def create(
        self, request: CreateRequest, body: dict[str, Any], key: str | None, trace: str | None
    ) -> Created:
        policy_name = request.policy or self._settings.default_policy
        if policy_name not in self._settings.policies:
            raise UnknownPolicy(
                f"unknown policy {policy_name!r}",
                {"known": sorted(self._settings.policies)},
            )
        policy = self._settings.policy(policy_name)
        now = self._clock.now()
        local_part = self._ids.local_part()
        created_with = json.dumps(body, sort_keys=True, separators=(",", ":"))
        inbox = Inbox.fresh(
            inbox_id=self._ids.inbox_id(),
            run_id=request.run_id,
            purpose=request.purpose,
            address=f"{local_part}@{self._settings.domain}",
            policy_name=policy_name,
            now=now,
            ttl_s=policy.ttl(request.ttl_s),
            poll_budget=policy.budget(request.poll_budget),
            match=request.match,
            trace_id=trace or self._ids.trace_id(),
            created_with=created_with,
        )
        idempotency_key = key or f"{request.purpose}:{request.run_id}"
        new = NewInbox(
            inbox=inbox,
            local_part=local_part,
            idempotency_key=idempotency_key,
            request_json=replay_key(body),
            inboxes_per_purpose=policy.inboxes_per_purpose,
            retention_s=policy.retention_s,
        )
        created_event = Event(
            run_id=inbox.run_id,
            type="created",
            at=now,
            inbox_id=inbox.inbox_id,
            detail={
                "purpose": inbox.purpose,
                "policy": policy_name,
                "ttl_s": policy.ttl(request.ttl_s),
            },
        )
        result = await self._store.create_inbox(new, created_event)
        if result.outcome == CreateOutcome.CONFLICT:
            raise _conflict(request, key)
        if result.outcome == CreateOutcome.FORBIDDEN:
            raise PolicyForbids(
                f"policy {policy_name!r} allows {policy.inboxes_per_purpose} inbox(es) per purpose "
                f"for a run; run {request.run_id!r} has {result.count} for {request.purpose!r}",
                {"inboxes_per_purpose": policy.inboxes_per_purpose, "used": result.count},
            )
        assert result.inbox is not None
        stored = result.inbox
        replayed = result.outcome == CreateOutcome.REPLAYED
        trace_id = trace or stored.trace_id
        if not replayed:
            self._metrics.inbox_created(policy_name)
        log(
            "inbox_replayed" if replayed else "inbox_created",
            run_id=stored.run_id,
            inbox_id=stored.inbox_id,
            trace_id=trace_id,
        )
        capped = policy.capped(request.ttl_s, request.poll_budget)
        # A create answer tells no near misses (only wait and get answers do).
        described = await self._describe(stored, now, trace_id)
        envelope = replace(described, replayed=replayed, near_misses=())
        envelope = await self._guided(envelope, Call(Tool.CREATE_INBOX, body), stored)
        return Created(envelope, replayed, capped)

    async def get(self, inbox_id: str, trace: str | None, run_id: str | None = None) -> Envelope:
        try:
            envelope = await self._get(inbox_id, trace, run_id)
        except ProviderTrouble as exc:
            envelope = self._unreadable(exc, "get", self._known.inbox(inbox_id), run_id, trace)
        # GET has no tool of its own: a wait is what an agent calls to see the inbox.
        return await self._guided(envelope, wait_call(inbox_id, WaitRequest(run_id=run_id)))

    async def _get(self, inbox_id: str, trace: str | None, run_id: str | None) -> Envelope:
        inbox = await self._load(inbox_id)
        if run_id is not None and run_id != inbox.run_id:
            # Refused like any call naming the wrong run (GET has no breaker of its own).
            raise OwnershipRefused("wrong_run", f"run {run_id!r} does not own this inbox")
        return await self._describe(inbox, self._clock.now(), trace or inbox.trace_id)

    # -- wait ----------------------------------------------------------------------

    async def wait(self, inbox_id: str, request: WaitRequest, trace: str | None) -> Envelope:
        cursor_seq = None if request.cursor is None else ids.decode_cursor(inbox_id, request.cursor)
        try:
            envelope = await self._wait(inbox_id, cursor_seq, request, trace)
        except ProviderTrouble as exc:
            known = self._known.inbox(inbox_id)
            envelope = self._unreadable(exc, "wait", known, request.run_id, trace)
        return await self._guided(envelope, wait_call(inbox_id, request), scanned=True)

    async def _wait(
        self, inbox_id: str, cursor_seq: int | None, request: WaitRequest, trace: str | None
    ) -> Envelope:
        inbox = await self._load(inbox_id)
        if cursor_seq is not None:
            await self._check_reached(inbox, cursor_seq)
        policy = self._policy(inbox)
        trace_id = trace or inbox.trace_id
        await self._check_owner(request.run_id, inbox, "wait", policy)
        started = self._clock.now()
        current = inbox.effective(started)
        if current.state is State.EXPIRED:
            return await self._expired(inbox, current, policy, started, trace_id)

        key = BreakerKey(inbox.run_id, inbox.inbox_id, "wait")
        slot_until: float | None = None  # the fleet-wide wait slot this wait holds, if any
        try:
            async with self._guard.attempt(key, policy, at=started) as attempt:
                if attempt.refused:
                    self._metrics.blocked("wait", "circuit_open")
                    view = await self._describe(inbox, started, trace_id, facts=False)
                    return blocked(view, Reason.CIRCUIT_OPEN, attempt.retry_after)
                gate = wait_gate(inbox, started)
                busy_until = self._polls.busy_until(inbox_id)
                if gate.kind is GateKind.TOO_EARLY or busy_until is not None:
                    retry_after = gate.retry_after or max(0.1, (busy_until or started) - started)
                    self._metrics.blocked("wait", "too_early")
                    view = await self._describe(inbox, started, trace_id)
                    return blocked(view, Reason.TOO_EARLY, retry_after)
                if gate.kind is GateKind.REPEAT_RECEIVED:
                    return await self._describe(inbox, started, trace_id)
                if gate.kind is GateKind.OUT_OF_BUDGET:
                    expired = inbox.expire(Reason.TIMEOUT, started)
                    return await self._expired(inbox, expired, policy, started, trace_id)

                # A half-open probe is a short look: one scan, no long-poll, so the breaker
                # learns at once whether the provider answers.
                timeout_s = request.timeout_s
                if timeout_s is None:  # omitted: as long as the policy lets a wait last
                    timeout_s = policy.long_poll_max_s
                if attempt.probe:
                    timeout_s = 0.0
                deadline = started + max(
                    0.0, min(timeout_s, policy.long_poll_max_s, inbox.expires_at - started)
                )
                match = request.match if request.match is not None else inbox.match
                position = inbox.cursor_seq if cursor_seq is None else cursor_seq
                if self._slots is not None:
                    # partial, not a lambda: a closure would make cells of these locals for
                    # the whole of every wait (thousands of them parked at once).
                    until = deadline + policy.provider_deadline_s
                    retry_at = await attempt.call(
                        partial(self._slots.take_poll_slot, inbox, started, until)
                    )
                    if retry_at is not None:  # a wait on another replica holds the inbox
                        self._metrics.blocked("wait", "too_early")
                        view = await self._describe(inbox, started, trace_id)
                        # The slot outlives its wait by the provider deadline (a replica that
                        # died with it); the time left in that wait is what the caller needs.
                        left = retry_at - policy.provider_deadline_s - started
                        return blocked(view, Reason.TOO_EARLY, max(0.1, left))
                    slot_until = until
                newest = request.order == "newest"
                look = await self._polls.look(inbox, match, position, deadline, attempt, newest)
                if look.ending is Ending.ENDED:
                    # Released (or swept) while we waited: answer as the store has it now.
                    latest = await self._load(inbox_id)
                    return await self._describe(latest, look.ended_at, trace_id)
                if look.ending is Ending.CLOSING:
                    # Shutting down: answer with the current envelope; this wait spends nothing.
                    return await self._describe(inbox, look.ended_at, trace_id)
                scan = look.scan
                if scan.found is None and not scan.mismatched:
                    # Nothing arrived; caught mail that nearly did says why (near misses).
                    scan = replace(scan, misaddressed=await self._near_missed(inbox_id))
                after = after_poll(inbox, policy, scan, started, look.ended_at)
                event = _polled_event(inbox, after, look, started)
                saved = await attempt.call(partial(self._store.save_poll, inbox, after, event))
                if saved:
                    slot_until = None  # a recorded poll frees the slot in the same write
                else:
                    # Another poll, a release or the sweeper got there first: answer as of now.
                    latest = await self._load(inbox_id)
                    return await self._describe(latest, look.ended_at, trace_id)
        except ProviderTrouble as exc:
            return await self._provider_trouble(exc, key, inbox, started, trace_id)
        finally:
            if slot_until is not None:
                # Recorded polls free it themselves; anything else gives it back here.
                await self._free_slot(inbox_id, slot_until)
        found = look.scan.found
        self._metrics.polled(inbox, after, found is not None)
        if after.state is State.EXPIRED and inbox.state is not State.EXPIRED:
            self._metrics.expired(after.reason or "timeout")  # its last poll, without evidence
        log(
            "polled",
            run_id=inbox.run_id,
            inbox_id=inbox.inbox_id,
            message_id=found.message_id if found else None,
            trace_id=trace_id,
            outcome=event.detail["outcome"],
            attempt=after.polls_used,
            latency_ms=after.last_poll_latency_ms,
        )
        answered_at = look.ended_at
        if found is None and deadline >= inbox.expires_at - _SAME_INSTANT_S:
            # The lease capped this wait and ran out with it (the loop's timer may fire a
            # moment early): the answer is the expiry, not a "wait again" with no time left.
            answered_at = max(answered_at, inbox.expires_at)
        return await self._describe(after, answered_at, trace_id)

    async def _free_slot(self, inbox_id: str, until: float) -> None:
        """Hand a wait slot back (best effort: it lapses at ``until`` anyway)."""
        if self._slots is not None:
            await self._best_effort(self._slots.free_poll_slot(inbox_id, until))

    # -- claim -----------------------------------------------------------------------

    async def claim(self, message_id: str, run_id: str, trace: str | None) -> Envelope:
        try:
            envelope = await self._claim(message_id, run_id, trace)
        except ProviderTrouble as exc:
            known = self._known.inbox_of(message_id)
            envelope = self._unreadable(exc, "claim", known, run_id, trace)
        return await self._guided(envelope, claim_call(message_id, run_id))

    async def _claim(self, message_id: str, run_id: str, trace: str | None) -> Envelope:
        delivery = await self._delivery(message_id)
        inbox = await self._load(delivery.inbox_id)
        policy = self._policy(inbox)
        trace_id = trace or inbox.trace_id
        now = self._clock.now()
        if delivery.claim is not None:
            return await self._claimed_before(
                inbox, delivery, delivery.claim, run_id, now, trace_id
            )
        await self._check_owner(run_id, inbox, "claim", policy)
        current = inbox.effective(now)
        if current.state is State.EXPIRED:
            await self._persist_expiry(inbox, current, policy)
            self._metrics.claim("lease_expired")
            view = await self._describe(current, now, trace_id)
            return lease_expired(view, await self._can_create_another(inbox, policy))

        key = BreakerKey(inbox.run_id, inbox.inbox_id, "claim")
        claim = Claim(self._ids.claim_id(), message_id, run_id, now)
        after = after_claim(inbox, delivery, claim)
        try:
            async with self._guard.attempt(key, policy, at=now) as attempt:
                if attempt.refused:
                    self._metrics.blocked("claim", "circuit_open")
                    view = await self._describe(inbox, now, trace_id, facts=False)
                    return blocked(view, Reason.CIRCUIT_OPEN, attempt.retry_after)
                standing = await attempt.call(lambda: self._store.claim(delivery, claim, after))
        except ProviderTrouble as exc:
            return await self._provider_trouble(exc, key, inbox, now, trace_id)
        if standing.claim_id != claim.claim_id:
            # Lost a race: someone claimed it between our read and our write.
            return await self._claimed_before(inbox, delivery, standing, run_id, now, trace_id)
        self._metrics.claim("claimed")
        if inbox.last_error is not None:  # the provider answered this claim
            await self._best_effort(self._store.set_last_error(inbox.inbox_id, None))
        log(
            "claimed",
            run_id=run_id,
            inbox_id=inbox.inbox_id,
            message_id=message_id,
            trace_id=trace_id,
        )
        return await self._describe(after_claim(inbox, delivery, standing), now, trace_id)

    async def _claimed_before(
        self,
        inbox: Inbox,
        delivery: Delivery,
        standing: Claim,
        run_id: str,
        now: float,
        trace_id: str,
    ) -> Envelope:
        """The message was claimed already: by this run (a replay), or by another (refused)."""
        if standing.run_id != run_id:
            self._metrics.claim("claimed_by_other_run")
            raise OwnershipRefused(
                "claimed_by_other_run",
                f"message {delivery.message_id} was claimed by another run",
            )
        self._metrics.claim("already_claimed")
        claimed = replace(delivery, claim=standing)
        current = inbox.effective(now)
        state = State.EXPIRED if current.state is State.EXPIRED else State.RECEIVED
        shown = replace(current, state=State.RECEIVED, evidence=claimed.as_evidence())
        view = describe(shown, now, False, trace_id)
        view = replace(view, state=state, status=Status.COMPLETED, next_action=NextAction.PROCEED)
        return already_claimed(await self._with_facts(view, shown, now))

    async def _provider_trouble(
        self, exc: ProviderTrouble, key: BreakerKey, inbox: Inbox, now: float, trace_id: str
    ) -> Envelope:
        """The provider failed an envelope call (the guard counted it): nothing spent, retry."""
        operation = key.operation
        self._metrics.provider_failure(operation, exc.reason)
        log(
            "provider_trouble",
            run_id=inbox.run_id,
            inbox_id=inbox.inbox_id,
            trace_id=trace_id,
            operation=operation,
            reason=exc.reason,
        )
        await self._best_effort(self._store.set_last_error(inbox.inbox_id, exc.reason))
        view = await self._describe(
            replace(inbox, last_error=exc.reason), now, trace_id, facts=False
        )
        cooldown = await self._guard.cooldown_left(key)
        return provider_trouble(view, exc.reason, cooldown or 1.0)

    def _unreadable(
        self,
        exc: ProviderTrouble,
        operation: str,
        known: Inbox | None,
        run_id: str | None,
        trace: str | None,
    ) -> Envelope:
        """The store failed before the inbox could be read (PostgreSQL down): provider
        trouble with the state unchanged, i.e. as this process last knew it. Without that
        (an inbox this process never saw) the error goes on to its 503 answer, which tells
        the caller the same: wait ``retry_after``, then retry."""
        if isinstance(exc, CircuitOpen) or known is None:
            raise exc
        if run_id is not None and run_id != known.run_id:
            raise OwnershipRefused(
                "wrong_run", f"run {run_id!r} does not own this {_noun(operation)}"
            )
        self._metrics.provider_failure(operation, exc.reason)
        trace_id = trace or known.trace_id
        log(
            "provider_trouble",
            run_id=known.run_id,
            inbox_id=known.inbox_id,
            trace_id=trace_id,
            operation=operation,
            reason=exc.reason,
            last_known=True,
        )
        view = describe(known, self._clock.now(), False, trace_id)
        return provider_trouble(view, exc.reason, UNREADABLE_RETRY_S)

    # -- read --------------------------------------------------------------------

    async def read(
        self, message_id: str, run_id: str | None, trace: str | None, agent: bool = False
    ) -> ReadResult:
        """The message; for an ``agent`` (an MCP caller, a minted run token) under a policy
        with ``agent_body = "never"``, marked ``withheld``: the evidence without bodies."""
        stored, inbox = await self._readable(message_id, run_id)
        withheld = agent and self._policy(inbox).agent_body == "never"
        if stored.raw is None:
            return ReadResult(stored, None, inbox.trace_id, withheld)
        kept = Analysis.from_json(stored.analysis)
        parsed = await asyncio.to_thread(parse, stored.raw, kept)
        if kept is None:  # the first read works it out; every later one reads it back
            analysis = Analysis.of(parsed).to_json()
            # in place of one of an older version (stored.analysis), or where none is kept
            keep = self._store.keep_analysis(message_id, analysis, stored.analysis)
            await self._best_effort(keep)
        log(
            "message_read",
            run_id=inbox.run_id,
            inbox_id=inbox.inbox_id,
            message_id=message_id,
            trace_id=trace or inbox.trace_id,
        )
        return ReadResult(stored, parsed, inbox.trace_id, withheld)

    async def raw(self, message_id: str, run_id: str | None, agent: bool = False) -> RawMessage:
        """The bytes received; refused to an ``agent`` under ``agent_body = "never"``."""
        stored, inbox = await self._readable(message_id, run_id)
        policy = self._policy(inbox)
        if agent and policy.agent_body == "never":
            raise ForbiddenScope(
                f"policy {policy.name!r} gives agents the extracted evidence only "
                "(agent_body = never): raw bytes need a read or admin token",
                "read",
            )
        if stored.raw is None:
            raise EvidenceReleased(
                f"message {message_id}: its body was released; only metadata is left",
                {"released_at": rfc3339_or_none(stored.released_at)},
            )
        return RawMessage(stored.raw, inbox.trace_id, inbox.run_id, inbox.inbox_id)

    async def _readable(self, message_id: str, run_id: str | None) -> tuple[StoredMessage, Inbox]:
        """A message the caller may read: ownership, then the read breaker and faults (a
        refusal is a 503 error, not an envelope)."""
        stored = await self._stored(message_id)
        inbox = await self._load(stored.delivery.inbox_id)
        policy = self._policy(inbox)
        await self._check_owner(run_id, inbox, "read", policy)
        key = BreakerKey(inbox.run_id, inbox.inbox_id, "read")
        try:
            async with self._guard.attempt(key, policy) as attempt:
                if attempt.refused:
                    self._metrics.blocked("read", "circuit_open")
                    raise CircuitOpen(
                        "the read circuit for this inbox is open", attempt.retry_after
                    )
                await attempt.call(_nothing)
        except CircuitOpen:
            raise
        except ProviderTrouble as exc:
            self._metrics.provider_failure("read", exc.reason)
            await self._best_effort(self._store.set_last_error(inbox.inbox_id, exc.reason))
            raise
        if inbox.last_error is not None:  # the provider answered this read
            await self._best_effort(self._store.set_last_error(inbox.inbox_id, None))
        return stored, inbox

    async def messages(
        self, inbox_id: str, after: str | None, limit: int, run_id: str | None
    ) -> MessagePage:
        position = 0 if after is None else ids.decode_cursor(inbox_id, after)
        inbox = await self._load(inbox_id)
        await self._check_reached(inbox, position)
        await self._check_owner(run_id, inbox, "read", self._policy(inbox))
        rows = await self._store.deliveries_after(inbox_id, position, limit + 1)
        page = rows[:limit]
        for delivery in page:  # a claim of one of them can be answered if the store fails
            self._known.saw_message(delivery.message_id, inbox_id)
        last = page[-1].seq if page else position
        return MessagePage(
            page, ids.encode_cursor(inbox_id, last), len(rows) > limit, inbox.trace_id
        )

    # -- runs ----------------------------------------------------------------------

    async def run_report(self, run_id: str) -> RunReport:
        inboxes, events = await self._store.run_report(run_id)
        if not inboxes and not events:
            raise NotFound(f"no run {run_id!r} on this server")
        now = self._clock.now()
        return RunReport(
            run_id, [replace(r, inbox=r.inbox.effective(now)) for r in inboxes], events
        )

    async def release(self, run_id: str, trace: str | None) -> None:
        now = self._clock.now()
        # Recorded first: should the release fail half-way, the run's tokens have already
        # ended (and the caller, told of the failure, releases again).
        await self._store.add_events([run_tokens.release_event(run_id, now)])
        released = await self._store.release_run(run_id, now)
        self._waiters.end(released)
        self._polls.forget_bodies()
        log("run_released", run_id=run_id, trace_id=trace, inboxes=len(released))

    # -- helpers -------------------------------------------------------------------

    async def _check_reached(self, inbox: Inbox, position: int) -> None:
        """``InvalidCursor`` for a position past the inbox's last delivery: every cursor we
        issue is at or before it (its creation, a delivery, or just before one), and a made-up
        one beyond would make every later delivery look already seen. A position at or
        before the stored cursor was reached: no store call."""
        if position <= inbox.cursor_seq:
            return
        if not await self._store.deliveries_after(inbox.inbox_id, position - 1, 1):
            raise InvalidCursor(ids.NOT_ISSUED)

    async def _check_owner(
        self, run_id: str | None, inbox: Inbox, operation: str, policy: Policy
    ) -> None:
        if run_id is None or run_id == inbox.run_id:
            return
        # An ownership fault counts against the run the caller named.
        await self._guard.failure(
            BreakerKey(run_id, inbox.inbox_id, operation), policy, "wrong_run"
        )
        if operation == "claim":
            self._metrics.claim("wrong_run")
        raise OwnershipRefused("wrong_run", f"run {run_id!r} does not own this {_noun(operation)}")

    def _policy(self, inbox: Inbox) -> Policy:
        return self._settings.policy(inbox.policy_name)

    async def _load(self, inbox_id: str) -> Inbox:
        inbox = await self._store.load_inbox(inbox_id)
        if inbox is None:
            raise NotFound(f"no inbox {inbox_id!r}")
        self._known.saw(inbox)
        return inbox

    async def _delivery(self, message_id: str) -> Delivery:
        delivery = await self._store.delivery(message_id)
        if delivery is None:
            raise NotFound(f"no message {message_id!r}")
        return delivery

    async def _stored(self, message_id: str) -> StoredMessage:
        stored = await self._store.message(message_id)
        if stored is None:
            raise NotFound(f"no message {message_id!r}")
        return stored

    async def _describe(
        self, inbox: Inbox, now: float, trace_id: str, facts: bool = True
    ) -> Envelope:
        """The envelope as of ``now``; with ``facts`` (not when the provider is the trouble),
        what the store knows beyond it: resends, a mismatch's mail, near misses."""
        self._known.saw(inbox)
        current = inbox.effective(now)
        can_create = False
        if current.state is State.EXPIRED:
            can_create = await self._can_create_another(inbox, self._policy(inbox))
        view = describe(current, now, can_create, trace_id)
        return await self._with_facts(view, current, now) if facts else view

    async def _with_facts(self, view: Envelope, inbox: Inbox, now: float) -> Envelope:
        """``newer_matching`` with a message; ``unmatched`` and ``rescan_cursor`` on a
        mismatch; ``near_misses`` while there is no evidence. Best effort and bounded: an
        answer never fails or waits long for want of them."""
        try:
            return await asyncio.wait_for(self._facts_of(view, inbox, now), _FACTS_WITHIN_S)
        except (TimeoutError, ProviderTrouble):
            return view

    async def _facts_of(self, view: Envelope, inbox: Inbox, now: float) -> Envelope:
        if view.message is not None:
            newer = await self._facts.newer_matching(
                inbox.inbox_id, inbox.criteria, view.message.seq, now
            )
            return replace(view, newer_matching=newer.count, newest_matching=newer.newest)
        if view.reason is Reason.EVIDENCE_MISMATCH and inbox.rescan_seq is not None:
            passed = await self._facts.unmatched(inbox.inbox_id, inbox.rescan_seq, inbox.cursor_seq)
            view = replace(
                view,
                unmatched=tuple(
                    Unmatched(d.message_id, d.received_at, d.from_addr, d.subject) for d in passed
                ),
                rescan_cursor=ids.encode_cursor(inbox.inbox_id, inbox.rescan_seq),
            )
        near = await self._store.near_misses(inbox.inbox_id, SHOWN)
        return replace(view, near_misses=tuple(near))

    async def _near_missed(self, inbox_id: str) -> bool:
        """Whether caught mail was recorded as a near miss of the inbox (best effort)."""
        try:
            return bool(await asyncio.wait_for(self._store.near_misses(inbox_id, 1), 1.0))
        except (TimeoutError, ProviderTrouble):
            return False

    async def _guided(
        self, envelope: Envelope, call: Call, inbox: Inbox | None = None, scanned: bool = False
    ) -> Envelope:
        """``envelope`` with next_tool, next_arguments and hint (``sink/guidance.py``), from
        what this process knows of the inbox; the store is asked only what the hint needs,
        and a store that cannot answer leaves the hint less specific, never the answer."""
        inbox = inbox or self._known.inbox(envelope.inbox_id)
        if inbox is None:  # the answer came without the inbox loaded (never in practice)
            known = Known(now=self._clock.now(), created_at=self._clock.now())
            return guide(envelope, call, known)
        policy = self._policy(inbox)
        mail_seen = True
        if needs_mail_check(envelope) and inbox.cursor_seq == 0:
            if scanned and envelope.state is State.WAITING:
                # This wait scanned from the start, and the cursor moves past every delivery
                # a scan looks at: none had arrived (no store call on the long-poll path).
                mail_seen = False
            else:
                seen = await self._quietly(self._store.deliveries_after(inbox.inbox_id, 0, 1))
                mail_seen = seen is None or bool(seen)
        inboxes_left = None
        if needs_inbox_count(envelope):
            used = await self._quietly(self._store.count_inboxes(inbox.run_id, inbox.purpose))
            if used is not None:
                inboxes_left = max(0, policy.inboxes_per_purpose - used)
        known = Known(
            now=self._clock.now(),
            created_at=inbox.created_at,
            created_with=inbox.created_with,
            hint_after_s=policy.hint_after_s,
            mail_seen=mail_seen,
            inboxes_left=inboxes_left,
        )
        return guide(envelope, call, known)

    async def _quietly(self, work: Awaitable[T]) -> T | None:
        """``work``'s result, or None when the store fails or is slow (bookkeeping for a hint)."""
        try:
            return await asyncio.wait_for(work, 1.0)
        except Exception as exc:
            log("bookkeeping_failed", error=type(exc).__name__)
            return None

    async def _can_create_another(self, inbox: Inbox, policy: Policy) -> bool:
        used = await self._store.count_inboxes(inbox.run_id, inbox.purpose)
        return used < policy.inboxes_per_purpose

    async def _expired(
        self, stored: Inbox, expired: Inbox, policy: Policy, now: float, trace_id: str
    ) -> Envelope:
        await self._persist_expiry(stored, expired, policy)
        return await self._describe(expired, now, trace_id)

    async def _persist_expiry(self, stored: Inbox, expired: Inbox, policy: Policy) -> None:
        if stored.state is State.EXPIRED:
            return
        await self._store.expire(expired, policy.retention_s)
        self._metrics.expired(expired.reason or "lease")
        log("expired", run_id=expired.run_id, inbox_id=expired.inbox_id, reason=expired.reason)

    async def _best_effort(self, work: Awaitable[None]) -> None:
        try:
            # Bounded: when the store is the trouble, bookkeeping must not hold the answer.
            await asyncio.wait_for(work, 1.0)
        except Exception as exc:  # bookkeeping must never turn an answer into a 500
            log("bookkeeping_failed", error=type(exc).__name__)


def wait_call(inbox_id: str, request: WaitRequest) -> Call:
    """A wait as the wait_for_message call it is, with the arguments it was given."""
    arguments: dict[str, Any] = {"inbox_id": inbox_id}
    if request.run_id is not None:
        arguments["run_id"] = request.run_id
    if request.timeout_s is not None:
        arguments["timeout_s"] = request.timeout_s
    if request.cursor is not None:
        arguments["cursor"] = request.cursor
    if request.match is not None:
        arguments["match"] = request.match.as_dict()
    if request.order != "oldest":
        arguments["order"] = request.order
    return Call(Tool.WAIT_FOR_MESSAGE, arguments)


def claim_call(message_id: str, run_id: str) -> Call:
    return Call(Tool.CLAIM_MESSAGE, {"message_id": message_id, "run_id": run_id})


def _conflict(request: CreateRequest, key: str | None) -> IdempotencyKeyConflict:
    """A create whose key names a live inbox made with other arguments (worded for the
    caller who never sent a key: an MCP agent, or HTTP without Idempotency-Key)."""
    if key is None:
        return IdempotencyKeyConflict(
            f"run {request.run_id!r} and purpose {request.purpose!r} already have a live inbox "
            "created with other arguments: repeat the earlier arguments, or use another purpose",
            {"run_id": request.run_id, "purpose": request.purpose},
        )
    return IdempotencyKeyConflict(
        f"Idempotency-Key {key!r} names a live inbox created with another body: repeat the "
        "earlier body, or use another key",
        {"idempotency_key": key},
    )


def _polled_event(inbox: Inbox, after: Inbox, look: Look, started: float) -> Event:
    found = look.scan.found
    return Event(
        run_id=inbox.run_id,
        type="polled",
        at=started,
        inbox_id=inbox.inbox_id,
        message_id=found.message_id if found else None,
        detail={
            "attempt": after.polls_used,
            "outcome": "received" if found else after.reason or "evidence_not_found",
            "latency_ms": after.last_poll_latency_ms,
        },
    )


async def _nothing() -> None:
    return None


def _noun(operation: str) -> str:
    return "message" if operation in ("read", "claim") else "inbox"


def replay_key(body: Mapping[str, Any]) -> str:
    """The create body as an idempotency key compares it: parsed JSON, so ``60`` and ``60.0``
    are one number (canonical text: sorted keys, whole-number floats written as integers)."""
    return json.dumps(_same_numbers(body), sort_keys=True, separators=(",", ":"))


def _same_numbers(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {key: _same_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_same_numbers(item) for item in value]
    return value
