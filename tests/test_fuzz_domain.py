"""Random sequences of create, deliver, wait, claim, release and clock steps keep the contract's
invariants: nothing leaves expired, a message is claimed at most once, budgets never go
negative, stored cursors never move backwards, and every envelope is one the table allows.

The machine drives the product itself: ``sink.agent.Agent`` and ``sink.ingest.Ingest`` over
the memory store (``sink/storage/memory.py``) on a fake clock, so a long-poll that nothing
wakes jumps the clock to its deadline. ``test_the_machine_catches_seeded_bugs`` plants bugs
in those real code paths and checks the machine finds each one.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from email.message import EmailMessage
from email.policy import SMTP
from enum import StrEnum
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import sink.agent
import sink.inbox
from sink import ids
from sink.agent import Agent, CreateRequest, WaitRequest
from sink.clock import FakeClock
from sink.config import Settings
from sink.envelope import Envelope
from sink.errors import OwnershipRefused, PolicyForbids
from sink.guard import Guard
from sink.inbox import Claim, Delivery, Inbox, Match, ScanResult
from sink.ingest import Ingest
from sink.metrics import Metrics
from sink.policy import BUILTIN, CI, Policy
from sink.storage.base import Event
from sink.storage.memory import MemoryStore
from sink.vocabulary import NextAction as Action
from sink.vocabulary import Reason, State, Status
from sink.waiters import Waiters

R = TypeVar("R")

T0 = 1_000_000.0
MAX_LIVE_INBOXES = 3  # few at a time, so that the steps pile up on each of them
RUNS = ("run-a", "run-b")
PURPOSES = ("signup", "reset", "invite", "login")
SUBJECTS = ("Welcome aboard", "Reset your password", "Your code is 123456", "Weekly news")
SENDERS = ("app@example.test", "noreply@other.test")
BODIES = ("click the link", "your code: 123456", "")

ACTIONS = {
    Action.WAIT_FOR_MESSAGE,
    Action.CLAIM_MESSAGE,
    Action.PROCEED,
    Action.WAIT_THEN_RETRY,
    Action.VERIFY_TRIGGER,
    Action.CREATE_NEW_INBOX,
    Action.STOP,
}
STATUSES = {Status.COMPLETED, Status.RETRYABLE, Status.BLOCKED}
REASONS = {
    None,
    "evidence_not_found",
    "evidence_mismatch",
    "provider_timeout",
    "provider_error",
    "circuit_open",
    "too_early",
    "lease",
    "timeout",
    "already_claimed",
    "claimed_by_other_run",
    "wrong_run",
    "lease_expired",
}
# The contract's state machine; expired is terminal.
ALLOWED = {
    State.CREATED: {State.CREATED, State.WAITING, State.RECEIVED, State.EXPIRED},
    State.WAITING: {State.WAITING, State.RECEIVED, State.EXPIRED},
    State.RECEIVED: {State.RECEIVED, State.WAITING, State.EXPIRED},
    State.EXPIRED: {State.EXPIRED},
}

SEED_POLICY = replace(CI, poll_budget=2, poll_interval_s=(0.0, 1.0))
policies = st.builds(
    Policy,
    name=st.just("fuzz"),
    ttl_default_s=st.sampled_from([30, 120, 600]),
    ttl_max_s=st.just(600),
    poll_budget=st.sampled_from([1, 2, 3, 5, 8, 12]),
    poll_interval_s=st.lists(
        st.sampled_from([0.0, 0.0, 0.5, 1.0, 3.0, 10.0]), min_size=1, max_size=3
    ).map(tuple),
    long_poll_max_s=st.sampled_from([1.0, 5.0, 30.0]),
    inboxes_per_purpose=st.integers(1, 3),
)
matches = st.builds(
    Match,
    subject_contains=st.sampled_from([None, None, "welcome", "RESET", "code", "nothing-like-it"]),
    from_contains=st.sampled_from([None, None, "APP@", "other"]),
    body_contains=st.sampled_from([None, None, "code", "link"]),
    max_age_s=st.sampled_from([None, None, 2, 60]),
)


class WaitKind(StrEnum):
    EXPIRED = "expired"
    TOO_EARLY = "too_early"
    REPEAT_RECEIVED = "repeat_received"
    OUT_OF_BUDGET = "out_of_budget"
    POLLED = "polled"


class ClaimKind(StrEnum):
    CLAIMED = "claimed"
    ALREADY_CLAIMED = "already_claimed"
    CLAIMED_BY_OTHER_RUN = "claimed_by_other_run"
    WRONG_RUN = "wrong_run"
    LEASE_EXPIRED = "lease_expired"


@dataclass(frozen=True, slots=True)
class WaitOutcome:
    kind: WaitKind
    envelope: Envelope
    found: Delivery | None = None
    started: float = 0.0
    ended: float = 0.0


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    kind: ClaimKind
    envelope: Envelope | None  # None for the ownership refusals (they show nothing)


class RecordingStore(MemoryStore):
    """The memory store, noting the last poll it recorded (so a test can tell a poll happened)."""

    def __init__(self) -> None:
        super().__init__()
        self.saved: Inbox | None = None

    async def save_poll(self, before: Inbox, after: Inbox, event: Event) -> bool:
        saved = await super().save_poll(before, after, event)
        if saved:
            self.saved = after
        return saved


class World:
    """The real Agent and Ingest over the memory store on a fake clock, one call at a time.

    Each call runs to its end on this world's own event loop; what it did is read back
    from the store, as an observer would.
    """

    def __init__(self, now: float) -> None:
        self.clock = FakeClock(now)
        self.store = RecordingStore()
        self.settings = Settings(policies=dict(BUILTIN))
        waiters, metrics = Waiters(), Metrics()
        new_ids = ids.Ids(random.Random(0).randbytes, self.clock.now)
        guard = Guard(None, self.store, metrics, self.clock)
        self.agent = Agent(self.store, waiters, self.settings, guard, metrics, self.clock, new_ids)
        self.ingest = Ingest(self.store, waiters, self.settings, metrics, self.clock, new_ids)
        self.inbox_ids: list[str] = []
        self.message_ids: list[str] = []
        self._numbers = itertools.count(1)
        self._loop = asyncio.new_event_loop()

    def close(self) -> None:
        self._loop.run_until_complete(self._loop.shutdown_default_executor())
        self._loop.close()

    def _run(self, work: Coroutine[Any, Any, R]) -> R:
        """An operation, run to its end on this world's loop."""
        return self._loop.run_until_complete(work)

    def _read(self, work: Coroutine[Any, Any, R]) -> R:
        """A memory store read: it never suspends, so it needs no loop (and is much faster)."""
        try:
            work.send(None)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        work.close()
        raise AssertionError("a memory store read suspended")

    # -- the clock -------------------------------------------------------------

    @property
    def now(self) -> float:
        return self.clock.now()

    def advance(self, seconds: float) -> None:
        assert seconds >= 0, "the fake clock never runs backwards"
        self.clock.advance(seconds)

    # -- reads (what the store holds) --------------------------------------------

    def stored(self, inbox_id: str) -> Inbox:
        inbox = self._read(self.store.load_inbox(inbox_id))
        assert inbox is not None
        return inbox

    def policy(self, inbox_id: str) -> Policy:
        return self.settings.policy(self.stored(inbox_id).policy_name)

    def delivery(self, message_id: str) -> Delivery:
        found = self._read(self.store.delivery(message_id))
        assert found is not None
        return found

    def deliveries(self, inbox_id: str) -> list[Delivery]:
        return self._read(self.store.deliveries_after(inbox_id, 0, 1_000_000))

    def claim_of(self, message_id: str) -> Claim | None:
        return self.delivery(message_id).claim

    def count(self, run_id: str, purpose: str) -> int:
        return self._read(self.store.count_inboxes(run_id, purpose))

    def can_create_another(self, inbox_id: str) -> bool:
        inbox = self.stored(inbox_id)
        return self.count(inbox.run_id, inbox.purpose) < self.policy(inbox_id).inboxes_per_purpose

    # -- operations --------------------------------------------------------------

    def create(
        self,
        run_id: str,
        purpose: str,
        policy: Policy,
        ttl_s: int | None,
        poll_budget: int | None,
        match: Match,
    ) -> str | None:
        """A new inbox, or None when the policy's inboxes_per_purpose is used up."""
        n = next(self._numbers)
        name = f"fuzz-{n}"  # each drawn policy under its own name, as a policy file would
        self.settings.policies[name] = replace(policy, name=name)
        request = CreateRequest(run_id, purpose, ttl_s, poll_budget, name, match)
        try:
            created = self._run(self.agent.create(request, {"n": n}, f"key-{n}", None))
        except PolicyForbids:
            return None
        self.inbox_ids.append(created.envelope.inbox_id)
        return created.envelope.inbox_id

    def get(self, inbox_id: str) -> Envelope:
        return self._run(self.agent.get(inbox_id, None))

    def deliver(self, inbox_id: str, subject: str, from_addr: str, body: str) -> str | None:
        """Mail for the inbox's address through ingest: the new message id, or None (dropped)."""
        address = self.stored(inbox_id).address
        before = len(self.deliveries(inbox_id))
        recipient = self._run(self.ingest.route(address, None))
        self._run(
            self.ingest.deliver(from_addr, [recipient], _raw(address, subject, from_addr, body))
        )
        after = self.deliveries(inbox_id)
        if len(after) == before:
            return None
        self.message_ids.append(after[-1].message_id)
        return after[-1].message_id

    def wait(
        self, inbox_id: str, cursor_seq: int | None, match: Match | None, timeout_s: float
    ) -> WaitOutcome:
        before = self.stored(inbox_id)
        started = self.now
        cursor = None if cursor_seq is None else ids.encode_cursor(inbox_id, cursor_seq)
        self.store.saved = None
        request = WaitRequest(timeout_s=timeout_s, cursor=cursor, match=match)
        envelope = self._run(self.agent.wait(inbox_id, request, None))
        ended = self.now
        polled = self.store.saved
        if polled is not None:
            evidence = polled.evidence if polled.state is State.RECEIVED else None
            found = None if evidence is None else self.delivery(evidence.message_id)
            return WaitOutcome(WaitKind.POLLED, envelope, found, started, ended)
        if envelope.reason == "too_early":
            kind = WaitKind.TOO_EARLY
        elif before.effective(started).state is State.EXPIRED:
            kind = WaitKind.EXPIRED
        elif before.remaining_polls == 0 and envelope.state == "received":
            kind = WaitKind.REPEAT_RECEIVED
        elif before.remaining_polls == 0:
            kind = WaitKind.OUT_OF_BUDGET
        else:
            raise AssertionError(f"a wait neither polled nor answered early: {envelope}")
        return WaitOutcome(kind, envelope, None, started, ended)

    def claim(self, message_id: str, run_id: str) -> ClaimOutcome:
        try:
            envelope = self._run(self.agent.claim(message_id, run_id, None))
        except OwnershipRefused as refused:
            kind = ClaimKind.WRONG_RUN
            if refused.reason == "claimed_by_other_run":
                kind = ClaimKind.CLAIMED_BY_OTHER_RUN
            return ClaimOutcome(kind, None)
        if envelope.reason == "already_claimed":
            return ClaimOutcome(ClaimKind.ALREADY_CLAIMED, envelope)
        if envelope.reason == "lease_expired":
            return ClaimOutcome(ClaimKind.LEASE_EXPIRED, envelope)
        return ClaimOutcome(ClaimKind.CLAIMED, envelope)

    def release(self, run_id: str) -> None:
        self._run(self.agent.release(run_id, None))


