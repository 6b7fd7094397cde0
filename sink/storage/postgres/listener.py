"""Wake-ups across replicas: a dedicated LISTEN connection per replica.

The delivering transaction NOTIFYs ``runsink`` with the inbox ids, delivered at COMMIT
(``batch.py``); other kinds say an inbox was created ("c") or ended ("e") elsewhere, and
"v" that event rows committed (``feed.py`` reads them). On every (re)connect the listener
wakes every wait it holds, so that a notification lost while it was down costs latency,
never a wake-up.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import asyncpg

from sink.logs import warn
from sink.nearmiss import LiveAddress
from sink.storage.base import WakeTarget
from sink.storage.postgres.driver import CHANNEL, CONNECT_TIMEOUT_S, DRIVER_ERRORS, Record
from sink.storage.postgres.feed import EventFeed

if TYPE_CHECKING:
    from sink.storage.postgres.driver import Connection

_LISTENER_CHECK_S = 2.0


class Followed(Protocol):
    """The store's caches the listener keeps (``store.py``): routes and near misses."""

    def ended(self, inbox_ids: list[str]) -> None: ...

    def created(self, live: LiveAddress) -> None: ...

    def forget_routes(self) -> None: ...

    async def reload_live(self, connection: Connection) -> None: ...


class Ends:
    """The listener's target: the waiters, and the store's caches beside them."""

    def __init__(self, target: WakeTarget, store: Followed) -> None:
        self._target = target
        self._store = store

    def wake(self, inbox_ids: Iterable[str]) -> None:
        self._target.wake(inbox_ids)

    def end(self, inbox_ids: Iterable[str]) -> None:
        ids = list(inbox_ids)
        self._store.ended(ids)
        self._target.end(ids)

    def created(self, live: LiveAddress) -> None:
        """Another replica created an inbox: near misses of it are found here too."""
        self._store.created(live)

    def watched(self) -> list[str]:
        # Called on every (re)connect: what was announced meanwhile is unknown, so every
        # cached route goes too.
        self._store.forget_routes()
        return self._target.watched()

    async def caught_up(self, connection: Connection) -> None:
        """On every (re)connect: creates and ends announced meanwhile are unknown, so the
        near-miss index becomes the live inboxes as the database has them now."""
        await self._store.reload_live(connection)


class Listener:
    """A dedicated LISTEN connection: other replicas' deliveries wake this replica's waits.

    On every (re)connect it wakes every wait this replica holds (each re-reads the store
    beyond its cursor), and ends those whose inbox expired meanwhile: a notification lost
    while the connection was down costs latency, never a wake-up. A check every
    ``_LISTENER_CHECK_S`` notices a connection that died without a word.
    """

    def __init__(
        self,
        dsn: str,
        replica_id: str,
        target: Ends,
        feed: EventFeed | None = None,
        on_deliveries: Callable[[], None] | None = None,
    ) -> None:
        self._dsn = dsn
        self._on_deliveries = on_deliveries  # "db h": some commit queued webhook deliveries
        self._replica_id = replica_id
        self._target = target
        self._feed = feed  # every replica's live events (this one's too), read on this connection
        self._idle = asyncio.Event()  # never set without a feed
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="postgres-listener")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _on_notify(self, _connection: Any, _pid: int, _channel: str, payload: object) -> None:
        sender, _, rest = str(payload).partition(" ")
        kind, _, ids = rest.partition(" ")
        if kind == "v":  # event rows committed, by any replica (feed.py)
            if self._feed is not None:
                self._feed.announced(ids)
            return
        if kind == "h":  # webhook deliveries queued, by any replica (webhooks.py)
            if self._on_deliveries is not None:
                self._on_deliveries()
            return
        if sender == self._replica_id:
            return  # this replica already woke its own waits after its commit
        if kind == "c":
            self._target.created(_live_from_payload(ids))
            return
        inbox_ids = ids.split(",") if ids else []
        if kind == "e":
            self._target.end(inbox_ids)
        else:
            self._target.wake(inbox_ids)

    async def _run(self) -> None:
        backoff = 0.05
        while True:
            connection: asyncpg.Connection[Record] | None = None
            lost = asyncio.Event()
            try:
                connection = await asyncpg.connect(
                    self._dsn,
                    timeout=CONNECT_TIMEOUT_S,
                    server_settings={"application_name": "runsink-listener"},
                )
                connection.add_termination_listener(partial(_set_on_termination, lost))
                await connection.add_listener(CHANNEL, self._on_notify)
                await self._catch_up(connection)
                self.connected.set()
                backoff = 0.05
                work = self._feed.work if self._feed is not None else self._idle
                while not lost.is_set():
                    if self._feed is not None and self._feed.pending:
                        await self._feed.pull(connection)
                        continue
                    if not await _either(lost, work, _LISTENER_CHECK_S):
                        await connection.fetchval("SELECT 1", timeout=_LISTENER_CHECK_S)
            except DRIVER_ERRORS:
                pass  # the database is away: reconnect below, and catch up then
            except Exception as exc:  # the listener must outlive anything: wake-ups depend on it
                warn("listener_failed", error=type(exc).__name__)
            finally:
                self.connected.clear()
                if connection is not None:
                    connection.terminate()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def _catch_up(self, connection: Connection) -> None:
        if self._feed is not None:  # the events first: the wake-ups below come after them
            await self._feed.reconnected(connection)
        await self._target.caught_up(connection)
        watched = self._target.watched()
        if not watched:
            return
        rows = await connection.fetch(
            "SELECT inbox_id FROM inboxes WHERE inbox_id = ANY($1::text[])"
            " AND (state = 'expired' OR released_at IS NOT NULL)",
            watched,
        )
        ended = [r[0] for r in rows]
        self._target.end(ended)
        self._target.wake(watched)


def _live_from_payload(text: str) -> LiveAddress:
    """A "c" notification's inbox (``_created_payload``)."""
    inbox_id, run_id, address, created_at, expires_at = text.split(" ")
    return LiveAddress(inbox_id, run_id, address, float(created_at), float(expires_at))


def _set_on_termination(lost: asyncio.Event, _connection: object) -> None:
    lost.set()


async def _either(a: asyncio.Event, b: asyncio.Event, within_s: float) -> bool:
    """Until either event is set (True) or ``within_s`` seconds pass (False)."""
    if a.is_set() or b.is_set():
        return True
    waits = {asyncio.ensure_future(a.wait()), asyncio.ensure_future(b.wait())}
    try:
        done, _ = await asyncio.wait(waits, timeout=within_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
    return bool(done)
