"""The memory adapter of the webhook port (``sink/webhooks/port.py``), for the fake and
the tests: webhooks, the outbox and its attempts in dicts.

The memory store calls ``add`` for the live events of everything it records, in the same
(synchronous, so atomic) step as the record itself: the outbox of the other backends, where
the delivery rows are written in the event's own transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from sink import event_shapes
from sink.event_ids import EventIds
from sink.storage.base import Event
from sink.webhooks.model import (
    Attempt,
    Delivery,
    DeliveryState,
    Due,
    LiveEvent,
    Outcome,
    Webhook,
    deliveries_for,
    failed_event,
    late,
    new_delivery_id,
    reports_a_failure,
)
from sink.webhooks.port import IN_FLIGHT_MAX, LEASE_S, NextDue


@dataclass(slots=True)
class _Row:
    seq: int
    delivery: Delivery
    next_attempt_at: float
    state: DeliveryState = DeliveryState.PENDING
    attempts: int = 0
    lease_until: float = 0.0


class MemoryWebhooks:
    def __init__(self, ids: EventIds, record: Callable[[list[Event]], None]) -> None:
        self._ids = ids
        self._record = record  # the store's own event recording (a webhook_failed run event)
        self._hooks: dict[str, Webhook] = {}
        self._rows: dict[str, _Row] = {}  # by delivery_id, oldest first
        self._attempts: dict[str, list[Attempt]] = {}  # by webhook_id
        self._seq = 0
        self.wake: Callable[[], None] | None = None  # the delivery worker's, once it runs
        self.hand: Callable[[list[Due]], None] | None = None  # unused: taken by take_due
        self.refills = False
        self.settle_soon: Callable[[Due, Outcome], bool] | None = None  # settles are written now
        self.child_db: str | None = None  # the delivery child writes nothing here

    # -- the outbox: written with the events -----------------------------------------

    @property
    def any(self) -> bool:
        """Some webhook exists (else recording skips making live events at all)."""
        return bool(self._hooks)

    def add(self, events: list[LiveEvent], now: float) -> None:
        if not self._hooks:
            return  # no webhook: nothing to do on the ingest path
        added = deliveries_for(list(self._hooks.values()), events, now)
        for delivery in added:
            self._seq += 1
            self._rows[delivery.delivery_id] = _Row(self._seq, delivery, now)
        if added and self.wake is not None:
            self.wake()

    # -- the port ------------------------------------------------------------------------

    async def create_webhook(self, webhook: Webhook) -> None:
        self._hooks[webhook.webhook_id] = webhook

    async def webhooks(self) -> list[Webhook]:
        return list(self._hooks.values())

    async def webhook(self, webhook_id: str) -> Webhook | None:
        return self._hooks.get(webhook_id)

    async def delete_webhook(self, webhook_id: str) -> bool:
        if self._hooks.pop(webhook_id, None) is None:
            return False
        self._attempts.pop(webhook_id, None)
        for key in [k for k, r in self._rows.items() if r.delivery.webhook_id == webhook_id]:
            del self._rows[key]
        return True

    async def deliveries(
        self, webhook_id: str, before: tuple[float, int, int] | None, limit: int
    ) -> list[Attempt]:
        rows = list(self._attempts.get(webhook_id, []))
        rows += [
            _queued(r)
            for r in self._rows.values()
            if r.delivery.webhook_id == webhook_id and r.attempts == 0
        ]
        rows.sort(key=lambda a: a.position, reverse=True)
        return [a for a in rows if before is None or a.position < before][:limit]

    async def enqueue_ping(self, webhook_id: str, now: float) -> str | None:
        hook = self._hooks.get(webhook_id)
        if hook is None:
            return None
        delivery_id = new_delivery_id()
        live = event_shapes.ping(self._ids, delivery_id, webhook_id, now)
        self._seq += 1
        delivery = Delivery(delivery_id, webhook_id, live.id, live.type, None, live.body(), now)
        self._rows[delivery_id] = _Row(self._seq, delivery, now)
        if self.wake is not None:
            self.wake()
        return delivery_id

    async def take_due(self, now: float, limit: int) -> list[Due]:
        leased: dict[str, int] = {}
        for r in self._rows.values():
            if r.state is DeliveryState.PENDING and r.lease_until > now:
                leased[r.delivery.webhook_id] = leased.get(r.delivery.webhook_id, 0) + 1
        due = sorted(
            (
                r
                for r in self._rows.values()
                if r.state is DeliveryState.PENDING
                and r.next_attempt_at <= now
                and r.lease_until <= now
            ),
            key=lambda r: (r.next_attempt_at, r.seq),
        )
        taken: list[Due] = []
        for r in due:
            if len(taken) >= limit:
                break
            hook = self._hooks.get(r.delivery.webhook_id)
            if hook is None or hook.disabled_at is not None:
                continue
            if leased.get(hook.webhook_id, 0) >= IN_FLIGHT_MAX:
                continue
            leased[hook.webhook_id] = leased.get(hook.webhook_id, 0) + 1
            r.lease_until = now + LEASE_S
            d = r.delivery
            taken.append(
                Due(
                    d.delivery_id,
                    d.webhook_id,
                    hook.url,
                    hook.secret,
                    d.event_id,
                    d.type,
                    d.run_id,
                    d.body,
                    r.attempts + 1,
                    r.lease_until,
                )
            )
        return taken

    async def settle(self, outcome: Outcome) -> None:
        row = self._rows.get(outcome.delivery_id)
        if row is None or row.attempts + 1 != outcome.attempt:
            return  # settled already (its lease ran out and another attempt was made)
        ended = row.state is DeliveryState.FAILED  # by a 410 while this attempt was in flight
        if ended:
            outcome = late(outcome)
        elif row.state is not DeliveryState.PENDING:
            return
        row.attempts = outcome.attempt
        row.state = outcome.state
        row.lease_until = 0.0
        if outcome.next_attempt_at is not None:
            row.next_attempt_at = outcome.next_attempt_at
        d = row.delivery
        self._attempts.setdefault(d.webhook_id, []).append(_attempt(row, outcome))
        if outcome.disable:
            hook = self._hooks.get(d.webhook_id)
            if hook is not None:
                self._hooks[d.webhook_id] = replace(hook, disabled_at=outcome.at)
            cut = {
                other.delivery.delivery_id: other.attempts
                for other in self._rows.values()
                if other.delivery.webhook_id == d.webhook_id
                and other.state is DeliveryState.PENDING
            }
            for other_id in cut:
                self._rows[other_id].state = DeliveryState.FAILED
            # Their newest attempt rows say failed, no retry (as the SQL adapters do).
            made = self._attempts.get(d.webhook_id, [])
            for i, a in enumerate(made):
                if cut.get(a.delivery_id) == a.attempt:
                    made[i] = replace(a, state=DeliveryState.FAILED, next_attempt_at=None)
        if (
            outcome.state is DeliveryState.FAILED
            and d.run_id is not None
            and not ended
            and not reports_a_failure(d)
        ):
            self._record([failed_event(d, outcome)])

    async def resume(self, now: float) -> None:
        # (Nothing outlives this process here: a worker starting again makes its retries due.)
        moved: set[tuple[str, int]] = set()
        for r in self._rows.values():
            if r.state is DeliveryState.PENDING and r.next_attempt_at > now:
                r.next_attempt_at = now
                moved.add((r.delivery.delivery_id, r.attempts))
        for hook_id, attempts in self._attempts.items():
            self._attempts[hook_id] = [
                replace(a, next_attempt_at=now) if (a.delivery_id, a.attempt) in moved else a
                for a in attempts
            ]

    async def reclaim(self, now: float) -> int:
        return 0  # one process owns the rows

    def recorded(self, dues: list[Due], now: float) -> None:
        pass  # (child_db is None: never called)

    async def next_due(self, now: float) -> NextDue:
        pending = [r for r in self._rows.values() if r.state is DeliveryState.PENDING]
        leased: dict[str, int] = {}
        for r in pending:
            if r.lease_until > now:
                leased[r.delivery.webhook_id] = leased.get(r.delivery.webhook_id, 0) + 1
        takeable = [
            r
            for r in pending
            if r.lease_until > now or leased.get(r.delivery.webhook_id, 0) < IN_FLIGHT_MAX
        ]
        return NextDue(
            min((max(r.next_attempt_at, r.lease_until) for r in pending), default=None),
            min((max(r.next_attempt_at, r.lease_until) for r in takeable), default=None),
        )

    async def pending_count(self) -> int:
        return sum(r.state is DeliveryState.PENDING for r in self._rows.values())

    async def prune(self, before: float) -> int:
        old = {
            k
            for k, r in self._rows.items()
            if r.state is not DeliveryState.PENDING and r.delivery.created_at < before
        }
        for key in old:
            del self._rows[key]
        for hook_id, attempts in self._attempts.items():
            self._attempts[hook_id] = [a for a in attempts if a.delivery_id not in old]
        return len(old)


def _queued(r: _Row) -> Attempt:
    d = r.delivery
    return Attempt(
        d.delivery_id,
        d.event_id,
        d.type,
        1,
        r.state,
        None,
        None,
        d.created_at,
        r.next_attempt_at if r.state is DeliveryState.PENDING else None,
        d.run_id,
        (d.created_at, r.seq, 0),
    )


def _attempt(r: _Row, outcome: Outcome) -> Attempt:
    d = r.delivery
    return Attempt(
        d.delivery_id,
        d.event_id,
        d.type,
        outcome.attempt,
        outcome.state,
        outcome.status_code,
        outcome.error,
        outcome.at,
        outcome.next_attempt_at,
        d.run_id,
        (outcome.at, r.seq, outcome.attempt),
    )
