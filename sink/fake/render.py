"""The fake's answers: the Agent's results -> the wire's JSON -> the client's own parsers.

The same shapes ``api/views.py`` gives the server's answers, and the same status and code
for each error (``sink.errors.STATUS_AND_CODE``), so a fake answer goes through exactly the
parsing a real one does.
"""

from __future__ import annotations

import math
from typing import Any

from sink import agent, errors, guidance, webhook_calls
from sink import envelope as domain
from sink.client import errors as client
from sink.client.models import (
    DeliveryPage,
    Envelope,
    FoundPage,
    Message,
    MessagePage,
    RunReport,
    Webhook,
)
from sink.clock import rfc3339, rfc3339_or_none, seconds_up
from sink.mailbox import Page
from sink.webhooks import model as webhooks


def envelope(view: domain.Envelope) -> Envelope:
    message, claim = view.message, view.claim
    return Envelope.from_json(
        {
            # Plain strings, as JSON gives them to the client (not the domain's members).
            "state": view.state.value,
            "status": view.status.value,
            "next_action": view.next_action.value,
            # v3 guidance, as the server sends it: the tool, its arguments, the hint.
            "next_tool": None if view.next_tool is None else view.next_tool.value,
            "next_arguments": None if view.next_arguments is None else dict(view.next_arguments),
            "hint": view.hint,
            "reason": None if view.reason is None else view.reason.value,
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
            "newer_matching": view.newer_matching,
            "unmatched": [
                {
                    "message_id": u.message_id,
                    "received_at": rfc3339(u.received_at),
                    "from": u.from_addr,
                    "subject": u.subject,
                }
                for u in view.unmatched
            ],
            "rescan_cursor": view.rescan_cursor,
            "near_misses": [
                {
                    "address": n.address,
                    "received_at": rfc3339(n.received_at),
                    "distance": n.distance,
                }
                for n in view.near_misses
            ],
        }
    )


def message(result: agent.ReadResult) -> Message:
    """read_message; ``parsed`` is None once the evidence is released (metadata only)."""
    stored, parsed = result.stored, result.parsed
    delivery = stored.delivery
    return Message.from_json(
        {
            "message_id": delivery.message_id,
            "inbox_id": delivery.inbox_id,
            "headers": parsed.headers if parsed else None,
            "from": delivery.from_addr,
            "from_name": parsed.from_name if parsed else None,
            "to": list(stored.to),
            "cc": list(stored.cc),
            "subject": delivery.subject,
            "date": stored.date,
            "text": parsed.text if parsed else None,
            "html": parsed.html if parsed else None,
            "attachments": [
                {
                    "filename": a.filename,
                    "content_type": a.content_type,
                    "size": a.size,
                    "sha256": a.sha256,
                    "original_filename": a.original_filename,
                }
                for a in (parsed.attachments if parsed else ())
            ],
            "links": list(parsed.links) if parsed else [],
            "codes": list(parsed.codes) if parsed else [],
            "parse_warnings": list(parsed.parse_warnings) if parsed else [],
            "codes_detail": [
                {"value": c.value, "sources": list(c.sources)}
                for c in (parsed.codes_detail if parsed else ())
            ],
            "hidden_text": parsed.hidden_text if parsed else None,
            "content_flags": list(parsed.content_flags) if parsed else [],
            "envelope": {
                "mail_from": stored.mail_from,
                "rcpt_to": list(stored.rcpts),
                "auth_user": stored.auth_user,
            },
            "size": delivery.size,
            "claimed": delivery.claim is not None,
            "received_at": rfc3339(delivery.received_at),
            "released_at": rfc3339_or_none(stored.released_at),
        }
    )


def page(result: agent.MessagePage) -> MessagePage:
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
                for d in result.messages
            ],
            "next_cursor": result.next_cursor,
            "has_more": result.has_more,
        }
    )


def found(result: Page) -> FoundPage:
    """A search page, as the HTTP API's ``GET /v1/messages?query=`` answers it."""
    return FoundPage.from_json(
        {
            "messages": [
                {
                    "message_id": f.id,
                    "caught": f.caught,
                    "inbox_id": f.inbox_id,
                    "run_id": f.run_id,
                    "subject": f.subject,
                    "from": f.from_addr,
                    "to": list(f.to),
                    "received_at": rfc3339(f.received_at),
                    "size": f.size,
                    "has_attachment": f.has_attachment,
                    "claimed": f.claimed,
                    "released": f.released,
                }
                for f in result.items
            ],
            "next_cursor": result.next_cursor,
            "has_more": result.has_more,
        }
    )


