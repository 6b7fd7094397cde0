"""Webhook benchmark: delivery rate, 250 -> webhook latency beside 250 -> SSE, ingest cost.

    .venv/bin/python bench/webhooks.py            # the full run (about two minutes)
    .venv/bin/python bench/webhooks.py --quick    # a smoke run (< 40 s)
    .venv/bin/python bench/webhooks.py --postgres # the same on PostgreSQL (its own cluster)
    .venv/bin/python bench/webhooks.py --outbox-floor  # + beside a receiver that never answers

What it measures, on one runsink (SQLite; with ``--postgres`` a PostgreSQL it starts itself,
tests/pg_cluster.py, one database per runsink) and a receiver in this process that verifies every
signature (``sink.client.verify_webhook``) and answers 204:
- latency: one message at a time, from the 250 after DATA to (a) the webhook delivery of its
  ``message`` event at the receiver and (b) the same event on ``/v1/events?run_id=`` read by
  this process; p50/p99 of each, from the same messages (issue 26: webhook p50 within 2x of
  SSE p50).
- deliveries per second: a burst of messages sent over 8 connections, then the time until
  every ``message`` event reached the receiver (one webhook, so at most 8 in flight).
- ingest at 8 connections with and without a webhook: two runsink processes, alternating,
  median of the rounds (issue 26: within 5%), after an uncounted round on each; a server's
  deliveries finish and its search index catches up before the other's turn.

It only talks to 127.0.0.1 and every loop is bounded. It exits 0 whatever the figures are.
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
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import (  # the bench folder is not a package: see sys.path above
    HOST,
    ServerProcess,
    SMTPClient,
    make_message,
    median,
    percentile,
    run_sender,
    start_runsink,
)
from ingest import settle  # a search: the index catches up before the other server's round

from sink.client import WebhookVerificationError, verify_webhook
from tests.pg_cluster import Cluster  # the same server the test suite starts

POSTER = Path(__file__).resolve().parent / "_poster.py"
MESSAGE_BYTES = 4096
DEADLINE_S = 30.0  # the longest any one event may take to arrive before the run gives up
POLICIES = """
[policy.bench]
poll_interval_s = [0]
poll_budget = 100000
ttl_default_s = 3600
ttl_max_s = 3600
inboxes_per_purpose = 100
"""


# -- the receiver ----------------------------------------------------------------------


@dataclass
class Receiver:
    """An HTTP/1.1 receiver on a free port: verifies, notes when each event arrived, 204."""

    secret: str = ""
    arrived: dict[str, float] = field(default_factory=dict)  # message_id -> perf_counter
    ids: set[str] = field(default_factory=set)  # webhook-id of every verified delivery
    deliveries: int = 0
    refused: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    server: asyncio.Server | None = None
    handlers: set[asyncio.Task[None]] = field(default_factory=set)
    hold: bool = False  # read every request, answer none (the attempts time out)
    sample: bytes = b""  # a delivery's body, for the HTTP floor's poster
    floor: int = 0  # the poster's POSTs (``webhook-id: floor_...``), verified too, not deliveries

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://{HOST}:{self.server.sockets[0].getsockname()[1]}/hooks"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, HOST, 0)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for handler in self.handlers:
            handler.cancel()
        await asyncio.gather(*self.handlers, return_exceptions=True)
        if self.server is not None:
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            while self.hold:
                if not await reader.read(65536):
                    return
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                headers = {}
                for line in head.decode("latin-1").split("\r\n")[1:]:
                    name, _, value = line.partition(":")
                    if name:
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                writer.write(self._answer(headers, body))
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the sender hung up, or the bench is over
        finally:
            self.handlers.discard(task)
            writer.close()

    def _answer(self, headers: dict[str, str], body: bytes) -> bytes:
        now = time.perf_counter()
        try:
            event = verify_webhook(self.secret, headers, body)
        except WebhookVerificationError:
            self.refused += 1
            return b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n"
        if headers.get("webhook-id", "").startswith("floor_"):
            self.floor += 1
            self.changed.set()
            return b"HTTP/1.1 204 No Content\r\n\r\n"
        self.deliveries += 1
        self.sample = body
        self.ids.add(event.id)
        message_id = event.data.get("message_id")
        if event.type == "message" and isinstance(message_id, str):
            self.arrived.setdefault(message_id, now)
        self.changed.set()
        return b"HTTP/1.1 204 No Content\r\n\r\n"


# -- the SSE reader ----------------------------------------------------------------------


@dataclass
class Stream:
    """``/v1/events?run_id=`` read in this process: when each ``message`` event arrived."""

    arrived: dict[str, float] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    open: asyncio.Event = field(default_factory=asyncio.Event)

    async def follow(self, url: str, run_id: str) -> None:
        async with (
            httpx.AsyncClient(base_url=url, timeout=None) as http,
            http.stream("GET", "/v1/events", params={"run_id": run_id}) as response,
        ):
            self.open.set()
            kind = ""
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:") and kind == "message":
                    now = time.perf_counter()
                    message_id = json.loads(line[5:]).get("message_id")
                    if isinstance(message_id, str):
                        self.arrived.setdefault(message_id, now)
                        self.changed.set()


async def _until(event: asyncio.Event, done: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RuntimeError(f"{what}: not within {DEADLINE_S:g} s")
        event.clear()
        if done():
            return
        try:
            await asyncio.wait_for(event.wait(), remaining)
        except TimeoutError:
            continue


# -- setup -------------------------------------------------------------------------------


def create_inbox(url: str, run_id: str) -> dict[str, Any]:
    body = {"run_id": run_id, "purpose": "webhooks", "policy": "bench", "ttl_s": 3600}
    answer = httpx.post(f"{url}/v1/inboxes", json=body, timeout=30)
    if answer.status_code != 201:
        raise RuntimeError(f"cannot create an inbox: {answer.status_code} {answer.text}")
    created: dict[str, Any] = answer.json()
    return created


def create_webhook(url: str, receiver: str, run_id: str) -> str:
    body = {"url": receiver, "run_id": run_id, "events": ["message"]}
    answer = httpx.post(f"{url}/v1/webhooks", json=body, timeout=30)
    if answer.status_code != 201:
        raise RuntimeError(f"cannot create a webhook: {answer.status_code} {answer.text}")
    secret: str = answer.json()["secret"]
    return secret


# -- the measurements ----------------------------------------------------------------------


async def measure_latency(
    server: ServerProcess, count: int, gap_s: float
) -> tuple[list[float], list[float]]:
    """Milliseconds from each 250 to its webhook delivery and to its SSE event."""
    run_id = f"bench-latency-{uuid.uuid4().hex[:10]}"
    receiver = Receiver()
    await receiver.start()
    stream = Stream()
    following = asyncio.ensure_future(stream.follow(server.url, run_id))
    try:
        receiver.secret = create_webhook(server.url, receiver.url, run_id)
        address = create_inbox(server.url, run_id)["address"]
        await asyncio.wait_for(stream.open.wait(), DEADLINE_S)
        smtp = await SMTPClient.connect(server.smtp_port)
        hook_ms: list[float] = []
        sse_ms: list[float] = []
        try:
            for _ in range(count):
                # Apart by more than a live stream's rest after a write (api/live.py PACE_S):
                # each message is a first event after a quiet spell on both paths.
                await asyncio.sleep(gap_s)
                known = set(receiver.arrived)
                message = make_message(address, MESSAGE_BYTES)
                code = await smtp.send(b"app@example.test", address.encode(), message)
                acknowledged = time.perf_counter()
                if code != 250:
                    raise RuntimeError(f"SMTP answered {code}")
                before = len(known)
                await _until(receiver.changed, lambda n=before: len(receiver.arrived) > n, "hook")
                (message_id,) = set(receiver.arrived) - known
                await _until(stream.changed, lambda m=message_id: m in stream.arrived, "SSE")
                hook_ms.append((receiver.arrived[message_id] - acknowledged) * 1000)
                sse_ms.append((stream.arrived[message_id] - acknowledged) * 1000)
        finally:
            await smtp.close()
        if receiver.refused:
            raise RuntimeError(f"{receiver.refused} deliveries failed verification")
        return hook_ms, sse_ms
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
        await receiver.close()


async def measure_rate(server: ServerProcess, count: int) -> dict[str, float]:
    """A burst of ``count`` messages over 8 connections, then until all were delivered."""
    run_id = f"bench-rate-{uuid.uuid4().hex[:10]}"
    receiver = Receiver()
    await receiver.start()
    try:
        receiver.secret = create_webhook(server.url, receiver.url, run_id)
        address = create_inbox(server.url, run_id)["address"]
        message = make_message(address, MESSAGE_BYTES)
        clients = await asyncio.gather(*(SMTPClient.connect(server.smtp_port) for _ in range(8)))
        started = time.perf_counter()
        left = count

        async def send(client: SMTPClient) -> None:
            nonlocal left
            while left > 0:
                left -= 1
                code = await client.send(b"app@example.test", address.encode(), message)
                if code != 250:
                    raise RuntimeError(f"SMTP answered {code}")

        await asyncio.gather(*(send(c) for c in clients))
        sent = time.perf_counter()
        await asyncio.gather(*(c.close() for c in clients))
        await _until(receiver.changed, lambda: len(receiver.arrived) >= count, "the burst")
        done = max(receiver.arrived.values())
        return {
            "messages": count,
            "send_s": sent - started,
            "deliver_s": done - started,
            "rate": count / (done - started),
            "refused": receiver.refused,
        }
    finally:
        await receiver.close()


@dataclass
class Ingest:
    plain: list[float] = field(default_factory=list)
    hooked: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    plain_cpu_us: list[float] = field(default_factory=list)  # server CPU per stored message
    hooked_cpu_us: list[float] = field(default_factory=list)  # ... its deliveries included
    hooked_own_us: list[float] = field(default_factory=list)  # ... of that, the server process
    receiver_us: list[float] = field(default_factory=list)  # this process's CPU per delivery
    plain_busy: list[float] = field(default_factory=list)  # the machine's busy cores, sending
    hooked_busy: list[float] = field(default_factory=list)
    delivered: int = 0
    # The HTTP floor: the server without a webhook, beside a poster (``_poster.py``, not
    # runsink) making as many signed POSTs a second to the receiver as the webhook's
    # deliveries came in that round.
    floor: list[float] = field(default_factory=list)
    floor_ratios: list[float] = field(default_factory=list)  # floor / without
    beyond_floor: list[float] = field(default_factory=list)  # with a webhook / floor
    poster_us: list[float] = field(default_factory=list)  # the poster's CPU per POST


async def measure_ingest(
    plain: ServerProcess,
    hooked: ServerProcess,
    duration: float,
    repeats: int,
    hold: bool = False,
    raw: bool = False,
) -> Ingest:
    """Messages/s over 8 connections into a run without a webhook and one with one. ``hold``:
    the webhook's receiver never answers, so its deliveries are written to the outbox and at
    most 8 attempts are in flight: what the durable outbox alone costs ingest."""
    receiver = Receiver(hold=hold)
    await receiver.start()
    figures = Ingest()
    try:
        targets: dict[str, str] = {}
        for server in (plain, hooked):
            run_id = f"bench-ingest-{uuid.uuid4().hex[:10]}"
            if server is hooked:
                receiver.secret = create_webhook(server.url, receiver.url, run_id)
            targets[server.name] = create_inbox(server.url, run_id)["address"]
        loop = asyncio.get_running_loop()
        sent_to_hook = 0
        # A round not counted first: the hooked server is fresh (the other one served the
        # latency and rate runs), and its first deliveries start its delivery child.
        for server in (plain, hooked):
            warm = await loop.run_in_executor(
                None, lambda s=server: run_sender(s.smtp_port, targets[s.name], 8, 0.5)
            )
            if server is hooked:
                sent_to_hook += int(warm["sent"])
        if not hold:
            await _until(
                receiver.changed,
                lambda: receiver.deliveries >= sent_to_hook,
                "the warm-up deliveries",
            )
        for server in (plain, hooked):
            await loop.run_in_executor(None, settle, server, 0)
        for repeat in range(repeats):
            pair = [plain, hooked] if repeat % 2 == 0 else [hooked, plain]
            rates: dict[str, float] = {}
            for server in pair:
                cpu_before, own_before = server.cpu_s(), _own_cpu_s(server.pid)
                mine_before, machine_before = time.process_time(), _machine()
                result = await loop.run_in_executor(
                    None,
                    lambda s=server: run_sender(
                        s.smtp_port, targets[s.name], 8, duration, server_pid=s.pid
                    ),
                )
                rates[server.name] = float(result["rate"])
                busy = _busy_cores(machine_before, _machine())
                (figures.hooked_busy if server is hooked else figures.plain_busy).append(busy)
                if server is hooked and not hold:
                    # Its deliveries go on after the sending stops: let them finish before
                    # the next measurement, so they count against this server only.
                    sent_to_hook += int(result["sent"])
                    await _until(
                        receiver.changed,
                        lambda n=sent_to_hook: receiver.deliveries >= n,
                        "the ingest deliveries",
                    )
                # The server's CPU per message, from the first send to the last delivery
                # (the warm-up's messages too: that is what it stored and delivered).
                sent = max(1, int(result["sent"]))
                cpu_us = (server.cpu_s() - cpu_before) / sent * 1e6
                (figures.hooked_cpu_us if server is hooked else figures.plain_cpu_us).append(cpu_us)
                if server is hooked:
                    figures.hooked_own_us.append((_own_cpu_s(server.pid) - own_before) / sent * 1e6)
                    figures.receiver_us.append((time.process_time() - mine_before) / sent * 1e6)
                # Its search index catches up now, not during the other server's round (the
                # second of each round lost ~half its rate to the first one's indexer).
                await loop.run_in_executor(None, settle, server, sent)
            figures.plain.append(rates[plain.name])
            figures.hooked.append(rates[hooked.name])
            ratio = rates[hooked.name] / rates[plain.name] if rates[plain.name] else 0.0
            figures.ratios.append(ratio)
            floor = ""
            if not hold:
                beside = await _beside_poster(
                    plain, targets[plain.name], duration, receiver, rates[hooked.name], figures, raw
                )
                figures.floor.append(beside)
                figures.floor_ratios.append(beside / rates[plain.name])
                figures.beyond_floor.append(rates[hooked.name] / beside if beside else 0.0)
                floor = f"; without beside the HTTP floor {beside:6.0f}/s"
            print(
                f"  round {repeat + 1}/{repeats}: without {rates[plain.name]:6.0f}/s, "
                f"with a webhook {rates[hooked.name]:6.0f}/s, ratio {ratio:.3f}{floor}",
                file=sys.stderr,
                flush=True,
            )
        figures.delivered = receiver.deliveries
        return figures
    finally:
        await receiver.close()


async def _beside_poster(
    server: ServerProcess,
    target: str,
    duration: float,
    receiver: Receiver,
    rate: float,
    figures: Ingest,
    raw: bool,
) -> float:
    """Messages/s into ``server`` (no webhook on its run) while ``_poster.py``, a process of
    its own at the delivery child's priority, POSTs ``rate`` signed deliveries a second to
    the receiver: what the deliveries' HTTP work alone (made and answered on this machine)
    costs ingest, whoever makes it (``raw``: pre-built requests, the cheapest Python client)."""
    loop = asyncio.get_running_loop()
    with tempfile.NamedTemporaryFile(suffix=".json") as body:
        body.write(receiver.sample)
        body.flush()
        way = ["--raw"] if raw else []
        poster = await asyncio.create_subprocess_exec(
            sys.executable, str(POSTER), receiver.url, receiver.secret, str(rate), body.name, *way
        )
        try:
            before = receiver.floor
            await _until(receiver.changed, lambda: receiver.floor > before, "the poster's first")
            cpu_before = _own_cpu_s(poster.pid)
            posted = receiver.floor
            result = await loop.run_in_executor(
                None,
                lambda: run_sender(server.smtp_port, target, 8, duration, server_pid=server.pid),
            )
            posts = max(1, receiver.floor - posted)
            figures.poster_us.append((_own_cpu_s(poster.pid) - cpu_before) / posts * 1e6)
        finally:
            poster.kill()
            await poster.wait()
    await loop.run_in_executor(None, settle, server, int(result["sent"]))
    return float(result["rate"])


def _own_cpu_s(pid: int) -> float:
    """A process's own CPU seconds, without its children's (``ServerProcess.cpu_s`` has both)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine() -> tuple[int, int]:
    """(all, idle) jiffies of every core so far (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(values), values[3] + values[4]


def _busy_cores(before: tuple[int, int], after: tuple[int, int]) -> float:
    """How many of the machine's cores were busy between two _machine() readings (everything
    on it: the server, the sender, the receiver, anyone else's work)."""
    total, idle = after[0] - before[0], after[1] - before[1]
    return (1 - idle / total) * (os.cpu_count() or 1) if total else 0.0


