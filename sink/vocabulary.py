"""The contract's words, once: states, statuses, next actions and reasons.

Each is a ``StrEnum``: the domain (``sink.inbox``, ``sink.envelope``) sets and compares
the members, so mypy checks every reason that is set. The ``...Name`` aliases are the same
members as ``Literal`` types, for the wire models (``api/schemas.py``, whose JSON Schema
lists their values) and the Python client's typed fields; the MCP tool schemas take the
tuples. No transport can drift from the others.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, get_args


class State(StrEnum):
    CREATED = "created"
    WAITING = "waiting"
    RECEIVED = "received"
    EXPIRED = "expired"


class Status(StrEnum):
    COMPLETED = "completed"
    RETRYABLE = "retryable"
    BLOCKED = "blocked"


class NextAction(StrEnum):
    WAIT_FOR_MESSAGE = "wait_for_message"
    CLAIM_MESSAGE = "claim_message"
    PROCEED = "proceed"
    WAIT_THEN_RETRY = "wait_then_retry"
    VERIFY_TRIGGER = "verify_trigger"
    CREATE_NEW_INBOX = "create_new_inbox"
    STOP = "stop"
    FIX_ARGUMENTS = "fix_arguments"  # v3, errors only: correct what the error names, call again


class Reason(StrEnum):
    EVIDENCE_NOT_FOUND = "evidence_not_found"
    EVIDENCE_MISMATCH = "evidence_mismatch"
    PROVIDER_TIMEOUT = "provider_timeout"
    PROVIDER_ERROR = "provider_error"
    CIRCUIT_OPEN = "circuit_open"
    TOO_EARLY = "too_early"
    LEASE = "lease"
    TIMEOUT = "timeout"
    ALREADY_CLAIMED = "already_claimed"
    CLAIMED_BY_OTHER_RUN = "claimed_by_other_run"
    WRONG_RUN = "wrong_run"
    LEASE_EXPIRED = "lease_expired"
    EVIDENCE_MISADDRESSED = "evidence_misaddressed"  # v3: only near misses arrived


class Tool(StrEnum):
    """The MCP tools an answer's ``next_tool`` may name (v3 agent guidance)."""

    CREATE_INBOX = "create_inbox"
    WAIT_FOR_MESSAGE = "wait_for_message"
    READ_MESSAGE = "read_message"
    CLAIM_MESSAGE = "claim_message"
    GET_RUN_REPORT = "get_run_report"
    FIND_MAIL = "find_mail"


StateName = Literal[State.CREATED, State.WAITING, State.RECEIVED, State.EXPIRED]
StatusName = Literal[Status.COMPLETED, Status.RETRYABLE, Status.BLOCKED]
NextActionName = Literal[
    NextAction.WAIT_FOR_MESSAGE,
    NextAction.CLAIM_MESSAGE,
    NextAction.PROCEED,
    NextAction.WAIT_THEN_RETRY,
    NextAction.VERIFY_TRIGGER,
    NextAction.CREATE_NEW_INBOX,
    NextAction.STOP,
    NextAction.FIX_ARGUMENTS,
]
ReasonName = Literal[
    Reason.EVIDENCE_NOT_FOUND,
    Reason.EVIDENCE_MISMATCH,
    Reason.PROVIDER_TIMEOUT,
    Reason.PROVIDER_ERROR,
    Reason.CIRCUIT_OPEN,
    Reason.TOO_EARLY,
    Reason.LEASE,
    Reason.TIMEOUT,
    Reason.ALREADY_CLAIMED,
    Reason.CLAIMED_BY_OTHER_RUN,
    Reason.WRONG_RUN,
    Reason.LEASE_EXPIRED,
    Reason.EVIDENCE_MISADDRESSED,
]
ToolName = Literal[
    Tool.CREATE_INBOX,
    Tool.WAIT_FOR_MESSAGE,
    Tool.READ_MESSAGE,
    Tool.CLAIM_MESSAGE,
    Tool.GET_RUN_REPORT,
    Tool.FIND_MAIL,
]

STATES: tuple[State, ...] = get_args(StateName)
STATUSES: tuple[Status, ...] = get_args(StatusName)
NEXT_ACTIONS: tuple[NextAction, ...] = get_args(NextActionName)
REASONS: tuple[Reason, ...] = get_args(ReasonName)
TOOLS: tuple[Tool, ...] = get_args(ToolName)

# A Literal lists the members by hand (typing cannot build one from an Enum): it must
# name every member, in order.
for _enum, _names in (
    (State, STATES),
    (Status, STATUSES),
    (NextAction, NEXT_ACTIONS),
    (Tool, TOOLS),
):
    assert tuple(_enum) == _names, f"{_enum.__name__}: the Literal lists other members"
assert tuple(Reason) == REASONS, "Reason: the Literal lists other members"
