"""Webhook signatures (sink/webhook_signature.py) and ``sink.client.verify_webhook``, checked
against the Standard Webhooks test vector and the reference ``standardwebhooks`` package both
ways: its signer with our verifier, our signer with its verifier."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError as TheirError

from sink.client import WebhookEvent, WebhookVerificationError, verify_webhook
from sink.webhook_signature import new_secret, secret_key, sign, signed_headers

# The Standard Webhooks libraries' shared test vector (libraries/*/tests: "sign function").
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TIME = 1614265330
VECTOR_BODY = b'{"test": 2432232314}'
VECTOR_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

BODY = json.dumps(
    {"type": "message", "id": "ev_1", "timestamp": "2026-12-05T18:00:00Z", "data": {"run_id": "r"}},
    separators=(",", ":"),
).encode()


def vector_headers(signature: str = VECTOR_SIGNATURE) -> dict[str, str]:
    return {
        "webhook-id": VECTOR_ID,
        "webhook-timestamp": str(VECTOR_TIME),
        "webhook-signature": signature,
    }


def test_sign_matches_the_standard_webhooks_test_vector() -> None:
    """Our signer gives the vector's signature for its secret, id, timestamp and body."""
    assert sign(VECTOR_SECRET, VECTOR_ID, VECTOR_TIME, VECTOR_BODY) == VECTOR_SIGNATURE


@pytest.mark.parametrize(
    "secret",
    [VECTOR_SECRET, VECTOR_SECRET.removeprefix("whsec_"), "  " + VECTOR_SECRET + "\n"],
    ids=["prefixed", "bare", "spaced"],
)
def test_verify_accepts_the_test_vector(secret: str) -> None:
    """The vector verifies at its own time, with the secret prefixed or bare."""
    verify_webhook(secret, vector_headers(), VECTOR_BODY, now=VECTOR_TIME)


@pytest.mark.parametrize(
    ("raw", "padded"),
    [
        ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS="),
        ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwBr", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwBr=="),
    ],
)
def test_unpadded_secrets_decode_as_padded_ones(raw: str, padded: str) -> None:
    """A secret missing its base64 padding is the same key (as the reference libraries read it)."""
    assert secret_key(raw) == secret_key("whsec_" + raw) == base64.b64decode(padded)


def test_their_signer_our_verifier() -> None:
    """A delivery signed by the reference package verifies with verify_webhook."""
    secret = new_secret()
    now = datetime.now(UTC)
    headers = {
        "webhook-id": "ev_abc",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign("ev_abc", now, BODY),
    }
    event = verify_webhook(secret, headers, BODY)
    assert event == WebhookEvent("message", "ev_1", "2026-12-05T18:00:00Z", {"run_id": "r"})


def test_our_signer_their_verifier() -> None:
    """Headers from signed_headers verify with the reference package, which reads the body."""
    secret = new_secret()
    headers = signed_headers(secret, "ev_abc", int(time.time()), BODY)
    assert headers["content-type"] == "application/json"
    assert Webhook(secret).verify(BODY, headers) == json.loads(BODY)
    with pytest.raises(TheirError):
        Webhook(new_secret()).verify(BODY, headers)


def test_new_secret_is_whsec_and_32_random_bytes() -> None:
    """A new secret is whsec_ + base64 of 32 bytes, different each time."""
    secret = new_secret()
    assert secret.startswith("whsec_")
    assert len(secret_key(secret)) == 32
    assert secret != new_secret()


def test_several_signatures_pass_when_one_v1_entry_matches() -> None:
    """webhook-signature may carry several space-separated entries; one matching v1 is enough."""
    good = VECTOR_SIGNATURE
    wrong = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
    header = f"{wrong} v2,{good.removeprefix('v1,')} v1a,bm90IGEgc2ln {good}  {wrong}"
    verify_webhook(VECTOR_SECRET, vector_headers(header), VECTOR_BODY, now=VECTOR_TIME)


