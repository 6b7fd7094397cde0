"""The MCP tools runsink offers: names, descriptions and JSON schemas. Pure data.

One definition for both transports (stdio in ``sink/mcp/stdio.py``, streamable HTTP
in ``api/mcp.py``), so an agent sees the same tools whichever way it connects. The
descriptions are the agent's manual: each says what the states and next actions
mean and when to stop. The output schemas describe the HTTP API's JSON, field for
field (``tests/test_mcp.py`` holds them against the wire models).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sink import ids
from sink.flags import FLAGS
from sink.untrusted import SENTENCE
from sink.vocabulary import NEXT_ACTIONS, REASONS, STATES, STATUSES
from sink.vocabulary import TOOLS as TOOL_NAMES


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    read_only: bool
    idempotent: bool
    url_args: tuple[
        str, ...
    ]  # arguments the HTTP API takes in the URL (path or query), not the body


INSTRUCTIONS = (
    """\
runsink leases disposable email inboxes to a run (a CI job or an agent run) and answers \
every call with an envelope that says what happened (`state`, `status`, `reason`) and \
what to do next (`next_action`, `retry_after`). The loop: create_inbox -> make the app \
under test send mail to the envelope's `address` -> wait_for_message until next_action \
is claim_message -> claim_message -> read_message for the codes and links. Always do \
what `next_action` says; when `retry_after` is set, wait that many seconds before the \
next call. Stop when next_action is `stop`, and when it is `proceed` once you have \
what you need. The server is the only authority on the lease, the poll budget and the \
cursor: never invent ids, addresses or cursors. Errors come back as tool errors whose \
text is the HTTP API's JSON: {"error": {"code", "message", "details"}}. """
    + SENTENCE
)

_ENVELOPE_GUIDE = """\
The answer is the envelope: state (created | waiting | received | expired), status \
(completed: the call did what was asked; retryable: nothing yet, call again after \
retry_after; blocked: this call changed nothing, do not repeat it before retry_after, \
or at all when retry_after is null), next_action, reason, inbox_id, address, \
expires_at (the lease; never extended), attempt / remaining_attempts (the poll \
budget), retry_after (seconds), cursor, message, claim, trace_id."""

_ERRORS = """\
Errors (tool errors, JSON text): not_found, invalid_request, invalid_cursor, \
unknown_policy, policy_forbids, idempotency_key_conflict, evidence_released; \
provider_timeout / provider_error / circuit_open (try again after a pause); \
unauthorized; forbidden_scope (your token does not reach this run or call; \
details.needed names the scope it would take: do not retry, stop or ask whoever gave \
you the token). An ownership refusal (error code wrong_run or claimed_by_other_run) \
carries status blocked and next_action stop: the inbox or message is not yours; do \
not use it and do not retry. next_action fix_arguments: correct what the error names, \
then call again."""

CREATE_INBOX = (
    """\
Lease a disposable email address to this run for one purpose (e.g. signup-check).

Give the returned `address` to the app under test (any `local+tag@domain` form reaches \
the same inbox), trigger the email, then call wait_for_message with the returned \
`inbox_id`. Expected answer: state created, status completed, next_action \
wait_for_message. Calling again with the same run_id, purpose and arguments while the \
inbox is live returns the same inbox, so a lost answer is safe to retry. Once that \
inbox has expired, the same call creates the run's next inbox for the purpose, until \
the policy's limit (then error policy_forbids: stop). ttl_s and poll_budget are capped \
by the policy, never raised past it: the answer's `capped` lists the ones that were \
lowered (e.g. ["ttl_s"]; [] when none), so plan with the returned expires_at and \
remaining_attempts.

"""
    + _ENVELOPE_GUIDE
    + "\n\n"
    + _ERRORS
)

WAIT_FOR_MESSAGE = (
    """\
Wait for a message in the inbox: long-polls up to timeout_s seconds (0 = look once; \
the server caps it, 30 s by default, and by the lease) and returns the moment matching \
mail is stored. Spends one poll of the budget (remaining_attempts). Optional `match`: \
literal, case-insensitive substrings (never regex) subject_contains, from_contains, \
body_contains, and max_age_s; it replaces the match given at creation, for this wait. \
Omit `cursor` to continue from the inbox's own position (recommended).

