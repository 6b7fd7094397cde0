"""Agent guidance (pure): next_tool, next_arguments and hint for every row of both tables."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from sink.envelope import Envelope, NearMiss, Unmatched, blocked, describe, provider_trouble
from sink.guidance import HINT_MAX_CHARS, Call, Known, for_error, guide
from sink.inbox import Claim, Evidence, Inbox
from sink.vocabulary import NextAction, Reason, State, Status, Tool

T0 = 1_000_000.0
INBOX_ID = "ib_aaaaaaaaaaaaaaaaaaaa"
ADDRESS = "r7x2k9q4m1@sink.test"
CREATED_WITH = json.dumps(
    {"run_id": "run-1", "purpose": "signup", "ttl_s": 60, "match": {"subject_contains": "Code"}},
    sort_keys=True,
)
SECRET = "SECRET-SUBJECT-918273"
WAIT_CALL = Call(
    Tool.WAIT_FOR_MESSAGE,
    {"inbox_id": INBOX_ID, "run_id": "run-1", "timeout_s": 5, "match": {"subject_contains": "x"}},
)


def inbox(**changes: Any) -> Inbox:
    base = Inbox.fresh(
        inbox_id=INBOX_ID,
        run_id="run-1",
        purpose="signup",
        address=ADDRESS,
        policy_name="ci",
        now=T0,
        ttl_s=600,
        poll_budget=12,
        trace_id="trace",
        created_with=CREATED_WITH,
    )
    return replace(base, **changes)


def evidence(claimed: bool = False) -> Evidence:
    claim = Claim("cl_1", "msg_1", "run-1", T0 + 5) if claimed else None
    return Evidence("msg_1", 1, SECRET, "app@x.test", T0 + 3, claim)


def known(**changes: Any) -> Known:
    return replace(Known(now=T0 + 10, created_at=T0, created_with=CREATED_WITH), **changes)


def view(state_inbox: Inbox, can_create: bool = True, now: float = T0 + 10) -> Envelope:
    return describe(state_inbox, now, can_create, "trace")


def test_created_names_the_wait_and_says_to_trigger_the_app() -> None:
    """created: wait_for_message {inbox_id, run_id}; the hint says to make the app send now."""
    guided = guide(view(inbox()), Call(Tool.CREATE_INBOX, {}), known())
    assert guided.next_tool is Tool.WAIT_FOR_MESSAGE
    assert guided.next_arguments == {"inbox_id": INBOX_ID, "run_id": "run-1"}
    assert guided.hint is not None and "app send" in guided.hint and ADDRESS in guided.hint


def test_waiting_keeps_this_waits_match_and_drops_the_cursor() -> None:
    """waiting: the next wait repeats this wait's match, never its cursor or timeout."""
    waiting = inbox(state=State.WAITING, reason=Reason.EVIDENCE_NOT_FOUND, polls_used=1)
    call = Call(Tool.WAIT_FOR_MESSAGE, {**dict(WAIT_CALL.arguments or {}), "cursor": "c"})
    guided = guide(view(waiting), call, known())
    assert guided.next_tool is Tool.WAIT_FOR_MESSAGE
    assert guided.next_arguments == {
        "inbox_id": INBOX_ID,
        "run_id": "run-1",
        "match": {"subject_contains": "x"},
    }


def test_no_mail_at_all_escalates_after_three_empty_polls() -> None:
    """Three empty polls without any mail: the hint says so, with time and polls, and the check."""
    waiting = inbox(state=State.WAITING, reason=Reason.EVIDENCE_NOT_FOUND, polls_used=3)
    hint = guide(view(waiting), WAIT_CALL, known(mail_seen=False)).hint or ""
    assert "No mail at all" in hint and "3 polls" in hint and "10 s" in hint
    assert "exact address" in hint
    calm = guide(view(replace(waiting, polls_used=2)), WAIT_CALL, known(mail_seen=False)).hint
    assert calm is not None and "No mail at all" not in calm


def test_no_mail_at_all_escalates_after_hint_after_s() -> None:
    """hint_after_s after creation without mail, one poll is enough to escalate."""
    waiting = inbox(state=State.WAITING, reason=Reason.EVIDENCE_NOT_FOUND, polls_used=1)
    late = known(mail_seen=False, now=T0 + 61, hint_after_s=60)
    hint = guide(view(waiting, now=T0 + 61), WAIT_CALL, late).hint or ""
    assert "No mail at all" in hint and "61 s and 1 poll:" in hint