# -- report --------------------------------------------------------------------------------


def report(
    hook_ms: list[float],
    sse_ms: list[float],
    rate: dict[str, float],
    ingest: Ingest,
    args: argparse.Namespace,
) -> dict[str, Any]:
    mode = "quick" if args.quick else "full"
    print()
    backend = "PostgreSQL" if args.postgres else "SQLite"
    print(f"runsink webhook benchmark ({mode}; {backend}; receiver and SSE reader in one process)")
    print(f"load average {args.load_at_start:.2f} at start, {os.getloadavg()[0]:.2f} at end")
    hook_p50, hook_p99 = percentile(hook_ms, 50), percentile(hook_ms, 99)
    sse_p50, sse_p99 = percentile(sse_ms, 50), percentile(sse_ms, 99)
    print()
    print(f"| 250 -> (same {len(hook_ms)} messages, {args.gap:g} s apart) | p50 ms | p99 ms |")
    print("|---|---:|---:|")
    print(f"| webhook delivery at the receiver | {hook_p50:.2f} | {hook_p99:.2f} |")
    print(f"| SSE event on /v1/events | {sse_p50:.2f} | {sse_p99:.2f} |")
    print()
    lag_ms = (rate["deliver_s"] - rate["send_s"]) * 1000
    print(
        f"deliveries: {rate['messages']:.0f} messages over 8 connections, sent in "
        f"{rate['send_s']:.2f} s, the last delivered {lag_ms:.0f} ms after the last 250: "
        f"{rate['rate']:.0f} deliveries/s to one webhook (at most 8 in flight"
        + ("; delivery kept pace with ingest, so this is a lower bound)" if lag_ms < 100 else ")")
    )
    plain, hooked = median(ingest.plain), median(ingest.hooked)
    ratio = median(ingest.ratios)
    plain_cpu, hooked_cpu = median(ingest.plain_cpu_us), median(ingest.hooked_cpu_us)
    print(
        f"ingest at 8 connections ({len(ingest.ratios)} rounds of {args.duration:g} s, median): "
        f"without a webhook {plain:.0f} msg/s, with one {hooked:.0f} msg/s, ratio {ratio:.3f} "
        f"({ingest.delivered} deliveries made meanwhile); runsink CPU per message "
        f"{plain_cpu:.0f} µs without, {hooked_cpu:.0f} µs with its delivery (the server "
        f"process {median(ingest.hooked_own_us):.0f} µs, its delivery child the rest); the "
        f"receiver (this process) {median(ingest.receiver_us):.0f} µs per delivery; the "
        f"machine's {os.cpu_count()} cores busy {median(ingest.plain_busy):.2f} without, "
        f"{median(ingest.hooked_busy):.2f} with (everything on it)"
    )
    if ingest.floor:
        poster = (
            "pre-built requests at the child's priority, the cheapest Python client"
            if args.raw_floor
            else "the child's own code and priority"
        )
        print(
            f"the HTTP floor (the same rounds): without a webhook, beside a process that is not "
            f"runsink making as many signed POSTs a second to the receiver as the webhook's "
            f"deliveries came ({poster}, {median(ingest.poster_us):.0f} µs per POST): "
            f"{median(ingest.floor):.0f} msg/s, ratio to without "
            f"{median(ingest.floor_ratios):.3f} (rounds {min(ingest.floor_ratios):.3f}-"
            f"{max(ingest.floor_ratios):.3f}); with a webhook against the floor "
            f"{median(ingest.beyond_floor):.3f} (rounds {min(ingest.beyond_floor):.3f}-"
            f"{max(ingest.beyond_floor):.3f})"
        )
    print()
    within = hook_p50 <= 2 * sse_p50
    print(
        f"target: webhook p50 within 2x of SSE p50: {hook_p50:.2f} vs {sse_p50:.2f} ms "
        f"({hook_p50 / sse_p50:.2f}x, {'met' if within else 'MISSED'})"
    )
    print(
        f"target: ingest with a webhook within 5% of without: {ratio:.3f} "
        f"({'met' if ratio >= 0.95 else 'MISSED'})"
    )
    return {
        "backend": backend,
        "webhook_ms": {"p50": hook_p50, "p99": hook_p99, "count": len(hook_ms)},
        "sse_ms": {"p50": sse_p50, "p99": sse_p99, "count": len(sse_ms)},
        "deliveries": rate,
        "ingest": {
            "without": plain,
            "with": hooked,
            "ratio": ratio,
            "ratios": ingest.ratios,
            "cpu_us_without": plain_cpu,
            "cpu_us_with": hooked_cpu,
            "cpu_us_with_server_process": median(ingest.hooked_own_us),
            "receiver_cpu_us_per_delivery": median(ingest.receiver_us),
            "busy_cores_without": median(ingest.plain_busy),
            "busy_cores_with": median(ingest.hooked_busy),
            "http_floor": median(ingest.floor) if ingest.floor else None,
            "http_floor_ratio": median(ingest.floor_ratios) if ingest.floor else None,
            "http_floor_ratios": ingest.floor_ratios,
            "with_against_floor": median(ingest.beyond_floor) if ingest.floor else None,
            "poster_cpu_us_per_post": median(ingest.poster_us) if ingest.floor else None,
        },
    }