What to do with the answer, by next_action:
- claim_message (state received): `message` has {message_id, received_at, \
untrusted: {from, subject}}; call claim_message(message.message_id, run_id). Waiting again returns \
the same message until it is claimed.
- wait_for_message (state waiting, reason evidence_not_found): nothing yet; call \
wait_for_message again after retry_after seconds.
- verify_trigger (state waiting, reason evidence_mismatch): mail arrived but none \
matched; check that the app really sent the email you expect and that your match is \
right, then wait again.
- wait_then_retry (reason too_early, circuit_open, provider_timeout, provider_error): \
nothing was spent; wait retry_after seconds, then call again.
- proceed: this inbox's message is already claimed; use it (read_message).
- create_new_inbox (state expired, reason lease or timeout): this inbox is over; \
start again with create_inbox and trigger the email again.
- stop: nothing more is allowed; do not call again, report what happened \
(get_run_report explains it).

"""
    + _ENVELOPE_GUIDE
    + "\n\n"
    + _ERRORS
)

READ_MESSAGE = (
    """\
A message's evidence: codes (a code in both subject and body first, then the body's, then \
the subject's), links (action links first), attachments (metadata), content_flags (facts, \
not verdicts) and, under `untrusted`, from (not verified), from_name and subject. \
include_body / include_html add untrusted.text / .html, cut to max_body_chars (4000; \
truncated says so); null when the policy keeps bodies from agents. Changes nothing. Pass \
run_id so mail of another run is refused (wrong_run).

"""
    + _ERRORS
)

CLAIM_MESSAGE = (
    """\
Claim a message as this run's evidence (one-time consumption). Call it when \
wait_for_message answered next_action claim_message.

What to do with the answer:
- status completed, next_action proceed: the message is yours; use it (read_message \
for its codes and links). reason already_claimed means this run had claimed it \
before: the same answer, safe to repeat.
- state expired, reason lease_expired (status blocked): the lease ended before the \
claim; next_action create_new_inbox (start again) or stop.
- wait_then_retry (circuit_open, provider_timeout, provider_error): nothing was \
claimed; wait retry_after seconds and claim again.
- error wrong_run or claimed_by_other_run (status blocked, next_action stop): not this \
run's message; do not use it, do not retry.

"""
    + _ENVELOPE_GUIDE
    + "\n\n"
    + _ERRORS
)

GET_RUN_REPORT = (
    """\
The run's record: its inboxes (state, reason, attempts, poll latency, the accepted \
message, when evidence is released) and its events in order (created, polled, \
message_accepted, late_arrival, claimed, breaker_*, expired, released). Read-only; \
changes nothing and spends no budget. Use it to explain a failure or a stop, or to \
confirm what happened. Error not_found when the server has nothing for the run.

