"""PostgreSQL benchmark: runsink on PostgreSQL (one replica, two) beside SQLite and a bare sink.

    .venv/bin/python bench/postgres.py            # the full run (about 2 minutes)
    .venv/bin/python bench/postgres.py --quick    # a smoke run (< 40 s)

What it measures, all in the same run on this machine:
- SMTP ingest, messages/s, ~4 KB messages over 8 reused connections: a bare aiosmtpd sink,
  runsink on SQLite, runsink on PostgreSQL (one replica), and two runsink replicas on one
  PostgreSQL (4 connections to each at once; the figure is their sum). Every 250 is durable.
- cross-replica wake latency: a long-poll held on replica B, a message sent to replica A;
  from A's 250 to B's answer (p50/p99).
- cross-replica live event latency: a GET /v1/events reader on replica B, a message sent to
  replica A; from A's 250 to the ``message`` event on B's stream (p50/p99; one message at a
  time, paced past the stream's 0.1 s rest after a write).
- long-poll memory: the RSS a runsink process grows by per 1,000 waits in progress, on
  SQLite and on PostgreSQL.

It starts its own PostgreSQL (tests/pg_cluster.py: Debian's initdb/pg_ctl, fsync=on) on a
free loopback port and removes it at the end. It reports; it does not judge.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import (  # the bench folder is not a package: see sys.path above
    ServerProcess,
    SMTPClient,
    make_message,
    median,
    percentile,
    run_sender,
    start_bare_sink,
    start_runsink,
)

from tests.pg_cluster import Cluster  # the same server the test suite starts

MESSAGE_BYTES = 4096
CONNECTIONS = 8
POLICIES = """
[policy.bench]
poll_interval_s = [0]
poll_budget = 100000
ttl_default_s = 3600
ttl_max_s = 3600
long_poll_max_s = 60
inboxes_per_purpose = 100000
"""


def create_inbox(server: ServerProcess, run_id: str | None = None, **body: Any) -> dict[str, Any]:
    payload = {
        "run_id": run_id or f"bench-{uuid.uuid4().hex[:12]}",
        "purpose": "ingest",
        "policy": "bench",
        **body,
    }
    with httpx.Client(base_url=server.url, timeout=30) as client:
        response = client.post("/v1/inboxes", json=payload)
    if response.status_code != 201:
        raise RuntimeError(f"cannot create an inbox: {response.status_code} {response.text}")
    created: dict[str, Any] = response.json()
    return created


def ingest(targets: list[tuple[ServerProcess, str]], duration: float) -> float:
    """Messages/s over CONNECTIONS connections split evenly over ``targets``, all at once."""
    share = CONNECTIONS // len(targets)
    rates: list[float] = [0.0] * len(targets)

    def send(index: int) -> None:
        server, rcpt = targets[index]
        result = run_sender(server.smtp_port, rcpt, share, duration, size=MESSAGE_BYTES)
        if result["failures"] or result["other_codes"]:
            print(
                f"  ! {server.name}: {result['failures']} {result['other_codes']}", file=sys.stderr
            )
        rates[index] = float(result["rate"])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(targets))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(rates)


async def _active_long_polls(http: httpx.AsyncClient) -> float:
    for line in (await http.get("/metrics")).text.splitlines():
        if line.startswith("runsink_active_long_polls "):
            return float(line.split()[1])
    raise RuntimeError("/metrics has no runsink_active_long_polls gauge")


async def _until_active(http: httpx.AsyncClient, count: int, deadline_s: float = 60) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if await _active_long_polls(http) >= count:
            return
        await asyncio.sleep(0.01)
    raise RuntimeError(f"fewer than {count} long-polls became active")


async def cross_replica_wake(a: ServerProcess, b: ServerProcess, count: int) -> list[float]:
    """Milliseconds from A's 250 to the answer of the long-poll held on B."""
    run_id = f"bench-wake-{uuid.uuid4().hex[:12]}"
    inbox = create_inbox(a, run_id, purpose="wake")
    address = inbox["address"]
    message = make_message(address, MESSAGE_BYTES)
    latencies: list[float] = []
    async with httpx.AsyncClient(base_url=b.url, timeout=30) as on_b:
        smtp = await SMTPClient.connect(a.smtp_port)
        try:
            for _ in range(count):

                async def timed_wait() -> tuple[httpx.Response, float]:
                    response = await on_b.post(
                        f"/v1/inboxes/{inbox['inbox_id']}/wait",
                        json={"timeout_s": 10, "run_id": run_id},
                    )
                    return response, time.perf_counter()

                wait = asyncio.ensure_future(timed_wait())
                await _until_active(on_b, 1, 10)
                code = await smtp.send(b"app@example.test", address.encode(), message)
                acknowledged = time.perf_counter()
                if code != 250:
                    wait.cancel()
                    raise RuntimeError(f"SMTP answered {code}")
                response, answered = await wait
                body = response.json()
                if body.get("state") != "received":
                    raise RuntimeError(f"unexpected wait answer: {response.text}")
                latencies.append((answered - acknowledged) * 1000)
                claimed = await on_b.post(
                    f"/v1/messages/{body['message']['message_id']}/claim", json={"run_id": run_id}
                )
                if claimed.status_code != 200:
                    raise RuntimeError(f"claim failed: {claimed.text}")
        finally:
            await smtp.close()
    return latencies


