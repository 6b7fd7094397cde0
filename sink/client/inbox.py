"""Inbox handles: one leased inbox bound to its run, with ``expect_message``.

``Inbox`` (sync) and ``AsyncInbox`` are the same code with and without ``await``; the
decisions live in ``sink.client.expect`` so the two cannot drift apart.
"""

from __future__ import annotations

from datetime import datetime

from sink.client.base import AsyncSinkApi, SinkApi
from sink.client.errors import OwnershipRefused, Unavailable
from sink.client.expect import Expectation, Found, Pause
from sink.client.models import Envelope, Match, Message, MessagePage, RunReport

DEFAULT_EXPECT_TIMEOUT_S = 30.0
DEFAULT_LONG_POLL_S = 10.0


class _Handle:
    """What both handles share: the creation answer and the last answer seen."""

    def __init__(self, envelope: Envelope, replayed: bool, capped: tuple[str, ...]) -> None:
        self.created = envelope
        self.envelope = envelope
        self.replayed = replayed
        self.capped = capped
        """The creation values the policy lowered, e.g. ``("ttl_s",)``; empty when none."""

    @property
    def inbox_id(self) -> str:
        return self.created.inbox_id

    @property
    def run_id(self) -> str:
        return self.created.run_id

    @property
    def purpose(self) -> str:
        return self.created.purpose

    @property
    def address(self) -> str:
        return self.created.address

    @property
    def expires_at(self) -> datetime:
        return self.created.expires_at

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.inbox_id} <{self.address}> run={self.run_id} "
            f"state={self.envelope.state}>"
        )

    def _message_id(self, given: str | None) -> str:
        if given is not None:
            return given
        if self.envelope.message is None:
            raise ValueError(
                f"inbox {self.inbox_id}: the last answer carries no message; pass message_id"
            )
        return self.envelope.message.message_id

    def _expectation(
        self, match: Match, timeout_s: float, long_poll_s: float, now: float
    ) -> Expectation:
        return Expectation(
            inbox_id=self.inbox_id,
            run_id=self.run_id,
            address=self.address,
            match=match,
            timeout_s=timeout_s,
            long_poll_s=long_poll_s,
            started=now,
        )


class Inbox(_Handle):
    """A leased inbox bound to its run (sync). Every call names the run, so the server checks it."""

    def __init__(
        self,
        sink: SinkApi,
        envelope: Envelope,
        *,
        replayed: bool = False,
        capped: tuple[str, ...] = (),
    ) -> None:
        super().__init__(envelope, replayed, capped)
        self._sink = sink

    def refresh(self) -> Envelope:
        """The envelope as of now (GET: spends nothing, never scans)."""
        self.envelope = self._sink.get_inbox(self.inbox_id)
        return self.envelope

    def wait(
        self,
        *,
        timeout_s: float = 0.0,
        cursor: str | None = None,
        subject_contains: str | None = None,
        from_contains: str | None = None,
        body_contains: str | None = None,
        max_age_s: int | None = None,
        order: str | None = None,
    ) -> Envelope:
        """One wait_for_message (spends one poll). Criteria given here replace the inbox's own;
        ``order="newest"`` takes the newest unclaimed match (a resend's)."""
        match = Match(subject_contains, from_contains, body_contains, max_age_s)
        self.envelope = self._sink.wait_for_message(
            self.inbox_id,
            timeout_s=timeout_s,
            cursor=cursor,
            match=match or None,
            run_id=self.run_id,
            order=order,
        )
        return self.envelope

    def claim(self, message_id: str | None = None) -> Envelope:
        """claim_message for this run (default: the message of the last answer)."""
        self.envelope = self._sink.claim_message(self._message_id(message_id), self.run_id)
        return self.envelope

    def read(self, message_id: str | None = None) -> Message:
        """read_message (consumes nothing; default: the message of the last answer)."""
        return self._sink.read_message(self._message_id(message_id), run_id=self.run_id)

    def messages(self, *, after: str | None = None, limit: int | None = None) -> MessagePage:
        return self._sink.list_messages(self.inbox_id, after=after, limit=limit, run_id=self.run_id)

    def report(self) -> RunReport:
        """The run's report: its inboxes and events (no mail content)."""
        return self._sink.run_report(self.run_id)

    def expect_message(
        self,
        *,
        subject_contains: str | None = None,
        from_contains: str | None = None,
        body_contains: str | None = None,
        max_age_s: int | None = None,
        timeout_s: float = DEFAULT_EXPECT_TIMEOUT_S,
        claim: bool = True,
        long_poll_s: float = DEFAULT_LONG_POLL_S,
    ) -> Message:
        """Wait for a matching message, claim it (unless ``claim=False``) and return it, read.

        Follows the server's ``next_action`` and ``retry_after`` (and a 503's Retry-After);
        raises ``ExpectationFailed`` naming the reason and the next action on a terminal
        answer (expired, stop, create_new_inbox, a refused run) or when ``timeout_s`` runs out.
        """
        clock = self._sink.clock
        match = Match(subject_contains, from_contains, body_contains, max_age_s)
        plan = self._expectation(match, timeout_s, long_poll_s, clock.monotonic())
        try:
            while True:
                try:
                    self.wait(
                        timeout_s=plan.wait_timeout(clock.monotonic()),
                        subject_contains=subject_contains,
                        from_contains=from_contains,
                        body_contains=body_contains,
                        max_age_s=max_age_s,
                    )
                except Unavailable as exc:  # the server at its long-poll cap: 503
                    clock.sleep(plan.after_unavailable(exc, clock.monotonic()).delay_s)
                    continue
                step = plan.after_wait(self.envelope, clock.monotonic())
                if isinstance(step, Found):
                    break
                clock.sleep(step.delay_s)
            message_id = step.message_id
            while claim:
                try:
                    answer = self.claim(message_id)
                except Unavailable as exc:
                    clock.sleep(plan.after_unavailable(exc, clock.monotonic(), message_id).delay_s)
                    continue
                claimed = plan.after_claim(answer, clock.monotonic())
                if not isinstance(claimed, Pause):
                    break
                clock.sleep(claimed.delay_s)
            while True:
                try:
                    return self.read(message_id)
                except Unavailable as exc:
                    clock.sleep(plan.after_unavailable(exc, clock.monotonic(), message_id).delay_s)
        except OwnershipRefused as exc:
            raise plan.refused(exc) from exc


