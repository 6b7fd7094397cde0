"""What the server answers, as frozen dataclasses parsed from its JSON.

The field names are the contract's (docs/contract.md), except ``from`` which is ``from_`` in
Python. Times are aware UTC ``datetime`` values. Parsing is lenient about values the
contract may grow (a new ``reason`` arrives as a plain string) and strict about shape:
a missing field is a ``ProtocolError``, because a client that guesses is worse than one
that says the server and the client disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sink.client.errors import ProtocolError
from sink.vocabulary import NextActionName as NextAction
from sink.vocabulary import ReasonName as Reason
from sink.vocabulary import StateName as State
from sink.vocabulary import StatusName as Status

Json = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Match:
    """Wait criteria: literal, case-insensitive substrings (never regex); all optional."""

    subject_contains: str | None = None
    from_contains: str | None = None
    body_contains: str | None = None
    max_age_s: int | None = None

    def as_json(self) -> dict[str, Any]:
        items = {
            "subject_contains": self.subject_contains,
            "from_contains": self.from_contains,
            "body_contains": self.body_contains,
            "max_age_s": self.max_age_s,
        }
        return {k: v for k, v in items.items() if v is not None}

    def __bool__(self) -> bool:
        return bool(self.as_json())

    @classmethod
    def of(cls, given: Match | Mapping[str, Any] | None) -> Match | None:
        """``given`` as a Match: a plain mapping is what ``next_arguments`` carries (v3), so
        ``sink.wait_for_message(**envelope.next_arguments)`` works as the tool call would."""
        if given is None or isinstance(given, Match):
            return given
        unknown = set(given) - set(_MATCH_FIELDS)
        if unknown:
            names = ", ".join(sorted(map(str, unknown)))
            raise TypeError(f"match: unknown criteria {names}; it takes {', '.join(_MATCH_FIELDS)}")
        return cls(**{name: given[name] for name in _MATCH_FIELDS if name in given})

    def __str__(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.as_json().items()) or "(no criteria)"


_MATCH_FIELDS = ("subject_contains", "from_contains", "body_contains", "max_age_s")
MatchLike = Match | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class MessageRef:
    """The message a wait returned: ``envelope.message``."""

    message_id: str
    subject: str
    from_: str
    received_at: datetime

    @classmethod
    def from_json(cls, data: Json) -> MessageRef:
        return cls(
            message_id=_str(data, "message_id"),
            subject=_str(data, "subject"),
            from_=_str(data, "from"),
            received_at=_time(data, "received_at"),
        )


@dataclass(frozen=True, slots=True)
class Claim:
    """The one-time consumption of a message by its run: ``envelope.claim``."""

    claim_id: str
    message_id: str
    run_id: str
    claimed_at: datetime

    @classmethod
    def from_json(cls, data: Json) -> Claim:
        return cls(
            claim_id=_str(data, "claim_id"),
            message_id=_str(data, "message_id"),
            run_id=_str(data, "run_id"),
            claimed_at=_time(data, "claimed_at"),
        )


@dataclass(frozen=True, slots=True)
class Unmatched:
    """A delivery a mismatching wait looked at and passed over (``envelope.unmatched``);
    ``from_`` and ``subject`` were written by the sender."""

    message_id: str
    received_at: datetime
    from_: str
    subject: str

    @classmethod
    def from_json(cls, data: Json) -> Unmatched:
        return cls(
            message_id=_str(data, "message_id"),
            received_at=_time(data, "received_at"),
            from_=_str(data, "from"),
            subject=_str(data, "subject"),
        )


@dataclass(frozen=True, slots=True)
class NearMiss:
    """Caught mail addressed within 2 edits of the inbox (``envelope.near_misses``)."""

    address: str
    received_at: datetime
    distance: int

    @classmethod
    def from_json(cls, data: Json) -> NearMiss:
        return cls(
            address=_str(data, "address"),
            received_at=_time(data, "received_at"),
            distance=_int(data, "distance"),
        )


@dataclass(frozen=True, slots=True)
class Envelope:
    """Every agent-facing answer (create, get, wait, claim): state, status and next action."""

    state: State
    status: Status
    next_action: NextAction
    reason: Reason | None
    inbox_id: str
    run_id: str
    purpose: str
    address: str
    expires_at: datetime
    attempt: int
    remaining_attempts: int
    retry_after: float | None
    next_poll_at: datetime | None
    cursor: str
    message: MessageRef | None
    claim: Claim | None
    last_error: str | None
    trace_id: str
    # v3: newer matching mail (a resend), what a mismatch passed over, near misses.
    newer_matching: int | None = None
    unmatched: tuple[Unmatched, ...] = ()
    rescan_cursor: str | None = None
    near_misses: tuple[NearMiss, ...] = ()
    # v3 guidance: the tool to call next (the client method of the same name), its arguments,
    # and the server's one-sentence hint.
    next_tool: str | None = None
    next_arguments: Mapping[str, Any] | None = None
    hint: str | None = None

    @classmethod
    def from_json(cls, data: Json) -> Envelope:
        message = _optional_object(data, "message")
        claim = _optional_object(data, "claim")
        retry_after = data.get("retry_after")
        return cls(
            state=cast(State, _str(data, "state")),
            status=cast(Status, _str(data, "status")),
            next_action=cast(NextAction, _str(data, "next_action")),
            reason=cast("Reason | None", _optional_str(data, "reason")),
            inbox_id=_str(data, "inbox_id"),
            run_id=_str(data, "run_id"),
            purpose=_str(data, "purpose"),
            address=_str(data, "address"),
            expires_at=_time(data, "expires_at"),
            attempt=_int(data, "attempt"),
            remaining_attempts=_int(data, "remaining_attempts"),
            retry_after=None if retry_after is None else float(retry_after),
            next_poll_at=_optional_time(data, "next_poll_at"),
            cursor=_str(data, "cursor"),
            message=None if message is None else MessageRef.from_json(message),
            claim=None if claim is None else Claim.from_json(claim),
            last_error=_optional_str(data, "last_error"),
            trace_id=_str(data, "trace_id"),
            newer_matching=data.get("newer_matching"),
            unmatched=tuple(Unmatched.from_json(u) for u in data.get("unmatched") or []),
            rescan_cursor=data.get("rescan_cursor"),
            near_misses=tuple(NearMiss.from_json(n) for n in data.get("near_misses") or []),
            next_tool=_optional_str(data, "next_tool") if "next_tool" in data else None,
            next_arguments=_arguments(data.get("next_arguments")),
            hint=_optional_str(data, "hint") if "hint" in data else None,
        )

    def next_message_id(self) -> str | None:
        """The message next_tool names (claim_message, read_message), if it names one."""
        given = self.next_arguments or {}
        message_id = given.get("message_id")
        return message_id if isinstance(message_id, str) else None

    def summary(self) -> str:
        """One line for logs and exception messages (no subject, no content)."""
        parts = [
            f"state={self.state}",
            f"status={self.status}",
            f"next_action={self.next_action}",
            f"reason={self.reason}",
            f"attempt={self.attempt}",
            f"remaining_attempts={self.remaining_attempts}",
        ]
        if self.retry_after is not None:
            parts.append(f"retry_after={self.retry_after:g}s")
        if self.last_error:
            parts.append(f"last_error={self.last_error}")
        parts.append(f"trace_id={self.trace_id}")
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Code:
    """A likely one-time code and where a person sees it: "subject", "text", "html"."""

    value: str
    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Attachment:
    filename: str  # the name made safe to save under
    content_type: str
    size: int
    sha256: str
    original_filename: str = ""  # the name as the mail gives it (may hold bidi characters)


@dataclass(frozen=True, slots=True)
class SmtpEnvelope:
    mail_from: str
    rcpt_to: tuple[str, ...]
    auth_user: str | None = None  # the SMTP AUTH user name; None without AUTH


@dataclass(frozen=True, slots=True)
class Message:
    """read_message: the whole message, decoded; bodies are None once the evidence is released."""

    message_id: str
    inbox_id: str
    headers: Mapping[str, tuple[str, ...]] | None
    from_: str
    to: tuple[str, ...]
    cc: tuple[str, ...]
    subject: str
    date: str | None
    text: str | None
    html: str | None
    attachments: tuple[Attachment, ...]
    links: tuple[str, ...]
    codes: tuple[str, ...]
    envelope: SmtpEnvelope
    size: int
    claimed: bool
    received_at: datetime
    released_at: datetime | None
    from_name: str | None = None
    """The sender's display name, decoded (``"Acme" <noreply@acme.example>``: ``Acme``)."""
    parse_warnings: tuple[str, ...] = ()
    """What the server could not parse strictly (a malformed From, ...), instead of a guess."""
    codes_detail: tuple[Code, ...] = ()
    """``codes`` in the same order, each with where a person sees it."""
    hidden_text: str | None = None
    """HTML text a reader would not see (never a source of codes or links), or None."""
    content_flags: tuple[str, ...] = ()
    """Facts about the content, never a verdict (``addresses_ai_agent``, ``hidden_text``...)."""

    @property
    def code(self) -> str | None:
        """The likeliest one-time code, or None."""
        return self.codes[0] if self.codes else None

    @property
    def link(self) -> str | None:
        """The likeliest action link (absolute http(s) URL), or None."""
        return self.links[0] if self.links else None

    @classmethod
    def from_json(cls, data: Json) -> Message:
        headers = data.get("headers")
        smtp = _object(data, "envelope")
        return cls(
            message_id=_str(data, "message_id"),
            inbox_id=_str(data, "inbox_id"),
            headers=None
            if headers is None
            else {str(k): tuple(str(v) for v in vs) for k, vs in headers.items()},
            from_=_str(data, "from"),
            to=_strs(data, "to"),
            cc=_strs(data, "cc"),
            subject=_str(data, "subject"),
            date=_optional_str(data, "date"),
            text=_optional_str(data, "text"),
            html=_optional_str(data, "html"),
            attachments=tuple(
                Attachment(
                    filename=_str(a, "filename"),
                    content_type=_str(a, "content_type"),
                    size=_int(a, "size"),
                    sha256=_str(a, "sha256"),
                    original_filename=str(a.get("original_filename") or a["filename"]),
                )
                for a in _list(data, "attachments")
            ),
            links=_strs(data, "links"),
            codes=_strs(data, "codes"),
            envelope=SmtpEnvelope(
                mail_from=_str(smtp, "mail_from"),
                rcpt_to=_strs(smtp, "rcpt_to"),
                auth_user=_optional_str(smtp, "auth_user"),
            ),
            size=_int(data, "size"),
            claimed=bool(data.get("claimed", False)),
            received_at=_time(data, "received_at"),
            released_at=_optional_time(data, "released_at"),
            # Both v2: a v1 server leaves them out.
            from_name=_optional_str(data, "from_name"),
            parse_warnings=_strs(data, "parse_warnings") if "parse_warnings" in data else (),
            codes_detail=tuple(
                Code(value=_str(c, "value"), sources=_strs(c, "sources"))
                for c in (_list(data, "codes_detail") if "codes_detail" in data else [])
            ),
            hidden_text=_optional_str(data, "hidden_text"),
            content_flags=_strs(data, "content_flags") if "content_flags" in data else (),
        )