LIVE_PACE_S = 0.15  # longer than the stream's rest after a write (api/live.py PACE_S)


async def cross_replica_live_event(a: ServerProcess, b: ServerProcess, count: int) -> list[float]:
    """Milliseconds from A's 250 to the ``message`` event on a /v1/events stream read on B."""
    run_id = f"bench-live-{uuid.uuid4().hex[:12]}"
    inbox = create_inbox(a, run_id, purpose="live")
    address = inbox["address"]
    message = make_message(address, MESSAGE_BYTES)
    latencies: list[float] = []
    timeout = httpx.Timeout(30, read=60)
    async with (
        httpx.AsyncClient(base_url=b.url, timeout=timeout) as on_b,
        on_b.stream("GET", "/v1/events", params={"run_id": run_id}) as stream,
    ):
        lines = stream.aiter_lines()
        await anext(lines)  # "retry:": the stream is open and B's reader is subscribed
        smtp = await SMTPClient.connect(a.smtp_port)
        try:
            for _ in range(count):
                await asyncio.sleep(LIVE_PACE_S)
                code = await smtp.send(b"app@example.test", address.encode(), message)
                acknowledged = time.perf_counter()
                if code != 250:
                    raise RuntimeError(f"SMTP answered {code}")
                async for line in lines:
                    if line == "event: message":
                        latencies.append((time.perf_counter() - acknowledged) * 1000)
                        break
        finally:
            await smtp.close()
    return latencies


