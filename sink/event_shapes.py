"""The live events' objects, made once here for both readers of them: the SSE hub
(``sink/events.py``) and the webhook outbox (written by each store in its commit).

Pure: a stored run event (with its ``events`` row id) or a stored message in, ``LiveEvent``
values out, with their ids (``sink/event_ids.py``) and their ``data`` exactly as the
contract's "Live events" section shows them.
"""

from __future__ import annotations

from typing import Any

from sink.clock import rfc3339
from sink.event_ids import EventIds
from sink.storage.base import Event, Incoming
from sink.webhooks.model import LiveEvent


def of_event(event: Event, ids: EventIds, row_id: int) -> list[LiveEvent]:
    """A run event as ``run_event``, plus ``inbox`` when it changes an inbox's state."""
    out = [
        LiveEvent(
            "run_event",
            ids.of_row("run_event", row_id),
            event.run_id,
            event.at,
            run_event_data(event),
        )
    ]
    state = _state_after(event)
    if state is not None and event.inbox_id is not None:
        reason = event.detail.get("reason") if state[0] == "expired" else state[1]
        data = {
            "inbox_id": event.inbox_id,
            "run_id": event.run_id,
            "state": state[0],
            "reason": reason,
        }
        out.append(LiveEvent("inbox", ids.of_row("inbox", row_id), event.run_id, event.at, data))
    return out


def of_events(events: list[Event], ids: EventIds) -> list[LiveEvent]:
    """Stored run events (each with its row id) as live events, in order."""
    out: list[LiveEvent] = []
    for event in events:
        if event.seq is None:
            raise ValueError(f"run event {event.type} has no events row id")
        out += of_event(event, ids, event.seq)
    return out


def delivered(
    ids: EventIds, message_id: str, inbox_id: str, run_id: str, subject: str, received_at: float
) -> LiveEvent:
    """A message delivered to a run's inbox."""
    stamp = rfc3339(received_at)
    data = {
        "message_id": message_id,
        "inbox_id": inbox_id,
        "run_id": run_id,
        "caught": False,
        "subject": subject,
        "received_at": stamp,
    }
    return LiveEvent("message", ids.of_message(message_id), run_id, received_at, data, stamp)


def caught(ids: EventIds, caught_id: str, subject: str, received_at: float) -> LiveEvent:
    """Caught mail: no run (only readers of every run, and an admin's unfiltered webhooks)."""
    stamp = rfc3339(received_at)
    data = {
        "message_id": caught_id,
        "inbox_id": None,
        "run_id": None,
        "caught": True,
        "subject": subject,
        "received_at": stamp,
    }
    return LiveEvent("message", ids.of_message(caught_id), None, received_at, data, stamp)


def of_incoming(incoming: Incoming, ids: EventIds) -> list[LiveEvent]:
    """A stored SMTP transaction's message events: one per inbox, one if caught."""
    subject = incoming.summary.subject
    out = [
        delivered(ids, d.message_id, d.inbox_id, d.run_id, subject, incoming.received_at)
        for d in incoming.deliveries
    ]
    if incoming.unrouted and incoming.caught_id is not None:
        out.append(caught(ids, incoming.caught_id, subject, incoming.received_at))
    return out


def ping(ids: EventIds, delivery_id: str, webhook_id: str, at: float) -> LiveEvent:
    """A webhook's test delivery."""
    return LiveEvent("ping", ids.of_ping(delivery_id), None, at, {"webhook_id": webhook_id})


def run_event_data(event: Event) -> dict[str, Any]:
    """The same shape as an entry of ``GET /v1/runs/{run_id}``'s ``events``."""
    return {
        "at": rfc3339(event.at),
        "type": event.type,
        "run_id": event.run_id,
        "inbox_id": event.inbox_id,
        "message_id": event.message_id,
        "detail": event.detail,
    }


def _state_after(event: Event) -> tuple[str, str | None] | None:
    """(state, reason) an inbox is in after this event, or None if the event changes none."""
    if event.type == "created":
        return ("created", None)
    if event.type == "claimed":
        return ("received", None)
    if event.type == "expired":
        return ("expired", None)
    if event.type == "polled":
        outcome = str(event.detail.get("outcome"))
        if outcome == "received":
            return ("received", None)
        if outcome in ("evidence_not_found", "evidence_mismatch", "evidence_misaddressed"):
            return ("waiting", outcome)
        return None  # "timeout": the expired event recorded with it says so
    return None