@pytest.mark.parametrize(
    ("signature", "says"),
    [
        ("v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=", "no v1 signature"),
        ("v2," + VECTOR_SIGNATURE.removeprefix("v1,"), "no v1 signature"),
        (VECTOR_SIGNATURE.removeprefix("v1,"), "no v1 signature"),
        ("v1,not*base64", "no v1 signature"),
    ],
    ids=["wrong-mac", "other-version", "no-version", "not-base64"],
)
def test_a_signature_that_does_not_match_is_refused(signature: str, says: str) -> None:
    """A wrong MAC, a right MAC under another version or none, or garbage: refused."""
    with pytest.raises(WebhookVerificationError, match=says):
        verify_webhook(VECTOR_SECRET, vector_headers(signature), VECTOR_BODY, now=VECTOR_TIME)


def test_a_changed_body_or_another_secret_is_refused() -> None:
    """The signature covers the body's exact bytes and the webhook's own secret."""
    reformatted = json.dumps(json.loads(VECTOR_BODY)).encode() + b" "
    with pytest.raises(WebhookVerificationError, match="raw bytes received"):
        verify_webhook(VECTOR_SECRET, vector_headers(), reformatted, now=VECTOR_TIME)
    with pytest.raises(WebhookVerificationError, match="this webhook's"):
        verify_webhook(new_secret(), vector_headers(), VECTOR_BODY, now=VECTOR_TIME)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_a_missing_header_is_named(missing: str) -> None:
    """Each of the three headers is required, and the error names the one that is missing."""
    headers = vector_headers()
    del headers[missing]
    with pytest.raises(WebhookVerificationError, match=f"missing {missing} header"):
        verify_webhook(VECTOR_SECRET, headers, VECTOR_BODY, now=VECTOR_TIME)


def test_header_names_are_read_in_any_case() -> None:
    """Header names are case-insensitive, as HTTP says (a framework may keep them as sent)."""
    headers = {name.title(): value for name, value in vector_headers().items()}
    verify_webhook(VECTOR_SECRET, headers, VECTOR_BODY.decode(), now=VECTOR_TIME)


@pytest.mark.parametrize(
    ("offset", "says"),
    [(-301, "301 s in the past"), (301, "301 s in the future")],
)
def test_a_timestamp_outside_five_minutes_is_refused(offset: int, says: str) -> None:
    """A timestamp more than 300 s from now (either way) is a replay or a wrong clock."""
    now = VECTOR_TIME - offset
    with pytest.raises(WebhookVerificationError, match=says):
        verify_webhook(VECTOR_SECRET, vector_headers(), VECTOR_BODY, now=now)
    verify_webhook(VECTOR_SECRET, vector_headers(), VECTOR_BODY, now=now, tolerance_s=302)


@pytest.mark.parametrize("offset", [-300, 300])
def test_a_timestamp_at_the_tolerance_passes(offset: int) -> None:
    """Exactly 300 s either way is still within the tolerance."""
    verify_webhook(VECTOR_SECRET, vector_headers(), VECTOR_BODY, now=VECTOR_TIME + offset)


@pytest.mark.parametrize(
    "stamp", ["hello", "1614265330.5", "-1614265330", "\uff11\uff16\uff11\uff14"]
)
def test_a_timestamp_that_is_not_unix_seconds_is_refused(stamp: str) -> None:
    """webhook-timestamp is whole Unix seconds; anything else is refused before any HMAC."""
    headers = vector_headers() | {"webhook-timestamp": stamp}
    with pytest.raises(WebhookVerificationError, match="not Unix seconds"):
        verify_webhook(VECTOR_SECRET, headers, VECTOR_BODY, now=VECTOR_TIME)


@pytest.mark.parametrize("secret", ["", "whsec_", "whsec_***"])
def test_a_secret_that_is_not_one_is_a_value_error(secret: str) -> None:
    """An empty or non-base64 secret is the caller's mistake: ValueError saying what one is."""
    with pytest.raises(ValueError, match="webhook secret"):
        verify_webhook(secret, vector_headers(), VECTOR_BODY, now=VECTOR_TIME)


def test_a_signed_body_that_is_not_a_json_object_is_refused() -> None:
    """A correctly signed body that is not a JSON object is not a runsink delivery."""
    secret = new_secret()
    for body in (b"[1]", b"\xff"):
        headers = signed_headers(secret, "ev_x", VECTOR_TIME, body)
        with pytest.raises(WebhookVerificationError, match="webhook ev_x: "):
            verify_webhook(secret, headers, body, now=VECTOR_TIME)
