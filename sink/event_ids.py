"""Event ids a run's reader cannot count other runs by.

A stream limited to runs (a run or ``runs:`` token, ``?run_id=``) sees only its runs'
events, but plain ids (``<boot>.<seq>``, one sequence for every run) would show by their
gaps how much happened elsewhere. Such readers get ``<boot>.m<hex>`` instead: the sequence
number under a keyed permutation of 64-bit numbers (a three-round Feistel network over
keyed BLAKE2b, the key made once per process), so one id says nothing about the next, and
the hub still turns it back into a position to resume from.
"""

from __future__ import annotations

import hashlib
import secrets

_ROUNDS = 3
_HALF = 0xFFFFFFFF


class IdMask:
    def __init__(self, key: bytes | None = None) -> None:
        key = key or secrets.token_bytes(32)
        self._rounds = [
            hashlib.blake2b(digest_size=4, key=key, person=bytes([n]) * 16) for n in range(_ROUNDS)
        ]

    def hide(self, seq: int) -> str:
        left, right = (seq >> 32) & _HALF, seq & _HALF
        for n in range(_ROUNDS):
            left, right = right, left ^ self._round(n, right)
        return f"m{(left << 32) | right:016x}"

    def reveal(self, hidden: str) -> int | None:
        """The sequence number behind an id of ``hide``, or None if it is not one."""
        if len(hidden) != 17 or not hidden.startswith("m"):
            return None
        try:
            value = int(hidden[1:], 16)
        except ValueError:
            return None
        left, right = value >> 32, value & _HALF
        for n in reversed(range(_ROUNDS)):
            left, right = right ^ self._round(n, left), left
        return (left << 32) | right

    def _round(self, n: int, half: int) -> int:
        mixed = self._rounds[n].copy()
        mixed.update(half.to_bytes(4, "big"))
        return int.from_bytes(mixed.digest(), "big")
