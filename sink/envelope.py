"""The envelope: every agent-facing answer, with its state, status and next action.

Pure. One function per row of the contract's table, so the table can be read
off this file. ``now`` is a parameter; times stay floats until the wire.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sink.clock import seconds_up
from sink.ids import encode_cursor
from sink.inbox import Claim, Evidence, Inbox
from sink.vocabulary import NextAction, Reason, State, Status, Tool


@dataclass(frozen=True, slots=True)
class NearMiss:
    """Caught mail addressed within 2 edits of this inbox's address (v3)."""

    address: str
    received_at: float
    distance: int


@dataclass(frozen=True, slots=True)
class Unmatched:
    """A delivery a wait looked at and did not match (v3; from and subject are the sender's)."""

    message_id: str
    received_at: float
    from_addr: str
    subject: str


# Answers that did not do what was asked (a claim after the lease claimed nothing): the HTTP
# API sends them with a 409 (``api/replies.py``), MCP as tool errors (``sink/mcp/server.py``).
REFUSALS = frozenset({Reason.LEASE_EXPIRED})


@dataclass(frozen=True, slots=True)
class Envelope:
    state: State
    status: Status
    next_action: NextAction
    reason: Reason | None
    inbox_id: str
    run_id: str
    purpose: str
    address: str
    expires_at: float
    attempt: int
    remaining_attempts: int
    retry_after: float | None
    next_poll_at: float | None
    cursor: str
    message: Evidence | None
    claim: Claim | None
    last_error: str | None
    trace_id: str
    # v3 agent guidance (sink/guidance.py fills these three): the tool to call next, its
    # complete arguments, and one sentence saying what to do and why.
    next_tool: Tool | None = None
    next_arguments: Mapping[str, Any] | None = None
    hint: str | None = None
    replayed: bool = False  # a create that returned the live inbox of its key
    # v3 evidence: resends, recoverable mismatches, near misses.
    newer_matching: int | None = None
    unmatched: tuple[Unmatched, ...] = ()
    rescan_cursor: str | None = None
    near_misses: tuple[NearMiss, ...] = ()
    # Not on the wire: the newest matching unclaimed delivery when newer_matching > 0, so
    # the guidance can send a claim to it (the newest of a resend usually holds the code).
    newest_matching: str | None = None


def describe(inbox: Inbox, now: float, can_create_another: bool, trace_id: str) -> Envelope:
    """The envelope of the inbox's last wait or claim, as of ``now`` (what GET answers)."""
    current = inbox.effective(now)
    evidence = current.evidence
    base = Envelope(
        state=current.state,
        status=Status.COMPLETED,
        next_action=NextAction.WAIT_FOR_MESSAGE,
        reason=None,
        inbox_id=current.inbox_id,
        run_id=current.run_id,
        purpose=current.purpose,
        address=current.address,
        expires_at=current.expires_at,
        attempt=current.polls_used,
        remaining_attempts=current.remaining_polls,
        retry_after=None,
        next_poll_at=current.next_poll_at,
        cursor=encode_cursor(current.inbox_id, current.cursor_seq),
        message=None,
        claim=None,
        last_error=current.last_error,
        trace_id=trace_id,
    )
    if current.state is State.CREATED:
        return base
    if current.state is State.WAITING:
        # Mail arrived and none matched, or only near misses did: check the trigger.
        mismatch = current.reason in (Reason.EVIDENCE_MISMATCH, Reason.EVIDENCE_MISADDRESSED)
        wait_s = 0.0 if current.next_poll_at is None else current.next_poll_at - now
        return replace(
            base,
            status=Status.RETRYABLE,
            next_action=NextAction.VERIFY_TRIGGER if mismatch else NextAction.WAIT_FOR_MESSAGE,
            reason=current.reason or Reason.EVIDENCE_NOT_FOUND,
            retry_after=seconds_up(wait_s),
        )
    if current.state is State.RECEIVED:
        assert evidence is not None, f"inbox {current.inbox_id} is received without evidence"
        return replace(
            base,
            next_action=NextAction.PROCEED if evidence.claim else NextAction.CLAIM_MESSAGE,
            message=evidence,
            claim=evidence.claim,
            cursor=encode_cursor(current.inbox_id, max(0, evidence.seq - 1)),
        )
    # expired: a claimed message keeps its claim; otherwise a new inbox, or stop.
    if evidence is not None and evidence.claim is not None:
        return replace(
            base,
            next_action=NextAction.PROCEED,
            reason=current.reason,
            message=evidence,
            claim=evidence.claim,
        )
    return replace(
        base,
        status=Status.BLOCKED,
        next_action=NextAction.CREATE_NEW_INBOX if can_create_another else NextAction.STOP,
        reason=current.reason,
    )


def blocked(view: Envelope, reason: Reason, retry_after: float) -> Envelope:
    """A call that changed nothing: too early, or the circuit is open. Its reason is not
    the last wait's, so it shows no mismatch's mail (only evidence_mismatch answers do)."""
    return replace(
        view,
        status=Status.BLOCKED,
        next_action=NextAction.WAIT_THEN_RETRY,
        reason=reason,
        retry_after=max(0.1, seconds_up(retry_after)),
        unmatched=(),
        rescan_cursor=None,
    )


def provider_trouble(view: Envelope, reason: Reason, retry_after: float) -> Envelope:
    """The provider did not answer well: nothing was spent, try again shortly."""
    return replace(
        view,
        status=Status.RETRYABLE,
        next_action=NextAction.WAIT_THEN_RETRY,
        reason=reason,
        retry_after=max(0.1, seconds_up(retry_after)),
        last_error=reason,
    )


def already_claimed(view: Envelope) -> Envelope:
    return replace(view, reason=Reason.ALREADY_CLAIMED)


def lease_expired(view: Envelope, can_create_another: bool) -> Envelope:
    """A claim after the lease ended, on an unclaimed message: it claimed nothing. A claim
    answer tells no near misses (only wait and get answers do)."""
    return replace(
        view,
        status=Status.BLOCKED,
        next_action=NextAction.CREATE_NEW_INBOX if can_create_another else NextAction.STOP,
        reason=Reason.LEASE_EXPIRED,
        near_misses=(),
        retry_after=None,
        message=None,
        claim=None,
        newer_matching=None,  # it names no message, so no newer one either (v3: null)
        newest_matching=None,
    )
