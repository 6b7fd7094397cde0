"""runsink's one exception tree.

Everything the domain can refuse, as a class. The HTTP layer maps each class to a
status and an error code in one table (``api/errors.py``); the SMTP layer maps
provider trouble to a 451 (``sink/smtp/handler.py``). Nothing else turns them into replies.

    RunsinkError
    ├── ConfigError                 bad start-up settings: exit code 2
    ├── InvalidRequest              input that breaks the contract's rules (422)
    │   ├── InvalidCursor           a cursor that is not one of ours (400)
    │   └── UnknownPolicy           no policy of that name (400)
    ├── NotFound                    no inbox / message / route of that id (404)
    ├── IdempotencyKeyConflict      the same key with another body (409)
    ├── PolicyForbids               the policy allows no more of this (409)
    ├── LiveEvidence                a delete named evidence of a live inbox (409)
    ├── WebhookDisabled             a test of a webhook a 410 disabled (409)
    ├── EvidenceReleased            the body was released (410)
    ├── Unauthorized                missing or wrong bearer token (401)
    ├── ForbiddenScope              the token's scope does not allow the call (403)
    ├── FaultsDisabled              fault injection is off (404)
    ├── OwnershipRefused            wrong_run (403) / claimed_by_other_run (409)
    └── ProviderTrouble             the store (or an injected fault) did not answer well
        ├── ProviderTimeout         not within provider_deadline_s
        ├── CircuitOpen             the breaker refuses the call (503 on read)
        └── ProviderError           it failed (StorageError is one)
            └── StorageError        a storage adapter's translation of a driver error
                └── StorageUnavailable  the database cannot be reached (down, failing over)
                    └── StoreFull       it has no space left for a write (disk full)
"""

from __future__ import annotations

from typing import Any

from sink.vocabulary import Reason


class RunsinkError(Exception):
    """Base of every error runsink raises on purpose."""

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class ConfigError(RunsinkError):
    """A start-up setting is wrong; the message names the flag, file, policy or key."""


class InvalidRequest(RunsinkError):
    """The request breaks the contract's input rules."""


class RequestTooLarge(InvalidRequest):
    """The request body is over the limit (413, however it was sent: chunked too)."""


class InvalidCursor(InvalidRequest):
    """The cursor is not one this server issued for this inbox."""


class UnknownPolicy(InvalidRequest):
    """No policy of that name."""


class NotFound(RunsinkError):
    """No such inbox, message or resource."""


class LiveEvidence(RunsinkError):
    """A delete named evidence of a live inbox: nothing was deleted."""


class IdempotencyKeyConflict(RunsinkError):
    """The Idempotency-Key was used with another body."""


class PolicyForbids(RunsinkError):
    """The policy allows no more of what was asked (e.g. inboxes_per_purpose)."""


class WebhookDisabled(RunsinkError):
    """The webhook was disabled (its receiver answered 410 Gone): it sends nothing more."""


class EvidenceReleased(RunsinkError):
    """The message's body was released; only metadata is left."""


class Unauthorized(RunsinkError):
    """Missing or wrong bearer token."""


class ForbiddenScope(RunsinkError):
    """The token is valid but its scope does not allow this call.

    ``details.needed`` names the scope that would; never the token, and never the run
    of an inbox or message the caller may not see.
    """

    def __init__(self, message: str, needed: str) -> None:
        super().__init__(message, {"needed": needed})
        self.needed = needed


class FaultsDisabled(RunsinkError):
    """Fault injection is not enabled on this server."""


class OwnershipRefused(RunsinkError):
    """The call names a run that does not own the inbox or message.

    ``reason`` is ``wrong_run`` (403) or ``claimed_by_other_run`` (409). The answer
    carries nothing of the other run's inbox or mail.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ProviderTrouble(RunsinkError):
    """The provider (the store, or an injected fault) did not answer well."""

    reason: Reason = Reason.PROVIDER_ERROR


class ProviderTimeout(ProviderTrouble):
    """The provider did not answer within the policy's provider_deadline_s."""

    reason = Reason.PROVIDER_TIMEOUT


class ProviderError(ProviderTrouble):
    """The provider failed."""

    reason = Reason.PROVIDER_ERROR


class StorageError(ProviderError):
    """A storage adapter's translation of a driver error (never the driver's own class)."""


class StorageUnavailable(StorageError):
    """The database cannot be reached or cannot commit now (down, restarting, failing over).

    Temporary by nature: SMTP answers 451, the API provider trouble, ``/readyz`` 503.
    """


class StoreFull(StorageUnavailable):
    """The store has no space left for this write (a full disk or tablespace).

    Temporary too: SMTP answers 452 4.3.1 (insufficient system storage), the API provider
    trouble, ``/readyz`` 503, until space is freed.
    """


class CircuitOpen(ProviderTrouble):
    """The circuit breaker refuses the call until its cooldown ends."""

    reason = Reason.CIRCUIT_OPEN

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message, {"retry_after": retry_after})
        self.retry_after = retry_after


# The contract's status and error code for each class, most specific first (the first
# matching class wins). ``api/errors.py`` answers HTTP with it; the fake raises the
# client's errors with it, so both say the same.
STATUS_AND_CODE: list[tuple[type[RunsinkError], int, str]] = [
    (InvalidCursor, 400, "invalid_cursor"),
    (UnknownPolicy, 400, "unknown_policy"),
    (RequestTooLarge, 413, "invalid_request"),
    (InvalidRequest, 422, "invalid_request"),
    (NotFound, 404, "not_found"),
    (FaultsDisabled, 404, "not_found"),
    (IdempotencyKeyConflict, 409, "idempotency_key_conflict"),
    (PolicyForbids, 409, "policy_forbids"),
    (LiveEvidence, 409, "live_evidence"),
    (WebhookDisabled, 409, "webhook_disabled"),
    (EvidenceReleased, 410, "evidence_released"),
    (Unauthorized, 401, "unauthorized"),
    (ForbiddenScope, 403, "forbidden_scope"),
    (CircuitOpen, 503, "circuit_open"),
    (ProviderTimeout, 503, "provider_timeout"),
    (ProviderTrouble, 503, "provider_error"),
]
# An ownership refusal's status, by its reason (answered with a refusal body, not the table's).
REFUSAL_STATUS = {"wrong_run": 403, "claimed_by_other_run": 409}
