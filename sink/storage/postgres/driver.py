"""The driver's edge, for every module of the PostgreSQL adapter: asyncpg's types, its
errors translated into ours, the notification channel, and the events a transaction wrote.

Driver errors never leave the adapter: a full disk becomes ``StoreFull``, a write's own
bad data (SQLSTATE classes 22, 23) ``StorageError``, and everything else the driver raises
(its whole tree, client-side errors included) ``StorageUnavailable``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

import asyncpg

from sink.errors import StorageError, StorageUnavailable, StoreFull
from sink.storage.base import Event
from sink.storage.postgres.space import DISK_FULL

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

T = TypeVar("T")
Record = asyncpg.Record
if TYPE_CHECKING:  # the driver's classes are generic only in its stubs
    Connection: TypeAlias = asyncpg.Connection[Record] | PoolConnectionProxy[Record]

CHANNEL = "runsink"
NOTIFY_IDS_PER_PAYLOAD = 200  # a NOTIFY payload is at most 8000 bytes
CONNECT_TIMEOUT_S = 5.0
NAMED = {"application_name": "runsink"}


class Database(Protocol):
    """The store's two ways to the database, for the modules beside it (mail, runs, breakers,
    webhooks)."""

    async def fetch(self, what: str, sql: str, *args: Any) -> list[Record]:
        """One statement on the pool, its errors translated (``what`` names it)."""

    async def transaction(self, what: str, work: Callable[[Connection], Awaitable[T]]) -> T:
        """``work`` in one transaction; it returns after COMMIT (then its events are told)."""


def is_postgres_url(text: str) -> bool:
    return text.startswith(("postgresql://", "postgres://"))


# SQLSTATE classes that are about the data a statement was given (22: data exception, 23:
# integrity constraint): the one write is wrong, not the database (a batch retries alone).
_DATA_CLASSES = ("22", "23")


def translate(exc: BaseException, what: str) -> StorageError:
    """Every driver error is ours: a full store, one write's own fault (``StorageError``), or
    the database unavailable, which is everything else asyncpg can raise, on the server's side
    (shutdown, restart, a standby) or the client's (``InterfaceError``, ``InternalClientError``
    as in a ``pg_ctl stop -m fast``, a reset socket)."""
    if isinstance(exc, StorageError):
        return exc
    state = getattr(exc, "sqlstate", None) or ""
    if state == DISK_FULL:
        return StoreFull(f"{what}: the database has no space left")
    if isinstance(exc, asyncpg.PostgresError) and state.startswith(_DATA_CLASSES):
        return StorageError(f"{what} failed ({type(exc).__name__}: {state})")
    return StorageUnavailable(f"{what}: the database is unavailable ({type(exc).__name__})")


DRIVER_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,  # ConnectionError included
    EOFError,  # asyncio.IncompleteReadError: the server went away mid-message
    TimeoutError,
)


@contextlib.asynccontextmanager
async def translated(what: str) -> AsyncIterator[None]:
    try:
        yield
    except DRIVER_ERRORS as exc:
        raise translate(exc, what) from exc


# The events a transaction wrote, told to ``on_events`` once it commits (dropped with a
# rollback). Set by the store's ``transaction`` (``writing``) for the task running it.
_WRITTEN: ContextVar[list[Event] | None] = ContextVar("runsink_pg_written", default=None)


@contextlib.contextmanager
def writing() -> Iterator[list[Event]]:
    """Collect the events this task's transaction notes (``noted``) until it ends."""
    written: list[Event] = []
    token = _WRITTEN.set(written)
    try:
        yield written
    finally:
        _WRITTEN.reset(token)


def noted(events: list[Event]) -> None:
    """Inside a transaction: these events are told to ``on_events`` once it commits."""
    written = _WRITTEN.get()
    if written is not None:
        written.extend(events)


def event_tuples(events: Iterable[Event]) -> list[tuple[Any, ...]]:
    """Events as rows of the ``events`` table's columns."""
    return [
        (e.run_id, e.inbox_id, e.message_id, e.at, e.type, json.dumps(e.detail)) for e in events
    ]


def unnest_columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """Rows as columns, for ``unnest`` of parallel arrays (empty rows: empty columns)."""
    return [[row[i] for row in rows] for i in range(width)]


async def insert_events(db: Connection, events: Iterable[Event]) -> None:
    """Inside a transaction: write ``events`` (told to ``on_events`` once it commits)."""
    events = list(events)
    noted(events)
    rows = [
        (e.run_id, e.inbox_id, e.message_id, e.at, e.type, json.dumps(e.detail)) for e in events
    ]
    if rows:
        await db.executemany(
            "INSERT INTO events (run_id, inbox_id, message_id, at, type, detail_json) "
            "VALUES ($1, $2, $3, $4, $5, $6)",
            rows,
        )
