"""Live event ids made from durable facts, the same on every replica and after a restart.

A webhook's ``webhook-id`` is its live event's SSE ``id:``, the same on every retry and on
every replica, and its outbox row is written in the commit of its event: so the id is made
from what that commit stores, not from an in-process sequence. ``run_event`` and ``inbox``
events come from a row of the ``events`` table (its id, plus the kind: one row can make
both); ``message`` events from the message's own id (a delivery's ``message_id``, caught
mail's ``caught_id``). The id is a keyed hash of that (BLAKE2b; the key derived from the
store's signing key, which every replica shares): opaque, so no reader can count other
runs' events by it, and one id serves every reader.
"""

from __future__ import annotations

import hashlib
import secrets

_PREFIX = "ev_"
_DIGEST = 12  # 96 bits: 24 hex digits


class EventIds:
    def __init__(self, signing_key: bytes | None = None) -> None:
        # Derived, so the id key says nothing of the token key it comes from.
        root = signing_key or secrets.token_bytes(32)
        self._key = hashlib.blake2b(root, digest_size=32, person=b"runsink.evids").digest()

    def of_row(self, kind: str, row_id: int) -> str:
        """A ``run_event`` or ``inbox`` event made from the ``events`` row ``row_id``."""
        return self._id(f"{kind}:{row_id}")

    def of_message(self, message_id: str) -> str:
        """A ``message`` event: a delivery's message_id or a caught mail's caught_id."""
        return self._id(f"message:{message_id}")

    def of_ping(self, delivery_id: str) -> str:
        """A webhook's test delivery."""
        return self._id(f"ping:{delivery_id}")

    def of_mark(self, boot: str, seq: int) -> str:
        """A position of one process's stream that no event has (a ``resync``'s id)."""
        return self._id(f"mark:{boot}:{seq}")

    def _id(self, fact: str) -> str:
        digest = hashlib.blake2b(fact.encode(), digest_size=_DIGEST, key=self._key)
        return _PREFIX + digest.hexdigest()


def is_event_id(text: str) -> bool:
    return len(text) == len(_PREFIX) + 2 * _DIGEST and text.startswith(_PREFIX)
