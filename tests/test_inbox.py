"""The inbox state machine, lease, budget, schedule and match rules (pure, fake clock)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sink.envelope import describe
from sink.inbox import (
    Claim,
    Delivery,
    GateKind,
    IllegalTransition,
    Inbox,
    Match,
    ScanResult,
    after_claim,
    after_poll,
    wait_gate,
)
from sink.policy import CI
from sink.vocabulary import NextAction as Action
from sink.vocabulary import Reason, State, Status

T0 = 1_000_000.0


def make_inbox(**changes: object) -> Inbox:
    inbox = Inbox.fresh(
        inbox_id="ib_aaaaaaaaaaaaaaaaaaaa",
        run_id="run-1",
        purpose="signup",
        address="raaaa@sink.test",
        policy_name="ci",
        now=T0,
        ttl_s=600,
        poll_budget=12,
        trace_id="trace",
    )
    return replace(inbox, **changes)  # type: ignore[arg-type]


def delivery(seq: int, subject: str = "Hello", claim: Claim | None = None) -> Delivery:
    return Delivery(
        seq, f"msg_{seq}", "ib_aaaaaaaaaaaaaaaaaaaa", subject, "app@x.test", T0 + seq, 100, claim
    )


NOTHING = ScanResult(None, 0, False)


def test_created_moves_to_waiting_on_an_empty_poll() -> None:
    """created -> waiting when a wait finds nothing; one poll is spent."""
    after = after_poll(make_inbox(), CI, NOTHING, T0, T0 + 0.01)
    assert after.state is State.WAITING and after.reason == "evidence_not_found"
    assert after.polls_used == 1


def test_created_moves_to_received_on_a_match() -> None:
    """created -> received when a wait finds a match; the cursor sits just before it."""
    found = delivery(7)
    after = after_poll(make_inbox(), CI, ScanResult(found, 6, False), T0, T0)
    assert after.state is State.RECEIVED and after.evidence is not None
    assert after.evidence.message_id == "msg_7" and after.cursor_seq == 6


def test_waiting_and_received_alternate_through_claims() -> None:
    """waiting -> received -> (claim) -> waiting on the next empty wait."""
    waiting = after_poll(make_inbox(), CI, NOTHING, T0, T0)
    received = after_poll(waiting, CI, ScanResult(delivery(3), 2, False), T0 + 1, T0 + 1)
    claim = Claim("clm_1", "msg_3", "run-1", T0 + 2)
    claimed = after_claim(received, delivery(3), claim)
    assert (
        claimed.cursor_seq == 3 and claimed.evidence is not None and claimed.evidence.claim == claim
    )
    again = after_poll(claimed, CI, ScanResult(None, 3, False), T0 + 3, T0 + 3)
    assert again.state is State.WAITING and again.evidence is None


def test_mismatch_is_remembered_as_evidence_mismatch() -> None:
    """Mail beyond the cursor that did not match gives evidence_mismatch and moves the cursor."""
    after = after_poll(make_inbox(), CI, ScanResult(None, 9, True), T0, T0)
    assert after.reason == "evidence_mismatch" and after.cursor_seq == 9


def test_cursor_never_moves_backwards() -> None:
    """A poll from an older cursor cannot move the stored cursor back."""
    inbox = make_inbox(cursor_seq=50)
    after = after_poll(inbox, CI, ScanResult(None, 10, False), T0, T0)
    found = after_poll(inbox, CI, ScanResult(delivery(20), 19, False), T0, T0)
    assert after.cursor_seq == 50 and found.cursor_seq == 50


@pytest.mark.parametrize("state", list(State))
def test_every_state_expires_with_the_lease(state: State) -> None:
    """Every state -> expired/lease once now >= expires_at."""
    evidence = delivery(1).as_evidence() if state is State.RECEIVED else None
    inbox = make_inbox(state=state, evidence=evidence)
    current = inbox.effective(T0 + 600)
    assert current.state is State.EXPIRED
    if state is not State.EXPIRED:
        assert current.reason == "lease"
    assert inbox.effective(T0 + 599.999).state is state


def test_nothing_leaves_expired() -> None:
    """expired is terminal: polls and claims refuse, expiring again changes nothing."""
    expired = make_inbox().expire(Reason.TIMEOUT, T0 + 5)
    assert expired.expire(Reason.LEASE, T0 + 6) == expired
    with pytest.raises(IllegalTransition):
        after_poll(expired, CI, ScanResult(delivery(1), 0, False), T0, T0)
    with pytest.raises(IllegalTransition):
        after_claim(expired, delivery(1), Claim("c", "msg_1", "run-1", T0))
    assert expired.effective(T0 - 100).state is State.EXPIRED
    assert wait_gate(expired, T0).kind is GateKind.EXPIRED


def test_unknown_expiry_reason_is_refused() -> None:
    """Only lease and timeout end an inbox."""
    with pytest.raises(IllegalTransition):
        make_inbox().expire("whim", T0)  # type: ignore[arg-type]


def test_schedule_sets_next_poll_at_from_the_start_or_the_end() -> None:
    """next_poll_at = start + poll_interval_s[k], or the wait's end if later; the last repeats."""
    inbox = make_inbox()
    first = after_poll(inbox, CI, NOTHING, T0, T0 + 0.5)
    assert first.next_poll_at == T0 + 1
    long_wait = after_poll(inbox, CI, NOTHING, T0, T0 + 20)
    assert long_wait.next_poll_at == T0 + 20
    late = make_inbox(polls_used=9)
    assert after_poll(late, CI, NOTHING, T0, T0).next_poll_at == T0 + 30
    assert [CI.poll_interval(k) for k in range(8)] == [1, 2, 4, 8, 15, 30, 30, 30]


