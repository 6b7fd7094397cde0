"""The contract's words, once: states, statuses, next actions and reasons.

The wire models (``api/schemas.py``), the Python client and the MCP tool schemas all
take their enumerations from here, so no transport can drift from the others.
"""

from __future__ import annotations

from typing import Literal, get_args

State = Literal["created", "waiting", "received", "expired"]
Status = Literal["completed", "retryable", "blocked"]
NextAction = Literal[
    "wait_for_message",
    "claim_message",
    "proceed",
    "wait_then_retry",
    "verify_trigger",
    "create_new_inbox",
    "stop",
]
Reason = Literal[
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
]

STATES: tuple[str, ...] = get_args(State)
STATUSES: tuple[str, ...] = get_args(Status)
NEXT_ACTIONS: tuple[str, ...] = get_args(NextAction)
REASONS: tuple[str, ...] = get_args(Reason)
