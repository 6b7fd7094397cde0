"""The client's exceptions: one small tree, each naming what happened and what to do next.

    RunsinkClientError
    ├── TransportFailed         the server could not be reached (wraps httpx's error)
    ├── ProtocolError           the answer is not what the contract promises
    ├── ApiError                an error answer: .status, .code, .message, .details
    │   ├── Unavailable         503 on read: provider_timeout / provider_error / circuit_open
    │   └── OwnershipRefused    wrong_run (403) / claimed_by_other_run (409): .reason
    ├── ExpectationFailed       expect_message ended without the message: .reason, .next_action
    └── WebhookVerificationError  a webhook delivery's signature or timestamp does not check out

These are the client's own classes; ``sink.errors`` is the server's tree and is never
raised to a client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sink.client.models import Envelope

# The ``error.code`` values a runsink server answers with (``ApiError.code``); a newer server
# may add one, so code on ``ApiError`` stays a plain string. tests/test_error_codes.py reads
# the server's code and fails when one is missing here.
ERROR_CODES: frozenset[str] = frozenset(
    {
        # the caller's arguments (next action fix_arguments)
        "invalid_request",
        "invalid_cursor",
        "unknown_policy",
        "idempotency_key_conflict",
        # refusals (next action stop)
        "not_found",
        "policy_forbids",
        "evidence_released",
        "live_evidence",
        "webhook_disabled",
        "unauthorized",
        "forbidden_scope",
        "wrong_run",
        "claimed_by_other_run",
        "lease_expired",
        # temporary (next action wait_then_retry, with retry_after)
        "provider_timeout",
        "provider_error",
        "circuit_open",
        "over_capacity",
        "too_many_failures",
        "too_many_streams",
        "internal_error",
        # the HTTP request itself
        "method_not_allowed",
        "unsupported_media_type",
        "cross_site_request",
        "host_not_allowed",
        "forbidden",
        "request_timeout",
        "uri_too_long",
        "header_too_large",
    }
)


class RunsinkClientError(Exception):
    """Base of every error the runsink client raises."""


class TransportFailed(RunsinkClientError):
    """The request did not get an answer (connection refused, reset, timed out)."""


class ProtocolError(RunsinkClientError):
    """The server's answer does not have the shape the contract promises."""


class ApiError(RunsinkClientError):
    """The server answered with an error object: ``{"error": {code, message, details}}``.

    ``code`` is one of ``ERROR_CODES`` (or one a newer server added).
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        trace_id: str | None = None,
        guidance: dict[str, Any] | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.trace_id = trace_id
        # v3: what the server says to do next (None from a server before v3).
        given = guidance or {}
        self.next_action: str | None = given.get("next_action")
        self.next_tool: str | None = given.get("next_tool")
        self.next_arguments: dict[str, Any] | None = given.get("next_arguments")
        self.hint: str | None = given.get("hint")
        text = f"{status} {code}: {message}" + (f" (trace_id={trace_id})" if trace_id else "")
        super().__init__(text + (f"\n  hint: {self.hint}" if self.hint else ""))


class Unavailable(ApiError):
    """Provider trouble or an open circuit on read (503); retry after ``retry_after`` seconds."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        trace_id: str | None = None,
        retry_after: float | None = None,
        guidance: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(status, code, message, details, trace_id, guidance)
        self.retry_after = retry_after


class OwnershipRefused(ApiError):
    """The call named a run that does not own the inbox or message (``next_action`` is stop).

    ``reason`` is ``wrong_run`` or ``claimed_by_other_run``. The server says nothing more
    about the other run's inbox or mail.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.next_action = self.next_action or "stop"

    @property
    def reason(self) -> str:
        return self.code


class ExpectationFailed(RunsinkClientError):
    """``expect_message`` ended without the message.

    ``reason`` and ``next_action`` are the server's last answer (``envelope``); the text says
    what they mean and what to do. ``deadline_exceeded`` is True when the caller's own
    ``timeout_s`` ran out while the server still said "retry"; ``mismatch`` is True when mail
    arrived but none matched the criteria (``evidence_mismatch``) at some point.
    """

    def __init__(
        self,
        text: str,
        *,
        reason: str | None,
        next_action: str,
        envelope: Envelope | None,
        deadline_exceeded: bool = False,
        mismatch: bool = False,
        hint: str | None = None,
    ) -> None:
        super().__init__(text)
        self.reason = reason
        self.next_action = next_action
        self.envelope = envelope
        self.deadline_exceeded = deadline_exceeded
        self.mismatch = mismatch
        self.hint = hint  # the server's own sentence: what to do next and why


class WebhookVerificationError(RunsinkClientError):
    """A webhook delivery failed verification (``verify_webhook``): answer it with a 4xx."""
