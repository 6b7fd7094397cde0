"""expect_message's decisions: follow the server's next_action and retry_after, never loop forever.

Pure: no I/O and no clock of its own; ``now`` is a parameter (monotonic seconds). The sync
and async inboxes drive an ``Expectation`` with their own I/O, so both follow exactly the same
rules:

- a wait that found the message -> claim the one the server's ``next_arguments`` name (with a
  resend, the newest matching message), then read it;
- ``wait_for_message`` / ``verify_trigger`` (retryable) -> wait again after ``retry_after``
  (the long-poll itself does the waiting, so this is usually 0);
- ``wait_then_retry`` (too early, circuit open, provider trouble) -> sleep ``retry_after``;
- ``expired``, ``stop``, ``create_new_inbox``, or ``blocked`` with no ``retry_after``
  -> raise ``ExpectationFailed`` (never silently create another inbox); so does a refusal of
  the run (``wrong_run``, ``claimed_by_other_run``: next action ``stop``);
- a 503 with ``Retry-After`` (the server at its long-poll cap; provider trouble on read)
  -> sleep that long and call again;
- the caller's ``timeout_s`` is a hard deadline: a pause that would pass it fails at once
  instead of sleeping for nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from sink.client.errors import ExpectationFailed, OwnershipRefused, Unavailable
from sink.client.models import Envelope, Match
from sink.vocabulary import NextAction, Reason, State, Status

_RETRY_ACTIONS = (
    NextAction.WAIT_FOR_MESSAGE,
    NextAction.VERIFY_TRIGGER,
    NextAction.WAIT_THEN_RETRY,
)
_REASONS = {
    "evidence_not_found": "no mail arrived for this inbox",
    "evidence_mismatch": "mail arrived, but none matched the criteria",
    "provider_timeout": "the server's store did not answer in time",
    "provider_error": "the server's store failed",
    "circuit_open": "the circuit breaker is open after repeated provider trouble",
    "too_early": "the wait came before next_poll_at",
    "lease": "the inbox's lease ended (or the run was released)",
    "timeout": "the poll budget was spent without evidence",
    "lease_expired": "the lease ended before the message was claimed",
    "already_claimed": "this run had already claimed the message",
    "claimed_by_other_run": "another run claimed the message",
    "wrong_run": "the run does not own this inbox or message",
}

_ACTIONS = {
    "wait_for_message": "wait again (no evidence yet)",
    "verify_trigger": (
        "check that the app really sent the mail you expect (to this address), or your criteria"
    ),
    "wait_then_retry": "wait retry_after seconds, then retry",
    "create_new_inbox": (
        "the policy allows another inbox for this run and purpose: create one and trigger "
        "the mail again"
    ),
    "stop": "nothing more is allowed for this run and purpose",
    "claim_message": "claim the message",
    "proceed": "use the evidence already claimed",
}


@dataclass(frozen=True, slots=True)
class Pause:
    """Call again after ``delay_s`` seconds."""

    delay_s: float


@dataclass(frozen=True, slots=True)
class Found:
    """A wait returned a matching message."""

    message_id: str


@dataclass(frozen=True, slots=True)
class Claimed:
    """The claim is done (or was already done by this run)."""

    message_id: str


class Expectation:
    """One expect_message call: its criteria, its deadline and what the server said so far."""

    def __init__(
        self,
        *,
        inbox_id: str,
        run_id: str,
        address: str,
        match: Match,
        timeout_s: float,
        long_poll_s: float,
        started: float,
    ) -> None:
        if timeout_s < 0 or long_poll_s < 0:
            raise ValueError("timeout_s and long_poll_s must be >= 0")
        self.inbox_id = inbox_id
        self.run_id = run_id
        self.address = address
        self.match = match
        self.timeout_s = timeout_s
        self.long_poll_s = long_poll_s
        self.deadline = started + timeout_s
        self.mismatch = False
        self.last: Envelope | None = None

    def wait_timeout(self, now: float) -> float:
        """How long the next wait may long-poll: up to ``long_poll_s``, within the deadline."""
        return round(max(0.0, min(self.long_poll_s, self.deadline - now)), 3)

    def after_wait(self, envelope: Envelope, now: float) -> Found | Pause:
        self.last = envelope
        if envelope.reason == Reason.EVIDENCE_MISMATCH:
            self.mismatch = True
        if envelope.state == State.EXPIRED:
            # Even "proceed" here means an earlier, already claimed message: nothing new can come.
            raise self.failure(envelope)
        if envelope.message is not None and envelope.next_action in (
            NextAction.CLAIM_MESSAGE,
            NextAction.PROCEED,
        ):
            # The message next_tool names (a resend's newest), else the one returned.
            return Found(envelope.next_message_id() or envelope.message.message_id)
        if envelope.next_action in _RETRY_ACTIONS:
            return self._pause(envelope, now)
        raise self.failure(envelope)

    def after_claim(self, envelope: Envelope, now: float) -> Claimed | Pause:
        self.last = envelope
        if envelope.next_action == NextAction.PROCEED and envelope.claim is not None:
            return Claimed(envelope.claim.message_id)
        if envelope.next_action == NextAction.WAIT_THEN_RETRY:
            return self._pause(envelope, now)
        raise self.failure(envelope)

    def after_unavailable(
        self, error: Unavailable, now: float, message_id: str | None = None
    ) -> Pause:
        """A 503 (the server at its long-poll cap, provider trouble or an open circuit on
        read): retry after its Retry-After, within the deadline."""
        delay = 1.0 if error.retry_after is None else error.retry_after
        if now + delay >= self.deadline:
            what = (
                f"message {message_id} in inbox {self.inbox_id} (run {self.run_id}) was found "
                "but could not be read"
                if message_id is not None
                else f"inbox {self.inbox_id} (run {self.run_id}) could not be waited on"
            )
            text = f"{what} within timeout_s={self.timeout_s:g}: {error}"
            raise ExpectationFailed(
                text + "\n  next: " + _ACTIONS["wait_then_retry"],
                reason=error.code,
                next_action="wait_then_retry",
                envelope=self.last,
                deadline_exceeded=True,
                mismatch=self.mismatch,
                hint=error.hint,
            )
        return Pause(delay)

    def refused(self, error: OwnershipRefused) -> ExpectationFailed:
        """The server refused the run (wrong_run, claimed_by_other_run): nothing to retry."""
        lines = [
            self._head() + f": reason={error.reason}, next_action={error.next_action}",
            f"reason: {_REASONS.get(error.reason, error.reason)}",
            f"next: {_ACTIONS['stop']}",
            f"the server said: {error}",
        ]
        return ExpectationFailed(
            "\n  ".join(lines),
            reason=error.reason,
            next_action=error.next_action or "stop",
            envelope=self.last,
            mismatch=self.mismatch,
            hint=error.hint,
        )

    def _pause(self, envelope: Envelope, now: float) -> Pause:
        if envelope.status == Status.BLOCKED and envelope.retry_after is None:
            raise self.failure(envelope)  # blocked with no retry_after: do not repeat it at all
        delay = envelope.retry_after or 0.0
        if now + delay >= self.deadline:
            raise self.failure(envelope, deadline_exceeded=True)
        return Pause(delay)

    def failure(self, envelope: Envelope, deadline_exceeded: bool = False) -> ExpectationFailed:
        """The exception for a terminal answer, or for a deadline reached while still retrying."""
        reason, action = envelope.reason, envelope.next_action
        lines = [self._head() + f": reason={reason}, next_action={action}"]
        if deadline_exceeded:
            lines.append(
                f"gave up after timeout_s={self.timeout_s:g} while the server still said "
                f"{envelope.status}"
                + (f" (retry_after={envelope.retry_after:g}s)" if envelope.retry_after else "")
            )
        if reason is not None:
            lines.append(f"reason: {_REASONS.get(reason, reason)}")
        if envelope.state == State.EXPIRED and envelope.claim is not None:
            lines.append(
                f"next: the inbox expired after its message {envelope.claim.message_id} was "
                "claimed; no new message can arrive here: create a new inbox"
            )
        else:
            lines.append(f"next: {_ACTIONS.get(action, action)}")
        if self.mismatch and reason != Reason.EVIDENCE_MISMATCH:
            lines.append("note: mail did arrive, but none matched the criteria (evidence_mismatch)")
        if envelope.hint:
            lines.append(f"hint: {envelope.hint}")
        lines.append(f"last answer: {envelope.summary()}")
        return ExpectationFailed(
            "\n  ".join(lines),
            reason=reason,
            next_action=action,
            envelope=envelope,
            deadline_exceeded=deadline_exceeded,
            mismatch=self.mismatch,
            hint=envelope.hint,
        )

    def _head(self) -> str:
        criteria = f" matching {self.match}" if self.match else ""
        return f"no message{criteria} in inbox {self.inbox_id} <{self.address}> (run {self.run_id})"
