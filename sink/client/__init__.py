"""The Python client for runsink: ``from sink.client import Sink`` (sync) or ``AsyncSink``.

    with Sink("http://127.0.0.1:8025") as sink:
        inbox = sink.create_inbox(run_id="ci-1842", purpose="password-reset")
        app.request_password_reset(inbox.address)
        message = inbox.expect_message(subject_contains="Reset")
        code = message.code

``expect_message`` follows the server's ``next_action`` and ``retry_after`` until it has the
message or a terminal answer, and raises ``ExpectationFailed`` naming the reason and the
next action. ``sink.fake.FakeSink`` has the same interface, in-process and scripted.
A webhook receiver checks each delivery with ``verify_webhook(secret, headers, body)``.
"""

from __future__ import annotations

from sink.client.aio import AsyncSink
from sink.client.base import AsyncClock, AsyncSinkApi, Clock, SinkApi
from sink.client.errors import (
    ERROR_CODES,
    ApiError,
    ExpectationFailed,
    OwnershipRefused,
    ProtocolError,
    RunsinkClientError,
    TransportFailed,
    Unavailable,
    WebhookVerificationError,
)
from sink.client.inbox import AsyncInbox, Inbox
from sink.client.models import (
    Attachment,
    Claim,
    DeliveryPage,
    Envelope,
    FoundMessage,
    FoundPage,
    Match,
    MatchLike,
    Message,
    MessagePage,
    MessageRef,
    MessageSummary,
    RunEvent,
    RunInbox,
    RunReport,
    RunToken,
    SmtpEnvelope,
    Webhook,
    WebhookDelivery,
)
from sink.client.sync import Sink
from sink.client.webhooks import WebhookEvent, verify_webhook

__all__ = [
    "ERROR_CODES",
    "ApiError",
    "AsyncClock",
    "AsyncInbox",
    "AsyncSink",
    "AsyncSinkApi",
    "Attachment",
    "Claim",
    "Clock",
    "DeliveryPage",
    "Envelope",
    "ExpectationFailed",
    "FoundMessage",
    "FoundPage",
    "Inbox",
    "Match",
    "MatchLike",
    "Message",
    "MessagePage",
    "MessageRef",
    "MessageSummary",
    "OwnershipRefused",
    "ProtocolError",
    "RunEvent",
    "RunInbox",
    "RunReport",
    "RunToken",
    "RunsinkClientError",
    "Sink",
    "SinkApi",
    "SmtpEnvelope",
    "TransportFailed",
    "Unavailable",
    "Webhook",
    "WebhookDelivery",
    "WebhookEvent",
    "WebhookVerificationError",
    "verify_webhook",
]
