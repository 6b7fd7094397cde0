"""How many pages does a delivery's commit write? WAL frames per commit, and whose they are.

    .venv/bin/python bench/commit_pages.py                  # 300 commits of one message
    .venv/bin/python bench/commit_pages.py --per-commit 8   # 8 deliveries sharing each commit

A durable commit appends every page it changed to the WAL and fsyncs it (WAL with
``synchronous=FULL``): the pages per commit are what the 250 waits for, and unlike a rate
they do not move with the machine's load. The store is filled through the real SQLite
adapter (``SQLiteStore``: group commit, the background indexer and all) with ``--prefill``
messages over 20 runs and inboxes, indexed; then ``--commits`` commits of ``--per-commit``
~4 KB messages each (the ingest bench's message) are stored one after another, with the WAL
left to grow (no automatic checkpoint) so that every frame can be read back and attributed
to the table or index owning its page (``dbstat``). Last, the indexer catches up and the
frames of its transactions are counted per message.

Local files only; bounded loops. Exits 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import struct
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import delivery_of, make_message, new_inbox

from sink.storage.base import Event, Incoming, NewInbox
from sink.storage.sqlite.store import SQLiteStore

_WAL_HEADER = 32
_FRAME_HEADER = 24


def _incoming(new: NewInbox, now: float) -> Incoming:
    return delivery_of(new, make_message(new.inbox.address)[:-3], now)  # without the final dot


def _frames(wal: Path, page_size: int) -> int:
    size = wal.stat().st_size if wal.exists() else 0
    return max(0, size - _WAL_HEADER) // (page_size + _FRAME_HEADER)


def _frame_pages(wal: Path, page_size: int, first: int, last: int) -> list[int]:
    """The page number of each frame in [first, last)."""
    pages = []
    with wal.open("rb") as f:
        for frame in range(first, last):
            f.seek(_WAL_HEADER + frame * (page_size + _FRAME_HEADER))
            pages.append(struct.unpack(">I", f.read(4))[0])
    return pages


def _owners(path: Path) -> dict[int, str]:
    db = sqlite3.connect(path)
    try:
        return {
            int(page): str(name) for name, page in db.execute("SELECT name, pageno FROM dbstat")
        }
    finally:
        db.close()


async def measure(
    folder: Path, prefill: int, commits: int, per_commit: int, page_size: int | None
) -> dict[str, object]:
    path = folder / "pages.db"
    wal = Path(f"{path}-wal")
    if page_size is not None:  # a new file's page size holds once its first table is made
        with sqlite3.connect(path) as db:
            db.execute(f"PRAGMA page_size = {page_size}")
            db.execute("PRAGMA journal_mode = WAL")
    store = SQLiteStore(path)
    await store.open()
    try:
        now = time.time()
        inboxes = []
        for _ in range(20):
            new: NewInbox = new_inbox("pages", now)
            await store.create_inbox(
                new, Event(new.inbox.run_id, "created", now, new.inbox.inbox_id)
            )
            inboxes.append(new)
        for start in range(0, prefill, 256):
            batch = [
                _incoming(inboxes[i % 20], now) for i in range(start, min(prefill, start + 256))
            ]
            await asyncio.gather(*(store.save_message(item) for item in batch))
        await store.indexer.caught_up()
        page_size = int((await store._read("PRAGMA page_size"))[0][0])
        timings: list[float] = []
        # Every frame stays readable: no checkpoint moves the WAL back to its start.
        await store._writer.statement("PRAGMA wal_autocheckpoint = 0")
        await store._writer.statement("PRAGMA wal_checkpoint(TRUNCATE)")
        per: list[int] = []
        spans: list[tuple[int, int]] = []
        for n in range(commits):
            before = _frames(wal, page_size)
            batch = [_incoming(inboxes[(n * per_commit + i) % 20], now) for i in range(per_commit)]
            started = time.perf_counter()
            await asyncio.gather(*(store.save_message(item) for item in batch))
            timings.append(time.perf_counter() - started)
            after = _frames(wal, page_size)
            per.append(after - before)
            spans.append((before, after))
        owners = _owners(path)
        whose: Counter[str] = Counter()
        for first, last in spans:
            for page in _frame_pages(wal, page_size, first, last):
                whose[owners.get(page, "(pointer map or free page)")] += 1
        indexed_from = _frames(wal, page_size)
        await store.indexer.caught_up()
        index_frames = _frames(wal, page_size) - indexed_from
    finally:
        await store.close()
    return {
        "page_size": page_size,
        "per_commit": per,
        "timings": timings,
        "whose": whose,
        "index_frames": index_frames,
        "messages": commits * per_commit,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prefill", type=int, default=2000, help="messages stored first")
    parser.add_argument("--commits", type=int, default=300, help="commits measured")
    parser.add_argument("--per-commit", type=int, default=1, help="deliveries in each commit")
    parser.add_argument("--page-size", type=int, help="a page size for the new file (bytes)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="runsink-pages-") as folder:
        found = asyncio.run(
            measure(Path(folder), args.prefill, args.commits, args.per_commit, args.page_size)
        )
    per = found["per_commit"]
    assert isinstance(per, list)
    whose = found["whose"]
    assert isinstance(whose, Counter)
    messages = found["messages"]
    assert isinstance(messages, int)
    print(
        f"page size {found['page_size']} B; {args.commits} commits of {args.per_commit} "
        f"~4 KB message(s), after {args.prefill} stored"
    )
    print(
        f"WAL frames per commit: mean {statistics.mean(per):.2f}, median "
        f"{statistics.median(per):g}, min {min(per)}, max {max(per)}; "
        f"per message {sum(per) / messages:.2f}"
    )
    timings = found["timings"]
    assert isinstance(timings, list)
    ms = sorted(t * 1000 for t in timings)
    print(
        f"save_message (commit and fsync) ms: p50 {statistics.median(ms):.2f}, "
        f"p90 {ms[int(len(ms) * 0.9)]:.2f}; load average {os.getloadavg()[0]:.2f}"
    )
    print("\n| owner of the page | frames per commit |\n|---|---|")
    for name, count in whose.most_common():
        print(f"| {name} | {count / args.commits:.2f} |")
    print()
    index_frames = found["index_frames"]
    assert isinstance(index_frames, int)
    print(f"indexer, catching up afterwards: {index_frames / messages:.2f} frames per message")


if __name__ == "__main__":
    main()
