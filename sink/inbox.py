"""The inbox: its state machine, lease, poll budget, cursor rules and match criteria.

Pure: no I/O, no asyncio; ``now`` is always a parameter. The rules are the
contract's:

    created -> waiting | received;  waiting <-> received;  every state -> expired

``expired`` is terminal: nothing here returns an inbox that left it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from sink.policy import Policy
from sink.vocabulary import Reason, State


class IllegalTransition(Exception):
    """A transition the state machine forbids (a bug in the caller, never user input)."""


@dataclass(frozen=True, slots=True)
class Match:
    """Literal, case-insensitive criteria; never regex. All optional."""

    subject_contains: str | None = None
    from_contains: str | None = None
    body_contains: str | None = None
    max_age_s: int | None = None

    @property
    def needs_body(self) -> bool:
        return bool(self.body_contains)

    def headers_match(
        self,
        subject: str,
        from_addr: str,
        received_at: float,
        now: float,
        from_name: str | None = None,
    ) -> bool:
        if self.max_age_s is not None and now - received_at > self.max_age_s:
            return False
        if self.subject_contains and self.subject_contains.casefold() not in subject.casefold():
            return False
        return self.from_matches(from_addr, from_name)

    def from_matches(self, from_addr: str, from_name: str | None = None) -> bool:
        """``from_contains`` is in the From's address, or in its display name when known."""
        if not self.from_contains:
            return True
        needle = self.from_contains.casefold()
        return needle in from_addr.casefold() or needle in (from_name or "").casefold()

    def body_matches(self, body_text: str) -> bool:
        return not self.body_contains or self.body_contains.casefold() in body_text.casefold()

    def as_dict(self) -> dict[str, str | int]:
        return {k: v for k, v in _match_items(self) if v is not None}


def _match_items(match: Match) -> list[tuple[str, str | int | None]]:
    return [
        ("subject_contains", match.subject_contains),
        ("from_contains", match.from_contains),
        ("body_contains", match.body_contains),
        ("max_age_s", match.max_age_s),
    ]


@dataclass(frozen=True, slots=True)
class Claim:
    claim_id: str
    message_id: str
    run_id: str
    claimed_at: float


@dataclass(frozen=True, slots=True)
class Evidence:
    """The message a wait returned (or a claim took): what the envelope's ``message`` shows."""

    message_id: str
    seq: int
    subject: str
    from_addr: str
    received_at: float
    claim: Claim | None = None


@dataclass(frozen=True, slots=True)
class Delivery:
    """One delivery of a stored message to one inbox, as a wait scans it."""

    seq: int
    message_id: str
    inbox_id: str
    subject: str
    from_addr: str
    received_at: float
    size: int
    claim: Claim | None

    def as_evidence(self) -> Evidence:
        return Evidence(
            self.message_id, self.seq, self.subject, self.from_addr, self.received_at, self.claim
        )


@dataclass(frozen=True, slots=True)
class Inbox:
    inbox_id: str
    run_id: str
    purpose: str
    address: str
    policy_name: str
    created_at: float
    expires_at: float
    poll_budget: int
    polls_used: int
    next_poll_at: float | None
    cursor_seq: int
    state: State
    reason: Reason | None
    evidence: Evidence | None
    match: Match
    trace_id: str
    last_error: str | None = None
    expired_at: float | None = None
    last_poll_at: float | None = None
    last_poll_latency_ms: float | None = None
    released_at: float | None = None
    # The create_inbox arguments as the caller gave them (canonical JSON): what agent
    # guidance repeats to make the run's next inbox. None for inboxes made before v3.
    created_with: str | None = None
    # The last wait's criteria (its ``match``, else the creation's) and where it began: a
    # later GET or claim counts resends by them, and a mismatch can be looked at again.
    wait_match: Match | None = None
    rescan_seq: int | None = None

    @property
    def criteria(self) -> Match:
        """What this inbox's evidence is matched by: the last wait's, else the creation's."""
        return self.wait_match if self.wait_match is not None else self.match

    @classmethod
    def fresh(
        cls,
        *,
        inbox_id: str,
        run_id: str,
        purpose: str,
        address: str,
        policy_name: str,
        now: float,
        ttl_s: float,
        poll_budget: int,
        trace_id: str,
        match: Match | None = None,
        created_with: str | None = None,
    ) -> Inbox:
        """A just-created inbox: no poll spent, no cursor, no evidence; its lease starts now."""
        return cls(
            inbox_id=inbox_id,
            run_id=run_id,
            purpose=purpose,
            address=address,
            policy_name=policy_name,
            created_at=now,
            expires_at=now + ttl_s,
            poll_budget=poll_budget,
            polls_used=0,
            next_poll_at=None,
            cursor_seq=0,
            state=State.CREATED,
            reason=None,
            evidence=None,
            match=match or Match(),
            trace_id=trace_id,
            created_with=created_with,
        )

    @property
    def remaining_polls(self) -> int:
        return max(0, self.poll_budget - self.polls_used)

    def lease_over(self, now: float) -> bool:
        return now >= self.expires_at

    def effective(self, now: float) -> Inbox:
        """The inbox as of ``now``: the lease applied (what GET reports; GET never scans)."""
        if self.state is not State.EXPIRED and self.lease_over(now):
            return self.expire(Reason.LEASE, self.expires_at)
        return self

    def expire(self, reason: Reason, at: float) -> Inbox:
        """Move to ``expired`` (terminal). Expiring an expired inbox changes nothing."""
        if self.state is State.EXPIRED:
            return self
        if reason not in (Reason.LEASE, Reason.TIMEOUT):
            raise IllegalTransition(f"cannot expire inbox {self.inbox_id}: unknown reason {reason}")
        return replace(self, state=State.EXPIRED, reason=reason, expired_at=at)

    def _require_live(self, what: str) -> None:
        if self.state is State.EXPIRED:
            raise IllegalTransition(
                f"cannot {what}: inbox {self.inbox_id} is expired ({self.reason})"
            )


