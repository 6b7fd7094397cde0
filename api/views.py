"""Wire models <-> domain values. The only place that knows both shapes.

Requests become the Agent's requests here (``create_request``, ``wait_request``), once
for the HTTP routes and the ``/mcp`` tools alike; answers become wire models.
"""

from __future__ import annotations

from typing import Any

from api.schemas import (
    AttachmentOut,
    CaughtMessageOut,
    ClaimOut,
    CodeOut,
    CreatedOut,
    CreateInboxIn,
    EnvelopeOut,
    FaultOut,
    FoundItem,
    MatchIn,
    MessageListItem,
    MessageListOut,
    MessageOut,
    MessageRef,
    NearMissOut,
    RunEventOut,
    RunInboxOut,
    RunReportOut,
    SearchOut,
    SmtpEnvelopeOut,
    UnmatchedOut,
    UnroutedItem,
    UnroutedOut,
    WaitIn,
)
from sink.agent import CreateRequest, MessagePage, ReadResult, RunReport, WaitRequest
from sink.clock import rfc3339, rfc3339_or_none
from sink.envelope import Envelope, NearMiss, Unmatched
from sink.faults import Fault
from sink.inbox import Claim, Evidence, Match
from sink.mailbox import CaughtRead, Page
from sink.message import ParsedMessage


def match_from(given: MatchIn | None) -> Match:
    """The wire's match criteria as the domain's (none given: match anything)."""
    if given is None:
        return Match()
    return Match(
        subject_contains=given.subject_contains,
        from_contains=given.from_contains,
        body_contains=given.body_contains,
        max_age_s=given.max_age_s,
    )


def create_request(given: CreateInboxIn) -> CreateRequest:
    return CreateRequest(
        run_id=given.run_id,
        purpose=given.purpose,
        ttl_s=given.ttl_s,
        poll_budget=given.poll_budget,
        policy=given.policy,
        match=match_from(given.match),
    )


def wait_request(given: WaitIn, run_id: str | None) -> WaitRequest:
    """``run_id``: the calling run, as the transport names it (body, header or query)."""
    return WaitRequest(
        timeout_s=given.timeout_s,
        cursor=given.cursor,
        match=match_from(given.match) if given.match is not None else None,
        run_id=run_id,
        order=given.order or "oldest",
    )


def claim_out(claim: Claim | None) -> ClaimOut | None:
    if claim is None:
        return None
    return ClaimOut(
        claim_id=claim.claim_id,
        message_id=claim.message_id,
        run_id=claim.run_id,
        claimed_at=rfc3339(claim.claimed_at),
    )


def message_ref(evidence: Evidence | None) -> MessageRef | None:
    if evidence is None:
        return None
    return MessageRef(
        message_id=evidence.message_id,
        subject=evidence.subject,
        from_=evidence.from_addr,
        received_at=rfc3339(evidence.received_at),
    )


def unmatched_out(unmatched: Unmatched) -> UnmatchedOut:
    return UnmatchedOut(
        message_id=unmatched.message_id,
        received_at=rfc3339(unmatched.received_at),
        from_=unmatched.from_addr,
        subject=unmatched.subject,
    )


def near_miss_out(near_miss: NearMiss) -> NearMissOut:
    return NearMissOut(
        address=near_miss.address,
        received_at=rfc3339(near_miss.received_at),
        distance=near_miss.distance,
    )


def envelope_out(envelope: Envelope) -> EnvelopeOut:
    next_arguments = envelope.next_arguments
    return EnvelopeOut(
        state=envelope.state,
        status=envelope.status,
        next_action=envelope.next_action,
        next_tool=envelope.next_tool,
        next_arguments=None if next_arguments is None else dict(next_arguments),
        hint=envelope.hint,
        reason=envelope.reason,
        inbox_id=envelope.inbox_id,
        run_id=envelope.run_id,
        purpose=envelope.purpose,
        address=envelope.address,
        expires_at=rfc3339(envelope.expires_at),
        attempt=envelope.attempt,
        remaining_attempts=envelope.remaining_attempts,
        retry_after=envelope.retry_after,
        next_poll_at=rfc3339_or_none(envelope.next_poll_at),
        cursor=envelope.cursor,
        message=message_ref(envelope.message),
        claim=claim_out(envelope.claim),
        last_error=envelope.last_error,
        trace_id=envelope.trace_id,
        newer_matching=envelope.newer_matching,
        unmatched=[unmatched_out(u) for u in envelope.unmatched],
        rescan_cursor=envelope.rescan_cursor,
        near_misses=[near_miss_out(n) for n in envelope.near_misses],
    )


def created_out(envelope: Envelope, capped: tuple[str, ...]) -> CreatedOut:
    return CreatedOut(
        **envelope_out(envelope).model_dump(), capped=list(capped), replayed=envelope.replayed
    )


def message_list_out(page: MessagePage) -> MessageListOut:
    return MessageListOut(
        messages=[
            MessageListItem(
                message_id=d.message_id,
                subject=d.subject,
                from_=d.from_addr,
                received_at=rfc3339(d.received_at),
                size=d.size,
                claimed=d.claim is not None,
            )
            for d in page.messages
        ],
        next_cursor=page.next_cursor,
        has_more=page.has_more,
    )


