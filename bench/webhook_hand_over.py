"""What the PostgreSQL hand-off costs a mail batch: the batch's own statement of one message
without the hand-off and with it (its check, and the hand-off statement when a webhook wants
the run), alternating in rolled-back transactions (no commit wait), median of the calls; with
no webhook, with a webhook of another run, and with one of the message's run. On a cluster
of its own.

    .venv/bin/python bench/webhook_hand_over.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sink import ids
from sink.storage.postgres.batch import insert_batch
from sink.storage.postgres.store import PostgresStore
from tests.pg_cluster import Cluster
from tests.support import new_webhook
from tests.test_storage import created_event, incoming, new_inbox

RUN = "bench-run"


async def measure(dsn: str, hook_run: str | None, calls: int) -> dict[str, float]:
    """Median microseconds of insert_batch of one message: as before the hand-off (plain), and
    with it (handing: asking, and handing over when a webhook wants the run)."""
    store = PostgresStore(dsn)
    await store.open()
    store.webhooks.hand = lambda dues: None  # a worker's hand: what makes the store hand over
    try:
        if hook_run is not None:
            await store.webhooks.create_webhook(new_webhook(events=("message",), run_id=hook_run))
        new = new_inbox(RUN, key=ids.new_inbox_id())
        await store.create_inbox(new, created_event(new))
        item = incoming(new.inbox)
        times: dict[str, list[float]] = {"plain": [], "handing": []}
        async with store.pool.acquire() as db:
            for n in range(2 * calls):
                kind = "plain" if n % 2 == 0 else "handing"
                store.webhooks.notified()  # as if a webhook may exist: the check is made
                hooks = store.webhooks if kind == "handing" else None
                transaction = db.transaction()
                await transaction.start()
                started = time.perf_counter()
                await insert_batch(db, [item], store.replica_id, hooks)
                times[kind].append(time.perf_counter() - started)
                await transaction.rollback()
        return {k: statistics.median(v) * 1e6 for k, v in times.items()}
    finally:
        await store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls of each kind per case")
    args = parser.parse_args(argv)
    cluster = Cluster.create()
    cluster.start()
    try:
        print(f"insert_batch of one message, median of {args.calls} calls, rolled back (µs):")
        print("| webhooks | without the hand-off | with it |")
        print("|---|---:|---:|")
        for label, hook_run in (
            ("none", None),
            ("one of another run", "another-run"),
            ("one of the message's run", RUN),
        ):
            got = asyncio.run(measure(cluster.dsn(cluster.new_database()), hook_run, args.calls))
            print(f"| {label} | {got['plain']:.0f} | {got['handing']:.0f} |")
    finally:
        cluster.destroy()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
