"""``AsyncFakeSink``: the product's own Agent and Ingest over the memory store, on a fake clock.

There is no second copy of the rules here: every operation is the real ``sink.agent.Agent``
call, mail arrives through the real ``sink.ingest.Ingest``, and the answers go through the
client's own parsers (``render.py``). What the fake adds is the edge the HTTP API would be
(input checks, errors as the client's exceptions) and the script, acted out through the
product's hooks before the wait that uses each step (``script.py``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from email.policy import SMTP
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sink import ids, webhook_calls
from sink.agent import Agent, CreateRequest, WaitRequest
from sink.breaker import BreakerKey
from sink.client.inbox import AsyncInbox
from sink.client.models import (
    DeliveryPage,
    Envelope,
    FoundPage,
    Match,
    MatchLike,
    Message,
    MessagePage,
    RunReport,
    Webhook,
)
from sink.clock import FakeClock
from sink.config import Settings
from sink.errors import RunsinkError
from sink.fake import render
from sink.fake.script import (
    CircuitOpen,
    Expired,
    ProviderError,
    ProviderTimeout,
    Received,
    Step,
)
from sink.faults import FaultRegistry, FaultSpec
from sink.guard import Guard
from sink.inbox import Match as Criteria
from sink.ingest import Ingest
from sink.mailbox import Mailbox
from sink.metrics import Metrics
from sink.policy import BUILTIN, Policy, load_policies
from sink.storage.memory import MemoryStore
from sink.waiters import Waiters
from sink.webhooks import model as webhook_model

if TYPE_CHECKING:
    from sink.fake.sink import FakeSink

T = TypeVar("T")

_RUN_ID = ids.RUN_ID
_PURPOSE = ids.PURPOSE
_RUN_GLOB = re.compile(r"[A-Za-z0-9._:\-*?\[\]!]{1,128}")  # api/schemas.py's RunGlob


@dataclass(slots=True)
class _Armed:
    """The script's first step, acted out before the wait that should use it."""

    step: Step
    fault_id: str | None = None


