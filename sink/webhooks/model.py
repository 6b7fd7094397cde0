"""Webhooks and their deliveries as values: what the port stores and the worker sends.

A ``Webhook`` is what a caller registered; ``wants`` is its filter (event types, one run,
a glob over run ids; neither: every run, and caught mail only for an admin's). A
``Delivery`` is one event for one webhook, written to the outbox in the same commit as the
event; each try at it is an ``Attempt`` row. The body is made once, when the delivery is
written, so every retry sends the same bytes (only the timestamp header and the signature
are made anew per attempt).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import time
from dataclasses import dataclass, replace
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any

from sink.clock import rfc3339
from sink.storage.base import Event

EVENT_TYPES = ("message", "inbox", "run_event")
PING = "ping"  # the type of a test delivery (POST /v1/webhooks/{id}/test)
FAILED_EVENT = "webhook_failed"  # the run event recorded when a delivery's last attempt fails


class DeliveryState(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Webhook:
    webhook_id: str
    url: str
    events: tuple[str, ...]  # a subset of EVENT_TYPES, in that order
    run_id: str | None
    run_glob: str | None
    description: str | None
    secret: str  # whsec_ + base64 of 24 random bytes; shown only in the create answer
    created_at: float
    disabled_at: float | None = None
    created_by_admin: bool = False

    def wants(self, kind: str, run_id: str | None) -> bool:
        """Whether an event of this type and run goes to this webhook."""
        if self.disabled_at is not None or kind not in self.events:
            return False
        if run_id is None:  # caught mail: only an admin's webhook that filters no run
            return self.created_by_admin and self.run_id is None and self.run_glob is None
        if self.run_id is not None and run_id != self.run_id:
            return False
        return self.run_glob is None or fnmatchcase(run_id, self.run_glob)


@dataclass(frozen=True, slots=True)
class LiveEvent:
    """One live event, as SSE shows it and a webhook delivers it."""

    type: str  # message | inbox | run_event (| ping, only for a webhook's test)
    id: str  # the SSE id: and the webhook-id header
    run_id: str | None  # None: caught mail (or a ping)
    at: float  # when it happened: the body's timestamp
    data: dict[str, Any]
    stamp: str | None = None  # ``at`` as RFC 3339, when its maker had it already

    def body(self) -> str:
        """The delivery's body: ``{"type", "id", "timestamp", "data"}``, compact JSON."""
        stamp = self.stamp or rfc3339(self.at)
        return _COMPACT.encode(
            {"type": self.type, "id": self.id, "timestamp": stamp, "data": self.data}
        )


# json.dumps with these arguments makes an encoder per call: one, made once.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Delivery:
    """An outbox row to write: one event for one webhook."""

    delivery_id: str
    webhook_id: str
    event_id: str
    type: str
    run_id: str | None
    body: str
    created_at: float  # also its first attempt's due time: at once


@dataclass(frozen=True, slots=True)
class Attempt:
    """One row of ``GET /v1/webhooks/{id}/deliveries``: an attempt made, or (attempt 1,
    ``pending``, no status) a delivery not tried yet. ``position`` orders them, newest first."""

    delivery_id: str
    event_id: str
    type: str
    attempt: int
    state: DeliveryState
    status_code: int | None
    error: str | None
    at: float  # when the attempt ended (or the delivery was queued)
    next_attempt_at: float | None  # set while the delivery is pending
    run_id: str | None
    position: tuple[float, int, int]  # (at, delivery's sequence, attempt): the cursor's key


