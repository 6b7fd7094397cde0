"""What an inbox handle needs from a sink: the operations, and a clock to pause on.

``Sink`` (HTTP) and ``sink.fake.FakeSink`` (in-process, scripted) both provide ``SinkApi``;
``AsyncSink`` provides ``AsyncSinkApi``. The inbox handles and ``expect_message`` are written
once against these, so the fake and the real client cannot differ in how they are used.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sink.client.inbox import AsyncInbox, Inbox
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


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class AsyncClock(Protocol):
    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """Real time: ``time.monotonic`` and ``time.sleep``."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class AsyncSystemClock:
    """Real time for asyncio: ``time.monotonic`` and ``asyncio.sleep``."""

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        if seconds > 0:
            await asyncio.sleep(seconds)


class SinkApi(Protocol):
    @property
    def clock(self) -> Clock: ...

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
    ) -> Inbox: ...

    def get_inbox(self, inbox_id: str) -> Envelope: ...

    def wait_for_message(
        self,
        inbox_id: str,
        *,
        timeout_s: float | None = None,
        cursor: str | None = None,
        match: MatchLike | None = None,
        run_id: str | None = None,
        order: str | None = None,
    ) -> Envelope: ...

    def list_messages(
        self,
        inbox_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        run_id: str | None = None,
    ) -> MessagePage: ...

    def read_message(self, message_id: str, *, run_id: str | None = None) -> Message: ...

    def raw_message(self, message_id: str, *, run_id: str | None = None) -> bytes: ...

    def claim_message(self, message_id: str, run_id: str) -> Envelope: ...

    def run_report(self, run_id: str) -> RunReport: ...

    def get_run_report(self, run_id: str) -> RunReport: ...

    def find_mail(
        self,
        query: str,
        *,
        run_id: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> FoundPage: ...

    def release_run(self, run_id: str) -> None: ...

    def create_webhook(
        self,
        url: str,
        *,
        events: Sequence[str] | None = None,
        run_id: str | None = None,
        run_glob: str | None = None,
        description: str | None = None,
    ) -> Webhook: ...

    def list_webhooks(self) -> tuple[Webhook, ...]: ...

    def get_webhook(self, webhook_id: str) -> Webhook: ...

    def delete_webhook(self, webhook_id: str) -> None: ...

    def list_deliveries(
        self, webhook_id: str, *, cursor: str | None = None, limit: int | None = None
    ) -> DeliveryPage: ...

    def test_webhook(self, webhook_id: str) -> str: ...


class AsyncSinkApi(Protocol):
    @property
    def clock(self) -> AsyncClock: ...

    async def create_inbox(
        self,
        run_id: str,
        purpose: str,
        *,
        ttl_s: int | None = None,
        poll_budget: int | None = None,
        policy: str | None = None,
        match: MatchLike | None = None,
        idempotency_key: str | None = None,
    ) -> AsyncInbox: ...

    async def get_inbox(self, inbox_id: str) -> Envelope: ...

    async def wait_for_message(
        self,
        inbox_id: str,
        *,
        timeout_s: float | None = None,
        cursor: str | None = None,
        match: MatchLike | None = None,
        run_id: str | None = None,
        order: str | None = None,
    ) -> Envelope: ...

    async def list_messages(
        self,
        inbox_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        run_id: str | None = None,
    ) -> MessagePage: ...

    async def read_message(self, message_id: str, *, run_id: str | None = None) -> Message: ...

    async def raw_message(self, message_id: str, *, run_id: str | None = None) -> bytes: ...

    async def claim_message(self, message_id: str, run_id: str) -> Envelope: ...

    async def run_report(self, run_id: str) -> RunReport: ...

    async def get_run_report(self, run_id: str) -> RunReport: ...

    async def find_mail(
        self,
        query: str,
        *,
        run_id: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> FoundPage: ...

    async def release_run(self, run_id: str) -> None: ...

    async def create_webhook(
        self,
        url: str,
        *,
        events: Sequence[str] | None = None,
        run_id: str | None = None,
        run_glob: str | None = None,
        description: str | None = None,
    ) -> Webhook: ...

    async def list_webhooks(self) -> tuple[Webhook, ...]: ...

    async def get_webhook(self, webhook_id: str) -> Webhook: ...

    async def delete_webhook(self, webhook_id: str) -> None: ...

    async def list_deliveries(
        self, webhook_id: str, *, cursor: str | None = None, limit: int | None = None
    ) -> DeliveryPage: ...

    async def test_webhook(self, webhook_id: str) -> str: ...