class AsyncFakeSink:
    """The fake behind the async interface (``sink.client.AsyncSinkApi``); see ``sink.fake``."""

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
        loaded = load_policies(Path(policy_file)) if policy_file is not None else dict(BUILTIN)
        settings = Settings(
            domain=domain, default_policy=default_policy, policies={**loaded, **(policies or {})}
        )
        self._clock = clock or FakeClock()
        new_ids = ids.Ids(random.Random(seed).randbytes, self._clock.now)
        self._faults = FaultRegistry(random.Random(seed))
        self._store = MemoryStore()
        waiters, metrics = Waiters(), Metrics()
        self._guard = Guard(self._faults, self._store, metrics, self._clock)
        self._agent = Agent(
            self._store, waiters, settings, self._guard, metrics, self._clock, new_ids
        )
        self._ingest = Ingest(self._store, waiters, settings, metrics, self._clock, new_ids)
        self._settings = settings
        self._script: list[Step] = list(script)
        self._armed: _Armed | None = None

    # -- the fake's own controls ------------------------------------------------------------

    @property
    def clock(self) -> _AsyncFakeClock:
        return _AsyncFakeClock(self._clock)

    @property
    def fake_clock(self) -> FakeClock:
        return self._clock

    @property
    def sync(self) -> FakeSink:
        """The same fake behind the synchronous interface."""
        from sink.fake.sink import FakeSink  # sink.py builds on this module

        return FakeSink.over(self)

    def script(self, *steps: Step) -> None:
        """Add steps for the next waits that reach the provider."""
        self._script.extend(steps)

    @property
    def pending(self) -> tuple[Step, ...]:
        """The steps not used yet (assert it is empty to check a test used its whole script)."""
        return tuple(self._script)

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
        # Ingest over the memory store never suspends, so it runs here without a loop.
        return _at_once(self._deliver(to, _raw(to, subject, text, html, sender), sender))

    async def aclose(self) -> None:
        """Nothing to close; here so an AsyncFakeSink can stand in for an AsyncSink."""

    # -- AsyncSinkApi ------------------------------------------------------------------------

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
    ) -> AsyncInbox:
        envelope, replayed, capped = await self.create(
            run_id, purpose, ttl_s, poll_budget, policy, match, idempotency_key
        )
        return AsyncInbox(self, envelope, replayed=replayed, capped=capped)

    async def get_inbox(self, inbox_id: str) -> Envelope:
        return render.envelope(await self._call(self._agent.get(inbox_id, None)))

    async def wait_for_message(
        self,
        inbox_id: str,
        *,
        timeout_s: float | None = None,
        cursor: str | None = None,
        match: MatchLike | None = None,
        run_id: str | None = None,
        order: str | None = None,
    ) -> Envelope:
        if timeout_s is not None and not 0 <= timeout_s <= 86400:
            raise render.invalid("timeout_s", "expected a number from 0 to 86400")
        _check_run(run_id)
        if order not in (None, "oldest", "newest"):
            raise render.invalid("order", "expected 'oldest' or 'newest'")
        request = WaitRequest(
            timeout_s=timeout_s,
            cursor=cursor,
            match=_criteria(Match.of(match)),
            run_id=run_id,
            order=order or "oldest",
        )
        await self._act_out(inbox_id)
        answer = await self._call(self._agent.wait(inbox_id, request, None))
        self._used_up(answer.reason)
        return render.envelope(answer)

    async def list_messages(
        self,
        inbox_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        run_id: str | None = None,
    ) -> MessagePage:
        count = 50 if limit is None else limit
        if not 1 <= count <= 500:
            raise render.invalid("limit", "expected a whole number from 1 to 500")
        _check_run(run_id)
        return render.page(await self._call(self._agent.messages(inbox_id, after, count, run_id)))

    async def read_message(self, message_id: str, *, run_id: str | None = None) -> Message:
        _check_run(run_id)
        return render.message(await self._call(self._agent.read(message_id, run_id, None)))

    async def raw_message(self, message_id: str, *, run_id: str | None = None) -> bytes:
        _check_run(run_id)
        return (await self._call(self._agent.raw(message_id, run_id))).raw

    async def claim_message(self, message_id: str, run_id: str) -> Envelope:
        _check_run(run_id)
        return render.envelope(await self._call(self._agent.claim(message_id, run_id, None)))

    async def run_report(self, run_id: str) -> RunReport:
        _check_run(run_id)
        return render.report(await self._call(self._agent.run_report(run_id)))

    async def get_run_report(self, run_id: str) -> RunReport:
        return await self.run_report(run_id)

    async def find_mail(
        self,
        query: str,
        *,
        run_id: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> FoundPage:
        _check_run(run_id)
        if limit is not None and not 1 <= limit <= 500:
            raise render.invalid("limit", "expected an integer from 1 to 500")
        search = Mailbox(self._store.mail).search(query, run_id, cursor, limit or 50)
        return render.found(await self._call(search))

    async def release_run(self, run_id: str) -> None:
        _check_run(run_id)
        await self._call(self._agent.release(run_id, None))

    # -- webhooks: the memory store's, over the same rules as the HTTP API ------------------
    # Deliveries are queued as events happen (list_deliveries shows them pending) but never
    # sent: the fake makes no network calls.

    async def create_webhook(
        self,
        url: str,
        *,
        events: Sequence[str] | None = None,
        run_id: str | None = None,
        run_glob: str | None = None,
        description: str | None = None,
    ) -> Webhook:
        if not 1 <= len(url) <= 2048:
            raise render.invalid("url", "expected 1 to 2048 characters")
        if events is not None and (
            not 1 <= len(events) <= 3 or not set(events) <= set(webhook_model.EVENT_TYPES)
        ):
            kinds = ", ".join(webhook_model.EVENT_TYPES)
            raise render.invalid("events", f"expected 1 to 3 of {kinds}")
        _check_run(run_id)
        if run_glob is not None and not _RUN_GLOB.fullmatch(run_glob):
            raise render.invalid("run_glob", "a run_glob is 1-128 chars of A-Za-z0-9._:-*?[]!")
        if description is not None and len(description) > 500:
            raise render.invalid("description", "expected at most 500 characters")
        hook = _checked(
            lambda: webhook_calls.new_webhook(
                url,
                events=None if events is None else list(events),
                run_id=run_id,
                run_glob=run_glob,
                description=description,
                now=self._clock.now(),
                by_admin=True,  # the fake has no tokens: every call is the admin's
            )
        )
        await self._store.webhooks.create_webhook(hook)
        return render.webhook(hook, with_secret=True)

    async def list_webhooks(self) -> tuple[Webhook, ...]:
        return tuple(render.webhook(h) for h in await self._store.webhooks.webhooks())

    async def get_webhook(self, webhook_id: str) -> Webhook:
        return render.webhook(await self._hook(webhook_id))

    async def delete_webhook(self, webhook_id: str) -> None:
        if not await self._store.webhooks.delete_webhook(webhook_id):
            raise render.error(webhook_calls.no_webhook(webhook_id))

    async def list_deliveries(
        self, webhook_id: str, *, cursor: str | None = None, limit: int | None = None
    ) -> DeliveryPage:
        count = webhook_calls.LIMIT_DEFAULT if limit is None else limit
        if not 1 <= count <= webhook_calls.LIMIT_MAX:
            most = webhook_calls.LIMIT_MAX
            raise render.invalid("limit", f"expected a whole number from 1 to {most}")
        hook = await self._hook(webhook_id)
        before = _checked(lambda: webhook_calls.position(cursor))
        rows = await self._store.webhooks.deliveries(hook.webhook_id, before, count + 1)
        page, has_more = rows[:count], len(rows) > count
        after = webhook_calls.cursor(page[-1].position) if has_more and page else None
        return render.deliveries(page, after, has_more)

    async def test_webhook(self, webhook_id: str) -> str:
        hook = await self._hook(webhook_id)
        return await self._call(webhook_calls.ping(self._store.webhooks, hook, self._clock.now()))

    async def _hook(self, webhook_id: str) -> webhook_model.Webhook:
        hook = await self._store.webhooks.webhook(webhook_id)
        if hook is None:
            raise render.error(webhook_calls.no_webhook(webhook_id))
        return hook

    # -- for FakeSink (the same calls, answered without the async handle) ---------------------

    async def create(
        self,
        run_id: str,
        purpose: str,
        ttl_s: int | None,
        poll_budget: int | None,
        policy: str | None,
        match: MatchLike | None,
        key: str | None,
    ) -> tuple[Envelope, bool, tuple[str, ...]]:
        if not _RUN_ID.fullmatch(run_id):
            raise render.invalid("run_id", "a run_id is 1-128 chars of A-Za-z0-9._:-")
        if not _PURPOSE.fullmatch(purpose):
            raise render.invalid("purpose", "a purpose is 1-64 chars of A-Za-z0-9._-")
        for name, value in (("ttl_s", ttl_s), ("poll_budget", poll_budget)):
            if value is not None and value < 1:
                raise render.invalid(name, "expected an integer >= 1")
        # The body the HTTP client would send: an Idempotency-Key replays only this body.
        body: dict[str, Any] = {"run_id": run_id, "purpose": purpose}
        given = {"ttl_s": ttl_s, "poll_budget": poll_budget, "policy": policy}
        body.update({k: v for k, v in given.items() if v is not None})
        criteria = Match.of(match)
        if criteria:
            body["match"] = criteria.as_json()
        request = CreateRequest(
            run_id=run_id,
            purpose=purpose,
            ttl_s=ttl_s,
            poll_budget=poll_budget,
            policy=policy,
            match=(_criteria(criteria) if criteria else None) or Criteria(),
        )
        created = await self._call(self._agent.create(request, body, key, None))
        return render.envelope(created.envelope), created.replayed, created.capped

    # -- the script ---------------------------------------------------------------------------

    async def _act_out(self, inbox_id: str) -> None:
        """Act out the script's next step through the product's hooks, once, before a wait."""
        if not self._script or self._armed is not None:
            return
        step = self._script[0]
        inbox = await self._call(self._agent.get(inbox_id, None))
        if isinstance(step, CircuitOpen):
            # Open from this wait on: the wait is refused, and the step is used.
            stored = await self._store.load_inbox(inbox_id)
            policy = self._settings.policy(stored.policy_name if stored else "ci")
            self._guard.trip(BreakerKey(inbox.run_id, inbox_id, "wait"), policy, step.retry_after)
            self._script.pop(0)
            return
        armed = _Armed(step)
        if isinstance(step, Received):
            raw = _raw(inbox.address, step.subject, step.text, step.html, step.sender)
            await self._deliver(inbox.address, raw, step.sender)
        elif isinstance(step, ProviderTimeout | ProviderError):
            mode = "timeout" if isinstance(step, ProviderTimeout) else "error"
            spec = FaultSpec(target="wait", mode=mode, count=1, run_id=inbox.run_id)
            armed.fault_id = self._faults.add(spec, self._clock.now()).fault_id
        elif isinstance(step, Expired) and step.reason == "lease":
            self._clock.advance(inbox.expires_at - self._clock.now())
        elif isinstance(step, Expired):
            await self._spend_all_but_one_poll(inbox_id, inbox.run_id)
        self._armed = armed

    def _used_up(self, reason: str | None) -> None:
        """A step is used by the wait that reached the provider (as a fault is on the server)."""
        armed = self._armed
        if armed is None:
            return
        if armed.fault_id is not None:
            used = all(f.fault_id != armed.fault_id for f in self._faults.list())
        else:
            used = reason not in ("circuit_open", "too_early")
        if used:
            self._script.pop(0)
            self._armed = None

    async def _spend_all_but_one_poll(self, inbox_id: str, run_id: str) -> None:
        """Expired("timeout"): empty polls, each when it is due, until one poll is left."""
        while True:
            view = await self._call(self._agent.get(inbox_id, None))
            if view.state == "expired":
                return
            if view.next_poll_at is not None:
                self._clock.advance(view.next_poll_at - self._clock.now())
            if view.remaining_attempts <= 1:
                return  # the wait this step is for spends the last one
            await self._call(self._agent.wait(inbox_id, WaitRequest(run_id=run_id), None))

    async def _deliver(self, to: str, raw: bytes, sender: str) -> str | None:
        recipient = await self._ingest.route(to, len(raw))
        route = recipient.route
        before = [] if route is None else await self._all_deliveries(route.inbox_id)
        await self._ingest.deliver(sender, [recipient], raw)
        if route is None:
            return None
        after = await self._all_deliveries(route.inbox_id)
        return after[-1].message_id if len(after) > len(before) else None

    async def _all_deliveries(self, inbox_id: str) -> list[Any]:
        return await self._store.deliveries_after(inbox_id, 0, 1_000_000)

    async def _call(self, work: Awaitable[T]) -> T:
        """An Agent call; the server's error answers become the client's exceptions."""
        try:
            return await work
        except RunsinkError as exc:
            raise render.error(exc) from None


class _AsyncFakeClock:
    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock

    def monotonic(self) -> float:
        return self._clock.monotonic()

    async def sleep(self, seconds: float) -> None:
        self._clock.advance(seconds)


def _at_once(work: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (the memory store's and ingest's), without a loop."""
    try:
        work.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    work.close()
    raise RuntimeError("the fake's ingest suspended; it must run on the fake's loop")


def _checked(work: Callable[[], T]) -> T:
    """A rule's check; its error as the server would answer it (the client's exception)."""
    try:
        return work()
    except RunsinkError as exc:
        raise render.error(exc) from None


def _check_run(run_id: str | None) -> None:
    if run_id is not None and not _RUN_ID.fullmatch(run_id):
        raise render.invalid("run_id", "a run_id is 1-128 chars of A-Za-z0-9._:-")


def _criteria(match: Match | None) -> Criteria | None:
    if match is None:
        return None
    return Criteria(
        match.subject_contains, match.from_contains, match.body_contains, match.max_age_s
    )


def _raw(to: str, subject: str, text: str, html: str | None, sender: str) -> bytes:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    message["Subject"] = subject
    message.set_content(text)
    if html is not None:
        message.add_alternative(html, subtype="html")
    return message.as_bytes(policy=SMTP)