def test_mismatch_names_the_rescan_cursor_and_keeps_the_match() -> None:
    """evidence_mismatch: wait again with the same match; the hint says rescan_cursor."""
    waiting = inbox(state=State.WAITING, reason=Reason.EVIDENCE_MISMATCH, polls_used=1)
    envelope = replace(
        view(waiting),
        unmatched=(Unmatched("msg_2", T0 + 2, "a@x.test", SECRET),),
        rescan_cursor="cur",
    )
    guided = guide(envelope, WAIT_CALL, known())
    assert guided.next_action is NextAction.VERIFY_TRIGGER
    assert guided.next_tool is Tool.WAIT_FOR_MESSAGE
    assert guided.next_arguments == {
        "inbox_id": INBOX_ID,
        "run_id": "run-1",
        "match": {"subject_contains": "x"},
    }
    assert guided.hint is not None and "rescan_cursor" in guided.hint and "1 mail " in guided.hint


def test_a_mismatch_at_the_cap_of_unmatched_never_says_exactly_three_arrived() -> None:
    """unmatched shows the newest 3: the hint then says 3 or more mails, not 3 (5 may have)."""
    waiting = inbox(state=State.WAITING, reason=Reason.EVIDENCE_MISMATCH, polls_used=1)
    shown = tuple(Unmatched(f"msg_{n}", T0 + n, "a@x.test", SECRET) for n in (5, 4, 3))
    envelope = replace(view(waiting), unmatched=shown, rescan_cursor="cur")
    hint = guide(envelope, WAIT_CALL, known()).hint or ""
    assert "3 or more mails arrived" in hint, hint


def test_a_near_miss_names_both_addresses_and_wins() -> None:
    """A near miss is the most specific hint: the caught address, the distance, the typo."""
    waiting = inbox(state=State.WAITING, reason=Reason.EVIDENCE_MISADDRESSED, polls_used=5)
    envelope = replace(
        view(waiting),
        next_action=NextAction.VERIFY_TRIGGER,
        near_misses=(NearMiss("r7x2k9q4m2@sink.test", T0 + 4, 1),),
    )
    hint = guide(envelope, WAIT_CALL, known(mail_seen=False)).hint or ""
    assert "r7x2k9q4m2@sink.test" in hint and ADDRESS in hint and "1 edit" in hint


@pytest.mark.parametrize("can_create", [True, False])
def test_a_near_miss_on_an_expired_inbox_says_the_next_step_not_to_wait(can_create: bool) -> None:
    """Expired with near misses: the hint names the typo and then a new inbox (how many are
    left) or stopping, as next_action says; never "then wait" on an inbox that cannot."""
    expired = inbox(state=State.EXPIRED, reason=Reason.TIMEOUT, polls_used=12)
    envelope = replace(
        view(expired, can_create),
        near_misses=(NearMiss("r7x2k9q4m2@sink.test", T0 + 4, 1),),
    )
    guided = guide(envelope, WAIT_CALL, known(mail_seen=False, inboxes_left=2))
    hint = guided.hint or ""
    assert "r7x2k9q4m2@sink.test" in hint and "typo" in hint and "then wait" not in hint
    if can_create:
        assert guided.next_tool is Tool.CREATE_INBOX
        assert "create_inbox" in hint and "2 more allowed" in hint, hint
    else:
        assert guided.next_tool is None and "stop" in hint, hint
    assert len(hint) <= HINT_MAX_CHARS


def test_a_mismatch_with_a_near_miss_says_both() -> None:
    """evidence_mismatch wins the reason over near misses, so its hint names the near miss
    and still says rescan_cursor (the contract: a mismatch's hint says both)."""
    waiting = inbox(state=State.WAITING, reason=Reason.EVIDENCE_MISMATCH, polls_used=1)
    envelope = replace(
        view(waiting),
        unmatched=(Unmatched("msg_2", T0 + 2, "a@x.test", SECRET),),
        rescan_cursor="cur",
        near_misses=(NearMiss("r7x2k9q4m2@sink.test", T0 + 4, 1),),
    )
    hint = guide(envelope, WAIT_CALL, known()).hint or ""
    assert "r7x2k9q4m2@sink.test" in hint and "rescan_cursor" in hint, hint
    assert len(hint) <= HINT_MAX_CHARS and SECRET not in hint


