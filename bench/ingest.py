"""Ingest and wake benchmark: runsink against a bare aiosmtpd sink, on this machine, now.

    .venv/bin/python bench/ingest.py            # the full run (a few minutes)
    .venv/bin/python bench/ingest.py --quick    # a smoke run (< 30 s)

What it measures (see bench/README.md for the method and the targets):
- SMTP ingest, messages/s, ~4 KB messages over 1, 8 and 64 reused connections, for runsink
  (durable: 250 only after the commit) and for a bare aiosmtpd sink that stores nothing,
  both running at once; the levels alternate bare/runsink and repeat, and the median counts.
- wake latency: from the 250 after DATA to the answer of a long-poll already waiting on
  that inbox (p50/p99).
- peak RSS (VmHWM) of each server process.

It only talks to 127.0.0.1 and every loop is bounded. It exits 0 whether or not the
targets are met: it reports, it does not judge a shared, noisy machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # the bench folder is not a package: see sys.path above
    Http,
    ServerProcess,
    SMTPClient,
    make_message,
    median,
    percentile,
    run_sender,
    start_bare_sink,
    start_runsink,
)

MESSAGE_BYTES = 4096

# Long-polls with no pacing, and budget and lease enough for every wait of the run.
POLICIES = """
[policy.bench]
poll_interval_s = [0]
poll_budget = 100000
ttl_default_s = 3600
ttl_max_s = 3600
long_poll_max_s = 30
inboxes_per_purpose = 100
"""


@dataclass
class Level:
    connections: int
    label: str
    sink_name: str = "runsink"  # which runsink process (see main)
    reconnect: bool = False  # a new connection per message
    size: int = MESSAGE_BYTES
    bare: list[float] = field(default_factory=list)
    sink: list[float] = field(default_factory=list)
    bare_cpu_us: list[float] = field(default_factory=list)
    sink_cpu_us: list[float] = field(default_factory=list)
    index_cpu_us: list[float] = field(default_factory=list)
    client_cpu: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)


def create_inbox(server: ServerProcess, purpose: str, **body: Any) -> dict[str, Any]:
    payload = {"run_id": f"bench-{uuid.uuid4().hex[:12]}", "purpose": purpose, **body}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        response = client.post("/v1/inboxes", json=payload)
    if response.status_code != 201:
        raise RuntimeError(f"cannot create an inbox: {response.status_code} {response.text}")
    created: dict[str, Any] = response.json()
    return created


def measure(server: ServerProcess, rcpt: str, level: Level, duration: float) -> dict[str, Any]:
    """One timed sender run: rate, and CPU of the server and of the sender in the window."""
    result = run_sender(
        server.smtp_port,
        rcpt,
        level.connections,
        duration,
        size=level.size,
        server_pid=server.pid,
        reconnect=level.reconnect,
    )
    if result["failures"] or result["other_codes"]:
        print(
            f"  ! {server.name} {level.label}: failures {result['failures']}, "
            f"non-250 replies {result['other_codes']}",
            file=sys.stderr,
        )
    return result


def settle(server: ServerProcess, messages: int) -> float:
    """Make runsink's search index catch up with what it stored (a search indexes every
    stored message before it answers); the server's CPU for that, µs per message.

    Without it the indexer, which starts once deliveries pause, would run during the next
    measurement, whichever server that is, and take its CPU: the figures of both sides
    swung by the order they ran in.
    """
    before = server.cpu_s()
    with httpx.Client(base_url=server.url, timeout=120) as client:
        client.get("/v1/messages", params={"query": "zzqx-never-there", "limit": 1})
    return (server.cpu_s() - before) / messages * 1e6 if messages else 0.0


def run_levels(
    bare: ServerProcess,
    sinks: dict[str, tuple[ServerProcess, str]],
    levels: list[Level],
    duration: float,
    repeats: int,
) -> None:
    """Each level against the bare sink and its runsink (``sinks``: name -> process, rcpt)."""
    for repeat in range(repeats):
        for index, level in enumerate(levels):
            sink, rcpt = sinks[level.sink_name]
            # Alternate which goes first: a noisy neighbour then hurts both sides alike.
            pair = [(bare, True), (sink, False)]
            if (repeat + index) % 2:
                pair.reverse()
            rates: dict[bool, float] = {}
            for server, is_bare in pair:
                result = measure(server, rcpt, level, duration)
                rate = float(result["rate"])
                cpu_us = float(result["server_cpu_us_per_msg"] or 0.0)
                client_cpu = float(result["client_cpu_share"])
                rates[is_bare] = rate
                if is_bare:
                    level.bare.append(rate)
                    level.bare_cpu_us.append(cpu_us)
                else:
                    level.sink.append(rate)
                    level.sink_cpu_us.append(cpu_us)
                    level.index_cpu_us.append(settle(server, int(result["sent"])))
                level.client_cpu.append(client_cpu)
            level.ratios.append(rates[False] / rates[True] if rates[True] else 0.0)
            print(
                f"  round {repeat + 1}/{repeats} {level.label:>26}: bare {rates[True]:7.0f}/s  "
                f"{sink.name} {rates[False]:7.0f}/s  ratio {level.ratios[-1]:.2f}",
                file=sys.stderr,
                flush=True,
            )


# -- wake latency --------------------------------------------------------------------


async def _active_long_polls(http: Http) -> float:
    _, body = await http.call("GET", "/metrics")
    for line in body.decode().splitlines():
        if line.startswith("runsink_active_long_polls "):
            return float(line.split()[1])
    raise RuntimeError("/metrics has no runsink_active_long_polls gauge")


async def _parked(http: Http, wait: asyncio.Future[Any]) -> None:
    """Until the server holds our long-poll (it registers its waiter before scanning)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if wait.done():
            status, body = wait.result()[0]
            raise RuntimeError(f"the wait returned before any mail: {status} {body!r}")
        if await _active_long_polls(http) >= 1:
            return
    raise RuntimeError("the long-poll never became active")


