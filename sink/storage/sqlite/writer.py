"""The SQLite writer: one connection on one thread of its own, and group commit.

Every write is a function run on the writer thread. Writes that arrive while a commit
is in progress wait for the next one and then share it: one ``BEGIN IMMEDIATE``, one
``SAVEPOINT`` per write (a failing write rolls back alone and fails alone), one
``COMMIT`` and one fsync for all of them. Writes of one kind that follow each other in a
batch (``shared``: SMTP deliveries) run as one write, one statement per table for all of
them; should it fail, each runs alone in its own savepoint, so that one fails alone still.
SMTP deliveries and agent calls (creates, polls, claims) all share commits this way, so
durability does not cost throughput, and each batch costs one hop from the event loop to
the thread and one back. The fsync happens on the writer thread, never on the event loop.

A caller that gives up before its batch starts is dropped from it; one that gives
up later lets its write finish: there is never a write half done.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sink.errors import StorageError, StoreFull
from sink.logs import warn
from sink.storage.base import Event
from sink.storage.rows import EventFields

if TYPE_CHECKING:
    from sink.storage.sqlite.webhooks import SQLiteWebhooks

T = TypeVar("T")

# Durability: WAL with synchronous=FULL fsyncs the log at every commit, so a commit
# survives a process crash and a power loss (https://www.sqlite.org/pragma.html#pragma_synchronous).
CONNECTION_PRAGMAS = (
    "PRAGMA synchronous = FULL",
    "PRAGMA busy_timeout = 5000",
    "PRAGMA foreign_keys = OFF",
    # A savepoint keeps the pages it changes in a statement journal, which SQLite spills to a
    # temporary file past 64 KiB: one file opened, written and removed per commit, in memory
    # instead (https://www.sqlite.org/tempfiles.html#statement_journals).
    "PRAGMA temp_store = MEMORY",
)

_BATCH_MAX = 256

Work = Callable[[sqlite3.Connection], Any]
Outcome = tuple[bool, Any]  # (succeeded, result or exception)

_SQLITE_FULL = 13  # https://www.sqlite.org/rescode.html#full (a write failing with ENOSPC)


def storage_error(exc: BaseException, what: str) -> StorageError:
    """A driver error as ours: a full disk is ``StoreFull`` (SMTP 452 4.3.1, as with
    PostgreSQL), anything else ``StorageError``."""
    if isinstance(exc, StorageError):
        return exc
    code = getattr(exc, "sqlite_errorcode", None) or 0
    if code & 0xFF == _SQLITE_FULL or getattr(exc, "errno", None) == errno.ENOSPC:
        return StoreFull(f"{what}: the disk is full")
    return StorageError(f"{what}: {exc}")


class Shared:
    """A write that may share one ``run(db, items)`` call with the same kind next to it."""

    __slots__ = ("item", "run")

    def __init__(self, run: Callable[[sqlite3.Connection, list[Any]], None], item: Any) -> None:
        self.run = run
        self.item = item

    def __call__(self, db: sqlite3.Connection) -> None:
        self.run(db, [self.item])


class NotingConnection(sqlite3.Connection):
    """A connection on which a write can leave notes (the events it recorded) for after
    its commit: the notes of a write that rolls back are dropped with it."""

    notes: list[Any]
    outbox: Any = None  # the webhook outbox (webhooks.py), set at open


def note(db: sqlite3.Connection, items: list[Any]) -> None:
    """Hand ``items`` to the writer's ``on_commit`` once this write's commit is durable."""
    notes = getattr(db, "notes", None)
    if notes is not None:
        notes.extend(items)


class _Call:
    """Work run alone on the writer thread, outside any transaction (open, close, a
    maintenance statement)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn


Item = tuple[Work | _Call, asyncio.Future[Any]]
_STOP: list[Item] = []  # handed to the thread last: it returns