def _parsed_fields(parsed: ParsedMessage | None, withheld: bool = False) -> dict[str, Any]:
    """What a read message and a read caught message take from the parse (empty once the
    body is released; without bodies, headers and hidden text when ``withheld``)."""
    fields: dict[str, Any] = {
        "headers": parsed.headers if parsed else None,
        "from_name": parsed.from_name if parsed else None,
        "text": parsed.text if parsed else None,
        "html": parsed.html if parsed else None,
        "attachments": [
            AttachmentOut(
                filename=a.filename,
                content_type=a.content_type,
                size=a.size,
                sha256=a.sha256,
                original_filename=a.original_filename,
            )
            for a in (parsed.attachments if parsed else ())
        ],
        "links": list(parsed.links) if parsed else [],
        "codes": list(parsed.codes) if parsed else [],
        "codes_detail": [
            CodeOut(value=c.value, sources=list(c.sources))
            for c in (parsed.codes_detail if parsed else ())
        ],
        "hidden_text": parsed.hidden_text if parsed else None,
        "content_flags": list(parsed.content_flags) if parsed else [],
        "parse_warnings": list(parsed.parse_warnings) if parsed else [],
    }
    if withheld:
        fields.update(headers=None, text=None, html=None, hidden_text=None)
    return fields


def message_out(result: ReadResult) -> MessageOut:
    stored = result.stored
    delivery = stored.delivery
    parsed = result.parsed
    return MessageOut(
        message_id=delivery.message_id,
        inbox_id=delivery.inbox_id,
        from_=delivery.from_addr,
        to=list(stored.to),
        cc=list(stored.cc),
        subject=delivery.subject,
        date=stored.date,
        **_parsed_fields(parsed, result.withheld),
        envelope=SmtpEnvelopeOut(
            mail_from=stored.mail_from, rcpt_to=list(stored.rcpts), auth_user=stored.auth_user
        ),
        size=delivery.size,
        claimed=delivery.claim is not None,
        received_at=rfc3339(delivery.received_at),
        released_at=rfc3339_or_none(stored.released_at),
    )


def run_report_out(report: RunReport) -> RunReportOut:
    return RunReportOut(
        run_id=report.run_id,
        inboxes=[
            RunInboxOut(
                inbox_id=r.inbox.inbox_id,
                purpose=r.inbox.purpose,
                address=r.inbox.address,
                policy=r.inbox.policy_name,
                state=r.inbox.state.value,
                reason=r.inbox.reason,
                reserved_at=rfc3339(r.inbox.created_at),
                expires_at=rfc3339(r.inbox.expires_at),
                attempt=r.inbox.polls_used,
                remaining_attempts=r.inbox.remaining_polls,
                last_poll_at=rfc3339_or_none(r.inbox.last_poll_at),
                last_poll_latency_ms=r.inbox.last_poll_latency_ms,
                accepted_message_id=r.accepted_message_id,
                last_change_reason=r.last_change_reason,
                evidence_release_at=rfc3339_or_none(r.evidence_release_at),
                released_at=rfc3339_or_none(r.inbox.released_at),
            )
            for r in report.inboxes
        ],
        events=[
            RunEventOut(
                at=rfc3339(e.at),
                type=e.type,
                inbox_id=e.inbox_id,
                message_id=e.message_id,
                detail=e.detail,
            )
            for e in report.events
        ],
    )


def unrouted_out(page: Page) -> UnroutedOut:
    return UnroutedOut(
        messages=[
            UnroutedItem(
                id=u.id,
                mail_from=u.mail_from,
                rcpt_to=list(u.rcpts),
                subject=u.subject,
                received_at=rfc3339(u.received_at),
                size=u.size,
            )
            for u in page.items
        ],
        next_cursor=page.next_cursor,
        has_more=page.has_more,
    )


def caught_message_out(read: CaughtRead, withheld: bool = False) -> CaughtMessageOut:
    caught = read.caught
    listed = caught.listed
    parsed = read.parsed
    return CaughtMessageOut(
        message_id=listed.id,
        caught=True,
        from_=listed.from_addr,
        to=list(listed.to),
        cc=list(listed.cc),
        subject=listed.subject,
        date=caught.date,
        **_parsed_fields(parsed, withheld),
        envelope=SmtpEnvelopeOut(
            mail_from=listed.mail_from, rcpt_to=list(listed.rcpts), auth_user=caught.auth_user
        ),
        size=listed.size,
        received_at=rfc3339(listed.received_at),
        expires_at=rfc3339(caught.expires_at),
        released_at=None,
    )


def search_out(page: Page) -> SearchOut:
    return SearchOut(
        messages=[
            FoundItem(
                message_id=f.id,
                caught=f.caught,
                inbox_id=f.inbox_id,
                run_id=f.run_id,
                subject=f.subject,
                from_=f.from_addr,
                to=list(f.to),
                rcpt_to=list(f.rcpts),
                received_at=rfc3339(f.received_at),
                size=f.size,
                has_attachment=f.has_attachment,
                claimed=f.claimed,
                released=f.released,
            )
            for f in page.items
        ],
        next_cursor=page.next_cursor,
        has_more=page.has_more,
    )


def fault_out(fault: Fault) -> FaultOut:
    return FaultOut(
        fault_id=fault.fault_id,
        target=fault.target,
        mode=fault.mode,
        count=fault.count,
        remaining=fault.remaining,
        probability=fault.probability,
        delay_s=fault.delay_s,
        run_id=fault.run_id,
        hits=fault.hits,
        created_at=rfc3339(fault.created_at),
    )
