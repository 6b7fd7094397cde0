"""Identifiers and cursors: unguessable ids, and opaque cursors bound to one inbox."""

from __future__ import annotations

import base64
import binascii
import re
import secrets

from sink.errors import InvalidCursor

# The shapes of what callers name: every transport checks input against these.
INBOX_ID = re.compile(r"ib_[a-z2-7]{20}")
MESSAGE_ID = re.compile(r"msg_[a-z2-7]{24}")
CAUGHT_ID = re.compile(r"cm_[a-z2-7]{24}")  # caught mail: any recipient without a live inbox
RUN_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
PURPOSE = re.compile(r"[A-Za-z0-9._-]{1,64}")


def _token(chars: int) -> str:
    """``chars`` lowercase base32 characters: 5 random bits each."""
    return base64.b32encode(secrets.token_bytes((chars * 5 + 7) // 8)).decode()[:chars].lower()


def new_inbox_id() -> str:
    return "ib_" + _token(20)


def new_message_id() -> str:
    return "msg_" + _token(24)


def new_caught_id() -> str:
    return "cm_" + _token(24)


def new_claim_id() -> str:
    return "clm_" + _token(20)


def new_local_part() -> str:
    """An address local part: lowercase and unguessable (100 bits)."""
    return "r" + _token(20)


def new_trace_id() -> str:
    return secrets.token_hex(16)


_CURSOR_PREFIX = "c1_"
_CURSOR_BODY = re.compile(r"(ib_[a-z2-7]{20})\.(\d{1,19})")


def encode_cursor(inbox_id: str, seq: int) -> str:
    """A position in one inbox's deliveries: every delivery with a greater seq is beyond it."""
    body = f"{inbox_id}.{seq}".encode()
    return _CURSOR_PREFIX + base64.urlsafe_b64encode(body).decode().rstrip("=")


def decode_cursor(inbox_id: str, cursor: str) -> int:
    """The position a cursor names; ``InvalidCursor`` unless we issued it for this inbox."""
    if not cursor.startswith(_CURSOR_PREFIX) or len(cursor) > 128:
        raise InvalidCursor("cursor is not one this server issued")
    text = cursor[len(_CURSOR_PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("ascii")
    except (binascii.Error, ValueError) as exc:
        raise InvalidCursor("cursor is not one this server issued") from exc
    found = _CURSOR_BODY.fullmatch(raw)
    if found is None:
        raise InvalidCursor("cursor is not one this server issued")
    if found.group(1) != inbox_id:
        raise InvalidCursor(f"cursor belongs to another inbox, not {inbox_id}")
    return int(found.group(2))


# Positions in the newest-first lists (search, caught mail): not bound to an inbox.
_LIST_CURSOR = re.compile(r"([a-z]{1,8})\.(\d{1,19})\.(\d{1,19})")


def encode_list_cursor(kind: str, message: int, entry: int) -> str:
    body = f"{kind}.{message}.{entry}".encode()
    return "l1_" + base64.urlsafe_b64encode(body).decode().rstrip("=")


def decode_list_cursor(kind: str, cursor: str) -> tuple[int, int]:
    """The position of a newest-first list cursor; ``InvalidCursor`` unless it is ours."""
    if not cursor.startswith("l1_") or len(cursor) > 128:
        raise InvalidCursor("cursor is not one this server issued")
    text = cursor[3:]
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("ascii")
    except (binascii.Error, ValueError) as exc:
        raise InvalidCursor("cursor is not one this server issued") from exc
    found = _LIST_CURSOR.fullmatch(raw)
    if found is None or found.group(1) != kind:
        raise InvalidCursor(f"cursor is not one this server issued for this {kind} list")
    return int(found.group(2)), int(found.group(3))
