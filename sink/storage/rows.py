"""What both SQL adapters read and write the same way: rows to domain values (an inbox, a
delivery, a stored message, a route, a listing entry, a run's summary; they select the same
columns), the values of a new inbox's and message's row (in the same column order), and the
run events every adapter records (``expired``, ``claimed``, ``message_accepted`` ...)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from json.encoder import encode_basestring_ascii
from typing import Any, Protocol

from sink.inbox import Claim, Delivery, Evidence, Inbox, Match
from sink.nearmiss import LiveAddress, NearMissFound
from sink.storage.base import (
    CaughtMessage,
    Delivered,
    Event,
    Incoming,
    Late,
    Listed,
    NewInbox,
    Route,
    RunSummary,
    StoredMessage,
)
from sink.vocabulary import Reason, State


def json_strings(values: Iterable[str]) -> str:
    """``json.dumps(list(values))`` for strings, the same text in a fifth of the time: the
    encoder's own escaping per string, without an encoder made per call. Ingest stores three
    such lists (To, Cc, recipients) a message."""
    return "[" + ", ".join(map(encode_basestring_ascii, values)) + "]"


class Row(Protocol):
    """A result row read by column name (``sqlite3.Row``, ``asyncpg.Record``)."""

    def __getitem__(self, key: str) -> Any: ...


def inbox_from_row(row: Row) -> Inbox:
    """An inbox from its row (the adapters select the same columns)."""
    evidence = None
    if row["evidence_message_id"] is not None and row["ev_seq"] is not None:
        claim = None
        if row["ev_claim_id"] is not None:
            claim = Claim(
                row["ev_claim_id"],
                row["evidence_message_id"],
                row["ev_claim_run_id"],
                row["ev_claimed_at"],
            )
        evidence = Evidence(
            row["evidence_message_id"],
            row["ev_seq"],
            row["ev_subject"],
            row["ev_from"],
            row["ev_received_at"],
            claim,
        )
    return Inbox(
        inbox_id=row["inbox_id"],
        run_id=row["run_id"],
        purpose=row["purpose"],
        address=row["address"],
        policy_name=row["policy"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        poll_budget=row["poll_budget"],
        polls_used=row["polls_used"],
        next_poll_at=row["next_poll_at"],
        cursor_seq=row["cursor_seq"],
        state=State(row["state"]),
        reason=None if row["reason"] is None else Reason(row["reason"]),
        evidence=evidence,
        match=Match(**json.loads(row["match_json"])),
        wait_match=_match_or_none(row["wait_match_json"]),
        rescan_seq=row["rescan_seq"],
        trace_id=row["trace_id"],
        last_error=row["last_error"],
        expired_at=row["expired_at"],
        last_poll_at=row["last_poll_at"],
        last_poll_latency_ms=row["last_poll_latency_ms"],
        released_at=row["released_at"],
        created_with=row["created_with"],
    )


def _match_or_none(text: str | None) -> Match | None:
    return None if text is None else Match(**json.loads(text))


def match_json_or_none(match: Match | None) -> str | None:
    """A wait's criteria as its column keeps them (None before any wait)."""
    return None if match is None else json.dumps(match.as_dict())


# The live inboxes, for a store's near-miss index (SQLite and PostgreSQL alike).
LIVE_ADDRESSES = (
    "SELECT inbox_id, run_id, address, created_at, expires_at FROM inboxes "
    "WHERE state <> 'expired' AND released_at IS NULL"
)


def live_from_row(row: Row) -> LiveAddress:
    return LiveAddress(
        row["inbox_id"], row["run_id"], row["address"], row["created_at"], row["expires_at"]
    )


# An event's fields in ``Event``'s order, before it has a row id: ``Event(*fields, seq)``.
# Ingest's events go to SQLite as these, so each is built once, with its id (a frozen
# dataclass costs ~15k instructions to build).
EventFields = tuple[str, str, float, str | None, str | None, dict[str, Any]]


def near_miss_event(found: NearMissFound, received_at: float) -> Event:
    """The run report's ``near_miss`` entry: the caught address and how far it is, never
    the mail's content (it stays caught mail)."""
    return Event(*near_miss_fields(found, received_at))


def near_miss_fields(found: NearMissFound, received_at: float) -> EventFields:
    detail = {"address": found.address, "distance": found.distance}
    return (found.run_id, "near_miss", received_at, found.inbox_id, None, detail)


def delivery_from_row(row: Row) -> Delivery:
    claim = None
    if row["claim_id"] is not None:
        claim = Claim(row["claim_id"], row["message_id"], row["claim_run_id"], row["claimed_at"])
    return Delivery(
        seq=row["seq"],
        message_id=row["message_id"],
        inbox_id=row["inbox_id"],
        subject=row["subject"],
        from_addr=row["from_addr"],
        received_at=row["received_at"],
        size=row["size"],
        claim=claim,
    )


def inbox_values(new: NewInbox) -> tuple[Any, ...]:
    """A new inbox's row as both adapters insert it: inbox_id, run_id, purpose, local_part,
    address, policy, created_at, expires_at, poll_budget, match_json, trace_id,
    evidence_release_at, created_with."""
    inbox = new.inbox
    return (
        inbox.inbox_id,
        inbox.run_id,
        inbox.purpose,
        new.local_part,
        inbox.address,
        inbox.policy_name,
        inbox.created_at,
        inbox.expires_at,
        inbox.poll_budget,
        json.dumps(inbox.match.as_dict()),
        inbox.trace_id,
        inbox.expires_at + new.retention_s,
        inbox.created_with,
    )


