"""``AsyncFakeSink``: the fake behind the async interface (``sink.client.AsyncSinkApi``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from sink.client.inbox import AsyncInbox
from sink.client.models import Envelope, Match, Message, MessagePage, RunReport
from sink.fake.script import FakeClock, Step
from sink.fake.sink import FakeSink
from sink.policy import Policy


class AsyncFakeSink:
    """``FakeSink`` behind the async interface (``sink.client.AsyncSinkApi``), for async agents."""

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
        self.sync = FakeSink(
            script,
            policy_file=policy_file,
            policies=policies,
            default_policy=default_policy,
            domain=domain,
            seed=seed,
            clock=clock,
        )
        self._clock = _AsyncFakeClock(self.sync.clock)

    @property
    def clock(self) -> _AsyncFakeClock:
        return self._clock

    def script(self, *steps: Step) -> None:
        self.sync.script(*steps)

    @property
    def pending(self) -> tuple[Step, ...]:
        return self.sync.pending

    def deliver(
        self,
        to: str,
        *,
        subject: str = "Hello",
        text: str = "Hello from the app.",
        html: str | None = None,
        sender: str = "app@example.test",
    ) -> str | None:
        return self.sync.deliver(to, subject=subject, text=text, html=html, sender=sender)

    async def aclose(self) -> None:
        self.sync.close()

    async def create_inbox(
        self,
        run_id: str,
        purpose: str,
        *,
        ttl_s: int | None = None,
        poll_budget: int | None = None,
        policy: str | None = None,
        match: Match | None = None,
        idempotency_key: str | None = None,
    ) -> AsyncInbox:
        handle = self.sync.create_inbox(
            run_id,
            purpose,
            ttl_s=ttl_s,
            poll_budget=poll_budget,
            policy=policy,
            match=match,
            idempotency_key=idempotency_key,
        )
        return AsyncInbox(self, handle.created, replayed=handle.replayed)

    async def get_inbox(self, inbox_id: str) -> Envelope:
        return self.sync.get_inbox(inbox_id)

    async def wait_for_message(
        self,
        inbox_id: str,
        *,
        timeout_s: float = 0.0,
        cursor: str | None = None,
        match: Match | None = None,
        run_id: str | None = None,
    ) -> Envelope:
        return self.sync.wait_for_message(
            inbox_id, timeout_s=timeout_s, cursor=cursor, match=match, run_id=run_id
        )

    async def list_messages(
        self,
        inbox_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        run_id: str | None = None,
    ) -> MessagePage:
        return self.sync.list_messages(inbox_id, after=after, limit=limit, run_id=run_id)

    async def read_message(self, message_id: str, *, run_id: str | None = None) -> Message:
        return self.sync.read_message(message_id, run_id=run_id)

    async def raw_message(self, message_id: str, *, run_id: str | None = None) -> bytes:
        return self.sync.raw_message(message_id, run_id=run_id)

    async def claim_message(self, message_id: str, run_id: str) -> Envelope:
        return self.sync.claim_message(message_id, run_id)

    async def run_report(self, run_id: str) -> RunReport:
        return self.sync.run_report(run_id)

    async def release_run(self, run_id: str) -> None:
        self.sync.release_run(run_id)


class _AsyncFakeClock:
    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock

    def monotonic(self) -> float:
        return self._clock.monotonic()

    async def sleep(self, seconds: float) -> None:
        self._clock.advance(seconds)