async def long_poll_rss(server: ServerProcess, waits: int) -> float:
    """RSS growth (MiB) per 1,000 long-polls in progress at once, on one process."""
    run_id = f"bench-rss-{uuid.uuid4().hex[:12]}"
    limits = httpx.Limits(max_connections=waits + 10, max_keepalive_connections=waits + 10)
    async with httpx.AsyncClient(base_url=server.url, timeout=120, limits=limits) as http:
        inbox_ids = []
        for n in range(waits):
            created = await http.post(
                "/v1/inboxes",
                json={"run_id": run_id, "purpose": f"p{n}", "policy": "bench"},
            )
            if created.status_code != 201:
                raise RuntimeError(f"cannot create an inbox: {created.text}")
            inbox_ids.append(created.json()["inbox_id"])
        # Warm the paths once, then measure from a settled baseline.
        await http.post(f"/v1/inboxes/{inbox_ids[0]}/wait", json={"timeout_s": 0})
        before = server.rss_mb() or 0.0
        tasks = [
            asyncio.ensure_future(
                http.post(f"/v1/inboxes/{i}/wait", json={"timeout_s": 50, "run_id": run_id})
            )
            for i in inbox_ids[1:]
        ]
        await _until_active(http, len(tasks))
        during = server.rss_mb() or 0.0
        await http.delete(f"/v1/runs/{run_id}")  # every wait answers at once
        await asyncio.gather(*tasks, return_exceptions=True)
    return (during - before) * 1000 / len(tasks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--duration", type=float, help="seconds per ingest measurement")
    parser.add_argument("--repeats", type=int, help="rounds of the ingest matrix")
    parser.add_argument("--wake-count", type=int, help="messages for the wake latency")
    parser.add_argument("--waits", type=int, help="long-polls held at once for the RSS figure")
    parser.add_argument("--live-count", type=int, help="messages for the live event latency")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    duration = args.duration or (1.0 if args.quick else 3.0)
    repeats = args.repeats or (1 if args.quick else 3)
    wake_count = args.wake_count or (50 if args.quick else 300)
    waits = args.waits or (300 if args.quick else 1000)
    live_count = args.live_count or (30 if args.quick else 200)

    folder = Path(tempfile.mkdtemp(prefix="runsink-bench-pg-"))
    policy_file = folder / "policies.toml"
    policy_file.write_text(POLICIES)
    servers: list[ServerProcess] = []
    cluster = Cluster.create()
    try:
        cluster.start()
        single_db = cluster.dsn(cluster.new_database())
        shared_db = cluster.dsn(cluster.new_database())

        def runsink(name: str, *extra: str) -> ServerProcess:
            server = start_runsink(
                folder / name,
                name=name,
                log_level="info",
                policy_file=policy_file,
                extra_args=extra,
            )
            servers.append(server)
            return server

        bare = start_bare_sink(folder / "bare")
        servers.append(bare)
        sqlite = runsink("sqlite")
        pg = runsink("pg", "--db", single_db)
        pg_a = runsink("pg-a", "--db", shared_db)
        pg_b = runsink("pg-b", "--db", shared_db)
        rows: dict[str, list[tuple[ServerProcess, str]]] = {
            "bare aiosmtpd": [(bare, "anyone@sink.test")],
            "runsink, SQLite": [(sqlite, create_inbox(sqlite)["address"])],
            "runsink, PostgreSQL, 1 replica": [(pg, create_inbox(pg)["address"])],
            "runsink, PostgreSQL, 2 replicas": [
                (pg_a, create_inbox(pg_a)["address"]),
                (pg_b, create_inbox(pg_b)["address"]),
            ],
        }
        rates: dict[str, list[float]] = {label: [] for label in rows}
        for repeat in range(repeats):
            for label, targets in rows.items():
                rates[label].append(ingest(targets, duration))
                print(
                    f"  round {repeat + 1}/{repeats} {label:>32}: {rates[label][-1]:7.0f}/s",
                    file=sys.stderr,
                    flush=True,
                )
        wake = asyncio.run(cross_replica_wake(pg_a, pg_b, wake_count))
        live = asyncio.run(cross_replica_live_event(pg_a, pg_b, live_count))
        rss = {
            "SQLite": asyncio.run(long_poll_rss(sqlite, waits)),
            "PostgreSQL": asyncio.run(long_poll_rss(pg, waits)),
        }
    finally:
        for server in servers:
            server.stop()
        cluster.destroy()

    summary = {
        "connections": CONNECTIONS,
        "message_bytes": MESSAGE_BYTES,
        "ingest_msgs_per_s": {label: median(values) for label, values in rates.items()},
        "cross_replica_wake_ms": {
            "p50": percentile(wake, 50),
            "p99": percentile(wake, 99),
            "max": max(wake),
            "count": len(wake),
        },
        "cross_replica_live_event_ms": {
            "p50": percentile(live, 50),
            "p99": percentile(live, 99),
            "max": max(live),
            "count": len(live),
        },
        "long_poll_rss_mib_per_1000_waits": rss,
    }
    medians = {label: median(values) for label, values in rates.items()}
    bare_rate = medians["bare aiosmtpd"]
    p50, p99 = percentile(wake, 50), percentile(wake, 99)
    lines = [
        f"Ingest at {CONNECTIONS} connections, ~{MESSAGE_BYTES} B messages, median of "
        f"{repeats} round(s) of {duration:g} s:",
        "",
        "| server | msg/s | of bare |",
        "|---|---|---|",
        *(
            f"| {label} | {rate:.0f} | {rate / bare_rate if bare_rate else 0.0:.2f} |"
            for label, rate in medians.items()
        ),
        "",
        "| figure | value | goal |",
        "|---|---|---|",
        f"| cross-replica wake p50 ({len(wake)} messages) | {p50:.2f} ms | <= 3 ms |",
        f"| cross-replica wake p99 | {p99:.2f} ms | <= 15 ms |",
        f"| cross-replica live event p50 ({len(live)} messages) | "
        f"{percentile(live, 50):.2f} ms | |",
        f"| cross-replica live event p99 | {percentile(live, 99):.2f} ms | |",
        *(
            f"| long-poll RSS on {backend} | {mib:.1f} MiB per 1,000 waits | |"
            for backend, mib in rss.items()
        ),
    ]
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
