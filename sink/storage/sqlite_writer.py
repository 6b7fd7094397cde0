"""The SQLite writer: one connection on one thread of its own; a transaction is one call.

Every write transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``) runs as a single function
on the writer thread, so it costs one hop between the event loop and the thread, not
one per statement, and no coroutine can interleave with it. The fsync happens on that
thread, never on the event loop. A caller that gives up before its turn comes cancels
the whole transaction; one that gives up later lets it finish: there is never a
transaction half done.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from sink.errors import StorageError

T = TypeVar("T")

# Durability: WAL with synchronous=FULL fsyncs the log at every commit, so a commit
# survives a process crash and a power loss (https://www.sqlite.org/pragma.html#pragma_synchronous).
CONNECTION_PRAGMAS = (
    "PRAGMA synchronous = FULL",
    "PRAGMA busy_timeout = 5000",
    "PRAGMA foreign_keys = OFF",
)


class Writer:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-writer")
        self._db: sqlite3.Connection | None = None

    async def open(self, setup: Callable[[sqlite3.Connection], None]) -> None:
        def connect() -> None:
            db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            db.row_factory = sqlite3.Row
            for pragma in CONNECTION_PRAGMAS:
                db.execute(pragma)
            setup(db)
            self._db = db

        await self._call(connect)

    async def transaction(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` inside ``BEGIN IMMEDIATE`` ... ``COMMIT`` on the writer thread."""
        return await self._call(lambda: self._in_transaction(work))

    async def statement(self, sql: str) -> None:
        """A statement outside any transaction (maintenance such as incremental_vacuum)."""

        def run() -> None:
            self._connection().execute(sql)

        await self._call(run)

    async def close(self) -> None:
        def close() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        try:
            await self._call(close)
        finally:
            # The worker is idle now (close ran last); do not block the loop joining it.
            self._executor.shutdown(wait=False)

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise StorageError("the store is closed")
        return self._db

    def _in_transaction(self, work: Callable[[sqlite3.Connection], T]) -> T:
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            result = work(db)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return result

    async def _call(self, fn: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn)
        except sqlite3.Error as exc:
            raise StorageError(f"write failed: {exc}") from exc
        except RuntimeError as exc:  # the executor was shut down
            raise StorageError("the store is closed") from exc