@dataclass(frozen=True, slots=True)
class MessageSummary:
    """One row of an inbox's message list."""

    message_id: str
    subject: str
    from_: str
    received_at: datetime
    size: int
    claimed: bool


@dataclass(frozen=True, slots=True)
class MessagePage:
    messages: tuple[MessageSummary, ...]
    next_cursor: str
    has_more: bool

    @classmethod
    def from_json(cls, data: Json) -> MessagePage:
        return cls(
            messages=tuple(
                MessageSummary(
                    message_id=_str(m, "message_id"),
                    subject=_str(m, "subject"),
                    from_=_str(m, "from"),
                    received_at=_time(m, "received_at"),
                    size=_int(m, "size"),
                    claimed=bool(m.get("claimed", False)),
                )
                for m in _list(data, "messages")
            ),
            next_cursor=_str(data, "next_cursor"),
            has_more=bool(data.get("has_more", False)),
        )


@dataclass(frozen=True, slots=True)
class FoundMessage:
    """One search result (``find_mail``): evidence of an inbox, or caught mail."""

    message_id: str
    caught: bool
    inbox_id: str | None
    run_id: str | None
    subject: str
    from_: str
    to: tuple[str, ...]
    received_at: datetime
    size: int
    has_attachment: bool
    claimed: bool
    released: bool


