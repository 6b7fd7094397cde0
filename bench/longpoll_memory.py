"""Where an idle long-poll's memory goes: RSS per wait, and tracemalloc by component and line.

    .venv/bin/python bench/longpoll_memory.py            # 1,000 and 5,000 waits
    .venv/bin/python bench/longpoll_memory.py --quick    # 200 and 1,000

First the server's resident set (VmRSS) is read with every inbox created and no wait in
progress, then with the first count of waits in progress, then with the second: the
difference divided by the waits is the memory one idle long-poll holds. Then the same run
is repeated on a server this script starts with ``tracemalloc`` (``traced-server`` mode):
a SIGUSR1 takes a snapshot, the second one writes the allocations that grew since the
first, by source line, to a file; the table gives the top lines per wait. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import HOST, ServerProcess, start_runsink  # the bench folder is not a package

POLICIES = """
[policy.ci]
poll_interval_s = [0]
long_poll_max_s = 900
ttl_default_s = 1800
ttl_max_s = 3600
inboxes_per_purpose = 100000
"""
SERVER_ARGS = ["--http-max-connections", "12000"]  # long-polls may then take 10,500
DEADLINE_S = 120.0


# -- the traced server (a process of its own) ------------------------------------------


def _traced_server(out: Path, serve_args: list[str]) -> int:
    """The server, tracing allocations from the first SIGUSR1 to the second (tracing from
    the start would slow start-up tenfold and count what start-up allocates)."""

    def on_signal(signum: int, frame: object) -> None:
        if not tracemalloc.is_tracing():
            tracemalloc.start(1)
            out.write_text("tracing\n")
            return
        snapshot = tracemalloc.take_snapshot()
        tracemalloc.stop()
        stats = snapshot.statistics("lineno")
        rows = [
            {"where": str(stat.traceback[0]), "bytes": stat.size, "count": stat.count}
            for stat in stats[:25]
        ]
        total = sum(stat.size for stat in stats)
        by_part: dict[str, list[int]] = {}
        for stat in snapshot.statistics("filename"):
            part = by_part.setdefault(_part(stat.traceback[0].filename), [0, 0])
            part[0] += stat.size
            part[1] += stat.count
        out.write_text(json.dumps({"total": total, "top": rows, "parts": by_part}))

    signal.signal(signal.SIGUSR1, on_signal)
    from api.cli import main

    return main(["serve", *serve_args])


_PARTS = [
    ("/api/", "runsink api/ (routes, middleware, protocol)"),
    ("/sink/", "runsink sink/ (agent, waiters, store)"),
    ("/starlette/", "starlette (request, routing, middleware layers)"),
    ("/uvicorn/", "uvicorn (h11 protocol, request cycle)"),
    ("/h11/", "h11 (HTTP parser state)"),
    ("/pydantic", "pydantic (request models)"),
    ("/asyncio/", "asyncio (tasks, futures, events, timers)"),
]


def _part(filename: str) -> str:
    for marker, name in _PARTS:
        if marker in filename:
            return name
    return "other (json, weakref, logging, ...)"


def _start_traced(folder: Path, policy_file: Path, out: Path) -> ServerProcess:
    """Like start_runsink, through this script's traced-server mode."""
    import _common

    smtp_port, http_port = _common.free_port(), _common.free_port()
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "traced-server",
        str(out),
        *_common.serve_arguments(smtp_port, http_port, folder / "traced.db"),
        "--log-level",
        "warning",
        "--policy-file",
        str(policy_file),
        *SERVER_ARGS,
    ]
    server = _common._spawn("traced", command, folder / "traced.log", (smtp_port, http_port))
    _common._wait_ready(server)
    return server


# -- the clients ------------------------------------------------------------------------


async def _create_inboxes(url: str, count: int) -> list[str]:
    limits = httpx.Limits(max_connections=32)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        gate = asyncio.Semaphore(32)

        async def one(index: int) -> str:
            async with gate:
                answer = await client.post(
                    "/v1/inboxes", json={"run_id": f"lp-{index}", "purpose": "longpoll"}
                )
                answer.raise_for_status()
                inbox_id: str = answer.json()["inbox_id"]
                return inbox_id

        return list(await asyncio.gather(*(one(i) for i in range(count))))


async def _hold_waits(port: int, inbox_ids: list[str]) -> list[asyncio.StreamWriter]:
    """Start one long-poll per inbox and keep its connection open, reading nothing."""
    body = b'{"timeout_s": 900}'
    writers = []
    for inbox_id in inbox_ids:
        _, writer = await asyncio.open_connection(HOST, port)
        writer.write(
            b"POST /v1/inboxes/%s/wait HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (inbox_id.encode(), len(body), body)
        )
        writers.append(writer)
    return writers


