"""What finding a dead replica's leases costs on PostgreSQL, beside a week of settled history
and a backlog of pending retries: the plan and median time of the full look (``_RECLAIM``:
every pending row against the presence locks in pg_locks, what a worker starting runs), the
median time of a ``reclaim`` that frees nothing (what every worker pays once a second: one
read of the locks while no holder went), and of a ``resume``; on a cluster of its own.

    .venv/bin/python bench/webhook_reclaim.py [--settled 20000] [--pending 1000] [--calls 100]
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


async def _rows(store: PostgresStore, hook: str, state: str, count: int, at: float) -> None:
    await store.fetch(
        "bench",
        "INSERT INTO webhook_deliveries (delivery_id, webhook_id, kind, created_at, state,"
        " attempts, next_attempt_at) SELECT 'dlv_' || $2 || '_' || g, $1, 'ping', $3, $2, 1,"
        " $4 FROM generate_series(1, $5) g",
        hook,
        state,
        at - 3600,
        at,
        count,
    )


async def _median_ms(calls: int, call: object) -> float:
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


async def main(args: argparse.Namespace) -> None:
    cluster = Cluster.create()
    try:
        cluster.start()
        live, other = PostgresStore(cluster.dsn()), PostgresStore(cluster.dsn())
        await live.open()
        await other.open()
        try:
            hook = new_webhook()
            await live.webhooks.create_webhook(hook)
            now = clock.now()
            await _rows(live, hook.webhook_id, "delivered", args.settled, now)
            await _rows(live, hook.webhook_id, "pending", args.pending, now + 600)
            await live.webhooks.resume(now)  # its presence lock; the retries due now
            await live.fetch(
                "bench",
                "UPDATE webhook_deliveries SET lease_until = $1, lease_holder = $2 "
                "WHERE seq IN (SELECT seq FROM webhook_deliveries WHERE state = 'pending' "
                "LIMIT 8)",
                now + 600,
                live.webhooks.holder,
            )
            await other.webhooks.resume(now)
            await live.fetch("bench", "ANALYZE webhook_deliveries")
            plan = await live.fetch(
                "explain", "EXPLAIN (ANALYZE, COSTS OFF) " + pg_webhooks._RECLAIM, now
            )
            print("-- _RECLAIM")
            for row in plan:
                print("  ", row[0])
            full_ms = await _median_ms(
                args.calls, lambda: other.fetch("bench", pg_webhooks._RECLAIM, clock.now())
            )
            reclaim_ms = await _median_ms(args.calls, lambda: other.webhooks.reclaim(clock.now()))

            times = []
            for _ in range(max(1, args.calls // 10)):
                await live.fetch(
                    "bench",
                    "UPDATE webhook_deliveries SET next_attempt_at = $1 WHERE state = 'pending'",
                    clock.now() + 600,
                )
                started = time.perf_counter()
                await other.webhooks.resume(clock.now())
                times.append(time.perf_counter() - started)
            resume_ms = statistics.median(times) * 1000
            print(
                f"{args.settled} settled, {args.pending} pending (8 leased by a live replica),"
                f" median of {args.calls} calls:"
            )
            print(f"the full look (_RECLAIM, frees nothing) {full_ms:.3f} ms")
            print(f"reclaim (no holder went, frees nothing) {reclaim_ms:.3f} ms")
            print(f"resume ({args.pending} retries made due) {resume_ms:.3f} ms")
        finally:
            await other.close()
            await live.close()
    finally:
        cluster.destroy()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--settled", type=int, default=20000)
    parser.add_argument("--pending", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=100)
    asyncio.run(main(parser.parse_args()))