def report(result: agent.RunReport) -> RunReport:
    return RunReport.from_json(
        {
            "run_id": result.run_id,
            "inboxes": [
                {
                    "inbox_id": r.inbox.inbox_id,
                    "purpose": r.inbox.purpose,
                    "address": r.inbox.address,
                    "policy": r.inbox.policy_name,
                    "state": r.inbox.state.value,
                    "reason": None if r.inbox.reason is None else r.inbox.reason.value,
                    "reserved_at": rfc3339(r.inbox.created_at),
                    "expires_at": rfc3339(r.inbox.expires_at),
                    "attempt": r.inbox.polls_used,
                    "remaining_attempts": r.inbox.remaining_polls,
                    "last_poll_at": rfc3339_or_none(r.inbox.last_poll_at),
                    "last_poll_latency_ms": r.inbox.last_poll_latency_ms,
                    "accepted_message_id": r.accepted_message_id,
                    "last_change_reason": r.last_change_reason,
                    "evidence_release_at": rfc3339_or_none(r.evidence_release_at),
                    "released_at": rfc3339_or_none(r.inbox.released_at),
                }
                for r in result.inboxes
            ],
            "events": [
                {
                    "at": rfc3339(e.at),
                    "type": e.type,
                    "inbox_id": e.inbox_id,
                    "message_id": e.message_id,
                    "detail": dict(e.detail),
                }
                for e in result.events
            ],
        }
    )


def webhook(hook: webhooks.Webhook, *, with_secret: bool = False) -> Webhook:
    """A webhook as ``api/webhooks.py`` answers it (the secret, and the URL's password, only
    when it was created)."""
    data: dict[str, Any] = {
        "webhook_id": hook.webhook_id,
        "url": hook.url if with_secret else webhook_calls.shown_url(hook.url),
        "events": list(hook.events),
        "run_id": hook.run_id,
        "run_glob": hook.run_glob,
        "description": hook.description,
        "created_at": rfc3339(hook.created_at),
        "disabled_at": rfc3339_or_none(hook.disabled_at),
    }
    if with_secret:
        data["secret"] = hook.secret
    return Webhook.from_json(data)


def deliveries(
    attempts: list[webhooks.Attempt], next_cursor: str | None, has_more: bool
) -> DeliveryPage:
    """A page of attempts as ``GET /v1/webhooks/{id}/deliveries`` answers it."""
    return DeliveryPage.from_json(
        {
            "deliveries": [
                {
                    "delivery_id": a.delivery_id,
                    "event_id": a.event_id,
                    "type": a.type,
                    "attempt": a.attempt,
                    "state": a.state.value,
                    "status_code": a.status_code,
                    "error": a.error,
                    "at": rfc3339(a.at),
                    "next_attempt_at": rfc3339_or_none(a.next_attempt_at),
                }
                for a in attempts
            ],
            "next_cursor": next_cursor,
            "has_more": has_more,
        }
    )


def error(exc: errors.RunsinkError) -> client.ApiError:
    """The client's exception for what the server would answer with an error body."""
    if isinstance(exc, errors.OwnershipRefused):
        status = errors.REFUSAL_STATUS[exc.reason]
        said = guidance.for_error(exc.reason, status, message=exc.message).fields()
        return client.OwnershipRefused(status, exc.reason, exc.message, guidance=said)
    for cls, status, code in errors.STATUS_AND_CODE:
        if isinstance(exc, cls):
            details: dict[str, Any] = dict(exc.details)
            if status == 503:
                # As the Retry-After header says it: whole seconds, at least one.
                wait = exc.retry_after if isinstance(exc, errors.CircuitOpen) else 1.0
                retry_after = float(max(1, math.ceil(wait)))
                said = guidance.for_error(
                    code, status, message=exc.message, details=details, retry_after=retry_after
                ).fields()
                return client.Unavailable(
                    status, code, exc.message, details, retry_after=retry_after, guidance=said
                )
            said = guidance.for_error(code, status, message=exc.message, details=details).fields()
            return client.ApiError(status, code, exc.message, details, guidance=said)
    raise exc


def invalid(field: str, problem: str) -> client.ApiError:
    """Input the HTTP API's request models refuse (422)."""
    return client.ApiError(422, "invalid_request", f"{field}: {problem}", {"field": field})
