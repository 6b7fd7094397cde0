"""Agent guidance: the tool to call next, its arguments, and one sentence saying why.

Pure: no I/O; ``now`` comes in with what the server knows (``Known``). The contract's two
tables (v3, "Agent guidance") are read off this file:

    envelope:  next_action -> next_tool, next_arguments     (``_next``; hints: ``_hint``)
    errors:    error code -> status, next_action, next tool  (``_ERRORS``; hints: ``_ERROR_HINTS``)

The agent (``sink/agent.py``) calls ``guide`` on every envelope it answers with; the HTTP and
MCP error replies call ``for_error``. ``Call`` is the call being answered, named as the MCP
tool it is (an HTTP route names the tool it corresponds to) with its arguments as given,
so ``wait_then_retry`` can say "this call again" and be exact.

A hint is one English sentence of at most 240 characters. It never quotes mail content
(no subject, body, code or link); it may name the inbox's address and a near miss's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from sink.envelope import Envelope
from sink.vocabulary import NextAction, Reason, State, Status, Tool

HINT_MAX_CHARS = 240
EMPTY_POLLS_BEFORE_ESCALATING = 3
UNMATCHED_SHOWN = 3  # an answer's unmatched holds at most this many (sink/evidence.py SHOWN)


@dataclass(frozen=True, slots=True)
class Call:
    """The call being answered, as an MCP tool call (None: a route no tool corresponds to)."""

    tool: Tool | None
    arguments: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Known:
    """What the server knows about the inbox beyond the envelope itself."""

    now: float
    created_at: float
    created_with: str | None = None  # the create_inbox arguments, canonical JSON
    hint_after_s: float = 60.0
    mail_seen: bool = True  # any delivery reached the inbox (True when not asked)
    inboxes_left: int | None = None  # more inboxes allowed for the run and purpose


# -- envelopes -------------------------------------------------------------------------


def guide(envelope: Envelope, call: Call, known: Known) -> Envelope:
    """``envelope`` with next_tool, next_arguments and hint filled in."""
    tool, arguments = _next(envelope, call, known)
    return replace(envelope, next_tool=tool, next_arguments=arguments, hint=_hint(envelope, known))


def needs_mail_check(envelope: Envelope) -> bool:
    """Whether the hint depends on ``Known.mail_seen`` (so the agent asks the store only then)."""
    if envelope.message is not None or envelope.unmatched or envelope.near_misses:
        return False
    action = envelope.next_action
    if action is NextAction.WAIT_FOR_MESSAGE:
        return envelope.reason in (None, Reason.EVIDENCE_NOT_FOUND)
    return action in (NextAction.CREATE_NEW_INBOX, NextAction.STOP)


def needs_inbox_count(envelope: Envelope) -> bool:
    """Whether the hint says ``Known.inboxes_left`` (so the agent counts the run's inboxes
    only then)."""
    return envelope.next_action in (NextAction.CREATE_NEW_INBOX, NextAction.STOP)


def _next(
    envelope: Envelope, call: Call, known: Known
) -> tuple[Tool | None, dict[str, Any] | None]:
    action = envelope.next_action
    run_id = envelope.run_id
    if action in (NextAction.WAIT_FOR_MESSAGE, NextAction.VERIFY_TRIGGER):
        return Tool.WAIT_FOR_MESSAGE, _wait_arguments(envelope, call)
    if action is NextAction.CLAIM_MESSAGE and envelope.message is not None:
        if envelope.newer_matching and envelope.newest_matching is not None:
            # A resend: the newest matching mail usually holds the valid code.
            return Tool.CLAIM_MESSAGE, {"message_id": envelope.newest_matching, "run_id": run_id}
        return Tool.CLAIM_MESSAGE, {"message_id": envelope.message.message_id, "run_id": run_id}
    if action is NextAction.PROCEED:
        claimed = envelope.claim.message_id if envelope.claim else None
        message_id = claimed or (envelope.message.message_id if envelope.message else None)
        if message_id is not None:
            return Tool.READ_MESSAGE, {"message_id": message_id, "run_id": run_id}
    if action is NextAction.WAIT_THEN_RETRY and call.tool is not None:
        return call.tool, dict(call.arguments or {})
    if action is NextAction.CREATE_NEW_INBOX:
        return Tool.CREATE_INBOX, created_arguments(envelope, known)
    return None, None


def _wait_arguments(envelope: Envelope, call: Call) -> dict[str, Any]:
    """``{inbox_id, run_id}``, and the criteria this wait was given (to keep waiting for
    the same mail): match and order, never the cursor (the inbox keeps its own)."""
    arguments: dict[str, Any] = {"inbox_id": envelope.inbox_id, "run_id": envelope.run_id}
    if call.tool is Tool.WAIT_FOR_MESSAGE and call.arguments:
        for name in ("match", "order"):
            if call.arguments.get(name) is not None:
                arguments[name] = call.arguments[name]
    return arguments


def created_arguments(envelope: Envelope, known: Known) -> dict[str, Any]:
    """Exactly the arguments the inbox was created with (an inbox from before v3 kept none:
    its run and purpose, which make the run's next inbox all the same)."""
    if known.created_with is not None:
        given = json.loads(known.created_with)
        if isinstance(given, dict):
            return given
    return {"run_id": envelope.run_id, "purpose": envelope.purpose}


def _hint(envelope: Envelope, known: Known) -> str:
    near = _near_miss_hint(envelope, known)
    if near is not None:
        return near
    action = envelope.next_action
    if action is NextAction.WAIT_FOR_MESSAGE:
        return _waiting_hint(envelope, known)
    if action is NextAction.VERIFY_TRIGGER:
        return _mismatch_hint(envelope)
    if action is NextAction.CLAIM_MESSAGE:
        return _claim_hint(envelope)
    if action is NextAction.PROCEED:
        return _proceed_hint(envelope)
    if action is NextAction.WAIT_THEN_RETRY:
        return _retry_hint(envelope)
    if action in (NextAction.CREATE_NEW_INBOX, NextAction.STOP):
        return _expired_hint(envelope, known)
    return "Nothing more is allowed for this inbox: stop."


def _near_miss_hint(envelope: Envelope, known: Known) -> str | None:
    if not envelope.near_misses or envelope.message is not None:
        return None
    near = envelope.near_misses[0]
    edits = _count(near.distance, "edit")
    if envelope.rescan_cursor is not None:  # a mismatch too: its hint says rescan_cursor
        return _fit(
            f"Mail went to {near.address}, {edits} from this inbox's address (an app typo?), "
            "and the mail that reached this inbox did not match: check the app and your match, "
            "or wait with cursor set to rescan_cursor.",
            "Mail went to an address a few letters off this inbox's (see near_misses) and the "
            "mail here did not match: check the app and your match, or wait with cursor set to "
            "rescan_cursor.",
        )
    then = _after_the_typo(envelope, known)
    return _fit(
        f"Mail was sent to {near.address}, {edits} from this inbox's {envelope.address}: the "
        f"app has a typo in the address; fix it, {then}.",
        f"Mail was sent to {near.address}, {edits} from this inbox's address: the app has a "
        f"typo in the address; fix it, {then}.",
        "Mail was sent to an address a few letters off this inbox's (see near_misses): fix "
        f"the app's typo, {then}.",
    )


def _after_the_typo(envelope: Envelope, known: Known) -> str:
    """What follows fixing the typo: wait here, a new inbox (this one expired), or stop."""
    if envelope.next_action is NextAction.CREATE_NEW_INBOX:
        left = known.inboxes_left
        allowed = "" if left is None else f" ({left} more allowed)"
        return f"then create_inbox for a new inbox{allowed} and trigger the app again"
    if envelope.next_action is NextAction.STOP:
        return "but no more inboxes are allowed for this run and purpose: stop and report it"
    return "trigger the app again, then wait"


def _waiting_hint(envelope: Envelope, known: Known) -> str:
    elapsed = known.now - known.created_at
    empty_polls = envelope.attempt
    if not known.mail_seen and (
        elapsed >= known.hint_after_s or empty_polls >= EMPTY_POLLS_BEFORE_ESCALATING
    ):
        polls = _count(empty_polls, "poll")
        return _fit(
            f"No mail at all has reached {envelope.address} in {_span(elapsed)} and {polls}: "
            "check that the app really sent the email, to this exact address, before waiting "
            "again.",
            f"No mail at all has reached this inbox in {_span(elapsed)} and {polls}: check that "
            "the app really sent the email, to this exact address, before waiting again.",
        )
    if envelope.state is State.CREATED:
        return _fit(
            f"Make the app send the email to {envelope.address} now, then call "
            "wait_for_message: it returns the moment matching mail arrives.",
            "Make the app send the email to this inbox's address now, then call "
            "wait_for_message: it returns the moment matching mail arrives.",
        )
    when = _after(envelope.retry_after)
    if known.mail_seen:
        return (
            f"Nothing new matched since the last look: call wait_for_message again {when}; "
            "it returns the moment matching mail arrives."
        )
    return _fit(
        f"No mail yet: call wait_for_message again {when}; it returns the moment mail "
        f"reaches {envelope.address}.",
        f"No mail yet: call wait_for_message again {when}; it returns the moment mail "
        "reaches this inbox.",
    )


def _mismatch_hint(envelope: Envelope) -> str:
    count = len(envelope.unmatched)
    if count == 0:
        arrived = "Mail arrived"
    elif count < UNMATCHED_SHOWN:
        arrived = f"{_count(count, 'mail')} arrived"
    else:  # the list is cut at its cap: more may have arrived
        arrived = f"{count} or more mails arrived"
    mail = "it" if count <= 1 else "them"
    rescan = (
        f"; to look at {mail} again with other criteria, wait with cursor set to rescan_cursor"
        if envelope.rescan_cursor
        else ""
    )
    return _fit(
        f"{arrived} but none matched this wait's criteria: check that the app sent the email "
        f"you expect and that your match is right{rescan}.",
        f"{arrived} but none matched: check the app and your match{rescan}.",
    )


def _claim_hint(envelope: Envelope) -> str:
    newer = envelope.newer_matching or 0
    if newer > 0:
        which = (
            "next_arguments claim that newest one"
            if envelope.newest_matching is not None
            else "wait again with order newest to get it"
        )
        return (
            f"{_count(newer, 'newer matching mail')} arrived after this one (a resend): the "
            f"newest usually holds the valid code, so {which}."
        )
    return (
        "A matching message arrived: claim it with claim_message, then call read_message for "
        "its codes and links."
    )


def _proceed_hint(envelope: Envelope) -> str:
    newer = envelope.newer_matching or 0
    if newer > 0:
        then = (
            "this inbox has expired, so use this one's"
            if envelope.state is State.EXPIRED  # no wait, nor claim, reaches the newer one now
            else "if this one's is refused, wait again with order newest"
        )
        return (
            f"This run claimed a message, but {_count(newer, 'newer matching mail')} arrived "
            f"after it (a resend): the newest usually holds the valid code; {then}."
        )
    if envelope.reason is Reason.ALREADY_CLAIMED:
        return (
            "This run had already claimed this message: call read_message for its codes and "
            "links, and use them."
        )
    return "The message is claimed for this run: call read_message for its codes and links."


_RETRY_WHY = {
    Reason.TOO_EARLY: "It is too early for the next poll",
    Reason.CIRCUIT_OPEN: "Recent calls on this inbox failed, so its circuit is open",
    Reason.PROVIDER_TIMEOUT: "The mail store did not answer in time",
    Reason.PROVIDER_ERROR: "The mail store failed",
}


def _retry_hint(envelope: Envelope) -> str:
    why = _RETRY_WHY.get(envelope.reason or Reason.PROVIDER_ERROR, "The call could not be done")
    return f"{why}; nothing was spent: repeat this call {_after(envelope.retry_after)}."


_EXPIRY_WHY = {
    Reason.LEASE: "its lease ended",
    Reason.TIMEOUT: "its poll budget was spent",
}


def _expired_hint(envelope: Envelope, known: Known) -> str:
    why = _EXPIRY_WHY.get(envelope.reason or Reason.LEASE, "it is over")
    left = known.inboxes_left
    allowed = "" if left is None else f" ({left} more allowed for this run and purpose)"
    if envelope.reason is Reason.LEASE_EXPIRED:
        # A claim after the lease claimed nothing (the inbox may hold an earlier claim, so
        # never say "without evidence" here).
        then = (
            f"create_inbox with these arguments makes the run's next inbox{allowed}; then "
            "trigger the app again"
            if envelope.next_action is NextAction.CREATE_NEW_INBOX
            else "no more inboxes are allowed for this run and purpose: stop; get_run_report "
            "explains what happened"
        )
        return f"This claim came after the inbox's lease ended, so it claimed nothing: {then}."
    never = not known.mail_seen and envelope.message is None
    if envelope.next_action is NextAction.CREATE_NEW_INBOX:
        if never:
            return (
                f"This inbox expired ({why}) without receiving any mail: fix the app's trigger "
                f"before creating another inbox{allowed}."
            )
        return (
            f"This inbox expired ({why}) without evidence: create_inbox with these arguments "
            f"makes the run's next inbox{allowed}; then trigger the app again."
        )
    if never:
        return (
            f"This inbox expired ({why}) without receiving any mail, and no more inboxes are "
            "allowed for this run and purpose: the app never sent the email; stop and report it."
        )
    return (
        f"This inbox expired ({why}) and no more inboxes are allowed for this run and purpose: "
        "stop; get_run_report explains what happened."
    )


# -- errors ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ErrorGuidance:
    """What an error body says besides ``error``: the contract's error table, one row."""

    status: Status
    next_action: NextAction
    next_tool: Tool | None
    next_arguments: dict[str, Any] | None
    hint: str
    retry_after: float | None

    def fields(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "next_action": self.next_action.value,
            "next_tool": None if self.next_tool is None else self.next_tool.value,
            "next_arguments": self.next_arguments,
            "hint": self.hint,
            "retry_after": self.retry_after,
        }


_FIX = (Status.BLOCKED, NextAction.FIX_ARGUMENTS)
_STOP = (Status.BLOCKED, NextAction.STOP)
_RETRY = (Status.RETRYABLE, NextAction.WAIT_THEN_RETRY)

# error code -> (status, next_action). next_tool / next_arguments follow from next_action:
# fix_arguments -> the same tool / null; stop -> null / null; wait_then_retry -> the same
# tool / the same arguments.
_ERRORS: dict[str, tuple[Status, NextAction]] = {
    "invalid_request": _FIX,
    "invalid_cursor": _FIX,
    "unknown_policy": _FIX,
    "idempotency_key_conflict": _FIX,
    "not_found": _STOP,
    "policy_forbids": _STOP,
    "evidence_released": _STOP,
    "unauthorized": _STOP,
    "forbidden_scope": _STOP,
    "wrong_run": _STOP,
    "claimed_by_other_run": _STOP,
    "live_evidence": _STOP,
    "provider_timeout": _RETRY,
    "provider_error": _RETRY,
    "over_capacity": _RETRY,
    "internal_error": _RETRY,
    "server_unreachable": _RETRY,
    "circuit_open": (Status.BLOCKED, NextAction.WAIT_THEN_RETRY),
    "too_many_failures": (Status.BLOCKED, NextAction.WAIT_THEN_RETRY),
}

_Hint = Callable[[Call, str, Mapping[str, Any]], str]


def _call_again(call: Call) -> str:
    return "make the call again" if call.tool is None else f"call {call.tool.value} again"


# error code -> its hint: a sentence, or one made from the call, error.message and error.details
_ERROR_HINTS: dict[str, str | _Hint] = {
    "invalid_request": lambda call, message, details: _fit(
        f"The arguments were refused ({message}): correct that, then {_call_again(call)}.",
        f"The arguments were refused: correct what error.message names, then {_call_again(call)}.",
    ),
    "invalid_cursor": (
        "That cursor is not one this server gave for this list: pass next_cursor back as an "
        "earlier answer gave it, or omit cursor (an inbox keeps its own position; other lists "
        "start again from the first page)."
    ),
    "unknown_policy": lambda call, message, details: _fit(
        "No policy of that name on this server: omit policy (the server's default) or use one "
        f"of {', '.join(str(p) for p in details.get('known', ()))}.",
        "No policy of that name on this server: omit policy to use the server's default.",
    ),
    "idempotency_key_conflict": (
        "This run and purpose already have a live inbox created with other arguments: repeat "
        "the earlier arguments, or use another purpose."
    ),
    "not_found": (
        "Nothing here has that id: use the id returned by the call that made it (create_inbox's "
        "inbox_id, wait_for_message's message.message_id), never one you made up."
    ),
    "policy_forbids": (
        "The policy allows no more inboxes for this run and purpose: stop; get_run_report "
        "shows what happened to the earlier ones."
    ),
    "evidence_released": (
        "This message's body was released (its run was released or its retention passed); only "
        "metadata is left: stop."
    ),
    "unauthorized": (
        "The server needs a valid API token for this call: ask whoever runs it for one; "
        "repeating the call will not help."
    ),
    "forbidden_scope": (
        "Your token does not reach this run or call: stop, or ask whoever gave you the token "
        "for one that does."
    ),
    "wrong_run": (
        "This inbox or message belongs to another run: use only the ids your own run's calls "
        "returned, with your own run_id."
    ),
    "claimed_by_other_run": (
        "Another run claimed this message first: it is not your evidence; do not use it."
    ),
    "live_evidence": "That mail is evidence of a live inbox and cannot be deleted now: stop.",
    "circuit_open": (
        "Recent calls here failed, so the circuit is open; nothing was done: repeat this call "
        "after retry_after seconds."
    ),
    "provider_timeout": (
        "The mail store did not answer in time; nothing was done: repeat this call after "
        "retry_after seconds."
    ),
    "provider_error": (
        "The mail store failed; nothing was done: repeat this call after retry_after seconds."
    ),
    "over_capacity": (
        "The server is at its limit of concurrent calls: repeat this call after retry_after "
        "seconds."
    ),
    "internal_error": "The server failed on this call: repeat it after retry_after seconds.",
    "too_many_failures": (
        "Too many calls from this address gave a wrong API token: wait retry_after seconds, "
        "then call again with a valid token."
    ),
    "server_unreachable": (
        "The runsink server did not answer: repeat this call after retry_after seconds."
    ),
}


def for_error(
    code: str,
    http_status: int,
    call: Call | None = None,
    *,
    message: str = "",
    details: Mapping[str, Any] | None = None,
    retry_after: float | None = None,
) -> ErrorGuidance:
    """The error table's row for ``code`` (a code it does not name goes by its HTTP status:
    5xx and 429 are worth repeating, any other 4xx is the caller's to fix)."""
    call = call or Call(None)
    row = _ERRORS.get(code)
    if row is None:
        row = _RETRY if http_status >= 500 or http_status == 429 else _FIX
    status, action = row
    tool: Tool | None = None
    arguments: dict[str, Any] | None = None
    if action is NextAction.FIX_ARGUMENTS:
        tool = call.tool
    elif action is NextAction.WAIT_THEN_RETRY and call.tool is not None:
        tool, arguments = call.tool, dict(call.arguments or {})
    if action is NextAction.WAIT_THEN_RETRY and retry_after is None:
        retry_after = 1.0
    hint_of = _ERROR_HINTS.get(code)
    if isinstance(hint_of, str):
        hint = hint_of
    elif hint_of is not None:
        hint = hint_of(call, message, details or {})
    elif action is NextAction.WAIT_THEN_RETRY:
        hint = "The call could not be done now: repeat it after retry_after seconds."
    else:
        hint = _fit(
            f"The call was refused ({message}): correct that before calling again.",
            "The call was refused: correct what error.message names before calling again.",
        )
    return ErrorGuidance(status, action, tool, arguments, _fit(hint), retry_after)


# -- words -------------------------------------------------------------------------------


def _fit(*candidates: str) -> str:
    """The first candidate within the limit (the last ones leave out long names)."""
    for text in candidates:
        if len(text) <= HINT_MAX_CHARS:
            return text
    return candidates[-1][: HINT_MAX_CHARS - 1] + "."


def _span(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{math.floor(seconds)} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{round(seconds / 3600, 1):g} h"


def _after(retry_after: float | None) -> str:
    return "now" if not retry_after else f"after {retry_after:g} s"


def _count(n: int, noun: str) -> str:
    return f"1 {noun}" if n == 1 else f"{n} {noun}s"