class GateKind(StrEnum):
    GO = "go"
    EXPIRED = "expired"
    TOO_EARLY = "too_early"
    REPEAT_RECEIVED = "repeat_received"
    OUT_OF_BUDGET = "out_of_budget"


@dataclass(frozen=True, slots=True)
class Gate:
    kind: GateKind
    retry_after: float | None = None


def wait_gate(inbox: Inbox, now: float) -> Gate:
    """The checks before a wait reaches the store: expiry, too early, budget (in that order)."""
    current = inbox.effective(now)
    if current.state is State.EXPIRED:
        return Gate(GateKind.EXPIRED)
    if current.next_poll_at is not None and now < current.next_poll_at:
        return Gate(GateKind.TOO_EARLY, current.next_poll_at - now)
    if current.remaining_polls == 0:
        evidence = current.evidence
        if current.state is State.RECEIVED and evidence is not None and evidence.claim is None:
            return Gate(GateKind.REPEAT_RECEIVED)
        return Gate(GateKind.OUT_OF_BUDGET)
    return Gate(GateKind.GO)


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What a wait found beyond its cursor."""

    found: Delivery | None
    last_seq: int  # the position after the last delivery looked at (or the start)
    mismatched: bool  # mail arrived beyond the cursor, but none matched
    first_seq: int = 0  # the position the wait began at (its cursor)
    match: Match | None = None  # the criteria it matched by
    misaddressed: bool = False  # caught mail nearly reached the inbox (a near miss)

    @property
    def reason(self) -> Reason:
        """Why nothing was found: mail that did not match wins over a near miss."""
        if self.mismatched:
            return Reason.EVIDENCE_MISMATCH
        if self.misaddressed:
            return Reason.EVIDENCE_MISADDRESSED
        return Reason.EVIDENCE_NOT_FOUND


def after_poll(
    inbox: Inbox,
    policy: Policy,
    result: ScanResult,
    started: float,
    ended: float,
) -> Inbox:
    """The inbox after one poll that reached the store (it spends one poll)."""
    inbox._require_live("record a poll")
    spent_before = inbox.polls_used
    polls_used = spent_before + 1
    next_poll_at = max(started + policy.poll_interval(spent_before), ended)
    common = {
        "polls_used": polls_used,
        "next_poll_at": next_poll_at,
        "last_poll_at": started,
        "last_poll_latency_ms": round((ended - started) * 1000, 3),
        "last_error": None,  # the provider answered this poll
        "wait_match": result.match,
        "rescan_seq": result.first_seq,
    }
    if result.found is not None:
        found = result.found
        # In ``received`` the stored cursor sits just before the returned message, so
        # waiting again returns it until it is claimed (a lost response is safe to retry).
        cursor = max(inbox.cursor_seq, found.seq - 1)
        return replace(
            inbox,
            state=State.RECEIVED,
            reason=None,
            evidence=found.as_evidence(),
            cursor_seq=cursor,
            **common,  # type: ignore[arg-type]
        )
    cursor = max(inbox.cursor_seq, result.last_seq)
    waited = replace(
        inbox,
        state=State.WAITING,
        reason=result.reason,
        evidence=None,
        cursor_seq=cursor,
        **common,  # type: ignore[arg-type]
    )
    if waited.lease_over(ended):
        return waited.expire(Reason.LEASE, waited.expires_at)
    if waited.remaining_polls == 0:
        # The last poll without evidence ends the inbox.
        return waited.expire(Reason.TIMEOUT, ended)
    return waited


def after_claim(inbox: Inbox, delivery: Delivery, claim: Claim) -> Inbox:
    """A claim makes its message the inbox's evidence; the stored cursor never moves back."""
    inbox._require_live("claim a message")
    evidence = replace(delivery.as_evidence(), claim=claim)
    return replace(
        inbox,
        state=State.RECEIVED,
        reason=None,
        evidence=evidence,
        cursor_seq=max(inbox.cursor_seq, delivery.seq),
        last_error=None,  # the provider answered this claim
    )
