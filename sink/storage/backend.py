"""The storage backend: one bundle of what a backend is and offers, chosen by URL here.

``open_backend`` is the one place that picks an adapter: a ``postgresql://`` URL is
PostgreSQL (asyncpg is imported only then), anything else the SQLite file. Tests hand the
runtime the memory backend instead (``sink/storage/memory.py``'s ``memory_backend``). What a
backend offers beyond the ports (``Store``, ``Maintenance``, the mail ports) is data on the
bundle, never a question asked of the store's type:

- ``poll_slots``: each inbox's one wait in progress kept in the database, fleet-wide (the
  agent keeps it in memory without);
- ``fleet_breakers``: breaker state shared by every replica (the guard keeps it in memory
  without; the sweeper forgets untouched ones);
- ``feed``: the database's feed of every replica's commits, which wakes this process's waits
  and publishes its live events; ``feed_announces_commits`` when that feed announces every
  commit, stored and caught mail included (then ingest announces none);
- ``sweeper_turn``: whose turn it is to sweep, when replicas share the database.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sink.storage.base import Event, LiveTarget, PollSlots, RunIndex, Storage, WakeTarget

if TYPE_CHECKING:
    from sink.config import Settings
    from sink.guard import FleetBreakers
    from sink.mailbox import MailStore
    from sink.webhooks.port import WebhookStore


class Feed(Protocol):
    """A shared database's feed of every replica's commits (PostgreSQL's LISTEN/NOTIFY)."""

    def follow(self, target: WakeTarget, live: LiveTarget | None = None) -> None:
        """Wake ``target``'s waits on any replica's mail (end them on expiry), and publish
        every replica's committed events to ``live``, in commit order."""


class Announced(Protocol):
    """Where a backend announces the events it commits (the live-event hub)."""

    def record(self, events: list[Event]) -> None: ...


@contextlib.asynccontextmanager
async def _always_mine() -> AsyncIterator[bool]:
    """One process alone with its store: every round is its turn to sweep."""
    yield True


@dataclass(frozen=True, slots=True)
class Backend:
    """One opened storage backend: its stores, and what it offers, as data."""

    name: str  # "sqlite", "postgresql" or "memory"
    store: Storage  # the domain's port and the sweeper's
    mail: MailStore  # caught mail, search and the Mailpit subset (the v2 mail ports)
    webhooks: WebhookStore  # webhooks and their outbox (written with the events it carries)
    runs: RunIndex  # views across runs, for the web UI
    poll_slots: PollSlots | None = None
    fleet_breakers: FleetBreakers | None = None
    feed: Feed | None = None
    feed_announces_commits: bool = False
    sweeper_turn: Callable[[], AbstractAsyncContextManager[bool]] = field(default=_always_mine)


Opener = Callable[["Settings", Announced], Backend]
"""How the runtime gets its backend: ``open_backend``, or ``memory_backend`` in tests."""


def open_backend(settings: Settings, hub: Announced) -> Backend:
    """The backend ``--db`` names: PostgreSQL for a postgresql:// URL, else the SQLite file.

    Nothing is opened yet: the runtime opens ``store`` (and starts ``feed``) in order.
    """
    if settings.db_url is not None:
        return _postgres(settings.db_url)
    return _sqlite(settings.db, hub)


def _postgres(url: str) -> Backend:
    from sink.storage.postgres.store import PostgresStore  # brings asyncpg: only for this URL

    store = PostgresStore(url)
    # Live events come from the database's feed (``feed.follow``): every replica's, this
    # one's included, in commit order, so all replicas show one order.
    return Backend(
        name="postgresql",
        store=store,
        mail=store.mail,
        webhooks=store.webhooks,
        runs=store.runs,
        poll_slots=store.slots,
        fleet_breakers=store.breakers,
        feed=store,
        feed_announces_commits=True,
        sweeper_turn=store.sweeper_turn,
    )


def _sqlite(path: Path, hub: Announced) -> Backend:
    from sink.storage.sqlite.store import SQLiteStore

    store = SQLiteStore(path, hub.record)
    return Backend(
        name="sqlite", store=store, mail=store.mail, webhooks=store.webhooks, runs=store.runs
    )
