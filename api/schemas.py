"""The wire contract as pydantic models, and only the wire contract.

Requests are strict (no silent coercion of "5" into 5, unknown fields refused) so
an agent's typo gets a 422 that names the field instead of being ignored.
Responses are built through these models, so the OpenAPI document and the bytes
on the wire cannot drift apart.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
)

from sink import ids
from sink.vocabulary import NextActionName as NextAction
from sink.vocabulary import ReasonName as Reason
from sink.vocabulary import StateName as State
from sink.vocabulary import StatusName as StatusT
from sink.vocabulary import ToolName

ErrorNextAction = Literal["fix_arguments", "stop", "wait_then_retry"]

RunId = Annotated[str, StringConstraints(pattern=ids.anchored(ids.RUN_ID))]
Purpose = Annotated[str, StringConstraints(pattern=ids.anchored(ids.PURPOSE))]
PolicyName = Annotated[str, StringConstraints(pattern=ids.anchored(ids.POLICY_NAME))]
Needle = Annotated[str, StringConstraints(min_length=1, max_length=512)]


def _whole(value: object) -> object:
    # JSON Schema counts 60.0 as an integer; strict mode still refuses "60" and true.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _at_most(limit: float) -> AfterValidator:
    """A value past ``limit`` counts as ``limit``. For the fields the server caps anyway
    (a wait's ``timeout_s`` by ``long_poll_max_s`` and the lease): a caller that asks for
    more gets the cap, not a 422, and no arithmetic ever meets a number of 4,000 digits."""
    return AfterValidator(lambda value: min(value, type(value)(limit)))


# The contract caps ttl_s and poll_budget by the policy, never refuses them for being large:
# any whole number >= 1 is taken (the JSON parser refuses numbers of more than 4,300 digits).
_WHOLE_AT_LEAST_1 = Annotated[int, Field(ge=1), BeforeValidator(_whole)]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)


class MatchIn(_Request):
    """Literal, case-insensitive substrings (never regex); all optional."""

    subject_contains: Needle | None = None
    from_contains: Needle | None = None
    body_contains: Needle | None = None
    # Past 10^9 s (31 years) no mail is older: the same as no limit.
    max_age_s: Annotated[int, Field(ge=0), BeforeValidator(_whole), _at_most(10**9)] | None = None


class CreateInboxIn(_Request):
    run_id: RunId
    purpose: Purpose
    ttl_s: _WHOLE_AT_LEAST_1 | None = None
    poll_budget: _WHOLE_AT_LEAST_1 | None = None
    policy: PolicyName | None = None
    match: MatchIn | None = None


class WaitIn(_Request):
    # Capped by long_poll_max_s and the lease; a day is past any policy's long_poll_max_s.
    timeout_s: Annotated[float, Field(ge=0, allow_inf_nan=False), _at_most(86400)] | None = Field(
        None,
        description="Seconds to long-poll; omitted: the policy's long_poll_max_s (30 under ci); "
        "0 looks once; capped by long_poll_max_s and the lease.",
    )
    cursor: Annotated[str, StringConstraints(max_length=256)] | None = None
    match: MatchIn | None = None
    run_id: RunId | None = None
    # v3: "newest" returns the newest unclaimed match beyond the cursor (a resend's).
    order: Literal["oldest", "newest"] | None = Field(
        "oldest",
        description="oldest: the oldest unclaimed match beyond the cursor; newest: the newest "
        "(a resend's), passing older ones over.",
    )


class ClaimIn(_Request):
    """The claiming run: ``run_id`` here, or the ``X-Run-Id`` header (one is required)."""

    run_id: RunId | None = None


class RunTokenIn(_Request):
    """``POST /v1/runs/{run_id}/token``: how long at most (never past the run's last lease)."""

    ttl_s: Annotated[int, Field(ge=1), BeforeValidator(_whole), _at_most(10**9)] | None = None


class FaultIn(_Request):
    target: Literal["wait", "read", "claim", "smtp.connect", "smtp.rcpt", "smtp.data"]
    mode: Literal["timeout", "error", "delay"]
    count: Annotated[int, Field(ge=1, le=10**6), BeforeValidator(_whole)] | None = None
    probability: Annotated[float, Field(gt=0, le=1)] | None = None
    delay_s: Annotated[float, Field(gt=0, le=60)] | None = None
    run_id: RunId | None = None


# -- responses -----------------------------------------------------------------------


class _Response(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True, defer_build=True)


class MessageRef(_Response):
    message_id: str
    subject: str
    from_: str = Field(alias="from")
    received_at: str


class ClaimOut(_Response):
    claim_id: str
    message_id: str
    run_id: str
    claimed_at: str


class UnmatchedOut(_Response):
    """A delivery the wait looked at and did not match (from and subject: the sender's words)."""

    message_id: str
    received_at: str
    from_: str = Field(alias="from")
    subject: str


class NearMissOut(_Response):
    """Caught mail whose address is within 2 edits of this inbox's (never its content)."""

    address: str
    received_at: str
    distance: int


_NEXT_TOOL = Field(
    description="The MCP tool to call next (after retry_after seconds when that is set); "
    "null when nothing more is to be called."
)
_NEXT_ARGUMENTS = Field(
    description="The complete arguments for next_tool, to pass as they are; null with it."
)
_HINT = Field(description="One sentence: what to do next and why (never quotes mail content).")


class EnvelopeOut(_Response):
    """Every agent-facing answer: the state, what the call did, and what to do next."""

    state: State
    status: StatusT
    next_action: NextAction
    next_tool: ToolName | None = _NEXT_TOOL
    next_arguments: dict[str, Any] | None = _NEXT_ARGUMENTS
    hint: str | None = _HINT
    reason: Reason | None
    inbox_id: str
    run_id: str
    purpose: str
    address: str
    expires_at: str
    attempt: int
    remaining_attempts: int
    retry_after: float | None
    next_poll_at: str | None
    cursor: str
    message: MessageRef | None
    claim: ClaimOut | None
    last_error: str | None
    trace_id: str
    newer_matching: int | None = Field(
        description="In state received: how many unclaimed matching deliveries arrived after "
        "this message (a resend when above 0); null without a message."
    )
    unmatched: list[UnmatchedOut] = Field(
        description="evidence_mismatch: up to 3 deliveries this wait did not match, newest "
        "first; [] otherwise."
    )
    rescan_cursor: str | None = Field(
        description="evidence_mismatch: the cursor from before this wait, to look at the same "
        "mail again with other criteria; null otherwise."
    )
    near_misses: list[NearMissOut] = Field(
        description="Caught mail addressed within 2 edits of this inbox's address, newest "
        "first (up to 3); [] otherwise."
    )


class CreatedOut(EnvelopeOut):
    """The create answer: the envelope, and which of the caller's values the policy capped."""

    replayed: bool = Field(
        description="true when the call returned the live inbox an earlier identical call "
        "created; false when it created one."
    )

    capped: list[Literal["ttl_s", "poll_budget"]] = Field(
        description="Fields of the request that the policy lowered to its maximum, e.g. "
        '["ttl_s"]; [] when none was.'
    )


class ErrorBody(_Response):
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class RunTokenOut(_Response):
    token: str
    run_id: str
    expires_at: str


class _Guided(_Response):
    """What every error body says besides ``error``: what to do next (v3 agent guidance)."""

    status: StatusT
    next_action: ErrorNextAction
    next_tool: ToolName | None = Field(
        description="The MCP tool to call next: the same one, to fix (fix_arguments) or repeat "
        "(wait_then_retry); null when a repeat cannot help."
    )
    next_arguments: dict[str, Any] | None = Field(
        description="With wait_then_retry, this call's own arguments; otherwise null."
    )
    hint: str = Field(description="One sentence: what to do next and why.")
    retry_after: float | None


class ErrorOut(_Guided):
    error: ErrorBody


class RefusalOut(_Guided):
    """An ownership refusal: nothing of the other run's inbox or mail."""

    reason: Literal["wrong_run", "claimed_by_other_run"]
    trace_id: str
    error: ErrorBody


class TroubleOut(_Guided):
    """Provider trouble that no envelope can carry (the store could not be read, so there is
    no inbox to describe, or a message read failed): what to do, and the error."""

    reason: Reason
    trace_id: str
    error: ErrorBody


class MessageListItem(_Response):
    message_id: str
    subject: str
    from_: str = Field(alias="from")
    received_at: str
    size: int
    claimed: bool


class MessageListOut(_Response):
    messages: list[MessageListItem]
    next_cursor: str
    has_more: bool


class AttachmentOut(_Response):
    filename: str = Field(
        description=(
            "The name made safe to save under: no path, control, bidi or zero-width characters."
        )
    )
    content_type: str
    size: int
    sha256: str
    original_filename: str = Field(
        description=(
            "The name as the mail gives it, decoded (untrusted): it may hold bidi or "
            "zero-width characters."
        )
    )


class CodeOut(_Response):
    value: str
    sources: list[str]


class SmtpEnvelopeOut(_Response):
    mail_from: str
    rcpt_to: list[str]
    auth_user: str | None = Field(
        description="The user name the SMTP client logged in with (AUTH); null without AUTH. "
        "Never the password."
    )


# Described alike in a message and in caught mail read whole.
_CODES_DETAIL = Field(
    description="The codes in the same order, each with where a person sees it: "
    '"subject", "text" or "html" (the HTML as shown).'
)
_HIDDEN_TEXT = Field(
    description="HTML text a reader would not see (display:none, white on white...): "
    "never a source of codes or links; null when none."
)
_CONTENT_FLAGS = Field(
    description="Facts about the content, never a verdict: addresses_ai_agent, "
    "forged_boundary, hidden_text, bidi_controls, zero_width, link_text_mismatch, "
    "subject_code_not_in_body; [] when none."
)


class MessageOut(_Response):
    message_id: str
    inbox_id: str
    headers: dict[str, list[str]] | None
    from_: str = Field(
        alias="from", description="The sender's bare address (From, parsed strictly)."
    )
    from_name: str | None = Field(
        description="The sender's display name, decoded; null when there is none."
    )
    to: list[str]
    cc: list[str]
    subject: str
    date: str | None
    text: str | None
    html: str | None
    attachments: list[AttachmentOut]
    links: list[str]
    codes: list[str]
    codes_detail: list[CodeOut] = _CODES_DETAIL
    hidden_text: str | None = _HIDDEN_TEXT
    content_flags: list[str] = _CONTENT_FLAGS
    parse_warnings: list[str] = Field(
        description="What could not be parsed strictly (e.g. a malformed From), instead of a "
        "guessed value; [] when everything parsed."
    )
    envelope: SmtpEnvelopeOut
    size: int
    claimed: bool
    received_at: str
    released_at: str | None


class RunInboxOut(_Response):
    inbox_id: str
    purpose: str
    address: str
    policy: str
    state: State
    reason: str | None
    reserved_at: str
    expires_at: str
    attempt: int
    remaining_attempts: int
    last_poll_at: str | None
    last_poll_latency_ms: float | None
    accepted_message_id: str | None
    last_change_reason: str | None
    evidence_release_at: str | None
    released_at: str | None


class RunEventOut(_Response):
    at: str
    type: str
    inbox_id: str | None
    message_id: str | None = None
    detail: dict[str, Any]


class RunReportOut(_Response):
    run_id: str
    inboxes: list[RunInboxOut]
    events: list[RunEventOut]


class UnroutedItem(_Response):
    """One caught mail: any recipient without a live inbox (v2: kept with its body)."""

    id: str
    mail_from: str
    rcpt_to: list[str]
    subject: str
    received_at: str
    size: int


class UnroutedOut(_Response):
    messages: list[UnroutedItem]
    next_cursor: str | None
    has_more: bool


class CaughtMessageOut(_Response):
    """Caught mail read whole: a message's JSON, without inbox or claim."""

    message_id: str
    caught: Literal[True]
    headers: dict[str, list[str]] | None
    from_: str = Field(alias="from")
    from_name: str | None
    to: list[str]
    cc: list[str]
    subject: str
    date: str | None
    text: str | None
    html: str | None
    attachments: list[AttachmentOut]
    links: list[str]
    codes: list[str]
    codes_detail: list[CodeOut] = _CODES_DETAIL
    hidden_text: str | None = _HIDDEN_TEXT
    content_flags: list[str] = _CONTENT_FLAGS
    parse_warnings: list[str]
    envelope: SmtpEnvelopeOut
    size: int
    received_at: str
    expires_at: str
    released_at: str | None


class FoundItem(_Response):
    """One search result: an inbox's delivery, or caught mail (``caught``: true)."""

    message_id: str
    caught: bool
    inbox_id: str | None
    run_id: str | None
    subject: str
    from_: str = Field(alias="from")
    to: list[str]
    rcpt_to: list[str]
    received_at: str
    size: int
    has_attachment: bool
    claimed: bool
    released: bool


class SearchOut(_Response):
    messages: list[FoundItem]
    next_cursor: str | None
    has_more: bool


class FaultOut(_Response):
    fault_id: str
    target: str
    mode: str
    count: int | None
    remaining: int | None
    probability: float | None
    delay_s: float | None
    run_id: str | None
    hits: int
    created_at: str


class FaultListOut(_Response):
    faults: list[FaultOut]


class HealthOut(_Response):
    status: Literal["ok"]


class ReadyOut(_Response):
    status: Literal["ready", "unavailable"]
    store: Literal["ok", "unavailable"]


# -- webhooks (v3) -------------------------------------------------------------------------

WebhookEventType = Literal["message", "inbox", "run_event"]
RunGlob = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._:\-*?\[\]!]{1,128}$")]


class WebhookIn(_Request):
    """``POST /v1/webhooks``: where to send which live events (default: all three types)."""

    url: Annotated[str, StringConstraints(min_length=1, max_length=2048)] = Field(
        description=(
            "http(s) with a host; any host, loopback and private addresses included; a "
            "user:password@ in it is sent as HTTP Basic auth"
        )
    )
    events: Annotated[list[WebhookEventType], Field(min_length=1, max_length=3)] | None = Field(
        None, description="Any of message, inbox, run_event; omitted: all three"
    )
    run_id: RunId | None = Field(None, description="Only this run's events (need not exist yet)")
    run_glob: RunGlob | None = Field(
        None, description="Only the events of runs this glob matches (fnmatch: * ? [...])"
    )
    description: Annotated[str, StringConstraints(max_length=500)] | None = None


class WebhookOut(_Response):
    webhook_id: str
    url: str
    events: list[WebhookEventType]
    run_id: str | None
    run_glob: str | None
    description: str | None
    created_at: str
    disabled_at: str | None = Field(description="Set when a 410 Gone disabled the webhook")


class CreatedWebhookOut(WebhookOut):
    secret: str = Field(
        description="whsec_ + base64 of the HMAC key: shown only in this answer (verify with it)"
    )


class WebhookListOut(_Response):
    webhooks: list[WebhookOut]


class DeliveryOut(_Response):
    """One attempt (or, not tried yet: attempt 1, pending, no status_code)."""

    delivery_id: str
    event_id: str = Field(description="The live event's id: webhook-id and the body's id")
    type: str = Field(description="message, inbox, run_event or ping")
    attempt: int
    state: Literal["pending", "delivered", "failed"]
    status_code: int | None
    error: str | None = Field(description="A short cause: timeout, connect, http_500, gone, ...")
    at: str
    next_attempt_at: str | None


class DeliveryListOut(_Response):
    deliveries: list[DeliveryOut]
    next_cursor: str | None = Field(description="Pass back as ?cursor= for older attempts")
    has_more: bool


class PingOut(_Response):
    delivery_id: str