"""
    + _ERRORS
)


# -- JSON schemas --------------------------------------------------------------------


def _string(description: str, pattern: str | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "description": description}
    if pattern is not None:
        schema["pattern"] = pattern
    return schema


def _object(
    properties: dict[str, Any], required: tuple[str, ...] | None = None, closed: bool = False
) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": list(properties if required is None else required),
    }
    if closed:
        schema["additionalProperties"] = False
    return schema


def _values(words: tuple[StrEnum, ...]) -> list[str]:
    """An enumeration as the plain strings a JSON Schema lists."""
    return [word.value for word in words]


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


_RUN_ID = _string(
    "Your run's id, chosen by you and the same for every call of the run: 1-128 chars "
    "of A-Za-z0-9._:-",
    ids.anchored(ids.RUN_ID),
)
_INBOX_ID = _string("The inbox_id from create_inbox's answer.")
_MESSAGE_ID = _string("The message.message_id from wait_for_message's answer.")
_NEEDLE = {"type": "string", "minLength": 1, "maxLength": 512}

_MATCH = {
    "type": "object",
    "description": "Which mail counts. Literal, case-insensitive substrings; never regex.",
    "properties": {
        "subject_contains": {**_NEEDLE, "description": "The subject contains this."},
        "from_contains": {**_NEEDLE, "description": "The From address contains this."},
        "body_contains": {
            **_NEEDLE,
            "description": "The text body (or the HTML as text) contains this.",
        },
        "max_age_s": {
            "type": "integer",
            "minimum": 0,
            "description": "Ignore mail received longer ago than this many seconds.",
        },
    },
    "additionalProperties": False,
}

_CREATE_INPUT = _object(
    {
        "run_id": _RUN_ID,
        "purpose": _string(
            "What the address is for, e.g. signup-check: 1-64 chars of A-Za-z0-9._-",
            ids.anchored(ids.PURPOSE),
        ),
        "ttl_s": {
            "type": "integer",
            "minimum": 1,
            "description": "Lease length in seconds (default and cap: the policy's).",
        },
        "poll_budget": {
            "type": "integer",
            "minimum": 1,
            "description": "How many waits this inbox allows (capped by the policy).",
        },
        "policy": _string(
            "Policy name (default: the server's default policy, e.g. ci).",
            ids.anchored(ids.POLICY_NAME),
        ),
    },
    required=("run_id", "purpose"),
    closed=True,
)

_WAIT_INPUT = _object(
    {
        "inbox_id": _INBOX_ID,
        "timeout_s": {
            "type": "number",
            "minimum": 0,
            "description": "Long-poll up to this many seconds (0 = look once; capped by the "
            "server's long_poll_max_s and by the lease).",
        },
        "cursor": _string(
            "Optional: a cursor from an earlier answer; scan only mail beyond it. Omit it "
            "to continue from the inbox's own position."
        ),
        "match": _MATCH,
        "run_id": {
            **_RUN_ID,
            "description": "Your run's id; the server refuses (wrong_run) an inbox of another run.",
        },
        "order": {
            "enum": ["oldest", "newest"],
            "description": "Which unclaimed match beyond the cursor (default oldest); newest "
            "takes a resend's, passing older ones over.",
        },
    },
    required=("inbox_id",),
    closed=True,
)

_READ_INPUT = _object(
    {
        "message_id": _MESSAGE_ID,
        "run_id": {
            **_RUN_ID,
            "description": "Your run's id; the server refuses (wrong_run) mail of another run.",
        },
        "include_body": {"type": "boolean", "description": "Add untrusted.text."},
        "include_html": {"type": "boolean", "description": "Add untrusted.html."},
        "max_body_chars": {
            "type": "integer",
            "minimum": 1,
            "maximum": 1_000_000,
            "description": "Cut each body to this many characters (default 4000).",
        },
    },
    required=("message_id",),
    closed=True,
)

_CLAIM_INPUT = _object({"message_id": _MESSAGE_ID, "run_id": _RUN_ID}, closed=True)

_REPORT_INPUT = _object({"run_id": _RUN_ID}, closed=True)

_STR: dict[str, Any] = {"type": "string"}
_INT: dict[str, Any] = {"type": "integer"}
_STR_OR_NULL: dict[str, Any] = {"type": ["string", "null"]}
_STRINGS: dict[str, Any] = {"type": "array", "items": _STR}

_SENDER = _object({"from": _STR, "subject": _STR})
_MESSAGE_REF = _object({"message_id": _STR, "received_at": _STR, "untrusted": _SENDER})
_CLAIM = _object({"claim_id": _STR, "message_id": _STR, "run_id": _STR, "claimed_at": _STR})

_UNMATCHED = _MESSAGE_REF
_NEAR_MISS = _object({"address": _STR, "received_at": _STR, "distance": _INT})

ENVELOPE_SCHEMA = _object(
    {
        "state": {"enum": _values(STATES)},
        "status": {"enum": _values(STATUSES)},
        "next_action": {"enum": _values(NEXT_ACTIONS)},
        "next_tool": {"enum": [*_values(TOOL_NAMES), None]},
        "next_arguments": {"type": ["object", "null"]},
        "hint": _STR_OR_NULL,
        "reason": {"enum": [*_values(REASONS), None]},
        "inbox_id": _STR,
        "run_id": _STR,
        "purpose": _STR,
        "address": _STR,
        "expires_at": _STR,
        "attempt": _INT,
        "remaining_attempts": _INT,
        "retry_after": {"type": ["number", "null"]},
        "next_poll_at": _STR_OR_NULL,
        "cursor": _STR,
        "message": _nullable(_MESSAGE_REF),
        "claim": _nullable(_CLAIM),
        "last_error": _STR_OR_NULL,
        "trace_id": _STR,
        "newer_matching": {"type": ["integer", "null"]},
        "unmatched": {"type": "array", "items": _UNMATCHED},
        "rescan_cursor": _STR_OR_NULL,
        "near_misses": {"type": "array", "items": _NEAR_MISS},
    }
)

MESSAGE_SCHEMA = _object(
    {
        "message_id": _STR,
        "received_at": _STR,
        "codes": _STRINGS,
        "links": _STRINGS,
        "attachments": {
            "type": "array",
            "items": _object(
                {"filename": _STR, "content_type": _STR, "size": _INT, "sha256": _STR}
            ),
        },
        "content_flags": {"type": "array", "items": {"enum": list(FLAGS)}},
        "untrusted": _object(
            {
                "from": _STR,
                "from_name": _STR_OR_NULL,
                "subject": _STR,
                "text": _STR_OR_NULL,
                "html": _STR_OR_NULL,
            },
            required=("from", "from_name", "subject"),
        ),
        "truncated": {"type": "boolean"},
    },
    required=(
        "message_id",
        "received_at",
        "codes",
        "links",
        "attachments",
        "content_flags",
        "untrusted",
    ),
)

RUN_REPORT_SCHEMA = _object(
    {
        "run_id": _STR,
        "inboxes": {
            "type": "array",
            "items": _object(
                {
                    "inbox_id": _STR,
                    "purpose": _STR,
                    "address": _STR,
                    "policy": _STR,
                    "state": {"enum": _values(STATES)},
                    "reason": _STR_OR_NULL,
                    "reserved_at": _STR,
                    "expires_at": _STR,
                    "attempt": _INT,
                    "remaining_attempts": _INT,
                    "last_poll_at": _STR_OR_NULL,
                    "last_poll_latency_ms": {"type": ["number", "null"]},
                    "accepted_message_id": _STR_OR_NULL,
                    "last_change_reason": _STR_OR_NULL,
                    "evidence_release_at": _STR_OR_NULL,
                    "released_at": _STR_OR_NULL,
                }
            ),
        },
        "events": {
            "type": "array",
            "items": _object(
                {
                    "at": _STR,
                    "type": _STR,
                    "inbox_id": _STR_OR_NULL,
                    "message_id": _STR_OR_NULL,
                    "detail": {"type": "object"},
                },
                required=("at", "type", "inbox_id", "detail"),
            ),
        },
    }
)


CREATED_SCHEMA = {
    **ENVELOPE_SCHEMA,
    "properties": {
        **ENVELOPE_SCHEMA["properties"],
        "capped": {
            "type": "array",
            "items": {"enum": ["ttl_s", "poll_budget"]},
            "description": 'Your values the policy lowered to its maximum, e.g. ["ttl_s"]; '
            "[] when none was.",
        },
        "replayed": {"type": "boolean"},
    },
    "required": [*ENVELOPE_SCHEMA["required"], "capped", "replayed"],
}


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "create_inbox",
        "Create a run-scoped inbox",
        CREATE_INBOX,
        _CREATE_INPUT,
        CREATED_SCHEMA,
        read_only=False,
        idempotent=True,
        url_args=(),
    ),
    ToolSpec(
        "wait_for_message",
        "Wait for a matching message",
        WAIT_FOR_MESSAGE,
        _WAIT_INPUT,
        ENVELOPE_SCHEMA,
        read_only=False,
        idempotent=False,
        url_args=("inbox_id",),
    ),
    ToolSpec(
        "read_message",
        "Read a message's content, codes and links",
        READ_MESSAGE,
        _READ_INPUT,
        MESSAGE_SCHEMA,
        read_only=True,
        idempotent=True,
        url_args=("message_id", "run_id"),
    ),
    ToolSpec(
        "claim_message",
        "Claim a message as this run's evidence",
        CLAIM_MESSAGE,
        _CLAIM_INPUT,
        ENVELOPE_SCHEMA,
        read_only=False,
        idempotent=True,
        url_args=("message_id",),
    ),
    ToolSpec(
        "get_run_report",
        "Explain a run: inboxes and events",
        GET_RUN_REPORT,
        _REPORT_INPUT,
        RUN_REPORT_SCHEMA,
        read_only=True,
        idempotent=True,
        url_args=("run_id",),
    ),
)
