"""Live events: a small in-process hub that the SSE endpoint (``GET /v1/events``) reads.

Publishing is a list append and a wake-up of the subscribers that want the event: it never
awaits, never writes to a socket and never waits for a reader, so a slow or stuck browser
tab cannot slow ingest. Every event is serialised once, when published.

Instead of one queue per subscriber, all subscribers read one shared, bounded log (the last
``KEEP_S`` seconds, at most ``KEEP_MAX`` events) with a cursor of their own: the memory a
subscriber costs is its cursor, and a subscriber that falls behind the log's tail (or asks
to resume from an id this process never issued) is told to resynchronise (a ``resync``
event) instead of holding the publisher back. The same log answers ``Last-Event-ID``.
Subscribers with the same filter share one wake-up, so publishing costs O(1) whatever the
number of readers.

An event's id is made from durable facts (``sink/event_ids.py``: its ``events`` row, or
its message's id), the same on every replica and the same a webhook delivers it under;
opaque, so one id serves every reader and tells nothing of other runs. The hub keeps its
own sequence for order and maps the ids in its log to it for ``Last-Event-ID``: an id it
does not hold (from before a restart, too old, not ours) gets a resync.

Fed, with SQLite, from the store's commit hook (every run event recorded, after its commit:
``record``) and ingest (a message stored, after its commit: ``message``); with PostgreSQL,
from the database's feed of every replica's events in commit order
(``sink/storage/postgres/feed.py``: ``record``, ``delivered``, ``caught``, and ``lost`` when it
cannot replay a gap).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from sink import event_shapes
from sink.event_ids import EventIds
from sink.storage.base import Event, Incoming
from sink.webhooks.model import LiveEvent

KEEP_S = 600.0  # Last-Event-ID resumes within the last 10 minutes (the contract's minimum)
KEEP_MAX = 65_536  # and never more events than this in memory
_TRIM_CHUNK = 1024  # trim the log's head in chunks: amortised O(1) per event
_MARKS_MAX = 4096  # resync ids remembered (positions no event has)


@dataclass(slots=True)
class Entry:
    seq: int
    run_id: str | None
    at: float  # monotonic, for trimming
    frame: bytes  # the whole SSE frame: id, event and data lines
    event_id: str


@dataclass(slots=True, eq=False)  # compared (and hashed) by identity
class Subscriber:
    run_id: str | None
    cursor: int  # the last seq this subscriber has been given
    fresh: bool = True  # its first read never waits (a backlog to replay, or a resync)
    gone: bool = False  # its client left: the next wait ends
    ends_on_release: bool = False  # a stream of one run: ends when its run is released
    glob: str | None = None  # a runs: token's stream of every run it may see (fnmatch)
    ended: bool = False  # its run was released: it reads what is left, then ends


@dataclass(slots=True, eq=False)
class _Group:
    """The subscribers with one filter (a run, or None for all) and one shared wake-up.

    Publishing resolves the group's future once, however many subscribers wait on it: a
    burst of events costs each waiting subscriber one wake-up, not one per event.
    """

    members: set[Subscriber] = field(default_factory=set)
    last_seq: int = 0  # the newest event this group's members would read
    changed: asyncio.Future[None] | None = None

    def poke(self) -> None:
        if self.changed is not None and not self.changed.done():
            self.changed.set_result(None)
        self.changed = None


@dataclass(frozen=True, slots=True)
class Batch:
    frames: list[bytes]
    resync: bool = False  # events were missed: the reader should reload its state
    closed: bool = False  # the hub is closing, or the run released: end after these frames
    idle: bool = False  # nothing came within the timeout: time for a keep-alive


class Hub:
    def __init__(self, boot: str | None = None) -> None:
        self.boot = boot or _base36(int(time.time() * 1000))
        self._log: list[Entry] = []
        self._first = 1  # seq of self._log[0]
        self._next = 1
        self._groups: dict[str | None, _Group] = {}
        self._closed = False
        self.published = 0
        self.subscribers = 0  # open subscriptions
        self._last_left = -float("inf")  # when the last reader left (monotonic)
        self.ids = EventIds()  # keyed by the store's signing key once it is open (keyed())
        self._seqs: dict[str, int] = {}  # the ids in the log -> their seq (Last-Event-ID)
        self._marks: dict[str, int] = {}  # resync ids -> the position they name
        self._unstored = 0  # events handed in without a row id (tests): numbered below 0

    def keyed(self, signing_key: bytes) -> None:
        """Make ids with the store's key (every replica's ids then agree)."""
        self.ids = EventIds(signing_key)

    # -- publishing (never awaits) ---------------------------------------------------

    def heard(self) -> bool:
        """Someone reads the stream, or did within KEEP_S (and may resume)."""
        return bool(self.subscribers) or time.monotonic() - self._last_left <= KEEP_S

    def _unheard(self) -> bool:
        """No reader now, and none for KEEP_S: nobody holds an id these events could follow.

        Then publishing is skipped (ingest pays nothing for live events while no page is
        open), and the log restarts past the skipped ids, so an old id still gets a resync.
        """
        if self.heard():
            return False
        self._next += 1
        self._forget_log()
        return True

    def _forget_log(self) -> None:
        self._log.clear()
        self._seqs.clear()
        self._first = self._next

    def record(self, events: Iterable[Event]) -> None:
        """Run events just committed: each as ``run_event``, plus ``inbox`` on state changes."""
        if self._unheard():
            return
        released: set[str] = set()
        for event in events:
            if event.type == "expired" and event.detail.get("cause") == "released":
                released.add(event.run_id)
            row_id = event.seq
            if row_id is None:
                self._unstored -= 1
                row_id = self._unstored
            for live in event_shapes.of_event(event, self.ids, row_id):
                self._publish(live)
        for run_id in released:
            self._end_streams_of(run_id)

    def _end_streams_of(self, run_id: str) -> None:
        """A run was released: the streams that end with it read its last events, then end."""
        group = self._groups.get(run_id)
        if group is None:
            return
        for member in group.members:
            if member.ends_on_release:
                member.ended = True
        group.poke()

    def message(self, incoming: Incoming) -> None:
        """A message was stored (its 250 follows): one event per inbox, one if caught."""
        if self._unheard():
            return
        for live in event_shapes.of_incoming(incoming, self.ids):
            self._publish(live)

    def caught(self, caught_id: str, subject: str, received_at: float) -> None:
        """Caught mail stored by any replica (and answered 250 for), from the store's feed.
        No run: only readers of every run see it (a run's stream never does)."""
        if self._unheard():
            return
        self._publish(event_shapes.caught(self.ids, caught_id, subject, received_at))

    def delivered(
        self, message_id: str, inbox_id: str, run_id: str, subject: str, received_at: float
    ) -> None:
        """A message stored by any replica (and answered 250 for), from the store's feed."""
        if self._unheard():
            return
        live = event_shapes.delivered(self.ids, message_id, inbox_id, run_id, subject, received_at)
        self._publish(live)

    def lost(self) -> None:
        """Events were missed (more than could be replayed): every reader resynchronises."""
        self._next += 1
        self._forget_log()
        for group in self._groups.values():
            group.last_seq = self._next - 1  # past every reader's cursor: each reads a resync
            group.poke()

    def _publish(self, live: LiveEvent) -> None:
        if self._closed:
            return
        seq = self._next
        self._next += 1
        payload = json.dumps(live.data, separators=(",", ":"), ensure_ascii=False)
        frame = f"id: {live.id}\nevent: {live.type}\ndata: {payload}\n\n".encode()
        now = time.monotonic()
        run_id = live.run_id
        self._log.append(Entry(seq, run_id, now, frame, live.id))
        self._seqs[live.id] = seq
        self.published += 1
        self._trim(now)
        for key in (None, run_id) if run_id is not None else (None,):
            group = self._groups.get(key)
            if group is not None:
                group.last_seq = seq
                group.poke()

    def _trim(self, now: float) -> None:
        # Whole chunks at a time, so that the list's head is cut rarely (amortised O(1)).
        log = self._log
        over = len(log) - KEEP_MAX
        aged = len(log) > _TRIM_CHUNK and now - log[_TRIM_CHUNK - 1].at > KEEP_S
        if over <= 0 and not aged:
            return
        drop = max(over + _TRIM_CHUNK, 0) if over > 0 else 0
        while drop < len(log) - 1 and now - log[drop].at > KEEP_S:
            drop += 1
        for entry in log[:drop]:
            if self._seqs.get(entry.event_id) == entry.seq:
                del self._seqs[entry.event_id]
        del log[:drop]
        self._first += drop

    # -- subscribing ---------------------------------------------------------------------

    def subscribe(
        self,
        run_id: str | None,
        last_event_id: str | None = None,
        ends_on_release: bool = False,
        glob: str | None = None,
    ) -> Subscriber:
        """A new reader: from now on, or from just after ``last_event_id``; with
        ``ends_on_release``, its stream ends once its run is released; with ``glob`` (and no
        ``run_id``), only the runs it matches, never caught mail."""
        cursor = self._next - 1
        if last_event_id:
            seq = self._parse_id(last_event_id)
            known = seq is not None and self._first - 1 <= seq < self._next
            # Not ours, from before a restart, or too old: -1 makes read() answer resync.
            cursor = seq if known and seq is not None else -1
        subscriber = Subscriber(run_id, cursor, ends_on_release=ends_on_release, glob=glob)
        self._groups.setdefault(run_id, _Group()).members.add(subscriber)
        self.subscribers += 1
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        group = self._groups.get(subscriber.run_id)
        if group is not None and subscriber in group.members:
            group.members.discard(subscriber)
            self.subscribers -= 1
            self._last_left = time.monotonic()
            if not group.members:
                group.poke()
                del self._groups[subscriber.run_id]

    def leave(self, subscriber: Subscriber) -> None:
        """Its client went away: end its wait now (the others of its group just look again)."""
        subscriber.gone = True
        group = self._groups.get(subscriber.run_id)
        if group is not None:
            group.poke()

    def read(self, subscriber: Subscriber) -> Batch:
        """Everything published for this subscriber since its cursor (never waits)."""
        subscriber.fresh = False
        if self._closed or subscriber.gone:
            return Batch([], closed=True)
        if subscriber.cursor < self._first - 1:
            # Fell behind the log's tail (or resumed from an unknown id): start again from now.
            subscriber.cursor = self._next - 1
            return Batch([self._resync_frame()], resync=True)
        start = subscriber.cursor + 1 - self._first
        entries = self._log[start:]
        subscriber.cursor = self._next - 1
        run_id, glob = subscriber.run_id, subscriber.glob
        if run_id is not None:
            mine = [e for e in entries if e.run_id == run_id]
        elif glob is not None:
            mine = [e for e in entries if e.run_id is not None and fnmatchcase(e.run_id, glob)]
        else:
            return Batch([e.frame for e in entries])
        return Batch([e.frame for e in mine], closed=subscriber.ended)

    async def wait(self, subscriber: Subscriber, idle_s: float) -> Batch:
        """The next batch, or an empty one once ``idle_s`` seconds pass with nothing for this
        subscriber (time for a keep-alive). Events it does not see (other runs', for a
        ``runs:`` reader) wake it but do not put its keep-alive off."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + idle_s
        while True:
            group = self._groups.get(subscriber.run_id)
            if (
                group is not None
                and not subscriber.fresh
                and not subscriber.gone
                and not subscriber.ended
                and not self._closed
                and subscriber.cursor >= group.last_seq
            ):
                if group.changed is None:
                    group.changed = loop.create_future()
                left = max(0.0, deadline - loop.time())
                done, _ = await asyncio.wait({group.changed}, timeout=left)
                if not done:
                    return Batch([], closed=self._closed or subscriber.gone, idle=True)
            batch = self.read(subscriber)
            if batch.frames or batch.closed:
                return batch
            if loop.time() >= deadline:
                return Batch([], idle=True)

    def close(self) -> None:
        """Shutdown: every open stream ends."""
        self._closed = True
        for group in self._groups.values():
            group.poke()

    def _parse_id(self, given: str) -> int | None:
        given = given.strip()
        seq = self._seqs.get(given)
        return seq if seq is not None else self._marks.get(given)

    def _resync_frame(self) -> bytes:
        """Resynchronise: its id names the current position (a reader resumes from there)."""
        seq = self._next - 1
        mark = self.ids.of_mark(self.boot, seq)
        self._marks[mark] = seq
        if len(self._marks) > _MARKS_MAX:
            del self._marks[next(iter(self._marks))]
        return f'id: {mark}\nevent: resync\ndata: {{"last_event_id":"{mark}"}}\n\n'.encode()


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while number:
        number, rest = divmod(number, 36)
        out = digits[rest] + out
    return out or "0"