@dataclass(frozen=True, slots=True)
class FoundPage:
    """A page of search results, newest first; ``next_cursor`` is None on the last page."""

    messages: tuple[FoundMessage, ...]
    next_cursor: str | None
    has_more: bool

    @classmethod
    def from_json(cls, data: Json) -> FoundPage:
        return cls(
            messages=tuple(
                FoundMessage(
                    message_id=_str(m, "message_id"),
                    caught=bool(m.get("caught", False)),
                    inbox_id=_optional_str(m, "inbox_id"),
                    run_id=_optional_str(m, "run_id"),
                    subject=_str(m, "subject"),
                    from_=_str(m, "from"),
                    to=_strs(m, "to") if "to" in m else (),
                    received_at=_time(m, "received_at"),
                    size=_int(m, "size"),
                    has_attachment=bool(m.get("has_attachment", False)),
                    claimed=bool(m.get("claimed", False)),
                    released=bool(m.get("released", False)),
                )
                for m in _list(data, "messages")
            ),
            next_cursor=_optional_str(data, "next_cursor"),
            has_more=bool(data.get("has_more", False)),
        )


@dataclass(frozen=True, slots=True)
class RunInbox:
    """One inbox of a run, as the run report shows it."""

    inbox_id: str
    purpose: str
    address: str
    policy: str
    state: State
    reason: str | None
    reserved_at: datetime
    expires_at: datetime
    attempt: int
    remaining_attempts: int
    last_poll_at: datetime | None
    last_poll_latency_ms: float | None
    accepted_message_id: str | None
    last_change_reason: str | None
    evidence_release_at: datetime | None
    released_at: datetime | None


