"""Verify a webhook delivery: ``event = verify_webhook(secret, request.headers, body)``.

A delivery is signed by the Standard Webhooks rules (``sink/webhook_signature.py``): this checks
the ``webhook-id``, ``webhook-timestamp`` (within ``tolerance_s`` of now, 5 minutes as the
reference libraries) and each ``v1,`` entry of ``webhook-signature`` (constant-time), then
returns the body as a ``WebhookEvent``. Pass the body's bytes exactly as received: JSON parsed
and serialised again is not what was signed. Anything wrong raises ``WebhookVerificationError``
naming what and why; a receiver answers it with a 4xx and the attempt is retried.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sink.client.errors import WebhookVerificationError
from sink.webhook_signature import secret_key, signature

TOLERANCE_S = 300.0


class HeaderItems(Protocol):
    """Anything with ``items()`` of (name, value): a dict, Starlette's, httpx's, aiohttp's,
    Flask's or ``http.server``'s headers."""

    def items(self) -> Iterable[tuple[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class WebhookEvent:
    """A verified delivery's body: the live event's ``type``, ``id`` and ``data`` (as SSE)."""

    type: str
    id: str
    timestamp: str
    data: Mapping[str, Any] = field(default_factory=dict)


def verify_webhook(
    secret: str,
    headers: HeaderItems,
    body: bytes | str,
    *,
    tolerance_s: float = TOLERANCE_S,
    now: float | None = None,
) -> WebhookEvent:
    """The delivery's event, once its Standard Webhooks signature and timestamp check out.

    ``headers`` is any mapping or ``items()`` of them (names in any case);
    ``now`` is Unix seconds (default the system clock).
    """
    payload = body.encode() if isinstance(body, str) else bytes(body)
    given = {str(name).lower(): str(value) for name, value in headers.items()}
    event_id = _header(given, "webhook-id")
    stamp = _header(given, "webhook-timestamp")
    signatures = _header(given, "webhook-signature")
    _check_time(stamp, time.time() if now is None else now, tolerance_s)
    expected = signature(secret_key(secret), event_id, stamp, payload)
    if not any(hmac.compare_digest(expected, mac) for mac in _v1_macs(signatures)):
        raise WebhookVerificationError(
            f"webhook {event_id}: no v1 signature in webhook-signature matches this secret; "
            "check that the secret is this webhook's (shown once, at create) and that the body "
            "is the raw bytes received, not JSON parsed and serialised again"
        )
    return _event(event_id, payload)


def _header(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name, "").strip()
    if not value:
        raise WebhookVerificationError(
            f"missing {name} header: not a Standard Webhooks delivery (runsink sends "
            "webhook-id, webhook-timestamp and webhook-signature)"
        )
    return value


def _check_time(stamp: str, now: float, tolerance_s: float) -> None:
    if not stamp.isascii() or not stamp.isdigit():
        raise WebhookVerificationError(f"webhook-timestamp {stamp[:32]!r} is not Unix seconds")
    skew = int(stamp) - now
    if not math.isfinite(skew) or abs(skew) > tolerance_s:
        when = "in the past" if skew < 0 else "in the future"
        raise WebhookVerificationError(
            f"webhook-timestamp {stamp} is {abs(skew):.0f} s {when}, outside the "
            f"{tolerance_s:g} s tolerance: a replayed delivery, or this host's clock is off"
        )


def _v1_macs(header: str) -> list[bytes]:
    """The MACs of the header's ``v1,`` entries (space-separated; other versions skipped)."""
    macs = []
    for entry in header.split():
        version, _, encoded = entry.partition(",")
        if version != "v1":
            continue
        try:
            macs.append(base64.b64decode(encoded, validate=True))
        except (binascii.Error, ValueError):
            continue
    return macs


def _event(event_id: str, payload: bytes) -> WebhookEvent:
    try:
        data = json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise WebhookVerificationError(
            f"webhook {event_id}: the signature matches but the body is not JSON"
        ) from None
    if not isinstance(data, dict):
        raise WebhookVerificationError(f"webhook {event_id}: the body is not a JSON object")
    inner = data.get("data")
    return WebhookEvent(
        type=str(data.get("type", "")),
        id=str(data.get("id", event_id)),
        timestamp=str(data.get("timestamp", "")),
        data=inner if isinstance(inner, dict) else {},
    )
