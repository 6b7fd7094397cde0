"""Near misses: caught mail addressed a typing slip or two away from a live inbox.

Caught mail is a near miss of a live inbox when its recipient's local part (lowercased,
``+tag`` removed) is within 2 edits of the inbox's (insert, delete, substitute, or swap of
neighbours: the optimal string alignment distance, a restricted Damerau-Levenshtein), in the
inbox's domain or one within 2 edits of it, and it arrived after the inbox was created.

``NearIndex`` finds them without looking at every live inbox (symmetric deletes, as in
SymSpell): it keeps every variant of each live local part with up to two characters deleted.
Two strings within 2 edits share such a variant (a swap is one deletion on each side), so
the variants of a caught local part name every candidate, whatever the number of live
inboxes; the true distance is then checked. As SymSpell does, only a prefix is indexed (the
first ``PREFIX`` characters): the prefixes of two strings within 2 edits are still within 2
deletions each (an insert or delete moves at most two characters across the prefix's end),
so nothing is lost, and an inbox's 21 characters make 56 keys rather than 232. Keys are the
variants' hashes (a collision only adds a candidate that the check drops).

Pure: no I/O, no clock; times are parameters.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

MAX_EDITS = 2
# Ten base32 characters: a random prefix of live inboxes shares a key with an unrelated
# caught address about once in 10^10 look-ups, at 10,000 live inboxes.
PREFIX = 10
# RFC 5321 4.5.3.1.1: a local part is at most 64 octets; a longer one (plus the edits)
# cannot be within reach of any inbox's.
_LONGEST_LOCAL = 64 + MAX_EDITS


@dataclass(frozen=True, slots=True)
class LiveAddress:
    """What the index needs of a live inbox."""

    inbox_id: str
    run_id: str
    address: str  # local@domain, as the inbox has it
    created_at: float
    expires_at: float

    @property
    def local_part(self) -> str:
        return self.address.rpartition("@")[0]

    @property
    def domain(self) -> str:
        return self.address.rpartition("@")[2].lower()


@dataclass(frozen=True, slots=True)
class NearMissFound:
    """Caught mail for ``address`` that was meant, most likely, for ``inbox_id``."""

    inbox_id: str
    run_id: str
    address: str  # the caught recipient, as it was sent
    distance: int  # edits between the two addresses (local part and domain)


def normal_local_part(local_part: str) -> str:
    """The mailbox a local part names: lowercased, ``+tag`` removed, quotes of a plain
    dot-atom dropped (``"Ab+x"`` is ``ab``)."""
    if len(local_part) >= 2 and local_part[0] == local_part[-1] == '"':
        local_part = local_part[1:-1]
    return local_part.lower().split("+", 1)[0]


def osa_distance(a: str, b: str, limit: int = MAX_EDITS) -> int:
    """Optimal string alignment distance (insert, delete, substitute, swap of neighbours),
    or ``limit + 1`` as soon as it is certainly above ``limit``. Only the cells within
    ``limit`` of the diagonal are computed (no path beyond them stays within the limit)."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    if a == b:
        return 0
    over = limit + 1
    width = len(b)
    before: list[int] = []  # the row before the previous one (for swaps)
    previous = [j if j <= limit else over for j in range(width + 1)]
    for i in range(1, len(a) + 1):
        row = [over] * (width + 1)
        if i <= limit:
            row[0] = i
        char = a[i - 1]
        lowest = row[0]
        for j in range(max(1, i - limit), min(width, i + limit) + 1):
            if char == b[j - 1]:
                best = previous[j - 1]
            else:
                best = min(previous[j], row[j - 1], previous[j - 1]) + 1
                if i > 1 and j > 1 and char == b[j - 2] and a[i - 2] == b[j - 1]:
                    best = min(best, before[j - 2] + 1)
            row[j] = min(best, over)
            lowest = min(lowest, row[j])
        if lowest > limit:
            return over
        before, previous = previous, row
    return min(previous[width], over)