def _raw(to: str, subject: str, sender: str, body: str) -> bytes:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    message["Subject"] = subject
    message.set_content(body)
    return message.as_bytes(policy=SMTP)


@dataclass
class Pending:
    """A wait (from the stored cursor) returned this unclaimed message under this match."""

    message_id: str
    match: Match


class InboxMachine(RuleBasedStateMachine):
    """Drives the real Agent and Ingest through World and checks the contract after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.model = World(T0)
        self.ledger: dict[str, Claim] = {}  # message_id -> the claim that stands
        self.expired: dict[str, str] = {}  # inbox_id -> its reason, once seen expired
        self.cursors: dict[str, int] = {}  # inbox_id -> highest stored cursor seen
        self.states: dict[str, State] = {}  # inbox_id -> last effective state seen
        self.pending: dict[str, Pending] = {}
        self.last_wait: tuple[str, Match | None, str] | None = None

    def teardown(self) -> None:
        self.model.close()

    @initialize()
    def seed(self) -> None:
        """One live inbox with one message, so every rule has something to act on."""
        inbox_id = self.model.create("run-a", "signup", SEED_POLICY, None, None, Match())
        assert inbox_id is not None
        assert self.model.deliver(inbox_id, SUBJECTS[0], SENDERS[0], BODIES[0]) is not None

    # -- rules -----------------------------------------------------------------

    @precondition(lambda self: self._live() < MAX_LIVE_INBOXES)
    @rule(
        run_id=st.sampled_from(RUNS),
        purpose=st.sampled_from(PURPOSES),
        policy=policies,
        ttl_s=st.none() | st.sampled_from([1, 5, 60, 300, 600]),
        poll_budget=st.none() | st.sampled_from([1, 2, 4, 10]),
        match=st.just(Match()) | matches,
    )
    def create(
        self,
        run_id: str,
        purpose: str,
        policy: Policy,
        ttl_s: int | None,
        poll_budget: int | None,
        match: Match,
    ) -> None:
        """A new inbox, capped by its policy; or none once inboxes_per_purpose is used up."""
        used = self.model.count(run_id, purpose)
        inbox_id = self.model.create(run_id, purpose, policy, ttl_s, poll_budget, match)
        if inbox_id is None:
            assert used >= policy.inboxes_per_purpose
            return
        envelope = self.model.get(inbox_id)
        assert (envelope.state, envelope.status, envelope.next_action) == (
            "created",
            Status.COMPLETED,
            Action.WAIT_FOR_MESSAGE,
        )
        inbox = self.model.stored(inbox_id)
        assert 1 <= inbox.poll_budget <= policy.poll_budget
        assert inbox.expires_at - inbox.created_at <= policy.ttl_max_s

    @rule(
        data=st.data(),
        subject=st.sampled_from(SUBJECTS),
        sender=st.sampled_from(SENDERS),
        body=st.sampled_from(BODIES),
    )
    def deliver(self, data: st.DataObject, subject: str, sender: str, body: str) -> None:
        """Mail for an inbox: stored while it is live, dropped once it is expired."""
        inbox_id = self._pick_inbox(data)
        expired = self.model.stored(inbox_id).effective(self.model.now).state is State.EXPIRED
        before = len(self.model.deliveries(inbox_id))
        message_id = self.model.deliver(inbox_id, subject, sender, body)
        if expired:
            # A late arrival: dropped, never listed.
            assert message_id is None and len(self.model.deliveries(inbox_id)) == before
        else:
            assert message_id is not None

    @rule(
        data=st.data(),
        match=st.none() | matches,
        cursor=st.sampled_from(["stored", "stored", "start", "older", "newest"]),
        timeout_s=st.sampled_from([0.0, 0.0, 1.0, 10.0]),
    )
    def wait(self, data: st.DataObject, match: Match | None, cursor: str, timeout_s: float) -> None:
        """A wait with or without its own match, from the stored cursor or a given one."""
        self._wait(self._pick_inbox(data), match, cursor, timeout_s)

    @precondition(lambda self: self.last_wait is not None)
    @rule(deliver_first=st.booleans())
    def retry_lost_response(self, deliver_first: bool) -> None:
        """The answer to the last wait was lost: more mail may arrive, then the agent sleeps
        until next_poll_at and sends the same wait again."""
        assert self.last_wait is not None
        inbox_id, match, cursor = self.last_wait
        if deliver_first:
            self.model.deliver(inbox_id, SUBJECTS[0], SENDERS[0], BODIES[0])
        self._sleep_until_next_poll(inbox_id)
        self._wait(inbox_id, match, cursor, 0.0)

    def _sleep_until_next_poll(self, inbox_id: str) -> None:
        next_poll_at = self.model.stored(inbox_id).next_poll_at
        if next_poll_at is not None and next_poll_at > self.model.now:
            self.model.advance(next_poll_at - self.model.now)

    def _wait(self, inbox_id: str, match: Match | None, cursor: str, timeout_s: float) -> None:
        self.last_wait = (inbox_id, match, cursor)
        before = self.model.stored(inbox_id)
        seqs = [d.seq for d in self.model.deliveries(inbox_id)]
        cursor_seq = {
            "stored": None,
            "start": 0,
            "older": max(0, before.cursor_seq - 1),
            "newest": max(seqs, default=0),
        }[cursor]
        effective_match = match if match is not None else before.match
        pending = self.pending.get(inbox_id)
        must_return = (
            pending is not None
            and cursor_seq is None
            and pending.match == effective_match
            and self._still_matches(pending)
        )
        outcome = self.model.wait(inbox_id, cursor_seq, match, timeout_s)
        after = self.model.stored(inbox_id)
        envelope = outcome.envelope
        event(f"wait: {outcome.kind} -> {envelope.state}/{envelope.next_action}")
        self._check_envelope(envelope)

        if outcome.kind is not WaitKind.POLLED:
            assert after.polls_used == before.polls_used, "only a poll spends budget"
        if outcome.kind is WaitKind.EXPIRED:
            assert envelope.state == "expired"
        elif outcome.kind is WaitKind.TOO_EARLY:
            assert before.next_poll_at is not None and self.model.now < before.next_poll_at
            assert (envelope.status, envelope.next_action, envelope.reason) == (
                Status.BLOCKED,
                Action.WAIT_THEN_RETRY,
                "too_early",
            )
            self._check_retry_after(envelope)
            assert envelope.retry_after is not None and envelope.retry_after > 0
            assert after == before, "a too-early wait changes nothing"
        elif outcome.kind is WaitKind.OUT_OF_BUDGET:
            assert before.polls_used == before.poll_budget
            assert (envelope.state, envelope.reason) == ("expired", "timeout")
        elif outcome.kind is WaitKind.REPEAT_RECEIVED:
            assert before.remaining_polls == 0 and envelope.state == "received"
            assert envelope.next_action == Action.CLAIM_MESSAGE
        else:
            assert after.polls_used == before.polls_used + 1
            # next_poll_at = start + poll_interval_s[k] (k = polls spent before), or the end.
            interval = self.model.policy(inbox_id).poll_interval(before.polls_used)
            assert after.next_poll_at == max(outcome.started + interval, outcome.ended)
            found = outcome.found
            if found is not None:
                assert found.claim is None and found.message_id not in self.ledger, (
                    "a wait never returns a claimed message"
                )
                assert envelope.message is not None
                assert envelope.message.message_id == found.message_id
                assert (envelope.state, envelope.next_action) == ("received", "claim_message")
            else:
                assert envelope.state in ("waiting", "expired")
                if after.remaining_polls == 0:
                    assert envelope.state == "expired", "the last empty poll ends the inbox"

        # An unclaimed match is never skipped: waiting again from the stored cursor, with the
        # same criteria, returns the same message while it is unclaimed and still matches.
        if must_return and outcome.kind in (WaitKind.POLLED, WaitKind.REPEAT_RECEIVED):
            assert pending is not None and envelope.message is not None, "skipped a match"
            assert envelope.message.message_id == pending.message_id
        if outcome.kind in (WaitKind.TOO_EARLY, WaitKind.REPEAT_RECEIVED):
            return  # nothing changed: the same message is still owed
        self.pending.pop(inbox_id, None)
        if outcome.found is not None and cursor_seq is None and envelope.state == "received":
            self.pending[inbox_id] = Pending(outcome.found.message_id, effective_match)

    @rule(data=st.data())
    def follow_next_action(self, data: st.DataObject) -> None:
        """An agent's loop: claim what it is told to claim, else sleep until next_poll_at (the
        fake clock jumps) and wait again."""
        inbox_id = self._pick_inbox(data)
        envelope = self.model.get(inbox_id)
        if envelope.next_action == Action.CLAIM_MESSAGE:
            assert envelope.message is not None
            self._claim(envelope.message.message_id, other=False)
            return
        self._sleep_until_next_poll(inbox_id)
        self._wait(inbox_id, None, "stored", 0.0)

    @precondition(lambda self: bool(self.model.message_ids))
    @rule(data=st.data(), other=st.sampled_from([False, False, False, True]))
    def claim(self, data: st.DataObject, other: bool) -> None:
        """A claim of any message, by its inbox's run or (one time in four) by another run."""
        live = [d.message_id for i in self._live_inboxes() for d in self.model.deliveries(i)]
        self._claim(data.draw(st.sampled_from(live * 3 + self.model.message_ids)), other)

    def _claim(self, message_id: str, other: bool) -> None:
        delivery = self.model.delivery(message_id)
        inbox = self.model.stored(delivery.inbox_id)
        owner = inbox.run_id
        run_id = next(r for r in RUNS if r != owner) if other else owner
        standing = self.ledger.get(message_id)
        expired = inbox.state is State.EXPIRED or self.model.now >= inbox.expires_at

        outcome = self.model.claim(message_id, run_id)
        event(f"claim: {outcome.kind}")
        self.pending.pop(inbox.inbox_id, None)
        envelope = outcome.envelope
        if envelope is not None:
            self._check_envelope(envelope)
        if standing is not None:
            expected = (
                ClaimKind.ALREADY_CLAIMED
                if standing.run_id == run_id
                else ClaimKind.CLAIMED_BY_OTHER_RUN
            )
        elif run_id != owner:
            expected = ClaimKind.WRONG_RUN
        elif expired:
            expected = ClaimKind.LEASE_EXPIRED
        else:
            expected = ClaimKind.CLAIMED
        assert outcome.kind is expected, (outcome.kind, expected)

        if outcome.kind is ClaimKind.CLAIMED:
            assert envelope is not None and envelope.claim is not None
            assert envelope.claim.message_id == message_id and envelope.claim.run_id == owner
            assert (envelope.state, envelope.status, envelope.next_action, envelope.reason) == (
                "received",
                Status.COMPLETED,
                Action.PROCEED,
                None,
            )
            self.ledger[message_id] = envelope.claim
        elif outcome.kind is ClaimKind.ALREADY_CLAIMED:
            assert envelope is not None and envelope.claim == standing
            assert envelope.state in ("received", "expired")
            assert (envelope.status, envelope.next_action, envelope.reason) == (
                Status.COMPLETED,
                Action.PROCEED,
                "already_claimed",
            )
        elif outcome.kind is ClaimKind.LEASE_EXPIRED:
            assert envelope is not None
            assert (envelope.state, envelope.status, envelope.reason) == (
                "expired",
                Status.BLOCKED,
                "lease_expired",
            )
            assert envelope.claim is None and envelope.message is None
            assert self.model.claim_of(message_id) is None
        else:
            assert envelope is None, "an ownership refusal shows nothing of the other run"
        assert self.model.claim_of(message_id) == self.ledger.get(message_id)

    @rule(seconds=st.sampled_from([0.1, 0.5, 1.0, 2.0, 3.0, 10.0, 60.0, 700.0]))
    def advance(self, seconds: float) -> None:
        """Small steps pass poll intervals; large ones end leases."""
        self.model.advance(seconds)

    @rule(run_id=st.sampled_from([*RUNS, *[None] * 8]))
    def release(self, run_id: str | None) -> None:
        """DELETE /v1/runs/{run_id}, drawn one time in five: it ends every inbox of the run."""
        if run_id is None:
            return
        now = self.model.now
        live = {i for i in self._live_inboxes() if self.model.stored(i).run_id == run_id}
        self.model.release(run_id)
        for inbox_id in self.model.inbox_ids:
            inbox = self.model.stored(inbox_id)
            if inbox.run_id == run_id:
                assert inbox.state is State.EXPIRED
            if inbox_id in live:
                assert (inbox.reason, inbox.expired_at) == ("lease", now)

    # -- invariants --------------------------------------------------------------

    @invariant()
    def nothing_leaves_expired(self) -> None:
        now = self.model.now
        for inbox_id in self.model.inbox_ids:
            current = self.model.stored(inbox_id).effective(now)
            previous = self.states.get(inbox_id, State.CREATED)
            assert current.state in ALLOWED[previous], f"{inbox_id}: {previous} -> {current.state}"
            self.states[inbox_id] = current.state
            if inbox_id in self.expired:
                assert current.state is State.EXPIRED, f"{inbox_id} left expired"
                assert current.reason == self.expired[inbox_id], "the expiry reason changed"
                assert self.model.get(inbox_id).state == "expired"
            elif current.state is State.EXPIRED:
                assert current.reason in ("lease", "timeout")
                self.expired[inbox_id] = current.reason

    @invariant()
    def claims_stand(self) -> None:
        for message_id, claim in self.ledger.items():
            assert self.model.claim_of(message_id) == claim, f"the claim on {message_id} changed"

    @invariant()
    def budgets_never_go_negative(self) -> None:
        for inbox_id in self.model.inbox_ids:
            inbox = self.model.stored(inbox_id)
            assert 0 <= inbox.polls_used <= inbox.poll_budget
            envelope = self.model.get(inbox_id)
            assert envelope.remaining_attempts >= 0
            assert envelope.attempt + envelope.remaining_attempts == inbox.poll_budget

    @invariant()
    def cursors_never_move_backwards(self) -> None:
        for inbox_id in self.model.inbox_ids:
            cursor = self.model.stored(inbox_id).cursor_seq
            assert cursor >= self.cursors.get(inbox_id, 0), f"{inbox_id}: cursor moved back"
            self.cursors[inbox_id] = cursor

    @invariant()
    def envelopes_follow_the_table(self) -> None:
        for inbox_id in self.model.inbox_ids:
            before = self.model.stored(inbox_id)
            self._check_envelope(self.model.get(inbox_id))
            assert self.model.stored(inbox_id) == before, "GET changes nothing"

    # -- checks ------------------------------------------------------------------

    def _live_inboxes(self) -> list[str]:
        now = self.model.now
        return [
            i
            for i in self.model.inbox_ids
            if self.model.stored(i).effective(now).state is not State.EXPIRED
        ]

    def _live(self) -> int:
        return len(self._live_inboxes())

    def _pick_inbox(self, data: st.DataObject) -> str:
        """Live inboxes three times as often as expired ones (those have little left to do)."""
        return data.draw(st.sampled_from(self._live_inboxes() * 3 + self.model.inbox_ids))

    def _still_matches(self, pending: Pending) -> bool:
        """Unclaimed, beyond the stored cursor, and (max_age_s) not too old by now."""
        delivery = self.model.delivery(pending.message_id)
        inbox = self.model.stored(delivery.inbox_id)
        if delivery.claim is not None or delivery.seq <= inbox.cursor_seq:
            return False
        return pending.match.headers_match(
            delivery.subject, delivery.from_addr, delivery.received_at, self.model.now
        )

    def _check_retry_after(self, envelope: Envelope) -> None:
        """Seconds until next_poll_at, rounded up to 0.1, never negative."""
        retry_after = envelope.retry_after
        assert retry_after is not None and retry_after >= 0
        assert abs(retry_after * 10 - round(retry_after * 10)) < 1e-6, retry_after
        if envelope.next_poll_at is not None:
            assert retry_after >= envelope.next_poll_at - self.model.now - 1e-6

    def _check_envelope(self, envelope: Envelope) -> None:
        """One of the contract's rows, consistent with the inbox as of now."""
        assert envelope.next_action in ACTIONS and envelope.status in STATUSES
        assert envelope.reason in REASONS
        assert envelope.remaining_attempts >= 0 and envelope.attempt >= 0
        if envelope.claim is not None:
            assert self.model.claim_of(envelope.claim.message_id) == envelope.claim
        if envelope.status == Status.BLOCKED and envelope.reason in ("too_early", "circuit_open"):
            return  # "unchanged": the state is whatever it was
        inbox_id = envelope.inbox_id
        state = envelope.state
        if state == "created":
            assert (envelope.status, envelope.next_action, envelope.reason) == (
                Status.COMPLETED,
                Action.WAIT_FOR_MESSAGE,
                None,
            )
        elif state == "waiting":
            assert envelope.status == Status.RETRYABLE
            assert (envelope.next_action, envelope.reason) in (
                (Action.WAIT_FOR_MESSAGE, "evidence_not_found"),
                (Action.VERIFY_TRIGGER, "evidence_mismatch"),
            )
            self._check_retry_after(envelope)
        elif state == "received":
            assert envelope.status == Status.COMPLETED and envelope.message is not None
            if envelope.claim is not None:
                assert envelope.next_action == Action.PROCEED
                assert envelope.reason in (None, "already_claimed")
            else:
                assert (envelope.next_action, envelope.reason) == (Action.CLAIM_MESSAGE, None)
        else:
            assert state == "expired"
            if envelope.claim is not None:
                assert (envelope.status, envelope.next_action) == (Status.COMPLETED, Action.PROCEED)
            else:
                assert envelope.status == Status.BLOCKED and envelope.retry_after is None
                can_create = self.model.can_create_another(inbox_id)
                wanted = Action.CREATE_NEW_INBOX if can_create else Action.STOP
                assert envelope.next_action == wanted
                assert envelope.reason in ("lease", "timeout", "lease_expired")


