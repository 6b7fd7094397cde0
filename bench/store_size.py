"""Does a bigger store slow the agent down? list, wait and claim latency at 10k .. 1M messages.

    .venv/bin/python bench/store_size.py             # 10k, 100k and 1M stored messages
    .venv/bin/python bench/store_size.py --quick     # 10k and 100k
    .venv/bin/python bench/store_size.py --sizes 10000,50000
    .venv/bin/python bench/store_size.py --folder /var/tmp/stores   # keep the stores, reuse them
    RUNSINK_BENCH_STORES=/var/tmp/stores make bench                 # the same, from bench/all.py

Each store is filled through the real SQLite adapter (``SQLiteStore.create_inbox`` and
``save_message``, group commit and all: no hand-made SQL), spread over many runs and
inboxes, ~600-byte messages, in a file of its own. Then one runsink process per size runs
at once, each on its file; each gets a fresh inbox with 200 messages over SMTP; then, over
HTTP on one kept-alive connection per server:
- **list**: `GET /v1/inboxes/{id}/messages?limit=50`, 200 times;
- **wait**: `POST /v1/inboxes/{id}/wait` with `timeout_s` 0 (it finds the oldest
  unclaimed message), then **claim** it, 200 times.
The sizes take turns of 20 operations (the order rotating), so a load that comes and goes
on a shared machine falls on every size alike. The peer is the smallest size: the table
gives p50/p95 and each size's p50 as a ratio of the smallest's (flat = 1.0; the goal is
within 1.2).

Loopback only; bounded loops. Exits 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import (
    SMTPClient,
    delivery_of,
    make_message,
    new_inbox,
    percentile,
    start_runsink,
)

from sink.storage.base import Event, NewInbox
from sink.storage.sqlite.store import SQLiteStore

POLICIES = """
[policy.ci]
poll_interval_s = [0]
poll_budget = 100000
ttl_default_s = 3600
ttl_max_s = 3600
inboxes_per_purpose = 100000
"""
MESSAGES_PER_INBOX = 50
OPERATIONS = 200
SLICE = 20
STORES_ENV = "RUNSINK_BENCH_STORES"  # the default for --folder
_CONCURRENCY = 512


def _raw(address: str, n: int) -> bytes:
    return (
        f"From: App <app@example.test>\r\nTo: <{address}>\r\nSubject: Code {n:06d}\r\n"
        f"Date: Tue, 20 Oct 2026 02:30:00 +0000\r\nMessage-ID: <{n}@example.test>\r\n\r\n"
        f"Hello, your code is {n:06d}. https://app.example.test/verify?t={n}\r\n" + "x" * 400
    ).encode()


async def fill(path: Path, count: int) -> float:
    """Add ``count`` messages through the real store; returns messages per second."""
    store = SQLiteStore(path)
    await store.open()
    started = time.perf_counter()
    try:
        done = 0
        while done < count:
            now = time.time()
            new: NewInbox = new_inbox("fill", now)
            await store.create_inbox(
                new, Event(new.inbox.run_id, "created", now, new.inbox.inbox_id)
            )
            batch = min(MESSAGES_PER_INBOX, count - done)
            raws = [_raw(new.inbox.address, done + i) for i in range(batch)]
            incoming = [delivery_of(new, raw, now) for raw in raws]
            await asyncio.gather(*(store.save_message(item) for item in incoming))
            done += batch
    finally:
        await store.close()
    return count / (time.perf_counter() - started)


@dataclass
class Probe:
    """A fresh inbox with ``OPERATIONS`` messages waiting, on one server."""

    url: str
    run_id: str
    path: str
    timings: dict[str, list[float]] = field(
        default_factory=lambda: {"list": [], "wait": [], "claim": []}
    )


async def prepare(url: str, smtp_port: int) -> Probe:
    run_id = f"probe-{uuid.uuid4().hex[:10]}"
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        created = await http.post("/v1/inboxes", json={"run_id": run_id, "purpose": "probe"})
        inbox = created.json()
    smtp = await SMTPClient.connect(smtp_port)
    message = make_message(inbox["address"], 1024)
    for _ in range(OPERATIONS):
        code = await smtp.send(b"app@example.test", inbox["address"].encode(), message)
        if code != 250:
            raise RuntimeError(f"SMTP answered {code}")
    await smtp.close()
    return Probe(url, run_id, f"/v1/inboxes/{inbox['inbox_id']}")


async def measure_slice(http: httpx.AsyncClient, probe: Probe, count: int) -> None:
    """``count`` lists, then ``count`` wait-and-claim pairs, timed one by one."""
    timings = probe.timings
    for _ in range(count):
        started = time.perf_counter()
        listed = await http.get(f"{probe.path}/messages", params={"limit": 50})
        timings["list"].append((time.perf_counter() - started) * 1000)
        assert listed.status_code == 200, listed.text
    for _ in range(count):
        started = time.perf_counter()
        ask = {"timeout_s": 0, "run_id": probe.run_id}
        waited = await http.post(f"{probe.path}/wait", json=ask)
        timings["wait"].append((time.perf_counter() - started) * 1000)
        body: dict[str, Any] = waited.json()
        if body.get("state") != "received":
            raise RuntimeError(f"unexpected wait answer: {waited.text}")
        started = time.perf_counter()
        claimed = await http.post(
            f"/v1/messages/{body['message']['message_id']}/claim", json={"run_id": probe.run_id}
        )
        timings["claim"].append((time.perf_counter() - started) * 1000)
        assert claimed.status_code == 200, claimed.text


async def measure_interleaved(probes: list[Probe]) -> None:
    """Every size measured in turns of ``SLICE`` operations, the order rotating each round, so
    that whatever else loads the machine meanwhile falls on every size alike."""
    clients = [httpx.AsyncClient(base_url=probe.url, timeout=30) for probe in probes]
    try:
        for turn in range(OPERATIONS // SLICE):
            shift = turn % len(probes)
            for index in [*range(shift, len(probes)), *range(shift)]:
                await measure_slice(clients[index], probes[index], SLICE)
    finally:
        for client in clients:
            await client.aclose()


def filled_store(folder: Path, size: int) -> tuple[Path, float | None]:
    """The folder of a store holding ``size`` messages: filled now (with its fill rate) or
    kept from an earlier ``--keep`` run (rate None)."""
    home = folder / f"size-{size}"
    done = home / "filled"
    if done.exists():
        return home, None
    home.mkdir(parents=True, exist_ok=True)
    print(f"filling {size:,} ...", file=sys.stderr, flush=True)
    rate = asyncio.run(fill(home / "bench.db", size))  # where start_runsink points the server
    done.touch()
    return home, rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10k and 100k only")
    parser.add_argument("--sizes", help="comma-separated stored-message counts, ascending")
    parser.add_argument(
        "--folder", type=Path, help="where the stores live (kept, and reused once filled)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    default = "10000,100000" if args.quick else "10000,100000,1000000"
    sizes = [int(s) for s in (args.sizes or default).split(",")]
    kept = args.folder or (Path(os.environ[STORES_ENV]) if os.environ.get(STORES_ENV) else None)
    folder = kept or Path(tempfile.mkdtemp(prefix="runsink-store-size-"))
    keep = args.keep or kept is not None
    (folder / "policies.toml").parent.mkdir(parents=True, exist_ok=True)
    (folder / "policies.toml").write_text(POLICIES)
    servers = []
    try:
        stores = [filled_store(folder, size) for size in sizes]
        for home, _ in stores:
            servers.append(start_runsink(home, policy_file=folder / "policies.toml"))
        probes = [asyncio.run(prepare(s.url, s.smtp_port)) for s in servers]
        asyncio.run(measure_interleaved(probes))
        megabytes = [(home / "bench.db").stat().st_size / 2**20 for home, _ in stores]
    finally:
        for server in servers:
            server.stop()
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)

    base = probes[0].timings
    print(
        f"store size, load average {os.getloadavg()[0]:.2f}; {OPERATIONS} of each operation, "
        f"every size measured in turns of {SLICE} (the order rotating)"
    )
    print()
    print(
        "| stored messages | DB MB | fill msg/s | list p50/p95 ms | wait p50/p95 ms "
        "| claim p50/p95 ms | p50 vs smallest (list / wait / claim) |"
    )
    print("|---|---|---|---|---|---|---|")
    for size, (_, rate), probe, mb in zip(sizes, stores, probes, megabytes, strict=True):
        timings = probe.timings
        cells = []
        ratios = []
        for op in ("list", "wait", "claim"):
            cells.append(f"{percentile(timings[op], 50):.2f} / {percentile(timings[op], 95):.2f}")
            ratios.append(f"{percentile(timings[op], 50) / percentile(base[op], 50):.2f}")
        shown = "kept" if rate is None else f"{rate:.0f}"
        print(f"| {size:,} | {mb:.0f} | {shown} | {' | '.join(cells)} | {' / '.join(ratios)} |")
    print()
    print("target (issue 13): list, wait and claim p50 within 1.2x of the smallest store")
    return 0


if __name__ == "__main__":
    sys.exit(main())
