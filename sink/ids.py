"""Identifiers and cursors: unguessable ids, and opaque cursors bound to one inbox."""

from __future__ import annotations

import base64
import binascii
import os
import re
import threading
import time
from collections.abc import Callable

from sink.errors import InvalidCursor

# The shapes of what callers name: every transport checks input against these, and the
# OpenAPI document and the MCP tool schemas publish them (``anchored``).
INBOX_ID = re.compile(r"ib_[a-z2-7]{20}")
MESSAGE_ID = re.compile(r"msg_[a-z2-7]{24}")
CAUGHT_ID = re.compile(r"cm_[a-z2-7]{24}")  # caught mail: any recipient without a live inbox
RUN_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
PURPOSE = re.compile(r"[A-Za-z0-9._-]{1,64}")
POLICY_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")


def anchored(shape: re.Pattern[str]) -> str:
    """The shape as a JSON Schema ``pattern`` (which matches anywhere unless anchored)."""
    return f"^{shape.pattern}$"


class SystemRandomBytes:
    """The operating system's random bytes (``os.urandom``, as ``secrets``), fetched 4 KiB
    at a time: one system call for a couple of hundred ids, not one each (ingest makes an
    id per message). Thread-safe; a forked child starts with a pool of its own."""

    _CHUNK = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool = b""
        self._at = 0
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._pool, self._at = b"", 0

    def __call__(self, count: int) -> bytes:
        with self._lock:
            if self._at + count > len(self._pool):
                self._pool, self._at = os.urandom(max(self._CHUNK, count)), 0
            start = self._at
            self._at += count
            return self._pool[start : self._at]


# Base32's digits in ASCII order ("2" < "a"): a number written with them sorts as it counts.
_ORDERED_DIGITS = "234567abcdefghijklmnopqrstuvwxyz"
_TIME_CHARS = 9  # milliseconds since 1970 in 45 bits: until the year 3084


class Ids:
    """New identifiers from a source of random bytes (the system's; a seeded one in the fake)
    and, for the ids of mail, a clock (``now``: seconds since 1970)."""

    def __init__(
        self,
        random_bytes: Callable[[int], bytes] | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        if random_bytes is None:
            random_bytes = SystemRandomBytes()
        self._bytes = random_bytes
        self._now = now

    def _token(self, chars: int) -> str:
        """``chars`` lowercase base32 characters: 5 random bits each."""
        raw = self._bytes((chars * 5 + 7) // 8)
        return base64.b32encode(raw).decode()[:chars].lower()

    def _ordered_token(self, chars: int) -> str:
        """``chars`` base32 characters that sort by the time they were made: the millisecond
        first (9 characters), then random ones (5 bits each: 75 bits in a 24-character id,
        still unguessable). Each message's id goes into unique indexes at ingest (deliveries,
        caught mail, then the listing); ids that follow one another land on the index's last
        page, which the messages of a group commit then share, instead of a page each."""
        ms = max(0, int(self._now() * 1000))
        stamp = "".join(
            _ORDERED_DIGITS[(ms >> shift) & 31] for shift in range(5 * (_TIME_CHARS - 1), -1, -5)
        )
        return stamp + self._token(chars - _TIME_CHARS)

    def inbox_id(self) -> str:
        return "ib_" + self._token(20)

    def message_id(self) -> str:
        return "msg_" + self._ordered_token(24)

    def caught_id(self) -> str:
        return "cm_" + self._ordered_token(24)

    def claim_id(self) -> str:
        return "clm_" + self._token(20)

    def local_part(self) -> str:
        """An address local part: lowercase and unguessable (100 bits)."""
        return "r" + self._token(20)

    def trace_id(self) -> str:
        return self._bytes(16).hex()


RANDOM = Ids()
new_inbox_id = RANDOM.inbox_id
new_message_id = RANDOM.message_id
new_claim_id = RANDOM.claim_id
new_caught_id = RANDOM.caught_id
new_local_part = RANDOM.local_part
new_trace_id = RANDOM.trace_id


_CURSOR_PREFIX = "c1_"
_CURSOR_BODY = re.compile(r"(ib_[a-z2-7]{20})\.(0|[1-9]\d{0,18})")  # as encode_cursor writes it


def encode_cursor(inbox_id: str, seq: int) -> str:
    """A position in one inbox's deliveries: every delivery with a greater seq is beyond it."""
    body = f"{inbox_id}.{seq}".encode()
    return _CURSOR_PREFIX + base64.urlsafe_b64encode(body).decode().rstrip("=")


def decode_cursor(inbox_id: str, cursor: str) -> int:
    """The position a cursor names; ``InvalidCursor`` unless we issued it for this inbox."""
    found = _CURSOR_BODY.fullmatch(_opened(cursor, _CURSOR_PREFIX))
    if found is None:
        raise InvalidCursor(_NOT_OURS)
    if found.group(1) != inbox_id:
        raise InvalidCursor(f"cursor belongs to another inbox, not {inbox_id}")
    return int(found.group(2))


# Positions in the newest-first lists (search, caught mail): not bound to an inbox.
_LIST_CURSOR_PREFIX = "l1_"
_LIST_CURSOR = re.compile(r"([a-z]{1,8})\.(\d{1,19})\.(\d{1,19})")


def encode_list_cursor(kind: str, message: int, entry: int) -> str:
    body = f"{kind}.{message}.{entry}".encode()
    return _LIST_CURSOR_PREFIX + base64.urlsafe_b64encode(body).decode().rstrip("=")


def decode_list_cursor(kind: str, cursor: str) -> tuple[int, int]:
    """The position of a newest-first list cursor; ``InvalidCursor`` unless it is ours."""
    found = _LIST_CURSOR.fullmatch(_opened(cursor, _LIST_CURSOR_PREFIX))
    if found is None or found.group(1) != kind:
        raise InvalidCursor(f"{_NOT_OURS} for this {kind} list")
    return int(found.group(2)), int(found.group(3))


_NOT_OURS = NOT_ISSUED = "cursor is not one this server issued"


def _opened(cursor: str, prefix: str) -> str:
    """A cursor's body, its base64 undone; ``InvalidCursor`` unless it has our prefix and form."""
    if not cursor.startswith(prefix) or len(cursor) > 128:
        raise InvalidCursor(_NOT_OURS)
    text = cursor[len(prefix) :]
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("ascii")
    except (binascii.Error, ValueError) as exc:
        raise InvalidCursor(_NOT_OURS) from exc