def test_received_claims_the_message_and_a_resend_claims_the_newest() -> None:
    """received: claim_message {message_id, run_id}; with newer matches, the newest."""
    received = inbox(state=State.RECEIVED, evidence=evidence(), polls_used=1)
    guided = guide(view(received), WAIT_CALL, known())
    assert (guided.next_tool, guided.next_arguments) == (
        Tool.CLAIM_MESSAGE,
        {"message_id": "msg_1", "run_id": "run-1"},
    )
    resend = replace(view(received), newer_matching=1, newest_matching="msg_9")
    guided = guide(resend, WAIT_CALL, known())
    assert guided.next_arguments == {"message_id": "msg_9", "run_id": "run-1"}
    assert guided.hint is not None and "resend" in guided.hint and "newest" in guided.hint


def test_proceed_reads_the_claimed_message() -> None:
    """proceed (claimed, already_claimed too): read_message of the claimed message."""
    claimed = inbox(state=State.RECEIVED, evidence=evidence(claimed=True), polls_used=1)
    guided = guide(view(claimed), Call(Tool.CLAIM_MESSAGE, {}), known())
    assert (guided.next_tool, guided.next_arguments) == (
        Tool.READ_MESSAGE,
        {"message_id": "msg_1", "run_id": "run-1"},
    )


def test_a_resend_after_an_expired_claim_is_not_told_to_wait() -> None:
    """proceed on an expired inbox with a newer matching mail: the hint tells the resend but
    not to wait again (an expired inbox cannot be waited on, nor its newer mail claimed)."""
    expired = inbox(state=State.EXPIRED, reason=Reason.LEASE, evidence=evidence(claimed=True))
    resend = replace(view(expired), newer_matching=1)
    assert resend.next_action is NextAction.PROCEED
    guided = guide(resend, Call(Tool.CLAIM_MESSAGE, {}), known())
    assert guided.hint is not None and "resend" in guided.hint
    assert "wait" not in guided.hint and "expired" in guided.hint


@pytest.mark.parametrize("reason", [Reason.TOO_EARLY, Reason.CIRCUIT_OPEN, Reason.PROVIDER_TIMEOUT])
def test_wait_then_retry_repeats_this_call_as_given(reason: Reason) -> None:
    """wait_then_retry: the tool of this call with this call's own arguments, all of them."""
    waiting = view(inbox(state=State.WAITING, reason=Reason.EVIDENCE_NOT_FOUND, polls_used=1))
    envelope = (
        provider_trouble(waiting, reason, 2.0)
        if reason is Reason.PROVIDER_TIMEOUT
        else blocked(waiting, reason, 2.0)
    )
    guided = guide(envelope, WAIT_CALL, known())
    assert (guided.next_tool, guided.next_arguments) == (Tool.WAIT_FOR_MESSAGE, WAIT_CALL.arguments)
    assert guided.hint is not None and "after 2 s" in guided.hint


def test_create_new_inbox_repeats_the_creation_arguments_exactly() -> None:
    """create_new_inbox: create_inbox with exactly the expired inbox's creation arguments."""
    expired = inbox(state=State.EXPIRED, reason=Reason.TIMEOUT, polls_used=12)
    guided = guide(view(expired), WAIT_CALL, known(mail_seen=True, inboxes_left=2))
    assert guided.next_tool is Tool.CREATE_INBOX
    assert guided.next_arguments == json.loads(CREATED_WITH)
    assert guided.hint is not None and "2 more allowed" in guided.hint


def test_an_inbox_that_never_got_mail_says_fix_the_trigger_first() -> None:
    """Expired without any mail: fix the trigger before creating another, and how many are left."""
    expired = inbox(state=State.EXPIRED, reason=Reason.LEASE)
    hint = guide(view(expired), WAIT_CALL, known(mail_seen=False, inboxes_left=1)).hint or ""
    assert "without receiving any mail" in hint and "fix the app's trigger" in hint
    assert "1 more allowed" in hint


def test_stop_names_no_tool() -> None:
    """stop: next_tool and next_arguments are null; the hint says why."""
    expired = inbox(state=State.EXPIRED, reason=Reason.LEASE)
    guided = guide(view(expired, can_create=False), WAIT_CALL, known(mail_seen=False))
    assert (guided.next_action, guided.next_tool, guided.next_arguments) == (
        NextAction.STOP,
        None,
        None,
    )
    assert guided.hint is not None and "never sent" in guided.hint


