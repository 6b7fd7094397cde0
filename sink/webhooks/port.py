"""The webhook store port: webhooks, and the outbox of their deliveries.

Deliveries are not written through this port: a store writes them itself, in the same
transaction as the events they carry (``model.deliveries_for`` over the webhooks it knows),
so a crash between the commit and the send loses none. This port is what the HTTP
endpoints (create, list, delete, deliveries, test) and the delivery worker (take what is
due under a lease, settle each attempt) call. Every backend implements it: memory,
SQLite, PostgreSQL (where several replicas share the outbox and ``take_due`` leases each
row to one of them, ``FOR UPDATE SKIP LOCKED``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

from sink.webhooks.model import Attempt, Due, Outcome, Webhook

# A taken delivery is any replica's to retry after this (an attempt lasts <= 5 s); sooner when
# the process that took it is known to be gone (``resume``, ``reclaim``).
LEASE_S = 10.0
IN_FLIGHT_MAX = 8  # deliveries of one webhook in flight at once (take_due never leases more)


class NextDue(NamedTuple):
    pending: float | None  # the earliest pending delivery (None: none is pending)
    takeable: float | None  # the earliest one not held back by its webhook's cap


class WebhookStore(Protocol):
    wake: Callable[[], None] | None  # set by the delivery worker: deliveries were queued
    # Set by the worker too, for a store that leases new deliveries to it in their own
    # commit (SQLite, PostgreSQL): these were, attempt them now.
    hand: Callable[[list[Due]], None] | None
    # True for a store that, in the commit settling a delivered attempt, also leases that
    # webhook's next due deliveries to the worker (``hand``; SQLite, PostgreSQL): the end of
    # an attempt then needs no round for the per-webhook cap.
    refills: bool
    # Set by a store that writes delivered attempts later, many in one statement
    # (PostgreSQL): ``settle_soon(due, outcome)`` frees the attempt's slot in this process at
    # once and records it within ``SETTLE_SOON_S`` (at least once: a crash before that sends
    # it again). On PostgreSQL its lease (the fleet's in-flight count) holds its slot of the
    # webhook's cap until the write, which refills it. False: not taken (the worker settles
    # it now).
    settle_soon: Callable[[Due, Outcome], bool] | None
    # The SQLite file the delivery child may write delivered attempts to itself (with
    # ``record_delivered``; the worker then calls ``recorded``), None: settled through here.
    child_db: str | None

    async def create_webhook(self, webhook: Webhook) -> None: ...

    async def webhooks(self) -> list[Webhook]:
        """Every webhook, oldest first (the caller filters by scope)."""

    async def webhook(self, webhook_id: str) -> Webhook | None: ...

    async def delete_webhook(self, webhook_id: str) -> bool:
        """Delete it with its deliveries; False if there was none."""

    async def deliveries(
        self, webhook_id: str, before: tuple[float, int, int] | None, limit: int
    ) -> list[Attempt]:
        """Its attempts (and its deliveries not tried yet), newest first, strictly before
        ``before`` (an ``Attempt.position``)."""

    async def enqueue_ping(self, webhook_id: str, now: float) -> str | None:
        """Queue a ``ping`` delivery (due at once); its delivery_id, or None if no webhook."""

    # -- the worker's side -------------------------------------------------------------

    async def resume(self, now: float) -> None:
        """A worker starts (after a restart, or a new replica): every pending delivery is due
        by ``now`` (a retry's schedule does not outlive the process that made it), and the
        leases of processes that are gone are free."""

    async def reclaim(self, now: float) -> int:
        """Free the leases held by processes that are gone (a replica killed mid-attempt:
        PostgreSQL); how many. Where one process owns the outbox, 0 (open frees them)."""

    async def take_due(self, now: float, limit: int) -> list[Due]:
        """Lease up to ``limit`` pending deliveries due by ``now`` (not leased, of an enabled
        webhook, at most ``IN_FLIGHT_MAX`` leased per webhook) until ``now + LEASE_S``."""

    async def settle(self, outcome: Outcome) -> None:
        """Record an attempt and free its lease: delivered, retried later, or failed (then a
        ``webhook_failed`` run event for its run, in the same commit); ``disable`` sets the
        webhook's ``disabled_at`` and fails its other pending deliveries."""

    def recorded(self, dues: list[Due], now: float) -> None:
        """The delivery child wrote these delivered attempts (``child_db``): their leases
        are gone with that write; what the store counts of them goes too, and what they held
        back is leased to the worker (``now``: the worker's clock)."""

    async def next_due(self, now: float) -> NextDue:
        """When the earliest pending delivery is due (leased ones: when their lease ends), and
        when the earliest one that can be taken is: a webhook at its cap at ``now``
        (``IN_FLIGHT_MAX`` leased) counts there only by its leases, as the rest of it waits
        for one of its attempts to end."""

    async def pending_count(self) -> int: ...

    async def prune(self, before: float) -> int:
        """Forget delivered and failed deliveries (with their attempts) of events older
        than ``before``; how many went."""