def report_floor(held: Ingest, args: argparse.Namespace) -> dict[str, Any]:
    ratio = median(held.ratios)
    print(
        f"outbox floor: ingest at 8 connections with a webhook whose receiver never answers "
        f"(every delivery written in its event's commit, at most 8 attempts in flight; "
        f"{len(held.ratios)} rounds of {args.duration:g} s, median): without "
        f"{median(held.plain):.0f} msg/s, with {median(held.hooked):.0f} msg/s, ratio "
        f"{ratio:.3f} (rounds {min(held.ratios):.3f}-{max(held.ratios):.3f}); runsink CPU per "
        f"message {median(held.plain_cpu_us):.0f} µs without, {median(held.hooked_cpu_us):.0f} "
        f"µs with"
    )
    return {"ratio": ratio, "ratios": held.ratios, "without": median(held.plain)}


async def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    policy_file = folder / "policies.toml"
    policy_file.write_text(POLICIES)
    servers: list[ServerProcess] = []
    cluster = Cluster.create() if args.postgres else None
    try:
        databases: list[list[str]] = [[], []]
        if cluster is not None:
            cluster.start()
            databases = [["--db", cluster.dsn(cluster.new_database())] for _ in range(2)]
        first = start_runsink(
            folder / "runsink", name="runsink", policy_file=policy_file, extra_args=databases[0]
        )
        servers.append(first)
        second = start_runsink(
            folder / "hooked", name="hooked", policy_file=policy_file, extra_args=databases[1]
        )
        servers.append(second)
        print(f"servers up in {folder}", file=sys.stderr, flush=True)
        hook_ms, sse_ms = await measure_latency(first, args.count, args.gap)
        rate = await measure_rate(first, args.burst)
        ingest = await measure_ingest(
            first, second, args.duration, args.repeats, raw=args.raw_floor
        )
        summary = report(hook_ms, sse_ms, rate, ingest, args)
        if args.outbox_floor:
            held = await measure_ingest(first, second, args.duration, args.repeats, hold=True)
            summary["outbox_floor"] = report_floor(held, args)
        return summary
    finally:
        for server in servers:
            server.stop()
        if cluster is not None:
            cluster.destroy()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--count", type=int, help="messages for the latencies")
    parser.add_argument("--burst", type=int, help="messages for the delivery rate")
    parser.add_argument(
        "--gap", type=float, default=0.2, help="seconds between the latency messages"
    )
    parser.add_argument("--duration", type=float, help="seconds per ingest measurement")
    parser.add_argument("--repeats", type=int, help="rounds of the ingest comparison")
    parser.add_argument(
        "--postgres", action="store_true", help="on a PostgreSQL this starts (not SQLite)"
    )
    parser.add_argument(
        "--outbox-floor",
        action="store_true",
        help="also ingest with a webhook whose receiver never answers (the outbox's own cost)",
    )
    parser.add_argument(
        "--raw-floor",
        action="store_true",
        help="the HTTP floor's POSTs pre-built (the cheapest client: the receiver's share)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    args.count = args.count or (50 if args.quick else 300)
    args.burst = args.burst or (300 if args.quick else 2000)
    args.duration = args.duration or (1.0 if args.quick else 3.0)
    args.repeats = args.repeats or (2 if args.quick else 6)
    args.load_at_start = os.getloadavg()[0]
    folder = Path(tempfile.mkdtemp(prefix="runsink-bench-webhooks-"))
    summary = asyncio.run(run(args, folder))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