def test_wait_gate_order_too_early_then_budget() -> None:
    """Before next_poll_at a wait is too_early (with the time left), even with no budget left."""
    inbox = make_inbox(next_poll_at=T0 + 2, polls_used=12, state=State.WAITING)
    gate = wait_gate(inbox, T0 + 0.5)
    assert gate.kind is GateKind.TOO_EARLY and gate.retry_after == pytest.approx(1.5)
    assert wait_gate(inbox, T0 + 2).kind is GateKind.OUT_OF_BUDGET


def test_budget_spent_repeats_an_unclaimed_received() -> None:
    """With no polls left, a wait repeats the received answer while its match is unclaimed."""
    received = make_inbox(state=State.RECEIVED, polls_used=12, evidence=delivery(4).as_evidence())
    assert wait_gate(received, T0).kind is GateKind.REPEAT_RECEIVED
    claimed = replace(
        received,
        evidence=replace(delivery(4).as_evidence(), claim=Claim("c", "msg_4", "run-1", T0)),
    )
    assert wait_gate(claimed, T0).kind is GateKind.OUT_OF_BUDGET


def test_last_poll_without_evidence_expires_timeout() -> None:
    """The last poll without evidence moves the inbox to expired/timeout."""
    inbox = make_inbox(polls_used=11)
    after = after_poll(inbox, CI, NOTHING, T0, T0)
    assert after.state is State.EXPIRED and after.reason == "timeout" and after.remaining_polls == 0


def test_last_poll_with_evidence_stays_received() -> None:
    """The last poll that finds evidence is received, not expired."""
    after = after_poll(make_inbox(polls_used=11), CI, ScanResult(delivery(2), 1, False), T0, T0)
    assert after.state is State.RECEIVED


def test_poll_ending_after_the_lease_is_lease_expiry() -> None:
    """A poll without evidence that ends at or past expires_at expires the inbox (lease)."""
    after = after_poll(make_inbox(), CI, NOTHING, T0 + 590, T0 + 600)
    assert after.state is State.EXPIRED and after.reason == "lease"


def test_match_is_literal_and_case_insensitive() -> None:
    """Criteria are substrings, case-insensitive, never regular expressions."""
    match = Match(subject_contains="RESET .*", from_contains="APP.TEST")
    assert match.headers_match("Password reset .* now", "noreply@app.test", T0, T0)
    assert not match.headers_match("Password reset now", "noreply@app.test", T0, T0)
    assert Match(body_contains="Ñandú").body_matches("un ñandú corre")
    assert Match().headers_match("", "", T0, T0) and Match().body_matches("")


def test_max_age_ignores_old_mail() -> None:
    """max_age_s drops mail older than that at the time of the wait."""
    match = Match(max_age_s=60)
    assert match.headers_match("s", "f", T0, T0 + 60)
    assert not match.headers_match("s", "f", T0, T0 + 61)


def _envelope(
    inbox: Inbox, now: float = T0, can_create: bool = True
) -> tuple[str, str, str, str | None]:
    env = describe(inbox, now, can_create, "trace")
    return env.state, env.status, env.next_action, env.reason


def test_every_state_has_a_concrete_next_action() -> None:
    """Each state maps to the contract's status and next_action."""
    claim = Claim("c", "msg_4", "run-1", T0)
    assert _envelope(make_inbox()) == ("created", Status.COMPLETED, Action.WAIT_FOR_MESSAGE, None)
    waiting = make_inbox(state=State.WAITING, reason="evidence_not_found", next_poll_at=T0 + 2)
    assert _envelope(waiting) == (
        "waiting",
        Status.RETRYABLE,
        Action.WAIT_FOR_MESSAGE,
        "evidence_not_found",
    )
    mismatch = replace(waiting, reason=Reason.EVIDENCE_MISMATCH)
    assert _envelope(mismatch)[2] == Action.VERIFY_TRIGGER
    received = make_inbox(state=State.RECEIVED, evidence=delivery(4).as_evidence())
    assert _envelope(received) == ("received", Status.COMPLETED, Action.CLAIM_MESSAGE, None)
    claimed = replace(received, evidence=replace(delivery(4).as_evidence(), claim=claim))
    assert _envelope(claimed) == ("received", Status.COMPLETED, Action.PROCEED, None)
    expired = make_inbox().expire(Reason.TIMEOUT, T0)
    assert _envelope(expired) == ("expired", Status.BLOCKED, Action.CREATE_NEW_INBOX, "timeout")
    assert _envelope(expired, can_create=False)[2] == Action.STOP
    assert _envelope(claimed.expire(Reason.LEASE, T0)) == (
        "expired",
        Status.COMPLETED,
        Action.PROCEED,
        "lease",
    )


def test_waiting_retry_after_counts_down_to_next_poll() -> None:
    """retry_after is the time to next_poll_at, rounded up to 0.1 s, never negative."""
    waiting = make_inbox(state=State.WAITING, reason="evidence_not_found", next_poll_at=T0 + 1.23)
    assert describe(waiting, T0, True, "t").retry_after == 1.3
    assert describe(waiting, T0 + 5, True, "t").retry_after == 0.0


def test_received_cursor_is_just_before_the_message() -> None:
    """In received, the envelope's cursor is the position just before the returned message."""
    from sink.ids import decode_cursor

    received = make_inbox(state=State.RECEIVED, evidence=delivery(8).as_evidence(), cursor_seq=20)
    env = describe(received, T0, True, "t")
    assert decode_cursor(received.inbox_id, env.cursor) == 7
