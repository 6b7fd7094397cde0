"""The near-miss lookup per caught mail, at 100, 1,000 and 10,000 live inboxes.

    .venv/bin/python bench/near_miss.py            # 100, 1,000 and 10,000 live inboxes
    .venv/bin/python bench/near_miss.py --quick    # 100 and 1,000

What a store does for each caught mail (``sink/nearmiss.py``'s ``NearIndex.find``): the
deletion variants of the caught local part, one dictionary look-up each, then the true
distance of the few candidates. Measured in this process, on the index alone (no database,
no SMTP), for three kinds of caught mail: a typo of a live inbox's address (a hit), an
unrelated address of the same length and domain (the common miss), and a short address of
another domain (``someone@gmail.com``). Beside it, for contrast, the cost of the scan the
index replaces: the distance to every live inbox. Also: the time to add an inbox to the
index (a create) and the index's memory per live inbox (tracemalloc). Figures are the
median of ``--rounds`` rounds of ``--lookups`` look-ups each.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import string
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sink.nearmiss import MAX_EDITS, LiveAddress, NearIndex, osa_distance

DOMAIN = "sink.test"
ALPHABET = string.ascii_lowercase + "234567"  # the base32 of generated local parts


def _local(rng: random.Random) -> str:
    return "r" + "".join(rng.choice(ALPHABET) for _ in range(20))


def _live(rng: random.Random, count: int) -> list[LiveAddress]:
    return [
        LiveAddress(f"ib_{n}", "run", f"{_local(rng)}@{DOMAIN}", 0.0, 1e12) for n in range(count)
    ]


def _per_call_us(work: Callable[[], object], calls: int, rounds: int) -> float:
    timings = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            work()
        timings.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(timings)


def _scan(live: list[LiveAddress], recipient: str) -> list[str]:
    """What the index replaces: the distance to every live inbox."""
    local = recipient.partition("@")[0]
    return [a.inbox_id for a in live if osa_distance(local, a.local_part) <= MAX_EDITS]


def measure(count: int, lookups: int, rounds: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    live = _live(rng, count)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    traced = NearIndex()
    for item in live:
        traced.add(item)
    grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    del traced
    index = NearIndex()  # built again untraced, for the time an add takes
    started = time.perf_counter()
    for item in live:
        index.add(item)
    add_us = (time.perf_counter() - started) / count * 1e6
    target = live[count // 2].local_part
    typo = f"{target[:7]}{target[8]}{target[7]}{target[9:]}@{DOMAIN}"  # two letters swapped
    unrelated = f"{_local(rng)}@{DOMAIN}"
    short = "someone@gmail.com"
    assert [f.inbox_id for f in index.find([typo], 1.0)] == [live[count // 2].inbox_id]
    scan_calls = max(1, min(lookups, 200_000 // count))
    return {
        "inboxes": count,
        "typo_us": _per_call_us(lambda: index.find([typo], 1.0), lookups, rounds),
        "unrelated_us": _per_call_us(lambda: index.find([unrelated], 1.0), lookups, rounds),
        "short_us": _per_call_us(lambda: index.find([short], 1.0), lookups, rounds),
        "scan_us": _per_call_us(lambda: _scan(live, unrelated), scan_calls, rounds),
        "add_us": add_us,
        "bytes_per_inbox": grown / count,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 and 1,000 live inboxes only")
    parser.add_argument("--lookups", type=int, default=2000, help="look-ups per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    counts = [100, 1_000] if args.quick else [100, 1_000, 10_000]
    load = os.getloadavg()[0]
    print(
        f"NearIndex.find per caught recipient, in process, median of {args.rounds} rounds of "
        f"{args.lookups} look-ups (load average {load:.1f}); scan: the distance to every inbox."
    )
    print()
    print("| live inboxes | typo µs | unrelated µs | gmail.com µs | scan µs | add µs | KiB/inbox |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for count in counts:
        row = measure(count, args.lookups, args.rounds, args.seed)
        print(
            f"| {count:,} | {row['typo_us']:.1f} | {row['unrelated_us']:.1f} "
            f"| {row['short_us']:.1f} | {row['scan_us']:,.1f} | {row['add_us']:.1f} "
            f"| {row['bytes_per_inbox'] / 1024:.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
