"""The worker's reads on PostgreSQL beside a week of settled history: the plans of take_due's
two queries and of next_due (EXPLAIN ANALYZE), and the median time of a take_due of 3 due
deliveries and of a next_due, on a cluster of its own.

    .venv/bin/python bench/webhook_take_due.py [--settled 20000] [--calls 100]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sink import clock
from sink.storage.postgres import webhooks as pg_webhooks
from sink.storage.postgres.store import PostgresStore
from tests.pg_cluster import Cluster
from tests.support import new_webhook


async def _explain(store: PostgresStore, now: float, hooks: list[str]) -> None:
    await store.fetch(
        "bench", "UPDATE webhook_deliveries SET lease_until = 0 WHERE state = 'pending'"
    )
    for name, sql, args in (
        ("_DUE_HOOKS", pg_webhooks._DUE_HOOKS, (now, 64)),
        ("_DUE", pg_webhooks._DUE, (now, hooks, 64)),
        ("_NEXT_DUE", pg_webhooks._NEXT_DUE, (now,)),
    ):
        rows = await store.fetch("explain", "EXPLAIN (ANALYZE, COSTS OFF) " + sql, *args)
        print(f"-- {name}")
        for row in rows:
            print("  ", row[0])


async def _median_ms(store: PostgresStore, calls: int) -> float:
    times = []
    for _ in range(calls):
        await store.fetch(
            "bench", "UPDATE webhook_deliveries SET lease_until = 0 WHERE state = 'pending'"
        )
        started = time.perf_counter()
        taken = await store.webhooks.take_due(clock.now(), 64)
        times.append(time.perf_counter() - started)
        assert len(taken) == 3, len(taken)
    return statistics.median(times) * 1000


async def main(args: argparse.Namespace) -> None:
    cluster = Cluster.create()
    try:
        cluster.start()
        store = PostgresStore(cluster.dsn())
        await store.open()
        try:
            hooks = [new_webhook() for _ in range(3)]
            for hook in hooks:
                await store.webhooks.create_webhook(hook)
            now = clock.now()
            for i, hook in enumerate(hooks):  # the week of history: most of it one webhook's
                await store.fetch(
                    "bench",
                    "INSERT INTO webhook_deliveries (delivery_id, webhook_id, kind, created_at,"
                    " state, attempts, next_attempt_at) SELECT 'dlv_old_' || $2 || '_' || g, $1,"
                    " 'ping', $3, 'delivered', 1, $3 FROM generate_series(1, $4) g",
                    hook.webhook_id,
                    str(i),
                    now - 3600,
                    args.settled * (8 if i == 0 else 1) // 10,
                )
                await store.webhooks.enqueue_ping(hook.webhook_id, now)
            await store.fetch("bench", "ANALYZE webhook_deliveries")
            ids = [h.webhook_id for h in hooks]
            await _explain(store, clock.now(), ids)
            take_ms = await _median_ms(store, args.calls)
            times = []
            for _ in range(args.calls):
                started = time.perf_counter()
                await store.webhooks.next_due(clock.now())
                times.append(time.perf_counter() - started)
            print(f"{args.settled} settled deliveries, median of {args.calls} calls:")
            print(f"take_due (3 due) {take_ms:.3f} ms")
            print(f"next_due {statistics.median(times) * 1000:.3f} ms")
        finally:
            await store.close()
    finally:
        cluster.destroy()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--settled", type=int, default=20000)
    parser.add_argument("--calls", type=int, default=100)
    asyncio.run(main(parser.parse_args()))