class Writer:
    """The writer thread and its group commit.

    Writes queue on the event loop for the rest of the loop's turn; then the turn's writes go
    to the thread together (``_flush``, once per turn, a ``call_soon``, not a task). The
    thread takes everything that waits for it, commits it in batches, and hands each batch's
    outcomes back in one ``call_soon_threadsafe``. While it commits, the next writes gather.
    """

    def __init__(self, path: Path, on_commit: Callable[[list[Any]], None] | None = None) -> None:
        self._path = path
        self._on_commit = on_commit
        self._db: sqlite3.Connection | None = None
        self._pending: list[Item] = []
        self._flushing = False
        self._inbox: queue.SimpleQueue[list[Item]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False

    async def open(self, setup: Callable[[sqlite3.Connection], None]) -> None:
        def connect() -> None:
            db = sqlite3.connect(
                self._path,
                isolation_level=None,
                check_same_thread=False,
                factory=NotingConnection,
            )
            db.row_factory = sqlite3.Row
            for pragma in CONNECTION_PRAGMAS:
                db.execute(pragma)
            setup(db)
            self._db = db

        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._serve, name="sqlite-writer", daemon=True)
        self._thread.start()
        await self._call(connect)

    async def transaction(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` in the next commit; it returns once that commit is durable."""
        if self._db is None or self._closing:
            raise StorageError("the store is closed")
        result: T = await self._queue(work)
        return result

    async def shared(self, run: Callable[[sqlite3.Connection, list[Any]], None], item: Any) -> None:
        """``transaction(lambda db: run(db, [item]))``, run with the same ``run``'s items that
        wait beside it as one ``run(db, items)``: one statement per table, not one per item."""
        await self.transaction(Shared(run, item))

    async def statement(self, sql: str) -> None:
        """A statement outside any transaction (maintenance such as incremental_vacuum)."""

        def run() -> None:
            self._connection().execute(sql)

        await self._call(run)

    async def close(self) -> None:
        """Commit what is pending, then close the connection and end the thread."""
        if self._thread is None:
            return
        self._closing = True

        def close() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        try:
            await self._call(close)
        finally:
            self._flush()
            self._inbox.put(_STOP)
            self._thread = None

    async def _call(self, fn: Callable[[], T]) -> T:
        try:
            result: T = await self._queue(_Call(fn))
            return result
        except (sqlite3.Error, OSError) as exc:
            raise storage_error(exc, "write failed") from exc

    def _queue(self, work: Work | _Call) -> asyncio.Future[Any]:
        loop = self._loop
        if loop is None or self._thread is None:
            raise StorageError("the store is closed")
        done: asyncio.Future[Any] = loop.create_future()
        self._pending.append((work, done))
        if not self._flushing:
            self._flushing = True
            loop.call_soon(self._flush)
        return done

    def _flush(self) -> None:
        """The loop's turn is over: its writes go to the thread together."""
        self._flushing = False
        if self._pending:
            self._inbox.put(self._pending)
            self._pending = []

    # -- on the writer thread ---------------------------------------------------------

    def _serve(self) -> None:
        inbox = self._inbox
        while True:
            items = inbox.get()
            if items is _STOP:
                return
            with contextlib.suppress(queue.Empty):
                while len(items) < _BATCH_MAX:
                    more = inbox.get_nowait()
                    if more is _STOP:
                        inbox.put(_STOP)  # after these
                        break
                    items = items + more
            self._run_items(items)

    def _run_items(self, items: list[Item]) -> None:
        """Calls alone, in their place; the transactions between them in batches."""
        batch: list[Item] = []
        for item in items:
            if isinstance(item[0], _Call):
                self._commit(batch)
                batch = []
                self._answer([item], [self._run_call(item[0])], [])
            elif not item[1].cancelled():  # a caller gone before its batch: dropped
                batch.append(item)
                if len(batch) == _BATCH_MAX:
                    self._commit(batch)
                    batch = []
        self._commit(batch)

    @staticmethod
    def _run_call(call: _Call) -> Outcome:
        try:
            return True, call.fn()
        except Exception as exc:
            return False, exc

    def _commit(self, batch: list[Item]) -> None:
        if not batch:
            return
        try:
            outcomes = self._run_batch([work for work, _ in batch])  # type: ignore[misc]
        except Exception as exc:  # BEGIN or COMMIT failed: nothing of the batch happened
            failure = storage_error(exc, "commit failed")
            outcomes = [(False, failure)] * len(batch)
        notes: list[Any] = []
        results: list[Outcome] = []
        for succeeded, value in outcomes:
            if succeeded:
                value, noted = value
                notes.extend(noted)
            results.append((succeeded, value))
        self._answer(batch, results, notes)

    def _answer(self, batch: list[Item], outcomes: list[Outcome], notes: list[Any]) -> None:
        loop = self._loop
        assert loop is not None
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(self._settle, batch, outcomes, notes)

    # -- back on the event loop -----------------------------------------------------------

    def _settle(self, batch: list[Item], outcomes: list[Outcome], notes: list[Any]) -> None:
        for (_, done), (succeeded, value) in zip(batch, outcomes, strict=True):
            if done.done():
                continue
            if succeeded:
                done.set_result(value)
            else:
                done.set_exception(value)
        if notes and self._on_commit is not None:
            # After the results: the writers' own continuations (an SMTP 250) run first.
            try:
                self._on_commit(notes)
            except Exception as exc:  # a listener's bug must not stop the commit loop
                warn("on_commit_failed", error=type(exc).__name__)

    def _run_batch(self, works: list[Work]) -> list[Outcome]:
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            outcomes: list[Outcome] = []
            start = 0
            while start < len(works):
                work = works[start]
                end = start + 1
                if isinstance(work, Shared):
                    while end < len(works) and _same_run(works[end], work):
                        end += 1
                if end - start == 1:
                    outcomes.append(self._run_one(db, work))
                else:
                    outcomes += self._run_shared(db, works[start:end])
                start = end
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return outcomes

    @staticmethod
    def _run_one(db: sqlite3.Connection, work: Work) -> Outcome:
        if isinstance(db, NotingConnection):
            db.notes = []
        db.execute("SAVEPOINT write")
        try:
            value = work(db)
        except Exception as exc:
            db.execute("ROLLBACK TO write")
            db.execute("RELEASE write")
            if isinstance(exc, sqlite3.Error | OSError):
                return False, storage_error(exc, "write failed")
            return False, exc
        db.execute("RELEASE write")
        return True, (value, getattr(db, "notes", []))

    @classmethod
    def _run_shared(cls, db: sqlite3.Connection, works: list[Work]) -> list[Outcome]:
        """Shared writes as one; when that fails, each alone (the failing one fails alone)."""
        items = [work.item for work in works if isinstance(work, Shared)]
        run = works[0].run if isinstance(works[0], Shared) else None
        assert run is not None and len(items) == len(works)
        succeeded, value = cls._run_one(db, lambda db: run(db, items))
        if not succeeded:
            return [cls._run_one(db, work) for work in works]
        _, noted = value
        # The notes go with the first write's outcome: the commit gathers them all anyway.
        return [(True, (None, noted))] + [(True, (None, []))] * (len(works) - 1)

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise StorageError("the store is closed")
        return self._db


def _same_run(work: Work, shared: Shared) -> bool:
    return isinstance(work, Shared) and work.run is shared.run


Row = sqlite3.Row


def all_rows(db: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> list[Row]:
    return list(db.execute(sql, params).fetchall())


_INSERT_EVENT = (
    "INSERT INTO events (run_id, inbox_id, message_id, at, type, detail_json) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)


def insert_events(db: sqlite3.Connection, events: Iterable[Event]) -> None:
    """Inside a write: store ``events`` (noted for after the commit) and their webhook mail."""
    insert_event_fields(
        db, [(e.run_id, e.type, e.at, e.inbox_id, e.message_id, e.detail) for e in events]
    )


def insert_event_fields(db: sqlite3.Connection, recorded: list[EventFields]) -> None:
    """``insert_events`` for events not built yet: each is built once, with its row id."""
    rows = [
        (run_id, inbox_id, message_id, at, kind, json.dumps(detail))
        for run_id, kind, at, inbox_id, message_id, detail in recorded
    ]
    if len(rows) == 1:  # most writes (one message, one release): its id comes with the insert
        last = db.execute(_INSERT_EVENT, rows[0]).lastrowid or 0
    else:
        db.executemany(_INSERT_EVENT, rows)
        # One writer connection: the rows just inserted took consecutive ids up to the last one.
        last = int(db.execute("SELECT last_insert_rowid()").fetchone()[0])
    first = last - len(recorded) + 1
    stored = [Event(*fields, first + n) for n, fields in enumerate(recorded)]
    note(db, stored)
    outbox: SQLiteWebhooks | None = getattr(db, "outbox", None)
    if outbox is not None:
        outbox.queue_events(db, stored)
