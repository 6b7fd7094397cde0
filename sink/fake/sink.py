"""``FakeSink``: the in-process, scripted runsink (see ``sink.fake``).

Each operation follows ``sink/agent.py`` step by step, in the contract's order of checks
(input, ownership, expiry, circuit breaker, too early, budget, provider), over in-memory
state instead of a store, with the script standing in for the provider.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from email.message import EmailMessage
from email.policy import SMTP
from pathlib import Path
from types import TracebackType
from typing import Any

from sink import envelope as env
from sink import ids
from sink.breaker import Breaker
from sink.client.errors import ApiError, OwnershipRefused, Unavailable
from sink.client.inbox import Inbox
from sink.client.models import Envelope, Match, Message, MessagePage, RunReport
from sink.errors import InvalidCursor
from sink.fake import render
from sink.fake.script import (
    CircuitOpen,
    Expired,
    FakeClock,
    ProviderError,
    ProviderTimeout,
    Received,
    Step,
    Waiting,
)
from sink.guard import breaker_settings
from sink.ids import decode_cursor
from sink.inbox import (
    Claim,
    Delivery,
    GateKind,
    ScanResult,
    State,
    after_claim,
    after_poll,
    wait_gate,
)
from sink.inbox import Inbox as Lease
from sink.inbox import Match as Criteria
from sink.message import parse, searchable_text, summarize
from sink.policy import BUILTIN, Policy, load_policies

_RUN_ID = ids.RUN_ID
_PURPOSE = ids.PURPOSE
_B32 = "abcdefghijklmnopqrstuvwxyz234567"


@dataclass(frozen=True, slots=True)
class _Stored:
    raw: bytes | None
    mail_from: str
    rcpt: str
    released_at: float | None = None


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
        loaded = load_policies(Path(policy_file)) if policy_file is not None else dict(BUILTIN)
        self._policies = {**loaded, **(policies or {})}
        self._default_policy = default_policy
        self._domain = domain
        self._random = random.Random(seed)
        self._clock = clock or FakeClock()
        self._script: list[Step] = list(script)
        self._inboxes: dict[str, Lease] = {}
        self._keys: dict[str, tuple[str, str]] = {}  # idempotency key -> (inbox_id, body)
        self._locals: dict[str, str] = {}  # address local part -> inbox_id
        self._deliveries: dict[str, list[Delivery]] = {}
        self._stored: dict[str, _Stored] = {}
        self._events: list[render.Event] = []
        self._breakers: dict[tuple[str, str, str], Breaker] = {}
        self._forced_open: dict[str, float] = {}  # inbox_id -> end of a scripted CircuitOpen

    # -- the fake's own controls ------------------------------------------------------------

    @property
    def clock(self) -> FakeClock:
        return self._clock

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
        local, _, domain = to.lower().partition("@")
        inbox_id = self._locals.get(local.split("+", 1)[0]) if domain == self._domain else None
        if inbox_id is None:
            return None
        inbox = self._inboxes[inbox_id]
        now = self._clock.now()
        if inbox.effective(now).state is State.EXPIRED:
            self._event(inbox.run_id, "late_arrival", inbox_id, detail={"action": "dropped"})
            return None
        raw = _raw(to, subject, text, html, sender)
        summary = summarize(raw)
        delivery = Delivery(
            seq=len(self._deliveries[inbox_id]) + 1,
            message_id="msg_" + self._token(24),
            inbox_id=inbox_id,
            subject=summary.subject,
            from_addr=summary.from_addr,
            received_at=now,
            size=len(raw),
            claim=None,
        )
        self._deliveries[inbox_id].append(delivery)
        self._stored[delivery.message_id] = _Stored(raw, sender, to)
        detail = {"size": len(raw)}
        self._event(inbox.run_id, "message_accepted", inbox_id, delivery.message_id, detail)
        return delivery.message_id

    # -- SinkApi ---------------------------------------------------------------------------

    def close(self) -> None:
        """Nothing to close; here so a FakeSink can stand in for a Sink."""

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
        match: Match | None = None,
        idempotency_key: str | None = None,
    ) -> Inbox:
        created, replayed = self._create(
            run_id, purpose, ttl_s, poll_budget, policy, match, idempotency_key
        )
        return Inbox(self, created, replayed=replayed)

    def get_inbox(self, inbox_id: str) -> Envelope:
        inbox = self._load(inbox_id)
        return self._describe(inbox, self._clock.now())

    def wait_for_message(
        self,
        inbox_id: str,
        *,
        timeout_s: float = 0.0,
        cursor: str | None = None,
        match: Match | None = None,
        run_id: str | None = None,
    ) -> Envelope:
        if not 0 <= timeout_s <= 86400:
            raise _invalid("timeout_s", "expected a number from 0 to 86400")
        position = None if cursor is None else self._cursor(inbox_id, cursor)
        inbox = self._load(inbox_id)
        policy = self._policy(inbox)
        self._check_owner(run_id, inbox, "wait", policy)
        started = self._clock.now()
        if inbox.effective(started).state is State.EXPIRED:
            return self._expire(inbox, inbox.effective(started), started)
        refused = self._admit(inbox, "wait", policy, started)
        if refused is not None:
            return self._answer(env.blocked(self._view(inbox, started), "circuit_open", refused))
        gate = wait_gate(inbox, started)
        if gate.kind is not GateKind.GO:
            self._abandon_probe(inbox, "wait")
            if gate.kind is GateKind.TOO_EARLY:
                view = self._view(inbox, started)
                return self._answer(env.blocked(view, "too_early", gate.retry_after or 0.1))
            if gate.kind is GateKind.REPEAT_RECEIVED:
                return self._describe(inbox, started)
            return self._expire(inbox, inbox.expire("timeout", started), started)
        step = self._script.pop(0) if self._script else Waiting()
        if isinstance(step, ProviderTimeout | ProviderError):
            return self._provider_trouble(inbox, policy, step, started)
        if isinstance(step, Expired):
            return self._scripted_expiry(inbox, step, started)
        if isinstance(step, Received):
            self.deliver(
                inbox.address,
                subject=step.subject,
                text=step.text,
                html=step.html,
                sender=step.sender,
            )
        criteria = inbox.match if match is None else _criteria(match)
        result = self._scan(inbox, criteria, inbox.cursor_seq if position is None else position)
        if result.found is None:
            held = min(timeout_s, policy.long_poll_max_s, inbox.expires_at - started)
            self._clock.advance(held)  # the long-poll: nothing arrives before it ends
        ended = self._clock.now()
        after = after_poll(inbox, policy, result, started, ended)
        self._record(inbox, "wait", policy, success=True)
        self._save(after)
        found = result.found
        outcome = "received" if found else after.reason or "evidence_not_found"
        detail = {"attempt": after.polls_used, "outcome": outcome}
        message_id = found.message_id if found else None
        self._event(inbox.run_id, "polled", inbox_id, message_id, detail, at=started)
        if after.state is State.EXPIRED:
            self._event(inbox.run_id, "expired", inbox_id, detail={"reason": after.reason})
        return self._describe(after, ended)

    def list_messages(
        self,
        inbox_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        run_id: str | None = None,
    ) -> MessagePage:
        count = 50 if limit is None else limit
        if not 1 <= count <= 500:
            raise _invalid("limit", "expected a whole number from 1 to 500")
        position = 0 if after is None else self._cursor(inbox_id, after)
        inbox = self._load(inbox_id)
        self._check_owner(run_id, inbox, "read", self._policy(inbox))
        rows = [d for d in self._deliveries[inbox_id] if d.seq > position][: count + 1]
        return render.page(inbox_id, rows[:count], position, len(rows) > count)

    def read_message(self, message_id: str, *, run_id: str | None = None) -> Message:
        delivery, stored = self._message(message_id)
        inbox = self._inboxes[delivery.inbox_id]
        policy = self._policy(inbox)
        self._check_owner(run_id, inbox, "read", policy)
        refused = self._admit(inbox, "read", policy, self._clock.now())
        if refused is not None:
            message = "the read circuit for this inbox is open"
            raise Unavailable(503, "circuit_open", message, retry_after=refused)
        self._record(inbox, "read", policy, success=True)
        parsed = None if stored.raw is None else parse(stored.raw)
        return render.message(delivery, parsed, stored.mail_from, stored.rcpt, stored.released_at)

    def raw_message(self, message_id: str, *, run_id: str | None = None) -> bytes:
        delivery, stored = self._message(message_id)
        inbox = self._inboxes[delivery.inbox_id]
        self._check_owner(run_id, inbox, "read", self._policy(inbox))
        if stored.raw is None:
            raise ApiError(410, "evidence_released", f"message {message_id}: its body was released")
        return stored.raw

    def claim_message(self, message_id: str, run_id: str) -> Envelope:
        if not _RUN_ID.fullmatch(run_id):
            raise _invalid("run_id", "a run_id is 1-128 chars of A-Za-z0-9._:-")
        delivery, _ = self._message(message_id)
        inbox = self._inboxes[delivery.inbox_id]
        policy = self._policy(inbox)
        now = self._clock.now()
        if delivery.claim is not None:
            if delivery.claim.run_id == run_id:
                return self._answer(env.already_claimed(self._claimed_view(inbox, delivery, now)))
            raise _refused(
                "claimed_by_other_run", f"message {message_id} was claimed by another run"
            )
        self._check_owner(run_id, inbox, "claim", policy)
        current = inbox.effective(now)
        if current.state is State.EXPIRED:
            self._persist_expiry(inbox, current)
            view = self._view(current, now)
            return self._answer(env.lease_expired(view, self._can_create_another(inbox)))
        refused = self._admit(inbox, "claim", policy, now)
        if refused is not None:
            return self._answer(env.blocked(self._view(inbox, now), "circuit_open", refused))
        claim = Claim("clm_" + self._token(20), message_id, run_id, now)
        after = after_claim(inbox, delivery, claim)
        self._record(inbox, "claim", policy, success=True)
        deliveries = self._deliveries[inbox.inbox_id]
        deliveries[delivery.seq - 1] = replace(delivery, claim=claim)
        self._save(after)
        detail = {"claim_id": claim.claim_id}
        self._event(run_id, "claimed", inbox.inbox_id, message_id, detail)
        return self._describe(after, now)

    def run_report(self, run_id: str) -> RunReport:
        now = self._clock.now()
        inboxes = [i for i in self._inboxes.values() if i.run_id == run_id]
        events = [e for e in self._events if e.run_id == run_id]
        if not inboxes and not events:
            raise ApiError(404, "not_found", f"no run {run_id!r} on this server")
        rows = [(i.effective(now), self._accepted(i), self._policy(i).retention_s) for i in inboxes]
        return render.report(run_id, rows, events)

    def release_run(self, run_id: str) -> None:
        now = self._clock.now()
        for inbox in [i for i in self._inboxes.values() if i.run_id == run_id]:
            if inbox.released_at is not None:
                continue
            self._save(replace(inbox.expire("lease", now), released_at=now))
            for delivery in self._deliveries[inbox.inbox_id]:
                stored = self._stored[delivery.message_id]
                self._stored[delivery.message_id] = replace(stored, raw=None, released_at=now)
            self._event(run_id, "released", inbox.inbox_id)

    # -- create ----------------------------------------------------------------------------

    def _create(
        self,
        run_id: str,
        purpose: str,
        ttl_s: int | None,
        poll_budget: int | None,
        policy_name: str | None,
        match: Match | None,
        key: str | None,
    ) -> tuple[Envelope, bool]:
        if not _RUN_ID.fullmatch(run_id):
            raise _invalid("run_id", "a run_id is 1-128 chars of A-Za-z0-9._:-")
        if not _PURPOSE.fullmatch(purpose):
            raise _invalid("purpose", "a purpose is 1-64 chars of A-Za-z0-9._-")
        for name, value in (("ttl_s", ttl_s), ("poll_budget", poll_budget)):
            if value is not None and value < 1:
                raise _invalid(name, "expected an integer >= 1")
        name = policy_name or self._default_policy
        policy = self._policies.get(name)
        if policy is None:
            raise ApiError(400, "unknown_policy", f"unknown policy {name!r}")
        body: dict[str, Any] = {"run_id": run_id, "purpose": purpose}
        given = {"ttl_s": ttl_s, "poll_budget": poll_budget, "policy": policy_name}
        body.update({k: v for k, v in given.items() if v is not None})
        if match:
            body["match"] = match.as_json()
        canonical = json.dumps(body, sort_keys=True)
        key = key or f"{purpose}:{run_id}"
        now = self._clock.now()
        if key in self._keys:
            inbox_id, earlier = self._keys[key]
            if earlier != canonical:
                raise ApiError(
                    409,
                    "idempotency_key_conflict",
                    f"Idempotency-Key {key!r} was used with another body",
                )
            existing = self._inboxes[inbox_id]
            if existing.effective(now).state is not State.EXPIRED:
                return self._describe(existing, now), True
        used = sum(1 for i in self._inboxes.values() if (i.run_id, i.purpose) == (run_id, purpose))
        if used >= policy.inboxes_per_purpose:
            raise ApiError(
                409,
                "policy_forbids",
                f"policy {name!r} allows {policy.inboxes_per_purpose} inbox(es) per purpose "
                f"for a run; run {run_id!r} has {used} for {purpose!r}",
            )
        local = "r" + self._token(20)
        inbox = Lease(
            inbox_id="ib_" + self._token(20),
            run_id=run_id,
            purpose=purpose,
            address=f"{local}@{self._domain}",
            policy_name=name,
            created_at=now,
            expires_at=now + policy.ttl(ttl_s),
            poll_budget=policy.budget(poll_budget),
            polls_used=0,
            next_poll_at=None,
            cursor_seq=0,
            state=State.CREATED,
            reason=None,
            evidence=None,
            match=_criteria(match) if match else Criteria(),
            trace_id=self._random.getrandbits(128).to_bytes(16, "big").hex(),
        )
        self._inboxes[inbox.inbox_id] = inbox
        self._keys[key] = (inbox.inbox_id, canonical)
        self._locals[local] = inbox.inbox_id
        self._deliveries[inbox.inbox_id] = []
        detail = {"purpose": purpose, "policy": name, "ttl_s": policy.ttl(ttl_s)}
        self._event(run_id, "created", inbox.inbox_id, detail=detail)
        return self._describe(inbox, now), False

    # -- wait helpers ------------------------------------------------------------------------

    def _scan(self, inbox: Lease, criteria: Criteria, after_seq: int) -> ScanResult:
        """The server's scan: beyond the cursor, oldest first, skipping claimed and mismatched."""
        position, mismatched = after_seq, False
        now = self._clock.now()
        for delivery in self._deliveries[inbox.inbox_id]:
            if delivery.seq <= after_seq:
                continue
            if delivery.claim is None:
                if _matches(criteria, delivery, self._stored[delivery.message_id].raw, now):
                    return ScanResult(delivery, position, mismatched)
                mismatched = True
            position = delivery.seq
        return ScanResult(None, position, mismatched)

    def _provider_trouble(
        self, inbox: Lease, policy: Policy, step: ProviderTimeout | ProviderError, now: float
    ) -> Envelope:
        reason = "provider_timeout" if isinstance(step, ProviderTimeout) else "provider_error"
        if reason == "provider_timeout":
            self._clock.advance(policy.provider_deadline_s)
        self._record(inbox, "wait", policy, success=False, cause=reason)
        troubled = replace(inbox, last_error=reason)
        self._save(troubled)
        breaker = self._breakers[(inbox.run_id, inbox.inbox_id, "wait")]
        cooldown = None
        if breaker.opened_at is not None:
            cooldown = max(0.1, breaker.opened_at + breaker.cooldown_s - self._clock.now())
        view = self._view(troubled, now)
        return self._answer(env.provider_trouble(view, reason, cooldown or 1.0))

    def _scripted_expiry(self, inbox: Lease, step: Expired, now: float) -> Envelope:
        if step.reason == "lease":
            self._clock.advance(inbox.expires_at - now)
            return self._expire(inbox, inbox.effective(self._clock.now()), self._clock.now())
        spent = replace(inbox, polls_used=inbox.poll_budget)
        return self._expire(spent, spent.expire("timeout", now), now)

    # -- breaker ---------------------------------------------------------------------------

    def _breaker(self, inbox: Lease, operation: str, policy: Policy) -> Breaker:
        key = (inbox.run_id, inbox.inbox_id, operation)
        if key not in self._breakers:
            self._breakers[key] = Breaker(breaker_settings(policy))
        return self._breakers[key]

    def _admit(self, inbox: Lease, operation: str, policy: Policy, now: float) -> float | None:
        """None when the call may go on; else the retry_after of a circuit_open refusal."""
        if operation == "wait":
            if self._script and isinstance(self._script[0], CircuitOpen):
                step = self._script.pop(0)
                assert isinstance(step, CircuitOpen)
                self._forced_open[inbox.inbox_id] = now + step.retry_after
            until = self._forced_open.get(inbox.inbox_id)
            if until is not None and now < until:
                return until - now
        admission = self._breaker(inbox, operation, policy).admit(now)
        if admission.transition is not None:
            self._breaker_event(inbox, operation, "breaker_half_open", None)
        return None if admission.allowed else admission.retry_after

    def _abandon_probe(self, inbox: Lease, operation: str) -> None:
        breaker = self._breakers.get((inbox.run_id, inbox.inbox_id, operation))
        if breaker is not None:
            breaker.abandon_probe(self._clock.now())

    def _record(
        self, inbox: Lease, operation: str, policy: Policy, *, success: bool, cause: str = ""
    ) -> None:
        breaker = self._breaker(inbox, operation, policy)
        now = self._clock.now()
        moved = breaker.record_success(now) if success else breaker.record_failure(now)
        if moved is not None:
            name = {"open": "breaker_opened", "closed": "breaker_closed"}[moved.to_state.value]
            self._breaker_event(inbox, operation, name, cause or None)

    def _breaker_event(self, inbox: Lease, operation: str, name: str, cause: str | None) -> None:
        detail = {"operation": operation, "cause": cause}
        self._event(inbox.run_id, name, inbox.inbox_id, detail=detail)

    # -- ownership, expiry, answers --------------------------------------------------------------

    def _check_owner(
        self, run_id: str | None, inbox: Lease, operation: str, policy: Policy
    ) -> None:
        if run_id is None or run_id == inbox.run_id:
            return
        if not _RUN_ID.fullmatch(run_id):
            raise _invalid("run_id", "a run_id is 1-128 chars of A-Za-z0-9._:-")
        key = (run_id, inbox.inbox_id, operation)
        self._breakers.setdefault(key, Breaker(breaker_settings(policy))).record_failure(
            self._clock.now()
        )
        noun = "message" if operation in ("read", "claim") else "inbox"
        raise _refused("wrong_run", f"run {run_id!r} does not own this {noun}")

    def _expire(self, stored: Lease, expired: Lease, now: float) -> Envelope:
        self._persist_expiry(stored, expired)
        return self._describe(expired, now)

    def _persist_expiry(self, stored: Lease, expired: Lease) -> None:
        if stored.state is State.EXPIRED:
            return
        self._save(expired)
        at = expired.expired_at if expired.expired_at is not None else expired.expires_at
        detail = {"reason": expired.reason}
        self._event(expired.run_id, "expired", expired.inbox_id, detail=detail, at=at)

    def _can_create_another(self, inbox: Lease) -> bool:
        used = sum(
            1
            for i in self._inboxes.values()
            if (i.run_id, i.purpose) == (inbox.run_id, inbox.purpose)
        )
        return used < self._policy(inbox).inboxes_per_purpose

    def _view(self, inbox: Lease, now: float) -> env.Envelope:
        current = inbox.effective(now)
        can_create = current.state is State.EXPIRED and self._can_create_another(inbox)
        return env.describe(current, now, can_create, inbox.trace_id)

    def _describe(self, inbox: Lease, now: float) -> Envelope:
        return self._answer(self._view(inbox, now))

    def _claimed_view(self, inbox: Lease, delivery: Delivery, now: float) -> env.Envelope:
        current = inbox.effective(now)
        state = State.EXPIRED if current.state is State.EXPIRED else State.RECEIVED
        shown = replace(current, state=State.RECEIVED, evidence=delivery.as_evidence())
        view = env.describe(shown, now, False, inbox.trace_id)
        return replace(
            view, state=state.value, status=env.Status.COMPLETED, next_action=env.Action.PROCEED
        )

    def _answer(self, view: env.Envelope) -> Envelope:
        return render.envelope(view)

    def _accepted(self, inbox: Lease) -> str | None:
        """The message this inbox's run claimed last (the run report's accepted_message_id)."""
        claimed = [d for d in self._deliveries[inbox.inbox_id] if d.claim is not None]
        claimed.sort(key=lambda d: d.claim.claimed_at if d.claim else 0.0)
        return claimed[-1].message_id if claimed else None

    # -- storage ---------------------------------------------------------------------------

    def _load(self, inbox_id: str) -> Lease:
        inbox = self._inboxes.get(inbox_id)
        if inbox is None:
            raise ApiError(404, "not_found", f"no inbox {inbox_id[:64]!r}")
        return inbox

    def _message(self, message_id: str) -> tuple[Delivery, _Stored]:
        for deliveries in self._deliveries.values():
            for delivery in deliveries:
                if delivery.message_id == message_id:
                    return delivery, self._stored[message_id]
        raise ApiError(404, "not_found", f"no message {message_id[:64]!r}")

    def _save(self, inbox: Lease) -> None:
        self._inboxes[inbox.inbox_id] = inbox

    def _policy(self, inbox: Lease) -> Policy:
        return self._policies.get(inbox.policy_name) or self._policies["ci"]

    def _cursor(self, inbox_id: str, cursor: str) -> int:
        try:
            return decode_cursor(inbox_id, cursor)
        except InvalidCursor as exc:
            raise ApiError(400, "invalid_cursor", exc.message) from None

    def _event(
        self,
        run_id: str,
        type_: str,
        inbox_id: str | None,
        message_id: str | None = None,
        detail: Mapping[str, Any] | None = None,
        at: float | None = None,
    ) -> None:
        when = self._clock.now() if at is None else at
        self._events.append(render.Event(run_id, type_, when, inbox_id, message_id, detail))

    def _token(self, chars: int) -> str:
        return "".join(self._random.choice(_B32) for _ in range(chars))


# -- pure helpers --------------------------------------------------------------------------


def _criteria(match: Match) -> Criteria:
    return Criteria(
        match.subject_contains, match.from_contains, match.body_contains, match.max_age_s
    )


def _matches(criteria: Criteria, delivery: Delivery, raw: bytes | None, now: float) -> bool:
    if not criteria.headers_match(delivery.subject, delivery.from_addr, delivery.received_at, now):
        return False
    if not criteria.needs_body:
        return True
    return criteria.body_matches("" if raw is None else searchable_text(raw))


def _raw(to: str, subject: str, text: str, html: str | None, sender: str) -> bytes:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    message["Subject"] = subject
    message.set_content(text)
    if html is not None:
        message.add_alternative(html, subtype="html")
    return message.as_bytes(policy=SMTP)


def _invalid(field: str, problem: str) -> ApiError:
    return ApiError(422, "invalid_request", f"{field}: {problem}", {"field": field})


def _refused(reason: str, message: str) -> OwnershipRefused:
    return OwnershipRefused(403 if reason == "wrong_run" else 409, reason, message)