def deletion_variants(word: str) -> set[str]:
    """``word`` with every choice of up to two characters deleted (itself included)."""
    found = {word}
    ones = [word[:i] + word[i + 1 :] for i in range(len(word))]
    found.update(ones)
    for i, one in enumerate(ones):
        # The second deletion at or after the first one's place: each pair once.
        found.update(one[:j] + one[j + 1 :] for j in range(i, len(one)))
    return found


class NearIndex:
    """The live inboxes' local parts by their deletion variants (this process's memory)."""

    def __init__(self) -> None:
        self._inboxes: dict[str, LiveAddress] = {}
        # hash of a variant -> the inbox id with it, or a tuple of them when several share it
        self._keys: dict[int, str | tuple[str, ...]] = {}

    def __len__(self) -> int:
        return len(self._inboxes)

    def __contains__(self, inbox_id: object) -> bool:
        return inbox_id in self._inboxes

    def add(self, live: LiveAddress) -> None:
        if live.inbox_id in self._inboxes:
            return
        self._inboxes[live.inbox_id] = live
        keys = self._keys
        inbox_id = live.inbox_id
        for variant in deletion_variants(live.local_part[:PREFIX]):
            key = hash(variant)
            held = keys.get(key)
            if held is None:
                keys[key] = inbox_id
            elif isinstance(held, str):
                keys[key] = (held, inbox_id)
            else:
                keys[key] = (*held, inbox_id)

    def remove(self, inbox_ids: Iterable[str]) -> None:
        for inbox_id in inbox_ids:
            live = self._inboxes.pop(inbox_id, None)
            if live is None:
                continue
            for variant in deletion_variants(live.local_part[:PREFIX]):
                key = hash(variant)
                held = self._keys.get(key)
                if held == inbox_id:
                    del self._keys[key]
                elif isinstance(held, tuple):
                    rest = tuple(i for i in held if i != inbox_id)
                    self._keys[key] = rest[0] if len(rest) == 1 else rest

    def keep_only(self, live: Iterable[LiveAddress]) -> None:
        """Become exactly ``live`` (after this process may have missed news: a reconnect)."""
        wanted = {item.inbox_id: item for item in live}
        self.remove([i for i in self._inboxes if i not in wanted])
        for item in wanted.values():
            self.add(item)

    def find(self, recipients: Iterable[str], received_at: float) -> list[NearMissFound]:
        """The live inboxes these caught recipients nearly reached: one near miss per inbox
        (its closest recipient), closest first."""
        best: dict[str, NearMissFound] = {}
        for recipient in recipients:
            for miss in self._near(recipient, received_at):
                held = best.get(miss.inbox_id)
                if held is None or miss.distance < held.distance:
                    best[miss.inbox_id] = miss
        return sorted(best.values(), key=lambda m: (m.distance, m.inbox_id))

    def _near(self, recipient: str, received_at: float) -> Iterator[NearMissFound]:
        raw_local, _, domain = recipient.rpartition("@")
        local = normal_local_part(raw_local)
        if not local or len(local) > _LONGEST_LOCAL or not self._inboxes:
            return
        domain = domain.lower()
        candidates: set[str] = set()
        for variant in deletion_variants(local[:PREFIX]):
            held = self._keys.get(hash(variant))
            if held is None:
                continue
            if isinstance(held, str):
                candidates.add(held)
            else:
                candidates.update(held)
        for inbox_id in candidates:
            live = self._inboxes[inbox_id]
            if not live.created_at <= received_at < live.expires_at:
                continue
            local_edits = osa_distance(local, live.local_part)
            if local_edits > MAX_EDITS:
                continue
            domain_edits = 0 if domain == live.domain else osa_distance(domain, live.domain)
            if domain_edits > MAX_EDITS or local_edits + domain_edits == 0:
                continue
            yield NearMissFound(inbox_id, live.run_id, recipient, local_edits + domain_edits)