class AsyncInbox(_Handle):
    """A leased inbox bound to its run (asyncio). See ``Inbox``; every method is awaited."""

    def __init__(
        self,
        sink: AsyncSinkApi,
        envelope: Envelope,
        *,
        replayed: bool = False,
        capped: tuple[str, ...] = (),
    ) -> None:
        super().__init__(envelope, replayed, capped)
        self._sink = sink

    async def refresh(self) -> Envelope:
        self.envelope = await self._sink.get_inbox(self.inbox_id)
        return self.envelope

    async def wait(
        self,
        *,
        timeout_s: float = 0.0,
        cursor: str | None = None,
        subject_contains: str | None = None,
        from_contains: str | None = None,
        body_contains: str | None = None,
        max_age_s: int | None = None,
        order: str | None = None,
    ) -> Envelope:
        match = Match(subject_contains, from_contains, body_contains, max_age_s)
        self.envelope = await self._sink.wait_for_message(
            self.inbox_id,
            timeout_s=timeout_s,
            cursor=cursor,
            match=match or None,
            run_id=self.run_id,
            order=order,
        )
        return self.envelope

    async def claim(self, message_id: str | None = None) -> Envelope:
        self.envelope = await self._sink.claim_message(self._message_id(message_id), self.run_id)
        return self.envelope

    async def read(self, message_id: str | None = None) -> Message:
        return await self._sink.read_message(self._message_id(message_id), run_id=self.run_id)

    async def messages(self, *, after: str | None = None, limit: int | None = None) -> MessagePage:
        return await self._sink.list_messages(
            self.inbox_id, after=after, limit=limit, run_id=self.run_id
        )

    async def report(self) -> RunReport:
        return await self._sink.run_report(self.run_id)

    async def expect_message(
        self,
        *,
        subject_contains: str | None = None,
        from_contains: str | None = None,
        body_contains: str | None = None,
        max_age_s: int | None = None,
        timeout_s: float = DEFAULT_EXPECT_TIMEOUT_S,
        claim: bool = True,
        long_poll_s: float = DEFAULT_LONG_POLL_S,
    ) -> Message:
        """See ``Inbox.expect_message``."""
        clock = self._sink.clock
        match = Match(subject_contains, from_contains, body_contains, max_age_s)
        plan = self._expectation(match, timeout_s, long_poll_s, clock.monotonic())
        try:
            while True:
                try:
                    await self.wait(
                        timeout_s=plan.wait_timeout(clock.monotonic()),
                        subject_contains=subject_contains,
                        from_contains=from_contains,
                        body_contains=body_contains,
                        max_age_s=max_age_s,
                    )
                except Unavailable as exc:  # the server at its long-poll cap: 503
                    await clock.sleep(plan.after_unavailable(exc, clock.monotonic()).delay_s)
                    continue
                step = plan.after_wait(self.envelope, clock.monotonic())
                if isinstance(step, Found):
                    break
                await clock.sleep(step.delay_s)
            message_id = step.message_id
            while claim:
                try:
                    answer = await self.claim(message_id)
                except Unavailable as exc:
                    await clock.sleep(
                        plan.after_unavailable(exc, clock.monotonic(), message_id).delay_s
                    )
                    continue
                claimed = plan.after_claim(answer, clock.monotonic())
                if not isinstance(claimed, Pause):
                    break
                await clock.sleep(claimed.delay_s)
            while True:
                try:
                    return await self.read(message_id)
                except Unavailable as exc:
                    await clock.sleep(
                        plan.after_unavailable(exc, clock.monotonic(), message_id).delay_s
                    )
        except OwnershipRefused as exc:
            raise plan.refused(exc) from exc