async def measure_wake(server: ServerProcess, count: int) -> list[float]:
    """Milliseconds from the 250 after DATA to the waiting long-poll's answer, per message.

    Over the lean HTTP client of _common.py, as bench/longpoll.py: httpx's own work on each
    answer (about 0.4 ms here) is the measuring client's, not the server's.
    """
    assert server.http_port is not None
    run_id = f"bench-wake-{uuid.uuid4().hex[:12]}"
    latencies: list[float] = []
    control = await Http.open(server.http_port)
    waiting = await Http.open(server.http_port)
    status, raw = await control.call(
        "POST",
        "/v1/inboxes",
        {
            "run_id": run_id,
            "purpose": "wake",
            "policy": "bench",
            "ttl_s": 3600,
            "poll_budget": count + 10,
        },
    )
    if status != 201:
        raise RuntimeError(f"cannot create the wake inbox: {raw!r}")
    inbox = json.loads(raw)
    address = inbox["address"]
    message = make_message(address, MESSAGE_BYTES)
    smtp = await SMTPClient.connect(server.smtp_port)

    async def timed_wait() -> tuple[tuple[int, bytes], float]:
        waiting.send(
            "POST", f"/v1/inboxes/{inbox['inbox_id']}/wait", {"timeout_s": 10, "run_id": run_id}
        )
        answer = await waiting.response()
        return answer, time.perf_counter()

    try:
        for _ in range(count):
            wait = asyncio.ensure_future(timed_wait())
            await _parked(control, wait)
            code = await smtp.send(b"app@example.test", address.encode(), message)
            acknowledged = time.perf_counter()
            if code != 250:
                wait.cancel()
                raise RuntimeError(f"SMTP answered {code} in the wake test")
            (status, raw), answered = await wait
            body = json.loads(raw)
            if status != 200 or body.get("state") != "received":
                raise RuntimeError(f"unexpected wait answer: {status} {raw!r}")
            latencies.append((answered - acknowledged) * 1000)
            status, raw = await control.call(
                "POST", f"/v1/messages/{body['message']['message_id']}/claim", {"run_id": run_id}
            )
            if status != 200:
                raise RuntimeError(f"claim failed: {raw!r}")
    finally:
        await smtp.close()
        control.close()
        waiting.close()
    return latencies