def message_values(key: object, item: Incoming, size: int) -> tuple[Any, ...]:
    """A message's row as both adapters insert it: its key (SQLite's ``message_pk``,
    PostgreSQL's ``message_key``), raw, size, subject, from_addr, to_json, cc_json, date,
    mail_from, received_at, auth_user."""
    s = item.summary
    return (
        key,
        item.raw,
        size,
        s.subject,
        s.from_addr,
        json_strings(s.to),
        json_strings(s.cc),
        s.date,
        item.mail_from,
        item.received_at,
        item.auth_user,
    )


def route_from_row(row: Row) -> Route:
    """Where mail to an address goes (``inbox_id, run_id, policy, expires_at, state``)."""
    return Route(
        row["inbox_id"],
        row["run_id"],
        row["policy"],
        row["expires_at"],
        row["state"] == "expired",
    )


def stored_message_from_row(row: Row) -> StoredMessage:
    """A delivered message from its row (the adapters' ``message`` selects the same columns;
    ``raw`` and ``analysis`` are NULL once released)."""
    return StoredMessage(
        delivery=delivery_from_row(row),
        run_id=row["run_id"],
        raw=None if row["raw"] is None else bytes(row["raw"]),
        mail_from=row["mail_from"],
        rcpts=tuple(json.loads(row["rcpt_json"])),
        to=tuple(json.loads(row["to_json"])),
        cc=tuple(json.loads(row["cc_json"])),
        date=row["date"],
        released_at=row["released_at"],
        analysis=row["analysis"],
        auth_user=row["auth_user"],
    )


def run_summary_from_row(row: Row) -> RunSummary:
    """A run of the web UI's run list from its row (``states`` a JSON object of counts)."""
    return RunSummary(
        run_id=row["run_id"],
        started_at=row["started"],
        purposes=tuple((row["purposes"] or "").split()),
        states={str(k): int(v) for k, v in json.loads(row["states"] or "{}").items()},
        messages=int(row["messages"]),
        claims=int(row["claims"]),
        last_event=row["last_event"],
        last_event_at=row["last_event_at"],
    )


def expired_event(inbox: Inbox, cause: str | None = None) -> Event:
    """The run report's ``expired`` entry for an inbox that just expired."""
    detail: dict[str, Any] = {"reason": inbox.reason}
    if cause:
        detail["cause"] = cause
    return Event(
        run_id=inbox.run_id,
        type="expired",
        at=inbox.expired_at if inbox.expired_at is not None else inbox.expires_at,
        inbox_id=inbox.inbox_id,
        detail=detail,
    )


def claimed_event(claim: Claim, inbox_id: str) -> Event:
    """The run report's ``claimed`` entry for a claim just made."""
    return Event(
        run_id=claim.run_id,
        type="claimed",
        at=claim.claimed_at,
        inbox_id=inbox_id,
        message_id=claim.message_id,
        detail={"claim_id": claim.claim_id},
    )


def accepted_event(delivered: Delivered, received_at: float, size: int) -> Event:
    """The run report's ``message_accepted`` entry for a message delivered to an inbox."""
    return Event(*accepted_fields(delivered, received_at, size))


def accepted_fields(delivered: Delivered, received_at: float, size: int) -> EventFields:
    return (
        delivered.run_id,
        "message_accepted",
        received_at,
        delivered.inbox_id,
        delivered.message_id,
        {"size": size},
    )


def late_events(dropped: Iterable[Late], received_at: float, size: int) -> list[Event]:
    """The run report's ``late_arrival`` entries for a message's dropped late recipients."""
    return [Event(*fields) for fields in late_fields(dropped, received_at, size)]


def late_fields(dropped: Iterable[Late], received_at: float, size: int) -> list[EventFields]:
    detail = {"size": size, "action": "dropped"}
    return [
        (late.run_id, "late_arrival", received_at, late.inbox_id, None, dict(detail))
        for late in dropped
    ]


def listed_from_row(row: Row) -> Listed:
    """A listing entry (a delivery or caught mail) from its row (the adapters select the
    same columns)."""
    return Listed(
        id=row["id"],
        position=(int(row["message_pk"]), int(row["seq"])),
        caught=row["inbox_id"] is None,
        inbox_id=row["inbox_id"],
        run_id=row["run_id"],
        subject=row["subject"],
        from_addr=row["from_addr"],
        to=tuple(json.loads(row["to_json"])),
        cc=tuple(json.loads(row["cc_json"])),
        mail_from=row["mail_from"],
        rcpts=tuple(json.loads(row["rcpt_json"] or "[]")),
        received_at=row["received_at"],
        size=row["size"],
        has_attachment=bool(row["has_attachment"]),
        claimed=row["claim_id"] is not None,
        released=bool(row["released"]),
    )


def caught_from_row(row: Row) -> CaughtMessage:
    """Caught mail from its listing row plus ``raw_body``, ``date`` and ``caught_until``."""
    raw = row["raw_body"]
    return CaughtMessage(
        listed=listed_from_row(row),
        raw=None if raw is None else bytes(raw),
        date=row["date"],
        expires_at=row["caught_until"],
        auth_user=row["auth_user"],
    )