InboxMachine.TestCase.settings = settings(
    max_examples=100,  # each step runs the real Agent on an event loop: ~3x the old pure model
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class TestInboxMachine(InboxMachine.TestCase):  # type: ignore[misc,valid-type]
    """Random create/deliver/wait/claim/release/clock sequences keep the contract's invariants."""


# -- the machine catches bugs planted in the real code paths ---------------------------------

_after_poll = sink.inbox.after_poll


def _poll_spends_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def after_poll(inbox: Inbox, policy: Policy, result: ScanResult, a: float, b: float) -> Inbox:
        return replace(_after_poll(inbox, policy, result, a, b), polls_used=inbox.polls_used)

    monkeypatch.setattr(sink.agent, "after_poll", after_poll)


def _last_empty_poll_keeps_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    def after_poll(inbox: Inbox, policy: Policy, result: ScanResult, a: float, b: float) -> Inbox:
        after = _after_poll(inbox, policy, result, a, b)
        if after.reason != "timeout":
            return after
        return replace(
            after, state=State.WAITING, reason=Reason.EVIDENCE_NOT_FOUND, expired_at=None
        )

    monkeypatch.setattr(sink.agent, "after_poll", after_poll)


def _expiry_is_overwritten(monkeypatch: pytest.MonkeyPatch) -> None:
    def persist_expiry(
        self: MemoryStore, inbox: Inbox, retention_s: int, cause: str | None = None
    ) -> None:
        if inbox.state is State.EXPIRED:  # forgets "only once": a later expiry overwrites
            row = self._inboxes[inbox.inbox_id]
            row.inbox = replace(row.inbox, state=State.EXPIRED, reason=inbox.reason)

    monkeypatch.setattr(MemoryStore, "_persist_expiry", persist_expiry)


@pytest.mark.parametrize(
    "plant", [_poll_spends_nothing, _last_empty_poll_keeps_waiting, _expiry_is_overwritten]
)
def test_the_machine_catches_seeded_bugs(
    plant: Callable[[pytest.MonkeyPatch], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug planted in the Agent's or the store's code makes the state machine fail."""
    plant(monkeypatch)
    with pytest.raises(AssertionError):
        run_state_machine_as_test(
            InboxMachine,
            settings=settings(
                max_examples=300,
                stateful_step_count=40,
                deadline=None,
                derandomize=True,
                database=None,
                phases=[Phase.generate],
                report_multiple_bugs=False,
                suppress_health_check=list(HealthCheck),
            ),
        )