# -- report --------------------------------------------------------------------------

# Issue 13's goals: (label, least runsink/bare ratio).
TARGETS = [
    ("1", 1.0),
    ("8", 1.5),
    ("8, new connection each", 1.2),
    ("8, 1 MiB messages", 1.0),
]


def _mark(ok: bool) -> str:
    return "met" if ok else "MISSED"


def report(
    levels: list[Level],
    wake_ms: list[float],
    rss: dict[str, float | None],
    big_rss_growth_mb: float | None,
    args: argparse.Namespace,
) -> dict[str, Any]:
    print()
    print(
        f"runsink ingest/wake benchmark  ({'quick' if args.quick else 'full'}: "
        f"{args.duration:g} s per measurement, {args.repeats} round(s), median shown)"
    )
    load = f"load average {args.load_at_start:.2f} at start, {os.getloadavg()[0]:.2f} at end"
    noisy = max(args.load_at_start, os.getloadavg()[0]) > 1.0
    print(load + (" (busy machine: figures are noisy)" if noisy else ""))
    print()
    print(
        "| messages over | bare msg/s | runsink msg/s | ratio | ratio range "
        "| bare CPU µs/msg | runsink CPU µs/msg | runsink index CPU µs/msg | sender CPU |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    summary: dict[str, Any] = {"load_average": [args.load_at_start, os.getloadavg()[0]]}
    summary["levels"] = []
    for level in levels:
        row = {
            "label": level.label,
            "connections": level.connections,
            "bare_rate": median(level.bare),
            "runsink_rate": median(level.sink),
            "ratio": median(level.ratios),
            "ratios": level.ratios,
            "bare_cpu_us": median(level.bare_cpu_us),
            "runsink_cpu_us": median(level.sink_cpu_us),
            "runsink_index_cpu_us": median(level.index_cpu_us),
            "client_cpu_share": max(level.client_cpu),
        }
        summary["levels"].append(row)
        spread = f"{min(level.ratios):.2f}-{max(level.ratios):.2f}"
        print(
            f"| {level.label} | {row['bare_rate']:.0f} | {row['runsink_rate']:.0f} | "
            f"**{row['ratio']:.2f}** | {spread} | {row['bare_cpu_us']:.0f} | "
            f"{row['runsink_cpu_us']:.0f} | {row['runsink_index_cpu_us']:.0f} | "
            f"{row['client_cpu_share']:.0%} |"
        )
    p50, p99 = percentile(wake_ms, 50), percentile(wake_ms, 99)
    summary["wake"] = {
        "count": len(wake_ms),
        "p50_ms": p50,
        "p99_ms": p99,
        "max_ms": max(wake_ms),
    }
    summary["peak_rss_mb"] = rss
    summary["big_message_rss_growth_mb"] = big_rss_growth_mb
    print()
    print(
        f"wake latency (250 -> long-poll answer), {len(wake_ms)} messages: "
        f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {max(wake_ms):.2f} ms"
    )
    print("peak RSS (VmHWM): " + ", ".join(f"{k} {v:.1f} MB" for k, v in rss.items() if v))
    print()
    by_label = {row["label"]: row for row in summary["levels"]}
    for label, least in TARGETS:
        if label in by_label:
            ratio = by_label[label]["ratio"]
            verdict = _mark(ratio >= least)
            print(f"target: {label}: runsink/bare >= {least:.1f}: {ratio:.2f} ({verdict})")
    print(
        f"target: wake p50 <= 1 ms, p99 <= 5 ms: {p50:.2f} / {p99:.2f} ms "
        f"({_mark(p50 <= 1.0 and p99 <= 5.0)})"
    )
    if big_rss_growth_mb is not None:
        per_connection = big_rss_growth_mb / BIG_CONNECTIONS
        print(
            f"target: 1 MiB messages, peak RSS growth per connection < 3 MiB: "
            f"{per_connection:.2f} MiB ({_mark(per_connection < 3.0)})"
        )
    print(
        "(runsink at the default --log-level info, on uvloop unless the row says 'stock loop'; "
        "the bare sink is aiosmtpd on the stock asyncio loop; 'index CPU' is the search "
        "indexing runsink does after the 250s, measured apart once each run is over)"
    )
    return summary


BIG_BYTES = 1024 * 1024
BIG_CONNECTIONS = 8


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run (< 60 s)")
    parser.add_argument("--duration", type=float, help="seconds per measurement")
    parser.add_argument("--repeats", type=int, help="rounds of the whole matrix")
    parser.add_argument("--wake-count", type=int, help="messages for the wake latency")
    parser.add_argument(
        "--levels", default="1,8,64", help="concurrent connections, comma-separated"
    )
    parser.add_argument(
        "--no-variants",
        action="store_true",
        help="only the levels: skip new-connection, 1 MiB, stock-loop and warning-log rows",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    args.duration = args.duration or (1.0 if args.quick else 3.0)
    args.repeats = args.repeats or (1 if args.quick else 5)
    args.wake_count = args.wake_count or (50 if args.quick else 500)
    connection_levels = [int(x) for x in args.levels.split(",")]
    args.load_at_start = os.getloadavg()[0]

    folder = Path(tempfile.mkdtemp(prefix="runsink-bench-"))
    policy_file = folder / "policies.toml"
    policy_file.write_text(POLICIES)
    servers: list[ServerProcess] = []

    def runsink(name: str, *extra: str, log_level: str = "info") -> tuple[ServerProcess, str]:
        server = start_runsink(
            folder / name,
            name=name,
            log_level=log_level,
            policy_file=policy_file,
            extra_args=extra,
        )
        servers.append(server)
        return server, create_inbox(server, "ingest", ttl_s=3600)["address"]

    try:
        bare = start_bare_sink(folder / "bare")
        servers.append(bare)
        sinks = {"runsink": runsink("runsink")}
        print(f"servers up in {folder}", file=sys.stderr, flush=True)
        levels = [Level(n, str(n)) for n in connection_levels]
        big_rss_growth_mb = None
        if not args.no_variants:
            sinks["runsink-stock"] = runsink("runsink-stock", "--event-loop", "asyncio")
            sinks["runsink-warning"] = runsink("runsink-warning", log_level="warning")
            sinks["runsink-big"] = runsink("runsink-big")
            levels += [
                Level(8, "8, new connection each", reconnect=True),
                Level(8, "8, stock loop", sink_name="runsink-stock"),
                Level(8, "8, warning logs", sink_name="runsink-warning"),
            ]
        run_levels(bare, sinks, levels, args.duration, args.repeats)
        if not args.no_variants:
            # Its own process, so that its peak RSS is the big messages' alone.
            big_sink = sinks["runsink-big"][0]
            before = big_sink.rss_mb() or 0.0
            big = Level(BIG_CONNECTIONS, "8, 1 MiB messages", "runsink-big", size=BIG_BYTES)
            run_levels(bare, sinks, [big], args.duration, args.repeats)
            levels.append(big)
            peak = big_sink.peak_rss_mb()
            big_rss_growth_mb = (peak - before) if peak else None

        print(f"wake latency: {args.wake_count} messages", file=sys.stderr, flush=True)
        wake_ms = asyncio.run(measure_wake(sinks["runsink"][0], args.wake_count))
        rss = {server.name: server.peak_rss_mb() for server in servers}
        summary = report(levels, wake_ms, rss, big_rss_growth_mb, args)
        if args.json:
            args.json.write_text(json.dumps(summary, indent=2))
    finally:
        for server in servers:
            server.stop()
        if args.keep:
            print(f"kept {folder}", file=sys.stderr)
        else:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
