"""Long-polls at scale: memory per waiting long-poll, /healthz while they wait, wake latency.

    .venv/bin/python bench/longpoll.py                 # 1,000 and 10,000 waits
    .venv/bin/python bench/longpoll.py --quick         # 1,000 waits
    .venv/bin/python bench/longpoll.py --counts 2000   # any counts

For each count N, against one runsink process (`--log-level warning`, uvloop):
- N inboxes, then N concurrent long-polls (`POST /v1/inboxes/{id}/wait`, one connection
  each), started in waves of 1,000 (each once the one before shows in
  `runsink_active_long_polls`), with `timeout_s` chosen so that they all end at one moment.
- **RSS per wait**: the server's VmRSS with the N waits parked, less its VmRSS with N idle
  keep-alive HTTP connections open instead (the peer measured in the same run: what a
  connection costs before it asks for anything), divided by N; and the whole growth over
  the server's RSS before any connection, divided by N.
- **/healthz** p50/p99 over a kept-alive connection while the N waits are parked, and
  while they all time out at once.
- **wake latency**: for 100 of the parked waits, the time from the 250 after DATA to that
  wait's answer on its own connection.

Loopback only; every loop is bounded in time. Exits 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # the bench folder is not a package: see sys.path above
    Http,
    ServerProcess,
    SMTPClient,
    make_message,
    percentile,
    start_runsink,
)

POLICIES = """
[policy.ci]
poll_interval_s = [0]
poll_budget = 1000
ttl_default_s = 3600
ttl_max_s = 3600
long_poll_max_s = 60
inboxes_per_purpose = 100000
"""

WAKE_SAMPLES = 100
WAVE = 1000
HEALTH_SAMPLES = 200


async def _gather_limited(coros: list[Any], limit: int) -> list[Any]:
    semaphore = asyncio.Semaphore(limit)

    async def one(coro: Any) -> Any:
        async with semaphore:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))


async def _create_inboxes(port: int, count: int) -> list[dict[str, Any]]:
    run_id = f"bench-lp-{uuid.uuid4().hex[:8]}"
    connections = [await Http.open(port) for _ in range(16)]
    created: list[dict[str, Any]] = []

    async def worker(http: Http, share: int) -> None:
        for _ in range(share):
            body = {"run_id": run_id, "purpose": f"p{uuid.uuid4().hex[:12]}"}
            status, raw = await http.call("POST", "/v1/inboxes", body)
            if status != 201:
                raise RuntimeError(f"create answered {status}: {raw[:200]!r}")
            created.append(json.loads(raw))

    shares = [count // 16 + (1 if i < count % 16 else 0) for i in range(16)]
    await asyncio.gather(*(worker(h, n) for h, n in zip(connections, shares, strict=True)))
    for http in connections:
        http.close()
    return created


async def _active_long_polls(http: Http) -> int:
    _, body = await http.call("GET", "/metrics")
    for line in body.decode().splitlines():
        if line.startswith("runsink_active_long_polls "):
            return int(float(line.split()[1]))
    raise RuntimeError("/metrics has no runsink_active_long_polls")


async def _until_active(http: Http, count: int, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if await _active_long_polls(http) >= count:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"fewer than {count} long-polls became active")


async def _health(http: Http, samples: int) -> list[float]:
    latencies = []
    for _ in range(samples):
        started = time.perf_counter()
        status, _ = await http.call("GET", "/healthz")
        latencies.append((time.perf_counter() - started) * 1000)
        if status != 200:
            raise RuntimeError(f"/healthz answered {status}")
    return latencies


async def measure(server: ServerProcess, count: int, timeout_s: int) -> dict[str, Any]:
    port = server.http_port
    assert port is not None
    inboxes = await _create_inboxes(port, count)
    control = await Http.open(port)
    await _health(control, 20)  # warm up
    rss_before = server.rss_mb() or 0.0

    # The peer: N idle keep-alive connections (each has made one request), then closed.
    idle = await _gather_limited([Http.open(port) for _ in range(count)], 200)
    await _gather_limited([h.call("GET", "/healthz") for h in idle], 200)
    rss_idle = server.rss_mb() or 0.0
    for http in idle:
        http.close()
    await asyncio.sleep(1.0)  # let the server see the closes

    waits: list[Http] = []
    answered_at: dict[int, float] = {}
    answers: dict[int, tuple[int, bytes]] = {}

    started = time.monotonic()
    ends = started + timeout_s  # every wait's deadline: they all time out together

    async def hold(index: int, http: Http, inbox: dict[str, Any]) -> None:
        left = round(ends - time.monotonic(), 3)
        http.send("POST", f"/v1/inboxes/{inbox['inbox_id']}/wait", {"timeout_s": left})
        answers[index] = await http.response()
        answered_at[index] = time.perf_counter()

    # In waves, each once the one before is parked: 10,000 first looks at once queue on the
    # store past its provider deadline (2 s: they would answer provider_timeout), and that is
    # the store's limit, not what a parked wait costs.
    holders: list[asyncio.Future[None]] = []
    for first in range(0, count, WAVE):
        # Each wave's connections are opened just before it asks: a connection that has
        # asked nothing is closed at the server's header deadline (10 s).
        waits += await _gather_limited(
            [Http.open(port) for _ in range(min(count, first + WAVE) - first)], 200
        )
        holders += [
            asyncio.ensure_future(hold(i, waits[i], inboxes[i]))
            for i in range(first, min(count, first + WAVE))
        ]
        try:
            await _until_active(control, len(holders), 60)
        except RuntimeError:
            early: dict[int, bytes] = {}
            for status, body in answers.values():
                early.setdefault(status, body[:300])
            raise RuntimeError(f"{len(answers)} waits answered early: {early}") from None
    parked_rss = server.rss_mb() or 0.0
    health_parked = await _health(control, HEALTH_SAMPLES)

    # Wake a sample of them, one at a time, each timed from its 250.
    smtp = await SMTPClient.connect(server.smtp_port)
    wake_ms = []
    for index in range(min(WAKE_SAMPLES, count)):
        address = inboxes[index]["address"]
        code = await smtp.send(b"app@example.test", address.encode(), make_message(address))
        acknowledged = time.perf_counter()
        if code != 250:
            raise RuntimeError(f"SMTP answered {code}")
        await asyncio.wait_for(asyncio.shield(holders[index]), 10)
        wake_ms.append((answered_at[index] - acknowledged) * 1000)
    await smtp.close()

    # The rest time out together: measure /healthz through that moment.
    remaining = timeout_s - (time.monotonic() - started)
    await asyncio.sleep(max(0.0, remaining - 1.0))
    control.close()  # idle past the server's keep-alive by now: a fresh one
    control = await Http.open(port)
    storm = asyncio.ensure_future(_health(control, HEALTH_SAMPLES * 5))
    await asyncio.wait_for(asyncio.gather(*holders), timeout_s + 60)
    health_storm = await storm
    statuses = {status for status, _ in answers.values()}
    for http in waits:
        http.close()
    control.close()
    return {
        "count": count,
        "rss_before_mb": rss_before,
        "rss_idle_connections_mb": rss_idle,
        "rss_parked_mb": parked_rss,
        "kb_per_wait_over_idle": (parked_rss - rss_idle) * 1024 / count,
        "kb_per_wait_total": (parked_rss - rss_before) * 1024 / count,
        "kb_per_idle_connection": (rss_idle - rss_before) * 1024 / count,
        "health_parked_p50_ms": percentile(health_parked, 50),
        "health_parked_p99_ms": percentile(health_parked, 99),
        "health_storm_p50_ms": percentile(health_storm, 50),
        "health_storm_p99_ms": percentile(health_storm, 99),
        "wake_p50_ms": percentile(wake_ms, 50),
        "wake_p99_ms": percentile(wake_ms, 99),
        "statuses": sorted(statuses),
    }


def _server_connections(count: int) -> int:
    """An HTTP cap whose long-poll share (seven eighths, sink/capacity.py) takes ``count``
    waits, plus the control connections."""
    return max(4096, (count + 64) * 8 // 7 + 64)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 waits only")
    parser.add_argument("--counts", help="comma-separated numbers of waits")
    parser.add_argument(
        "--timeout", type=int, default=40, help="from the first wait to every wait's deadline"
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    counts = [int(c) for c in (args.counts or ("1000" if args.quick else "1000,10000")).split(",")]
    # Each process (this client, the server) holds one descriptor per wait, and the server
    # keeps a sixteenth of its limit in reserve (sink/capacity.py): raise the soft limit to
    # the hard one in-process; the server inherits it.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    needed = _server_connections(max(counts)) * 17 // 16 + 1024
    if hard != resource.RLIM_INFINITY and hard < needed:
        print(
            f"the descriptor limit ({hard}) is too low for {max(counts)} waits "
            f"(about {needed} needed: raise the hard `ulimit -n`)",
            file=sys.stderr,
        )
        return 0

    rows = []
    for count in counts:
        folder = Path(tempfile.mkdtemp(prefix="runsink-longpoll-"))
        (folder / "policies.toml").write_text(POLICIES)
        server = start_runsink(
            folder,
            policy_file=folder / "policies.toml",
            extra_args=["--http-max-connections", str(_server_connections(count))],
        )
        try:
            print(f"{count} waits ...", file=sys.stderr, flush=True)
            rows.append(asyncio.run(measure(server, count, args.timeout)))
        finally:
            server.stop()

    print(f"long-polls, load average {os.getloadavg()[0]:.2f}; runsink at warning logs")
    print()
    print(
        "| waits | RSS parked MB | KB per wait (over idle conn.) | KB per wait (all) "
        "| KB per idle conn. | /healthz p50/p99 parked ms | /healthz p50/p99 at time-out ms "
        "| wake p50/p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['count']} | {r['rss_parked_mb']:.0f} | {r['kb_per_wait_over_idle']:.1f} | "
            f"**{r['kb_per_wait_total']:.1f}** | {r['kb_per_idle_connection']:.1f} | "
            f"{r['health_parked_p50_ms']:.1f} / {r['health_parked_p99_ms']:.1f} | "
            f"{r['health_storm_p50_ms']:.1f} / {r['health_storm_p99_ms']:.1f} | "
            f"{r['wake_p50_ms']:.2f} / {r['wake_p99_ms']:.2f} |"
        )
    print()
    print(
        "targets (issue 13): 10,000 waits under 200 MiB RSS (<= 12 KB per wait), /healthz p99 "
        "< 20 ms while waiting and at the time-out, each woken within 5 ms of its 250"
    )
    for r in rows:
        checks = [
            (
                "RSS under 200 MiB",
                r["rss_parked_mb"] < 200 if r["count"] >= 10000 else None,
            ),
            ("<= 12 KB per wait", r["kb_per_wait_total"] <= 12),
            ("/healthz p99 < 20 ms", max(r["health_parked_p99_ms"], r["health_storm_p99_ms"]) < 20),
            ("wake p50 <= 1 ms", r["wake_p50_ms"] <= 1),
            ("wake p99 <= 5 ms", r["wake_p99_ms"] <= 5),
        ]
        verdicts = [f"{name}: {'met' if ok else 'MISSED'}" for name, ok in checks if ok is not None]
        print(f"- {r['count']} waits: " + "; ".join(verdicts))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