@dataclass(frozen=True, slots=True)
class Due:
    """A delivery the worker took (leased until ``lease_until``) for its next attempt."""

    delivery_id: str
    webhook_id: str
    url: str
    secret: str
    event_id: str
    type: str
    run_id: str | None
    body: str
    attempt: int  # the number of the attempt to make now (1 for the first)
    lease_until: float


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an attempt came to, for ``settle``."""

    delivery_id: str
    attempt: int
    at: float  # when the attempt ended
    status_code: int | None  # None: no answer (refused, timed out, ...)
    error: str | None  # a short cause, never a body or a secret: "timeout", "http_500"
    state: DeliveryState  # delivered, pending (retried at next_attempt_at) or failed
    next_attempt_at: float | None = None
    disable: bool = False  # 410 Gone: the webhook is disabled at once


def late(outcome: Outcome) -> Outcome:
    """An attempt in flight when a 410 ended its webhook's deliveries, settled after it:
    listed as it went (delivered, or failed), never retried, disabling nothing again."""
    delivered = outcome.state is DeliveryState.DELIVERED
    state = DeliveryState.DELIVERED if delivered else DeliveryState.FAILED
    return replace(outcome, state=state, next_attempt_at=None, disable=False)


def new_webhook_id() -> str:
    return "wh_" + base64.b32encode(secrets.token_bytes(15)).decode().lower()


def new_delivery_id() -> str:
    """``dlv_`` and 32 hex digits, as PostgreSQL's outbox trigger makes them (b32encode is
    pure Python: a tenth of this per delivery): the first 12 the time in milliseconds, so a
    commit's new ids go to the end of the unique index, not one page of it each, then 80
    random bits."""
    return f"dlv_{time.time_ns() // 1_000_000:012x}{os.urandom(10).hex()}"


def deliveries_for(webhooks: list[Webhook], events: list[LiveEvent], now: float) -> list[Delivery]:
    """The outbox rows a commit writes: each event for each webhook that wants it (a
    ``webhook_failed`` run event never goes to the webhook whose failure it reports)."""
    out: list[Delivery] = []
    for event in events:
        failed_hook = (
            event.data.get("detail", {}).get("webhook_id") if event.type == "run_event" else None
        )
        for hook in webhooks:
            if hook.webhook_id == failed_hook or not hook.wants(event.type, event.run_id):
                continue
            out.append(
                Delivery(
                    new_delivery_id(),
                    hook.webhook_id,
                    event.id,
                    event.type,
                    event.run_id,
                    event.body(),
                    now,
                )
            )
    return out


def reports_a_failure(delivery: Delivery) -> bool:
    """Does it carry a ``webhook_failed`` run event? Its own failure is then recorded as no
    further one: two dead webhooks of a run would otherwise feed each other for ever."""
    if delivery.type != "run_event":
        return False
    try:
        data = json.loads(delivery.body).get("data")
    except (ValueError, AttributeError):
        return False
    return isinstance(data, dict) and data.get("type") == FAILED_EVENT


def failed_event(delivery: Delivery, outcome: Outcome) -> Event:
    """The run event that says a delivery's last attempt failed (or its webhook went)."""
    if delivery.run_id is None:
        raise ValueError("a webhook_failed event needs a run")
    return Event(
        run_id=delivery.run_id,
        type=FAILED_EVENT,
        at=outcome.at,
        detail={
            "webhook_id": delivery.webhook_id,
            "delivery_id": delivery.delivery_id,
            "event_id": delivery.event_id,
            "event_type": delivery.type,
            "attempts": outcome.attempt,
            "status_code": outcome.status_code,
            "error": outcome.error,
        },
    )


def glob_regex(glob: str) -> str:
    """A run glob (``fnmatchcase``: ``*``, ``?``, ``[set]``, ``[!set]``) as an anchored POSIX
    regular expression, for a database to match with ``~`` exactly as Python matches."""
    out = ["^"]
    i, n = 0, len(glob)
    while i < n:
        c = glob[i]
        i += 1
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            j = i
            if j < n and glob[j] == "!":
                j += 1
            if j < n and glob[j] == "]":
                j += 1
            while j < n and glob[j] != "]":
                j += 1
            if j >= n:
                out.append("\\[")  # no closing bracket: a literal "[", as fnmatch reads it
                continue
            body = glob[i:j]
            i = j + 1
            negate = body.startswith("!")
            if negate:
                body = body[1:]
            members = "".join(ch if ch.isalnum() or ch == "-" else "\\" + ch for ch in body)
            out.append("[" + ("^" if negate else "") + members + "]")
        else:
            out.append(c if c.isalnum() else "\\" + c)
    out.append("$")
    return "".join(out)
