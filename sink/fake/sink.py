"""``FakeSink``: the synchronous fake, ``AsyncFakeSink`` through a portal.

The way Starlette's ``TestClient`` runs the real app, each call runs the real Agent to its
end on an event loop of its own (``_portal``), and that loop is closed before the call
returns: no loop or thread outlives a call. Called from inside a running loop (a sync fake
in async code), the call runs on a short-lived thread that is joined before it returns.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from sink.client.inbox import Inbox
from sink.client.models import (
    DeliveryPage,
    Envelope,
    FoundPage,
    MatchLike,
    Message,
    MessagePage,
    RunReport,
    Webhook,
)
from sink.clock import FakeClock
from sink.fake.aio import AsyncFakeSink
from sink.fake.script import Step
from sink.policy import Policy

T = TypeVar("T")


class FakeSink:
    """An in-process runsink with scripted outcomes and a fake clock (see ``sink.fake``)."""

    def __init__(
        self,
        script: Iterable[Step] = (),
        *,
        policy_file: str | Path | None = None,
        policies: Mapping[str, Policy] | None = None,
        default_policy: str = "ci",
        domain: str = "sink.test",
        seed: int = 0,
        clock: FakeClock | None = None,
    ) -> None:
        self.aio = AsyncFakeSink(
            script,
            policy_file=policy_file,
            policies=policies,
            default_policy=default_policy,
            domain=domain,
            seed=seed,
            clock=clock,
        )

    @classmethod
    def over(cls, core: AsyncFakeSink) -> FakeSink:
        """The synchronous face of an existing ``AsyncFakeSink`` (the same inboxes and clock)."""
        fake = cls.__new__(cls)
        fake.aio = core
        return fake

    # -- the fake's own controls ------------------------------------------------------------

    @property
    def clock(self) -> FakeClock:
        return self.aio.fake_clock

    def script(self, *steps: Step) -> None:
        """Add steps for the next waits that reach the provider."""
        self.aio.script(*steps)

    @property
    def pending(self) -> tuple[Step, ...]:
        """The steps not used yet (assert it is empty to check a test used its whole script)."""
        return self.aio.pending

    def deliver(
        self,
        to: str,
        *,
        subject: str = "Hello",
        text: str = "Hello from the app.",
        html: str | None = None,
        sender: str = "app@example.test",
    ) -> str | None:
        """Mail arrives now, as over SMTP: the message_id, or None (unrouted or late: dropped)."""
        return self.aio.deliver(to, subject=subject, text=text, html=html, sender=sender)

    # -- SinkApi ---------------------------------------------------------------------------

    def close(self) -> None:
        """Nothing to close (each call closes its own loop); here so a FakeSink can stand
        in for a Sink."""

    def __enter__(self) -> FakeSink:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def create_inbox(
        self,
        run_id: str,
        purpose: str,
        *,
        ttl_s: int | None = None,
        poll_budget: int | None = None,
        policy: str | None = None,
        match: MatchLike | None = None,
        idempotency_key: str | None = None,
    ) -> Inbox:
        envelope, replayed, capped = _portal(
            self.aio.create(run_id, purpose, ttl_s, poll_budget, policy, match, idempotency_key)
        )
        return Inbox(self, envelope, replayed=replayed, capped=capped)

    def get_inbox(self, inbox_id: str) -> Envelope:
        return _portal(self.aio.get_inbox(inbox_id))

    def wait_for_message(
        self,
        inbox_id: str,
        *,
        timeout_s: float | None = None,
        cursor: str | None = None,
        match: MatchLike | None = None,
        run_id: str | None = None,
        order: str | None = None,
    ) -> Envelope:
        return _portal(
            self.aio.wait_for_message(
                inbox_id,
                timeout_s=timeout_s,
                cursor=cursor,
                match=match,
                run_id=run_id,
                order=order,
            )
        )

    def list_messages(
        self,
        inbox_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        run_id: str | None = None,
    ) -> MessagePage:
        return _portal(self.aio.list_messages(inbox_id, after=after, limit=limit, run_id=run_id))

    def read_message(self, message_id: str, *, run_id: str | None = None) -> Message:
        return _portal(self.aio.read_message(message_id, run_id=run_id))

    def raw_message(self, message_id: str, *, run_id: str | None = None) -> bytes:
        return _portal(self.aio.raw_message(message_id, run_id=run_id))

    def claim_message(self, message_id: str, run_id: str) -> Envelope:
        return _portal(self.aio.claim_message(message_id, run_id))

    def run_report(self, run_id: str) -> RunReport:
        return _portal(self.aio.run_report(run_id))

    def get_run_report(self, run_id: str) -> RunReport:
        return _portal(self.aio.get_run_report(run_id))

    def find_mail(
        self,
        query: str,
        *,
        run_id: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> FoundPage:
        return _portal(self.aio.find_mail(query, run_id=run_id, limit=limit, cursor=cursor))

    def release_run(self, run_id: str) -> None:
        _portal(self.aio.release_run(run_id))

    # -- webhooks (queued as events happen, never sent: see AsyncFakeSink) -------------------

    def create_webhook(
        self,
        url: str,
        *,
        events: Sequence[str] | None = None,
        run_id: str | None = None,
        run_glob: str | None = None,
        description: str | None = None,
    ) -> Webhook:
        return _portal(
            self.aio.create_webhook(
                url, events=events, run_id=run_id, run_glob=run_glob, description=description
            )
        )

    def list_webhooks(self) -> tuple[Webhook, ...]:
        return _portal(self.aio.list_webhooks())

    def get_webhook(self, webhook_id: str) -> Webhook:
        return _portal(self.aio.get_webhook(webhook_id))

    def delete_webhook(self, webhook_id: str) -> None:
        _portal(self.aio.delete_webhook(webhook_id))

    def list_deliveries(
        self, webhook_id: str, *, cursor: str | None = None, limit: int | None = None
    ) -> DeliveryPage:
        return _portal(self.aio.list_deliveries(webhook_id, cursor=cursor, limit=limit))

    def test_webhook(self, webhook_id: str) -> str:
        return _portal(self.aio.test_webhook(webhook_id))


def _portal(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` to its end on a loop of its own, closed (with its executor) before return."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run(work)
    # Inside a running loop (a sync fake in async code): a thread of its own, joined here.
    result: list[T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            result.append(_run(work))
        except BaseException as exc:  # handed back to the caller below
            failure.append(exc)

    thread = threading.Thread(target=target, name="fake-sink-portal")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


def _run(work: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(work)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
