"""An in-memory store around the pure core, for the fuzz tests of the domain.

It mirrors what ``sink/agent.py`` and ``sink/storage/sqlite.py`` do around the pure
functions of ``sink/inbox.py`` and ``sink/envelope.py``, in the same order of checks
(ownership, expiry, too early, budget, scan), with a fake clock instead of I/O. The
circuit breaker and provider faults are left out: they have their own tests.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from enum import StrEnum

from sink.envelope import Action, Envelope, Status, already_claimed, blocked, describe
from sink.envelope import lease_expired as lease_expired_view
from sink.inbox import (
    Claim,
    Delivery,
    GateKind,
    Inbox,
    Match,
    ScanResult,
    State,
    after_claim,
    after_poll,
    wait_gate,
)
from sink.policy import Policy

TRACE = "trace-fuzz"


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


class DomainModel:
    """Inboxes, deliveries and claims in dicts; ``now`` is a float the test advances."""

    def __init__(self, now: float) -> None:
        self.now = now
        self._inboxes: dict[str, Inbox] = {}
        self._policies: dict[str, Policy] = {}
        self._deliveries: dict[str, list[Delivery]] = {}
        self._bodies: dict[str, str] = {}
        self._by_message: dict[str, Delivery] = {}
        self._claims: dict[str, Claim] = {}
        self._seq = itertools.count(1)  # one sequence over all deliveries, as in SQLite
        self._ids = itertools.count(1)
        self.late_arrivals = 0

    # -- the clock -------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        assert seconds >= 0, "the fake clock never runs backwards"
        self.now += seconds

    # -- reads (what a store load gives) --------------------------------------------

    @property
    def inbox_ids(self) -> list[str]:
        return list(self._inboxes)

    @property
    def message_ids(self) -> list[str]:
        return list(self._by_message)

    def stored(self, inbox_id: str) -> Inbox:
        """The inbox row; its evidence carries the message's current claim (a JOIN in SQL)."""
        inbox = self._inboxes[inbox_id]
        evidence = inbox.evidence
        if evidence is not None:
            evidence = replace(evidence, claim=self._claims.get(evidence.message_id))
        return replace(inbox, evidence=evidence)

    def policy(self, inbox_id: str) -> Policy:
        return self._policies[inbox_id]

    def delivery(self, message_id: str) -> Delivery:
        found = self._by_message[message_id]
        return replace(found, claim=self._claims.get(message_id))

    def deliveries(self, inbox_id: str) -> list[Delivery]:
        return [self.delivery(d.message_id) for d in self._deliveries[inbox_id]]

    def claim_of(self, message_id: str) -> Claim | None:
        return self._claims.get(message_id)

    def count(self, run_id: str, purpose: str) -> int:
        """Inboxes of a run for a purpose, expired ones included."""
        return sum(1 for i in self._inboxes.values() if (i.run_id, i.purpose) == (run_id, purpose))

    def can_create_another(self, inbox_id: str) -> bool:
        inbox = self._inboxes[inbox_id]
        used = self.count(inbox.run_id, inbox.purpose)
        return used < self._policies[inbox_id].inboxes_per_purpose

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
        if self.count(run_id, purpose) >= policy.inboxes_per_purpose:
            return None
        n = next(self._ids)
        inbox_id = f"ib_{n:020d}"
        self._inboxes[inbox_id] = Inbox(
            inbox_id=inbox_id,
            run_id=run_id,
            purpose=purpose,
            address=f"r{n}@sink.test",
            policy_name=policy.name,
            created_at=self.now,
            expires_at=self.now + policy.ttl(ttl_s),
            poll_budget=policy.budget(poll_budget),
            polls_used=0,
            next_poll_at=None,
            cursor_seq=0,
            state=State.CREATED,
            reason=None,
            evidence=None,
            match=match,
            trace_id=TRACE,
        )
        self._policies[inbox_id] = policy
        self._deliveries[inbox_id] = []
        return inbox_id

    def get(self, inbox_id: str) -> Envelope:
        """GET: the envelope as of now; never scans, never spends."""
        return self._describe(self.stored(inbox_id), self.now)

    def deliver(self, inbox_id: str, subject: str, from_addr: str, body: str) -> str | None:
        """SMTP ingest: stored, or dropped as a late arrival when the inbox is expired."""
        inbox = self._inboxes[inbox_id]
        if inbox.state is State.EXPIRED or self.now >= inbox.expires_at:
            self.late_arrivals += 1
            return None
        message_id = f"msg_{next(self._ids):024d}"
        delivery = Delivery(
            seq=next(self._seq),
            message_id=message_id,
            inbox_id=inbox_id,
            subject=subject,
            from_addr=from_addr,
            received_at=self.now,
            size=len(body),
            claim=None,
        )
        self._deliveries[inbox_id].append(delivery)
        self._by_message[message_id] = delivery
        self._bodies[message_id] = body
        return message_id

    def wait(
        self, inbox_id: str, cursor_seq: int | None, match: Match | None, timeout_s: float
    ) -> WaitOutcome:
        """wait_for_message, in agent.py's order: expiry, too early, budget, then one poll."""
        inbox = self.stored(inbox_id)
        policy = self._policies[inbox_id]
        started = self.now
        current = inbox.effective(started)
        if current.state is State.EXPIRED:
            self._persist_expiry(inbox, current)
            return WaitOutcome(WaitKind.EXPIRED, self._describe(current, started))
        gate = wait_gate(inbox, started)
        if gate.kind is GateKind.TOO_EARLY:
            view = self._describe(inbox, started)
            retry_after = gate.retry_after or 0.1
            return WaitOutcome(WaitKind.TOO_EARLY, blocked(view, "too_early", retry_after))
        if gate.kind is GateKind.REPEAT_RECEIVED:
            return WaitOutcome(WaitKind.REPEAT_RECEIVED, self._describe(inbox, started))
        if gate.kind is GateKind.OUT_OF_BUDGET:
            expired = inbox.expire("timeout", started)
            self._persist_expiry(inbox, expired)
            return WaitOutcome(WaitKind.OUT_OF_BUDGET, self._describe(expired, started))

        position = inbox.cursor_seq if cursor_seq is None else cursor_seq
        result = self._scan(inbox_id, match if match is not None else inbox.match, position)
        if result.found is None:
            # Nothing arrives while the fake clock stands still: the long-poll runs out.
            deadline = max(0.0, min(timeout_s, policy.long_poll_max_s, inbox.expires_at - started))
            self.advance(deadline)
        ended = self.now
        scan = ScanResult(result.found, max(position, result.last_seq), result.mismatched)
        after = after_poll(inbox, policy, scan, started, ended)
        row = self._inboxes[inbox_id]
        # save_poll's guard: WHERE polls_used = before AND state != 'expired'.
        assert row.polls_used == inbox.polls_used and row.state is not State.EXPIRED
        self._inboxes[inbox_id] = after
        envelope = self._describe(after, ended)
        return WaitOutcome(WaitKind.POLLED, envelope, result.found, started, ended)

    def claim(self, message_id: str, run_id: str) -> ClaimOutcome:
        """claim_message: a same-run replay wins over lease_expired; another run's claim wins
        over wrong_run."""
        delivery = self.delivery(message_id)
        inbox = self.stored(delivery.inbox_id)
        now = self.now
        if delivery.claim is not None:
            if delivery.claim.run_id == run_id:
                view = self._claimed_view(inbox, delivery, now)
                return ClaimOutcome(ClaimKind.ALREADY_CLAIMED, already_claimed(view))
            return ClaimOutcome(ClaimKind.CLAIMED_BY_OTHER_RUN, None)
        if run_id != inbox.run_id:
            return ClaimOutcome(ClaimKind.WRONG_RUN, None)
        current = inbox.effective(now)
        if current.state is State.EXPIRED:
            self._persist_expiry(inbox, current)
            view = self._describe(current, now)
            can_create = self.can_create_another(inbox.inbox_id)
            return ClaimOutcome(ClaimKind.LEASE_EXPIRED, lease_expired_view(view, can_create))
        claim = Claim(f"clm_{next(self._ids):020d}", message_id, run_id, now)
        after = after_claim(inbox, delivery, claim)
        # The store: first claim wins (UPDATE ... WHERE claim_id IS NULL), and the inbox
        # row moves only while it is not expired.
        standing = self._claims.setdefault(message_id, claim)
        row = self._inboxes[inbox.inbox_id]
        if standing is claim and row.state is not State.EXPIRED:
            self._inboxes[inbox.inbox_id] = replace(
                row,
                state=State.RECEIVED,
                reason=None,
                evidence=after.evidence,
                cursor_seq=max(row.cursor_seq, delivery.seq),
            )
        envelope = self._describe(after_claim(inbox, delivery, standing), now)
        return ClaimOutcome(ClaimKind.CLAIMED, envelope)

    def release(self, run_id: str) -> None:
        """DELETE /v1/runs/{run_id}: live inboxes expire with reason lease."""
        for inbox_id in self.inbox_ids:
            inbox = self.stored(inbox_id)
            if inbox.run_id != run_id:
                continue
            current = inbox.effective(self.now)
            if current.state is not State.EXPIRED:
                current = inbox.expire("lease", self.now)
            self._persist_expiry(inbox, current)

    # -- helpers ---------------------------------------------------------------

    def _scan(self, inbox_id: str, match: Match, after_seq: int) -> ScanResult:
        """agent._scan: beyond the cursor, oldest first; the first unclaimed match, or none."""
        position = after_seq
        mismatched = False
        for delivery in self.deliveries(inbox_id):
            if delivery.seq <= after_seq:
                continue
            if delivery.claim is None:
                if self._matches(match, delivery):
                    return ScanResult(delivery, position, mismatched)
                mismatched = True
            position = delivery.seq
        return ScanResult(None, position, mismatched)

    def _matches(self, match: Match, delivery: Delivery) -> bool:
        if not match.headers_match(
            delivery.subject, delivery.from_addr, delivery.received_at, self.now
        ):
            return False
        return match.body_matches(self._bodies[delivery.message_id])

    def _persist_expiry(self, stored: Inbox, expired: Inbox) -> None:
        """store.expire: state, reason and expired_at only, and only once."""
        assert expired.state is State.EXPIRED
        row = self._inboxes[stored.inbox_id]
        if row.state is State.EXPIRED:
            return
        at = expired.expired_at if expired.expired_at is not None else expired.expires_at
        self._inboxes[stored.inbox_id] = replace(
            row, state=State.EXPIRED, reason=expired.reason, expired_at=at
        )

    def _describe(self, inbox: Inbox, now: float) -> Envelope:
        current = inbox.effective(now)
        can_create = False
        if current.state is State.EXPIRED:
            can_create = self.can_create_another(inbox.inbox_id)
        return describe(current, now, can_create, TRACE)

    def _claimed_view(self, inbox: Inbox, delivery: Delivery, now: float) -> Envelope:
        current = inbox.effective(now)
        state = State.EXPIRED if current.state is State.EXPIRED else State.RECEIVED
        shown = replace(current, state=State.RECEIVED, evidence=delivery.as_evidence())
        view = describe(shown, now, False, TRACE)
        return replace(view, state=state.value, status=Status.COMPLETED, next_action=Action.PROCEED)