def test_hints_stay_short_and_never_quote_mail() -> None:
    """Every hint is one sentence of at most 240 characters without the mail's subject."""
    long_address = "x" * 64 + "@" + "d" * 180 + ".test"
    cases = [
        inbox(address=long_address),
        inbox(state=State.WAITING, reason=Reason.EVIDENCE_NOT_FOUND, polls_used=9),
        inbox(state=State.RECEIVED, evidence=evidence(), polls_used=1),
        inbox(state=State.RECEIVED, evidence=evidence(claimed=True), polls_used=1),
        inbox(state=State.EXPIRED, reason=Reason.TIMEOUT, evidence=evidence()),
    ]
    for case in cases:
        envelope = replace(
            view(case),
            near_misses=(NearMiss("y" * 64 + "@" + "d" * 180 + ".test", T0, 2),),
            unmatched=(Unmatched("msg_2", T0, "a@x.test", SECRET),),
        )
        for knowing in (known(mail_seen=False), known()):
            hint = guide(envelope, WAIT_CALL, knowing).hint or ""
            assert 0 < len(hint) <= HINT_MAX_CHARS and SECRET not in hint, hint


ERROR_ROWS = [
    ("invalid_request", 422, Status.BLOCKED, NextAction.FIX_ARGUMENTS, "same", False),
    ("invalid_cursor", 400, Status.BLOCKED, NextAction.FIX_ARGUMENTS, "same", False),
    ("unknown_policy", 400, Status.BLOCKED, NextAction.FIX_ARGUMENTS, "same", False),
    ("idempotency_key_conflict", 409, Status.BLOCKED, NextAction.FIX_ARGUMENTS, "same", False),
    ("not_found", 404, Status.BLOCKED, NextAction.STOP, None, False),
    ("policy_forbids", 409, Status.BLOCKED, NextAction.STOP, None, False),
    ("evidence_released", 410, Status.BLOCKED, NextAction.STOP, None, False),
    ("unauthorized", 401, Status.BLOCKED, NextAction.STOP, None, False),
    ("forbidden_scope", 403, Status.BLOCKED, NextAction.STOP, None, False),
    ("wrong_run", 403, Status.BLOCKED, NextAction.STOP, None, False),
    ("claimed_by_other_run", 409, Status.BLOCKED, NextAction.STOP, None, False),
    ("provider_timeout", 503, Status.RETRYABLE, NextAction.WAIT_THEN_RETRY, "same", True),
    ("provider_error", 503, Status.RETRYABLE, NextAction.WAIT_THEN_RETRY, "same", True),
    ("over_capacity", 503, Status.RETRYABLE, NextAction.WAIT_THEN_RETRY, "same", True),
    ("circuit_open", 503, Status.BLOCKED, NextAction.WAIT_THEN_RETRY, "same", True),
]


@pytest.mark.parametrize(("code", "http", "status", "action", "tool", "arguments"), ERROR_ROWS)
def test_error_table_row(
    code: str, http: int, status: Status, action: NextAction, tool: str | None, arguments: bool
) -> None:
    """Each error code's status, next_action, next_tool and next_arguments, as the table says."""
    call = Call(Tool.READ_MESSAGE, {"message_id": "msg_1", "run_id": "run-1"})
    guided = for_error(code, http, call, message="field: problem", retry_after=3.0)
    assert (guided.status, guided.next_action) == (status, action)
    assert guided.next_tool is (Tool.READ_MESSAGE if tool else None)
    assert guided.next_arguments == (dict(call.arguments or {}) if arguments else None)
    assert 0 < len(guided.hint) <= HINT_MAX_CHARS
    if action is NextAction.WAIT_THEN_RETRY:
        assert guided.retry_after == 3.0


def test_a_bad_cursor_hint_fits_every_list_not_only_an_inbox() -> None:
    """invalid_cursor's hint serves every cursor list (webhook deliveries, caught mail,
    search), not only an inbox's messages: it names the list, and what omitting does."""
    hint = for_error("invalid_cursor", 400, Call(None)).hint
    assert "this list" in hint and "next_cursor" in hint and "first page" in hint


def test_idempotency_conflict_speaks_without_http_terms() -> None:
    """idempotency_key_conflict's hint is the contract's MCP sentence (no key, no body)."""
    hint = for_error("idempotency_key_conflict", 409, Call(Tool.CREATE_INBOX)).hint
    assert hint == (
        "This run and purpose already have a live inbox created with other arguments: repeat "
        "the earlier arguments, or use another purpose."
    )


def test_invalid_request_on_a_route_no_tool_serves_reads_as_english() -> None:
    """A route with no MCP tool (e.g. a message list) says "make the call again", never
    "call the call again"."""
    hint = for_error("invalid_request", 422, Call(None), message="limit: 1 to 500").hint
    assert hint.endswith("then make the call again.") and "call the call" not in hint, hint
