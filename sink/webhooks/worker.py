"""The delivery worker: takes due deliveries from the outbox, posts them, settles each attempt.

    worker = Worker(store, metrics, clock)   # started by the Runtime
    store.wake = worker.wake                 # a commit that queues deliveries wakes it at once
    store.hand = worker.hand                 # or hands them over, leased already
    await worker.run(stopping)

Each round leases what is due (``take_due``: at most 8 in flight per webhook, across
replicas on PostgreSQL), starts an attempt at each, and sleeps until the
next is due, a wake-up (a commit queued one, or an attempt ended while something waited: a
retry was scheduled, or the last look saw deliveries due that the caps kept back), or
``LOOK_S`` at the most: deliveries queued by another replica, or left pending by a process
that died, go out within that. When the worker starts, every pending delivery is due at
once (``resume``: after a restart each gets an attempt within seconds, its retry schedule
notwithstanding), and each round (once a second at most) frees the leases of replicas that
are gone (``reclaim``), so a replica killed mid-attempt leaves its deliveries to the others
within ``LOOK_S`` and a second, not its 10 s leases. An attempt that ends delivered with
nothing waiting wakes nobody: with the hand-off a steady stream of deliveries
needs no round at all.
An attempt is one signed POST (``attempt.py``: 5 s in all, no redirects), made by the
delivery child (``child.py``, a process of its own: the loop that takes mail pays a pipe
write and a line read per attempt) whenever others are in flight; alone (sparse mail), or
with ``child=False``, it is made here, in a task, without the hop; a 2xx is
delivered, a 410 disables the webhook, anything else is retried on the schedule
(``schedule.py``) until the last attempt, which fails the delivery. The cap of
``IN_FLIGHT_MAX`` attempts per webhook is kept here: a store may hand or lease more (SQLite
hands a stream's deliveries over as they are written), and those wait their turn in order.
A delivered attempt the child made is written by the child itself where the store allows it
(``child_db``, SQLite: none of it on the writer that takes the mail), or with the others that
end near it (``settle_soon``); one made here (alone: whoever lists the deliveries once the
receiver answered sees it) and the rest at once. A
settle that cannot be written is left to the lease: the delivery is tried again (at least
once, never lost).
Logs name the webhook, delivery and attempt, never the URL, the secret or the body.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from typing import Any

from sink.clock import Clock
from sink.errors import StorageError
from sink.logs import enabled, log, warn
from sink.metrics import Metrics
from sink.webhooks import schedule
from sink.webhooks.attempt import post
from sink.webhooks.child import Child
from sink.webhooks.http import Http1
from sink.webhooks.model import DeliveryState, Due, Outcome
from sink.webhooks.port import IN_FLIGHT_MAX, WebhookStore

LOOK_S = 2.0  # the longest sleep: others' deliveries (replicas, a restart) go out within this
IN_FLIGHT = 64  # attempts in flight in this process, all webhooks together
RECLAIM_S = 1.0  # how often a round looks for leases of replicas that are gone
_IDLE_S = 0.25  # deliveries due that no cap holds back, yet none taken (IN_FLIGHT, a lock): again
HISTORY_S = 7 * 86400  # settled deliveries (and their attempts) are listed for a week
_PRUNE_EVERY_S = 3600.0


class Worker:
    def __init__(
        self,
        store: WebhookStore,
        metrics: Metrics,
        clock: Clock,
        delays: tuple[float, ...] = schedule.DELAYS_S,
        child: bool = False,
    ) -> None:
        """``child``: attempts are made by the delivery child (``child.py``), not here."""
        self._store = store
        self._metrics = metrics
        self._clock = clock
        self._delays = delays
        self._http = Http1(IN_FLIGHT)
        self._wakeup = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()  # attempts in flight (kept: not GC'd)
        self._child = (
            Child(self._answered, self._resend, self._recorded, store.child_db) if child else None
        )
        self._sent: dict[str, tuple[Due, float]] = {}  # in flight in the child, by key
        # Delivered in the child, being written by it (``child_db``): settled here if it dies
        # before it says they are written.
        self._recording: dict[str, tuple[Due, int | None]] = {}
        # The per-webhook cap (``IN_FLIGHT_MAX``): attempts in flight (here or in the child),
        # and deliveries handed or taken beyond it, waiting their turn in order.
        self._flying: dict[str, int] = {}
        self._queued: dict[str, deque[Due]] = {}
        self._queued_n = 0
        self._stopped = False
        self._keys = 0
        self._counted: dict[str, Any] = {}  # the deliveries metric, by result (labels() costs)
        self._due_at: float | None = None  # when the next delivery is due, at the last look
        # The last round saw deliveries due that it did not take (the caps): an attempt that
        # ends then wakes the worker, unless the store refills the webhook's cap itself.
        self._waiting = True
        self._capped = False  # the last round left due deliveries for want of IN_FLIGHT room
        self._pruned_at = -_PRUNE_EVERY_S  # monotonic: the first round prunes
        self._reclaimed_at = time.monotonic()  # (resume reclaims at the start)

    @property
    def child_pid(self) -> int | None:
        """The delivery child's process id while one runs (the bench counts its CPU)."""
        return None if self._child is None else self._child.pid

    def wake(self) -> None:
        """Deliveries were queued (or an attempt ended): look now."""
        self._wakeup.set()

    def hand(self, dues: list[Due]) -> None:
        """Deliveries the store leased to this worker in the commit that wrote them: their
        first attempts start now, without a round (stopped: a restart frees their leases)."""
        alone = len(dues) == 1
        for due in dues:
            self._start(due, alone)

    async def run(self, stopping: asyncio.Event) -> None:
        woken = True  # the first round takes what the process before left pending
        child = None
        if self._child is not None:
            child = asyncio.create_task(self._child.run(stopping), name="webhook-child")
        try:
            try:
                await self._store.resume(self._clock.now())
            except Exception as exc:  # the store's trouble: the rounds go on (LEASE_S, retries)
                warn("webhook_outbox_unavailable", error=type(exc).__name__)
            while not stopping.is_set():
                self._wakeup.clear()
                delay = await self._round(woken)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), delay)
                woken = self._wakeup.is_set()
        finally:
            self._stopped = True
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._http.close()
            if child is not None and self._child is not None:
                self._child.close()
                # In flight in the child: not settled, made again after the restart.
                await asyncio.gather(child, return_exceptions=True)
                self._sent.clear()
            # Delivered, not said written (the child writes them as it ends): written here too,
            # whichever comes second changes nothing.
            for due, status in self._recording.values():
                await self._settle(self._outcome(due, status, None))
            self._recording.clear()

    async def _round(self, woken: bool) -> float:
        """Start what is due; how long to sleep before the next round. Nothing is taken (no
        write) unless woken or something was due by now at the last look."""
        try:
            now = self._clock.now()
            if time.monotonic() - self._pruned_at >= _PRUNE_EVERY_S:
                self._pruned_at = time.monotonic()
                await self._store.prune(now - HISTORY_S)
            taken = []
            looking = woken or (self._due_at is not None and self._due_at <= now)
            if time.monotonic() - self._reclaimed_at >= RECLAIM_S:
                self._reclaimed_at = time.monotonic()
                looking = await self._store.reclaim(now) > 0 or looking
            room = IN_FLIGHT - len(self._tasks) - len(self._sent) - self._queued_n
            if looking and room > 0:
                taken = await self._store.take_due(now, room)
            self._capped = looking and len(taken) >= room
            for due in taken:
                self._start(due, len(taken) == 1)
            # Sleep until the next delivery that can be taken: a webhook's backlog at its cap
            # waits for one of its attempts to end, which wakes the worker (``_waiting``).
            ahead = await self._store.next_due(self._clock.now())
            next_at = self._due_at = ahead.takeable
            self._waiting = ahead.pending is not None and ahead.pending <= self._clock.now()
            self._metrics.webhook_pending.set(await self._store.pending_count())
        except Exception as exc:  # the store's trouble (or ours): the loop goes on
            warn("webhook_outbox_unavailable", error=type(exc).__name__)
            return 1.0
        if next_at is None:
            return LOOK_S
        wait = next_at - self._clock.now()
        if wait <= 0:
            # Not looking: this round woke a moment before the next was due (a timer can end
            # early: uvloop's count whole ms from the loop's cached time), and it is due now.
            return 0.0 if taken or not looking else _IDLE_S
        return min(wait, LOOK_S)

    def _start(self, due: Due, alone: bool = False) -> None:
        """Attempt it now if its webhook has room under the cap, else after those before it.
        ``alone``: the only one a commit or a round gave (not one of a batch)."""
        if self._stopped:
            return  # (an attempt cancelled at the stop makes room: a restart frees the lease)
        hook_id = due.webhook_id
        flying = self._flying.get(hook_id, 0)
        if flying >= IN_FLIGHT_MAX:
            self._queued.setdefault(hook_id, deque()).append(due)
            self._queued_n += 1
            return
        self._flying[hook_id] = flying + 1
        # Alone with nothing in flight the attempt is made here, at once: sparse mail gets the
        # lowest latency (no hop through the child). Beside others, or one of a batch (a
        # stream of mail) it goes to the child, off the loop that takes the mail.
        if self._child is not None and (not alone or self._sent or self._tasks):
            self._keys += 1
            key = str(self._keys)
            self._sent[key] = (due, time.monotonic())
            self._send(key, due)  # (no child running: sent at its restart)
            return
        task = asyncio.create_task(self._attempt(due), name=f"webhook {due.delivery_id}")
        self._tasks.add(task)
        task.add_done_callback(self._ended)

    def _landed(self, hook_id: str) -> None:
        """An attempt of this webhook ended (its answer came, or none will): the next one
        waiting for its room starts."""
        flying = self._flying.get(hook_id, 0) - 1
        if flying > 0:
            self._flying[hook_id] = flying
        else:
            self._flying.pop(hook_id, None)
        queued = self._queued.get(hook_id)
        if queued:
            due = queued.popleft()
            self._queued_n -= 1
            if not queued:
                del self._queued[hook_id]
            self._start(due)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled() or task.exception() is not None:
            self.wake()
        else:
            self._after_delivered()

    def _after_delivered(self) -> None:
        if self._waiting and (self._capped or not self._store.refills):
            self.wake()  # (a store that refills has leased the webhook's next ones already)

    async def _attempt(self, due: Due) -> None:
        started = time.monotonic()
        now = int(self._clock.now())
        try:
            status, error = await post(
                self._http, due.url, due.secret, due.event_id, now, due.body.encode()
            )
        finally:
            self._landed(due.webhook_id)
        # Made here, so alone (sparse mail): written at once, so whoever lists the deliveries
        # when the receiver has answered sees it delivered.
        await self._settle(self._ended_as(due, status, error, started))

    def _answered(self, key: str, status: int | None, error: str | None) -> None:
        """The child's answer for one attempt."""
        sent = self._sent.pop(key, None)
        if sent is None:
            return
        due, started = sent
        self._landed(due.webhook_id)
        if error is None and self._child is not None and self._child.records:
            # Delivered: the child writes it, with the others that end near it.
            self._recording[key] = (due, status)
            self._delivered(due, status, started)
            return
        outcome = self._ended_as(due, status, error, started)
        soon = self._store.settle_soon
        if outcome.state is DeliveryState.DELIVERED and soon is not None and soon(due, outcome):
            self._after_delivered()
            return
        self._settle_in_task(outcome)

    def _recorded(self, keys: list[str], written: bool) -> None:
        """The child wrote these delivered attempts (``written``), or could not: they are
        settled here (a row that changed meanwhile is left as it is)."""
        dues = []
        for key in keys:
            recording = self._recording.pop(key, None)
            if recording is None:
                continue
            due, status = recording
            if written:
                dues.append(due)
                continue
            outcome = self._outcome(due, status, None)
            self._settle_in_task(outcome)
        if dues:
            self._store.recorded(dues, self._clock.now())
            self._after_delivered()

    def _settle_in_task(self, outcome: Outcome) -> None:
        """Settle it in a task of its own, kept with the attempts in flight until it ends."""
        task = asyncio.create_task(self._settle(outcome), name=f"settle {outcome.delivery_id}")
        self._tasks.add(task)
        task.add_done_callback(self._ended)

    def _resend(self) -> None:
        """A child runs: the attempts that waited for it, or that the one before left
        unanswered, are sent to it (made again: they were not settled); those it delivered
        but had not said written are settled here."""
        for key, (due, _) in self._sent.items():
            self._send(key, due)
        if self._recording:
            self._recorded(list(self._recording), written=False)

    def _send(self, key: str, due: Due) -> None:
        assert self._child is not None
        now = self._clock.now()
        body = due.body.encode()
        self._child.send(
            key,
            due.url,
            due.secret,
            due.event_id,
            int(now),
            body,
            due.delivery_id,
            due.attempt,
            now,
        )

    def _ended_as(self, due: Due, status: int | None, error: str | None, started: float) -> Outcome:
        """The attempt's outcome, counted and logged."""
        outcome = self._outcome(due, status, error)
        self._noted(due, _result(outcome), outcome.state, status, error, started)
        return outcome

    def _delivered(self, due: Due, status: int | None, started: float) -> None:
        """A delivered attempt the child writes: counted and logged here."""
        self._noted(due, "delivered", DeliveryState.DELIVERED, status, None, started)

    def _noted(
        self,
        due: Due,
        result: str,
        state: DeliveryState,
        status: int | None,
        error: str | None,
        started: float,
    ) -> None:
        counter = self._counted.get(result)
        if counter is None:
            counter = self._counted[result] = self._metrics.webhook_deliveries.labels(result)
        counter.inc()
        level = logging.DEBUG if state is DeliveryState.DELIVERED else logging.INFO
        if not enabled(level):
            return
        log(
            "webhook_attempt",
            level,
            webhook_id=due.webhook_id,
            delivery_id=due.delivery_id,
            run_id=due.run_id,
            attempt=due.attempt,
            state=state.value,
            status_code=status,
            error=error,
            latency_ms=round((time.monotonic() - started) * 1000, 1),
        )

    async def _settle(self, outcome: Outcome) -> None:
        try:
            await self._store.settle(outcome)
        except StorageError as exc:
            # Not recorded: when the lease ends the delivery is taken again (at least once).
            warn("webhook_settle_failed", delivery_id=outcome.delivery_id, error=type(exc).__name__)
            self.wake()
            return
        if outcome.state is not DeliveryState.DELIVERED:
            self.wake()  # a retry to schedule, or a webhook disabled: the next round knows

    def _outcome(self, due: Due, status: int | None, error: str | None) -> Outcome:
        ended = self._clock.now()
        if error is None:
            return Outcome(
                due.delivery_id, due.attempt, ended, status, None, DeliveryState.DELIVERED
            )
        if status == 410:
            return Outcome(
                due.delivery_id,
                due.attempt,
                ended,
                status,
                error,
                DeliveryState.FAILED,
                disable=True,
            )
        retry_at = schedule.next_attempt_at(due.attempt, ended, self._delays)
        if retry_at is None:
            return Outcome(due.delivery_id, due.attempt, ended, status, error, DeliveryState.FAILED)
        return Outcome(
            due.delivery_id, due.attempt, ended, status, error, DeliveryState.PENDING, retry_at
        )


def _result(outcome: Outcome) -> str:
    """The metric's label: delivered, retried, failed or disabled."""
    if outcome.disable:
        return "disabled"
    if outcome.state is DeliveryState.PENDING:
        return "retried"
    return outcome.state.value
