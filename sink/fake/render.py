"""The fake's answers: domain values -> the wire's JSON -> the client's own parsers.

The same shapes ``api/views.py`` gives the server's answers, so a fake answer goes through
exactly the parsing a real one does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sink import envelope as domain
from sink.client.models import Envelope, Message, MessagePage, RunReport
from sink.clock import rfc3339, rfc3339_or_none, seconds_up
from sink.ids import encode_cursor
from sink.inbox import Delivery
from sink.inbox import Inbox as Lease
from sink.message import ParsedMessage


@dataclass(frozen=True, slots=True)
class Event:
    run_id: str
    type: str
    at: float
    inbox_id: str | None
    message_id: str | None = None
    detail: Mapping[str, Any] | None = None


def envelope(view: domain.Envelope) -> Envelope:
    message, claim = view.message, view.claim
    return Envelope.from_json(
        {
            "state": view.state,
            "status": view.status,
            "next_action": view.next_action,
            "reason": view.reason,
            "inbox_id": view.inbox_id,
            "run_id": view.run_id,
            "purpose": view.purpose,
            "address": view.address,
            "expires_at": rfc3339(view.expires_at),
            "attempt": view.attempt,
            "remaining_attempts": view.remaining_attempts,
            "retry_after": None if view.retry_after is None else seconds_up(view.retry_after),
            "next_poll_at": rfc3339_or_none(view.next_poll_at),
            "cursor": view.cursor,
            "message": None
            if message is None
            else {
                "message_id": message.message_id,
                "subject": message.subject,
                "from": message.from_addr,
                "received_at": rfc3339(message.received_at),
            },
            "claim": None
            if claim is None
            else {
                "claim_id": claim.claim_id,
                "message_id": claim.message_id,
                "run_id": claim.run_id,
                "claimed_at": rfc3339(claim.claimed_at),
            },
            "last_error": view.last_error,
            "trace_id": view.trace_id,
        }
    )


def message(
    delivery: Delivery,
    parsed: ParsedMessage | None,
    mail_from: str,
    rcpt: str,
    released_at: float | None,
) -> Message:
    """read_message; ``parsed`` is None once the evidence is released (metadata only)."""
    return Message.from_json(
        {
            "message_id": delivery.message_id,
            "inbox_id": delivery.inbox_id,
            "headers": parsed.headers if parsed else None,
            "from": delivery.from_addr,
            "from_name": parsed.from_name if parsed else None,
            "to": list(parsed.to) if parsed else [],
            "cc": list(parsed.cc) if parsed else [],
            "subject": delivery.subject,
            "date": parsed.date if parsed else None,
            "text": parsed.text if parsed else None,
            "html": parsed.html if parsed else None,
            "attachments": [
                {
                    "filename": a.filename,
                    "content_type": a.content_type,
                    "size": a.size,
                    "sha256": a.sha256,
                }
                for a in (parsed.attachments if parsed else ())
            ],
            "links": list(parsed.links) if parsed else [],
            "codes": list(parsed.codes) if parsed else [],
            "parse_warnings": list(parsed.parse_warnings) if parsed else [],
            "envelope": {"mail_from": mail_from, "rcpt_to": [rcpt]},
            "size": delivery.size,
            "claimed": delivery.claim is not None,
            "received_at": rfc3339(delivery.received_at),
            "released_at": rfc3339_or_none(released_at),
        }
    )


def page(inbox_id: str, rows: list[Delivery], after: int, has_more: bool) -> MessagePage:
    last = rows[-1].seq if rows else after
    return MessagePage.from_json(
        {
            "messages": [
                {
                    "message_id": d.message_id,
                    "subject": d.subject,
                    "from": d.from_addr,
                    "received_at": rfc3339(d.received_at),
                    "size": d.size,
                    "claimed": d.claim is not None,
                }
                for d in rows
            ],
            "next_cursor": encode_cursor(inbox_id, last),
            "has_more": has_more,
        }
    )


def report(
    run_id: str, rows: Iterable[tuple[Lease, str | None, int]], events: Iterable[Event]
) -> RunReport:
    """The run report from (inbox, accepted message id, retention_s) rows and the events."""
    return RunReport.from_json(
        {
            "run_id": run_id,
            "inboxes": [_report_row(*row) for row in rows],
            "events": [
                {
                    "at": rfc3339(e.at),
                    "type": e.type,
                    "inbox_id": e.inbox_id,
                    "message_id": e.message_id,
                    "detail": dict(e.detail or {}),
                }
                for e in sorted(events, key=lambda e: e.at)
            ],
        }
    )


def _report_row(inbox: Lease, accepted_message_id: str | None, retention_s: int) -> dict[str, Any]:
    ended = inbox.expired_at or inbox.expires_at
    return {
        "inbox_id": inbox.inbox_id,
        "purpose": inbox.purpose,
        "address": inbox.address,
        "policy": inbox.policy_name,
        "state": inbox.state.value,
        "reason": inbox.reason,
        "reserved_at": rfc3339(inbox.created_at),
        "expires_at": rfc3339(inbox.expires_at),
        "attempt": inbox.polls_used,
        "remaining_attempts": inbox.remaining_polls,
        "last_poll_at": rfc3339_or_none(inbox.last_poll_at),
        "last_poll_latency_ms": inbox.last_poll_latency_ms,
        "accepted_message_id": accepted_message_id,
        "last_change_reason": inbox.reason,
        "evidence_release_at": rfc3339(inbox.released_at or ended + retention_s),
        "released_at": rfc3339_or_none(inbox.released_at),
    }