@dataclass(frozen=True, slots=True)
class RunEvent:
    at: datetime
    type: str
    inbox_id: str | None
    message_id: str | None
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunToken:
    """A token limited to one run (``Sink.mint_run_token``): hand it to an agent."""

    token: str = field(repr=False)  # a credential: kept out of reprs, logs and reports
    run_id: str
    expires_at: datetime

    @classmethod
    def from_json(cls, data: Json) -> RunToken:
        return cls(
            token=_str(data, "token"),
            run_id=_str(data, "run_id"),
            expires_at=_time(data, "expires_at"),
        )


@dataclass(frozen=True, slots=True)
class RunReport:
    """A run's inboxes and its ordered events: what happened, without any mail content."""

    run_id: str
    inboxes: tuple[RunInbox, ...]
    events: tuple[RunEvent, ...]

    @classmethod
    def from_json(cls, data: Json) -> RunReport:
        return cls(
            run_id=_str(data, "run_id"),
            inboxes=tuple(_run_inbox(i) for i in _list(data, "inboxes")),
            events=tuple(
                RunEvent(
                    at=_time(e, "at"),
                    type=_str(e, "type"),
                    inbox_id=_optional_str(e, "inbox_id"),
                    message_id=_optional_str(e, "message_id"),
                    detail=dict(e.get("detail") or {}),
                )
                for e in _list(data, "events")
            ),
        )

    def describe(self) -> str:
        """Several lines for a test failure: the inboxes, then the events in order."""
        lines = [f"run {self.run_id}:"]
        for i in self.inboxes:
            lines.append(
                f"  inbox {i.inbox_id} <{i.address}> purpose={i.purpose} policy={i.policy} "
                f"state={i.state} reason={i.reason} attempt={i.attempt} "
                f"remaining_attempts={i.remaining_attempts} expires_at={_wire_time(i.expires_at)}"
            )
        for e in self.events:
            detail = " ".join(f"{k}={v}" for k, v in e.detail.items())
            target = " ".join(x for x in (e.inbox_id, e.message_id) if x)
            lines.append(f"  {_wire_time(e.at)} {e.type} {target} {detail}".rstrip())
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Webhook:
    """A webhook: where a run's live events are POSTed, signed with its secret.

    ``secret`` is set only on the answer of ``create_webhook`` (the server shows it once);
    lists and gets leave it None.
    """

    webhook_id: str
    url: str
    events: tuple[str, ...]
    run_id: str | None
    run_glob: str | None
    created_at: datetime
    disabled_at: datetime | None
    description: str | None = None
    secret: str | None = field(default=None, repr=False)  # a credential: kept out of reprs

    @classmethod
    def from_json(cls, data: Json) -> Webhook:
        return cls(
            webhook_id=_str(data, "webhook_id"),
            url=_str(data, "url"),
            events=_strs(data, "events"),
            run_id=_optional_str(data, "run_id"),
            run_glob=_optional_str(data, "run_glob"),
            created_at=_time(data, "created_at"),
            disabled_at=_optional_time(data, "disabled_at"),
            description=_optional_str(data, "description"),
            secret=_optional_str(data, "secret"),
        )