async def _active(url: str) -> float:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for line in (await client.get("/metrics")).text.splitlines():
            if line.startswith("runsink_active_long_polls "):
                return float(line.split()[1])
    return 0.0


async def _until_active(url: str, count: int) -> None:
    end = time.monotonic() + DEADLINE_S
    while await _active(url) < count:
        if time.monotonic() > end:
            raise RuntimeError(f"fewer than {count} waits in progress after {DEADLINE_S:g} s")
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)  # let the last ones settle into their wait


async def _run(server: ServerProcess, counts: list[int], on_step: object = None) -> list[float]:
    """RSS (MiB) with no wait, then with each count of waits in progress."""
    assert server.http_port is not None
    inbox_ids = await _create_inboxes(server.url, max(counts))
    await asyncio.sleep(1.0)
    rss = [server.rss_mb() or 0.0]
    if callable(on_step):
        on_step()
    writers: list[asyncio.StreamWriter] = []
    for count in counts:
        writers += await _hold_waits(server.http_port, inbox_ids[len(writers) : count])
        await _until_active(server.url, count)
        rss.append(server.rss_mb() or 0.0)
        if callable(on_step):
            on_step()
    for writer in writers:
        writer.close()
    return rss


def _measure(args: argparse.Namespace) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max(args.counts) + 512
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    folder = Path(tempfile.mkdtemp(prefix="runsink-longpoll-"))
    policy_file = folder / "policies.toml"
    policy_file.write_text(POLICIES)

    server = start_runsink(folder, policy_file=policy_file, extra_args=SERVER_ARGS)
    try:
        rss = asyncio.run(_run(server, args.counts))
    finally:
        server.stop()

    out = folder / "tracemalloc.json"
    traced = _start_traced(folder, policy_file, out)
    signals = iter([None, None])

    def snapshot() -> None:
        if next(signals, "done") is None:
            before = out.read_text() if out.exists() else ""
            os.kill(traced.pid, signal.SIGUSR1)
            end = time.monotonic() + DEADLINE_S
            while (out.read_text() if out.exists() else "") == before:
                if time.monotonic() > end:
                    raise RuntimeError("the traced server wrote no snapshot")
                time.sleep(0.1)

    traced_count = args.counts[0]
    try:
        asyncio.run(_run(traced, [traced_count], snapshot))
        traced_stats = json.loads(out.read_text())
    finally:
        traced.stop()

    lines = [
        f"Idle long-polls held open against one runsink (default event loop), on "
        f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f}). "
        f"RSS with {max(args.counts)} inboxes and no wait: "
        f"{rss[0]:.1f} MiB.",
        "",
        "| waits in progress | RSS (MiB) | growth (MiB) | per wait (KiB) |",
        "|---|---|---|---|",
    ]
    for count, value in zip(args.counts, rss[1:], strict=True):
        growth = value - rss[0]
        lines.append(f"| {count} | {value:.1f} | {growth:.1f} | {growth * 1024 / count:.1f} |")
    lines += [
        "",
        f"Where it goes (tracemalloc, {traced_count} waits, growth since no wait, by line; "
        f"Python allocations only: {traced_stats['total'] / traced_count / 1024:.1f} KiB per "
        "wait in all):",
    ]
    parts = sorted(traced_stats["parts"].items(), key=lambda item: -item[1][0])
    lines += [
        "",
        "By component:",
        "",
        "| component | KiB per wait | blocks per wait |",
        "|---|---|---|",
        *(
            f"| {name} | {size / traced_count / 1024:.2f} | {count / traced_count:.1f} |"
            for name, (size, count) in parts
        ),
        "",
        "The top lines:",
        "",
        "| allocated at | KiB per wait | blocks per wait |",
        "|---|---|---|",
    ]
    for row in traced_stats["top"][:15]:
        where = row["where"].replace(str(Path(sys.prefix)), "<venv>")
        lines.append(
            f"| `{where}` | {row['bytes'] / traced_count / 1024:.2f} | "
            f"{row['count'] / traced_count:.1f} |"
        )
    print("\n".join(lines))
    return 0


def main() -> int:
    if sys.argv[1:2] == ["traced-server"]:  # traced-server OUT SERVE-ARGS...
        return _traced_server(Path(sys.argv[2]), sys.argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--counts", type=int, nargs="+")
    args = parser.parse_args()
    args.counts = sorted(args.counts or ([200, 1000] if args.quick else [1000, 5000]))
    return _measure(args)


if __name__ == "__main__":
    sys.exit(main())
