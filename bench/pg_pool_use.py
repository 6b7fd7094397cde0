"""What one use of the PostgreSQL store's pool costs this process: a one-row statement through
``PostgresStore.fetch`` (acquire, the statement, release), CPU and wall time per use, on a
cluster of its own, beside the same through a pool that sends asyncpg's default reset query
on every release (``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL``: a second
round trip, which the store's pools no longer make). Rounds alternate; medians are printed.

    .venv/bin/python bench/pg_pool_use.py [--uses 3000] [--rounds 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sink.storage.postgres.store import PostgresStore
from tests.pg_cluster import Cluster


async def _per_use(fetch: Callable[[], Awaitable[Any]], uses: int) -> tuple[float, float]:
    """CPU and wall µs per call of ``fetch`` (one statement)."""
    for _ in range(100):
        await fetch()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(uses):
        await fetch()
    return (
        (time.process_time() - cpu) / uses * 1e6,
        (time.perf_counter() - wall) / uses * 1e6,
    )


async def run(dsn: str, uses: int, rounds: int) -> None:
    store = PostgresStore(dsn)
    await store.open()
    resetting = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    figures: dict[str, list[tuple[float, float]]] = {"store": [], "reset": []}
    try:
        for _ in range(rounds):
            figures["store"].append(
                await _per_use(lambda: store.fetch("bench", "SELECT $1::int", 1), uses)
            )
            figures["reset"].append(
                await _per_use(lambda: resetting.fetch("SELECT $1::int", 1), uses)
            )
    finally:
        await resetting.close()
        await store.close()
    for name, label in (
        ("store", "the store's pool (no reset query)"),
        ("reset", "a pool with asyncpg's default reset"),
    ):
        cpu = statistics.median(f[0] for f in figures[name])
        wall = statistics.median(f[1] for f in figures[name])
        print(f"{label}: {cpu:.0f} µs CPU, {wall:.0f} µs wall per use (median of {rounds})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uses", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    cluster = Cluster.create()
    try:
        cluster.start()
        uvloop.run(run(cluster.dsn(), args.uses, args.rounds))  # the server's loop
    finally:
        cluster.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