@dataclass(frozen=True, slots=True)
class WebhookDelivery:
    """One attempt to deliver one event (``state``: pending, delivered or failed)."""

    delivery_id: str
    event_id: str
    type: str
    attempt: int
    state: str
    status_code: int | None
    error: str | None
    at: datetime
    next_attempt_at: datetime | None

    @classmethod
    def from_json(cls, data: Json) -> WebhookDelivery:
        status = data.get("status_code")
        return cls(
            delivery_id=_str(data, "delivery_id"),
            event_id=_str(data, "event_id"),
            type=_str(data, "type"),
            attempt=_int(data, "attempt"),
            state=_str(data, "state"),
            status_code=None if status is None else _int(data, "status_code"),
            error=_optional_str(data, "error"),
            at=_time(data, "at"),
            next_attempt_at=_optional_time(data, "next_attempt_at"),
        )


@dataclass(frozen=True, slots=True)
class DeliveryPage:
    """A webhook's attempts, newest first; pass ``next_cursor`` back for the older ones."""

    deliveries: tuple[WebhookDelivery, ...]
    next_cursor: str | None
    has_more: bool

    @classmethod
    def from_json(cls, data: Json) -> DeliveryPage:
        return cls(
            deliveries=tuple(WebhookDelivery.from_json(d) for d in _list(data, "deliveries")),
            next_cursor=_optional_str(data, "next_cursor"),
            has_more=bool(data.get("has_more", False)),
        )


def _run_inbox(data: Json) -> RunInbox:
    latency = data.get("last_poll_latency_ms")
    return RunInbox(
        inbox_id=_str(data, "inbox_id"),
        purpose=_str(data, "purpose"),
        address=_str(data, "address"),
        policy=_str(data, "policy"),
        state=cast(State, _str(data, "state")),
        reason=_optional_str(data, "reason"),
        reserved_at=_time(data, "reserved_at"),
        expires_at=_time(data, "expires_at"),
        attempt=_int(data, "attempt"),
        remaining_attempts=_int(data, "remaining_attempts"),
        last_poll_at=_optional_time(data, "last_poll_at"),
        last_poll_latency_ms=None if latency is None else float(latency),
        accepted_message_id=_optional_str(data, "accepted_message_id"),
        last_change_reason=_optional_str(data, "last_change_reason"),
        evidence_release_at=_optional_time(data, "evidence_release_at"),
        released_at=_optional_time(data, "released_at"),
    )


# -- field readers: each names the field the server left out or got wrong -----------------


def _get(data: Json, key: str) -> Any:
    try:
        return data[key]
    except (KeyError, TypeError):
        raise ProtocolError(f"the server's answer has no {key!r} field") from None


def _str(data: Json, key: str) -> str:
    value = _get(data, key)
    if not isinstance(value, str):
        raise ProtocolError(f"{key!r}: expected a string, got {type(value).__name__}")
    return value


def _optional_str(data: Json, key: str) -> str | None:
    value = data.get(key)
    return None if value is None else str(value)


def _int(data: Json, key: str) -> int:
    value = _get(data, key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"{key!r}: expected an integer, got {type(value).__name__}")
    return value


def _list(data: Json, key: str) -> list[Any]:
    value = _get(data, key)
    if not isinstance(value, list):
        raise ProtocolError(f"{key!r}: expected a list, got {type(value).__name__}")
    return value


def _strs(data: Json, key: str) -> tuple[str, ...]:
    return tuple(str(v) for v in _list(data, key))


def _object(data: Json, key: str) -> Json:
    value = _get(data, key)
    if not isinstance(value, Mapping):
        raise ProtocolError(f"{key!r}: expected an object, got {type(value).__name__}")
    return value


def _optional_object(data: Json, key: str) -> Json | None:
    return None if data.get(key) is None else _object(data, key)


def _time(data: Json, key: str) -> datetime:
    text = _str(data, key)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ProtocolError(f"{key!r}: not an RFC 3339 time: {text[:40]!r}") from None


def _optional_time(data: Json, key: str) -> datetime | None:
    return None if data.get(key) is None else _time(data, key)


def _wire_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _arguments(value: object) -> Mapping[str, Any] | None:
    return dict(value) if isinstance(value, dict) else None
