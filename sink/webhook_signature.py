"""Standard Webhooks signatures: the secret, and the signature of one delivery attempt.

    secret = new_secret()                                    # "whsec_" + base64 of 32 random bytes
    headers = signed_headers(secret, event_id, int(now), body)
    # webhook-id, webhook-timestamp, webhook-signature: v1,<base64 HMAC-SHA256>, content-type

What is signed is ``id + "." + timestamp + "." + body`` (the body's exact bytes) under the key
that the secret's base64 after ``whsec_`` encodes (https://www.standardwebhooks.com, "Signature
scheme"), so a receiver can check it with any Standard Webhooks library, or with
``sink.client.verify_webhook``, which uses the same two functions. Pure: no clock, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

PREFIX = "whsec_"
KEY_BYTES = 32  # the standard asks for 24 to 64 random bytes


def new_secret() -> str:
    """A fresh webhook secret: ``whsec_`` + base64 of 32 random bytes."""
    return PREFIX + base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")


def secret_key(secret: str) -> bytes:
    """The HMAC key a secret encodes (``whsec_`` optional, base64 padding optional)."""
    text = secret.strip().removeprefix(PREFIX).rstrip("=")
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(
            "a webhook secret is 'whsec_' followed by base64 (as POST /v1/webhooks returned it); "
            "this one is not base64"
        ) from None
    if not key:
        raise ValueError("the webhook secret is empty: pass the secret POST /v1/webhooks returned")
    return key


def signature(key: bytes, event_id: str, timestamp: str, body: bytes) -> bytes:
    """HMAC-SHA256 of ``event_id.timestamp.body`` under ``key`` (the raw 32 bytes)."""
    signed = f"{event_id}.{timestamp}.".encode() + body
    return hmac.new(key, signed, hashlib.sha256).digest()


def sign(secret: str, event_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value of one attempt: ``v1,<base64 HMAC-SHA256>``."""
    mac = signature(secret_key(secret), event_id, str(timestamp), body)
    return "v1," + base64.b64encode(mac).decode("ascii")


def signed_headers(secret: str, event_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt at ``timestamp`` (Unix seconds)."""
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, event_id, timestamp, body),
        "content-type": "application/json",
    }
