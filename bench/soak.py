"""Soak test: many agents and SMTP senders against one runsink, for a bounded time.

    .venv/bin/python bench/soak.py            # 60 s, 500 agents, 50 SMTP senders
    .venv/bin/python bench/soak.py --quick    # 10 s, 50 agents, 10 SMTP senders

Each agent loops: create an inbox, announce its address to the senders, long-poll
(`POST /v1/inboxes/{id}/wait`, following `next_action` and `retry_after`), read the
message, claim it, and start over with a new run. The senders hold reused SMTP
connections and send one ~4 KB mail to each announced address, plus background mail
to unknown addresses on the domain (kept as unrouted) at a bounded rate.

At the end every acknowledged message (250 after DATA) must have been found by its
agent, or at least be listed in its inbox: anything else is lost. It prints the counts,
the errors (HTTP 5xx, unexpected 4xx, client timeouts, SMTP replies other than 250),
latencies, and the server's RSS over time. Exit code 0 when nothing was lost and no
5xx (nor any other unexpected answer) was seen, else 1. Loopback only; every loop is
bounded in time and count; the agents and the senders run in processes of their own,
not in the server's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import queue
import random
import shutil
import ssl
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.context import SpawnProcess
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # the bench folder is not a package: see sys.path above
    ServerProcess,
    SMTPClient,
    SMTPError,
    percentile,
    start_runsink,
)

MESSAGE_BYTES = 4096
WAIT_S = 10.0  # timeout_s of each long-poll
HTTP_TIMEOUT_S = 60.0  # generous: a saturated server is slow, not broken
SMTP_TIMEOUT_S = 60.0
READY_DEADLINE_S = 60.0  # for the helper processes to start and connect
COLLECT_MARGIN_S = 90.0  # past the hard deadline: one last request may take its timeout
SAMPLE_SAMPLES = 5  # bodies of odd answers kept per process, for the report
AGENT_PROCESSES = 2
SENDER_PROCESSES = 1
MAIL_FROM = b"app@example.test"

# No poll pacing, a budget no agent spends, and a lease longer than the whole run: an
# acknowledged message that no agent finds is then lost, never a late arrival.
POLICY = """
[policy.soak]
poll_interval_s = [0]
poll_budget = 1000
ttl_default_s = {ttl}
ttl_max_s = {ttl}
long_poll_max_s = {wait:g}
inboxes_per_purpose = 3
"""


# -- what the processes share -------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    url: str
    smtp_port: int
    domain: str
    duration: float
    grace: float
    background_rate: float  # unrouted mail per second, over all sender processes


@dataclass(frozen=True)
class Shared:
    """The multiprocessing pieces; handed to each helper process when it is spawned."""

    addresses: Queue[tuple[str, str] | None]  # (address, token) from agents; None: stop
    results: Queue[dict[str, Any]]  # "ready", then one result per process
    go: Event
    start_at: Synchronized[float]  # time.monotonic() of the start (one clock for all)
    acked: Synchronized[int]
    claimed: Synchronized[int]


@dataclass(frozen=True)
class Window:
    start: float
    end: float  # no new work starts after this
    hard: float  # work in flight gives up here

    @classmethod
    def of(cls, plan: Plan, start: float) -> Window:
        return cls(start, start + plan.duration, start + plan.duration + plan.grace)


def _bump(counter: Synchronized[int]) -> None:
    with counter.get_lock():
        counter.value += 1


async def _started(shared: Shared, plan: Plan) -> Window:
    """Say ready, then block (off the loop) until the orchestrator says go."""
    shared.results.put({"role": "ready"})
    loop = asyncio.get_running_loop()
    if not await loop.run_in_executor(None, shared.go.wait, READY_DEADLINE_S):
        raise RuntimeError("no go from the orchestrator")
    return Window.of(plan, shared.start_at.value)


def soak_message(address: str, token: str) -> bytes:
    """A ~4 KB plain-text mail whose subject names its token, ready for DATA."""
    head = (
        "From: App <app@example.test>\r\n"
        f"To: <{address}>\r\n"
        f"Subject: soak {token}\r\n"
        "Date: Tue, 20 Oct 2026 02:30:00 +0000\r\n"
        f"Message-ID: <{token}@soak.example.test>\r\n"
        "MIME-Version: 1.0\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        "\r\n"
        "Hello, your code is 428913. Or follow https://app.example.test/verify?t=abc123\r\n"
    )
    filler = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.\r\n"
    lines = max(0, (MESSAGE_BYTES - len(head) - 5) // len(filler))
    return (head + filler * lines).encode() + b".\r\n"


# -- agents -------------------------------------------------------------------------


@dataclass
class AgentTally:
    """What one agent process saw. Only stdlib types go back over the results queue."""

    counts: Counter[str] = field(default_factory=Counter)
    wait_answers: Counter[str] = field(default_factory=Counter)
    http_5xx: Counter[str] = field(default_factory=Counter)
    unexpected: Counter[str] = field(default_factory=Counter)
    client_timeouts: Counter[str] = field(default_factory=Counter)
    transport_errors: Counter[str] = field(default_factory=Counter)
    samples: list[str] = field(default_factory=list)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)

    def sample(self, what: str, response: httpx.Response) -> None:
        if len(self.samples) < SAMPLE_SAMPLES:
            self.samples.append(f"{what}: {response.status_code} {response.text[:300]}")


class SoakAgent:
    """One agent: its own HTTP client, one request at a time, runs one after another."""

    def __init__(
        self, name: str, http: httpx.AsyncClient, shared: Shared, window: Window, tally: AgentTally
    ) -> None:
        self.name = name
        self.http = http
        self.shared = shared
        self.window = window
        self.tally = tally

    async def run(self) -> None:
        await asyncio.sleep(random.uniform(0, 1.0))  # stagger the first creates
        iteration = 0
        while time.monotonic() < self.window.end:
            if not await self.once(f"{self.name}.{iteration}"):
                await asyncio.sleep(0.2)  # an error must not turn into a flood of new runs
            iteration += 1

    async def once(self, token: str) -> bool:
        """One run: create, announce, wait until the mail is there, read, claim."""
        run_id = f"soak-{token}"
        body = {"run_id": run_id, "purpose": "soak", "policy": "soak"}
        created = await self.request("create", "POST", "/v1/inboxes", {201, 200}, json=body)
        if created is None:
            return False
        inbox = created.json()
        self.tally.counts["inboxes created"] += 1
        record: dict[str, Any] = {
            "run_id": run_id,
            "inbox_id": inbox["inbox_id"],
            "address": inbox["address"],
            "token": token,
            "announced_at": time.monotonic(),
        }
        self.tally.records.append(record)
        self.shared.addresses.put((inbox["address"], token))

        message = await self.wait_for(inbox["inbox_id"], run_id)
        if message is None:
            return False
        record.update(found_at=time.monotonic(), subject=message["subject"])
        self.tally.counts["messages found"] += 1
        if message["subject"] != f"soak {token}":
            return False  # the cross-check reports it: another run's mail in this inbox
        message_id = message["message_id"]
        headers = {"X-Run-Id": run_id}
        read = await self.request(
            "read", "GET", f"/v1/messages/{message_id}", {200}, headers=headers
        )
        if read is None:
            return False
        self.tally.counts["reads"] += 1
        if read.json().get("subject") != f"soak {token}":
            self.tally.unexpected["read: another subject"] += 1
        claimed = await self.request(
            "claim", "POST", f"/v1/messages/{message_id}/claim", {200}, json={"run_id": run_id}
        )
        if claimed is None:
            return False
        answer = claimed.json()
        if answer.get("next_action") != "proceed":
            self.tally.unexpected[f"claim: {answer.get('next_action')}/{answer.get('reason')}"] += 1
            self.tally.sample("claim", claimed)
            return False
        # A retried claim (after a client timeout) answers already_claimed: still one claim.
        self.tally.counts["claims"] += 1
        _bump(self.shared.claimed)
        return True

    async def wait_for(self, inbox_id: str, run_id: str) -> dict[str, Any] | None:
        """Long-poll, following next_action and retry_after, until evidence or the deadline."""
        while True:
            remaining = self.window.hard - time.monotonic()
            if remaining <= 0:
                self.tally.counts["waits given up at the deadline"] += 1
                return None
            timeout_s = round(min(WAIT_S, remaining), 1)
            answer = await self.request(
                "wait",
                "POST",
                f"/v1/inboxes/{inbox_id}/wait",
                {200},
                json={"timeout_s": timeout_s, "run_id": run_id},
                read_s=timeout_s + HTTP_TIMEOUT_S,
            )
            if answer is None:
                return None
            envelope = answer.json()
            action = envelope["next_action"]
            self.tally.wait_answers[f"{envelope['state']}/{envelope['reason'] or '-'}"] += 1
            if action == "claim_message":
                message: dict[str, Any] = envelope["message"]
                return message
            if action not in ("wait_for_message", "wait_then_retry", "verify_trigger"):
                # expired, stop, proceed: none should happen to a fresh inbox with this policy
                self.tally.unexpected[f"wait: {action}/{envelope['reason']}"] += 1
                self.tally.sample("wait", answer)
                return None
            delay = envelope.get("retry_after") or 0.0
            if delay:
                await asyncio.sleep(min(delay, max(0.0, self.window.hard - time.monotonic())))

    async def request(
        self,
        op: str,
        method: str,
        path: str,
        expected: set[int],
        *,
        json: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        read_s: float = HTTP_TIMEOUT_S,
    ) -> httpx.Response | None:
        """One call, retried (every call here is safe to repeat) on a 5xx, a client timeout or
        a broken connection, until the hard deadline; None when it gave up or got a 4xx."""
        tally = self.tally
        while time.monotonic() < self.window.hard:
            started = time.monotonic()
            try:
                response = await self.http.request(
                    method, path, json=json, headers=headers, timeout=read_s
                )
            except httpx.TimeoutException:
                tally.client_timeouts[op] += 1
                continue
            except httpx.TransportError as exc:
                tally.transport_errors[f"{op}: {type(exc).__name__}"] += 1
                await asyncio.sleep(0.2)
                continue
            tally.counts[f"http {op}"] += 1
            tally.latency_ms.setdefault(op, []).append((time.monotonic() - started) * 1000)
            if response.status_code >= 500:
                tally.http_5xx[f"{op} {response.status_code}"] += 1
                tally.sample(op, response)
                await asyncio.sleep(_retry_after(response))
                continue
            if response.status_code not in expected:
                tally.unexpected[f"{op} {response.status_code}"] += 1
                tally.sample(op, response)
                return None
            return response
        tally.counts[f"{op} given up at the deadline"] += 1
        return None


def _retry_after(response: httpx.Response) -> float:
    try:
        return min(5.0, float(response.headers.get("Retry-After", "0.5")))
    except ValueError:
        return 0.5


async def _run_agents(plan: Plan, shared: Shared, proc: int, agents: int) -> dict[str, Any]:
    tally = AgentTally()
    # One TLS context for all (httpx builds one per client otherwise; this is plain HTTP),
    # no proxy from the environment (loopback only), and idle connections dropped before
    # uvicorn's 5 s keep-alive ends, so that no request races the server's close.
    tls = ssl.create_default_context()
    limits = httpx.Limits(max_connections=2, max_keepalive_connections=1, keepalive_expiry=4.0)
    clients = [
        httpx.AsyncClient(base_url=plan.url, verify=tls, trust_env=False, limits=limits)
        for _ in range(agents)
    ]
    try:
        window = await _started(shared, plan)
        cpu_0 = time.process_time()
        team = [SoakAgent(f"p{proc}a{i}", c, shared, window, tally) for i, c in enumerate(clients)]
        await asyncio.gather(*(agent.run() for agent in team))
        cpu = time.process_time() - cpu_0
    finally:
        await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)
    return {"role": "agents", "cpu_s": cpu, **vars(tally)}


def agent_process(plan: Plan, shared: Shared, proc: int, agents: int) -> None:
    shared.results.put(asyncio.run(_run_agents(plan, shared, proc, agents)))


# -- senders ------------------------------------------------------------------------


@dataclass
class SenderTally:
    acks: list[tuple[str, str, float]] = field(default_factory=list)  # address, token, when
    codes: Counter[str] = field(default_factory=Counter)  # replies other than 250
    failures: Counter[str] = field(default_factory=Counter)  # broken or timed-out sessions
    uncertain: list[str] = field(default_factory=list)  # addresses whose outcome is unknown
    send_ms: list[float] = field(default_factory=list)  # MAIL FROM to the 250 after DATA
    unrouted_acked: int = 0


def _take(addresses: Queue[tuple[str, str] | None], wait_s: float) -> list[Any]:
    """What is queued, waiting up to ``wait_s`` for the first item; stops after a None."""
    items: list[Any] = []
    try:
        item = addresses.get(timeout=wait_s)
    except queue.Empty:
        return items
    while True:
        items.append(item)
        if item is None or len(items) >= 256:
            return items
        try:
            item = addresses.get_nowait()
        except queue.Empty:
            return items


async def _reconnect(old: SMTPClient, port: int, until: float, tally: SenderTally) -> SMTPClient:
    await old.close()
    while True:
        try:
            return await asyncio.wait_for(SMTPClient.connect(port), SMTP_TIMEOUT_S)
        except (SMTPError, OSError, TimeoutError) as exc:
            tally.failures[f"connect: {type(exc).__name__}"] += 1
            if time.monotonic() >= until:
                raise
            await asyncio.sleep(0.5)


async def _send(
    client: SMTPClient, rcpt: str, message: bytes, tally: SenderTally
) -> tuple[int | None, bool]:
    """(reply code or None, whether the session broke and needs a new connection)."""
    try:
        code = await asyncio.wait_for(
            client.send(MAIL_FROM, rcpt.encode(), message), SMTP_TIMEOUT_S
        )
    except (SMTPError, OSError, TimeoutError) as exc:
        tally.failures[f"send: {type(exc).__name__}"] += 1
        return None, True
    if code != 250:
        tally.codes[str(code)] += 1
    return code, False


async def _run_senders(
    plan: Plan, shared: Shared, proc: int, connections: int, rate: float
) -> dict[str, Any]:
    port = plan.smtp_port
    clients = list(await asyncio.gather(*(SMTPClient.connect(port) for _ in range(connections))))
    background_client = await SMTPClient.connect(port) if rate > 0 else None
    window = await _started(shared, plan)
    cpu_0 = time.process_time()
    tally = SenderTally()
    local: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    give_up = window.hard + COLLECT_MARGIN_S / 2

    async def pump() -> None:
        """From the agents' queue to the workers, until a None (or past the deadline)."""
        try:
            while time.monotonic() < give_up:
                items = await loop.run_in_executor(None, _take, shared.addresses, 0.2)
                for item in items:
                    if item is None:
                        return
                    local.put_nowait(item)
        finally:
            for _ in clients:
                local.put_nowait(None)

    async def worker(client: SMTPClient) -> None:
        while (item := await local.get()) is not None:
            address, token = item
            sent_at = time.monotonic()
            code, broken = await _send(client, address, soak_message(address, token), tally)
            if code == 250:
                acked_at = time.monotonic()
                tally.acks.append((address, token, acked_at))
                tally.send_ms.append((acked_at - sent_at) * 1000)
                _bump(shared.acked)
            if broken:
                tally.uncertain.append(address)
                try:
                    client = await _reconnect(client, port, give_up, tally)
                except (SMTPError, OSError, TimeoutError):
                    return  # what is left in the queue is counted as never sent
        await client.close()

    async def background(client: SMTPClient) -> None:
        """Mail for unknown addresses on our domain, on a fixed schedule, until the end."""
        message = soak_message(f"nobody@{plan.domain}", "unrouted")
        due = window.start
        while (due := due + 1 / rate) < window.end:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            rcpt = f"nobody-{uuid.uuid4().hex[:12]}@{plan.domain}"
            code, broken = await _send(client, rcpt, message, tally)
            if code == 250:
                tally.unrouted_acked += 1
            if broken:
                try:
                    client = await _reconnect(client, port, window.end, tally)
                except (SMTPError, OSError, TimeoutError):
                    return
        await client.close()

    work = [pump(), *(worker(c) for c in clients)]
    if background_client is not None:
        work.append(background(background_client))
    await asyncio.gather(*work)
    return {"role": "senders", "cpu_s": time.process_time() - cpu_0, **vars(tally)}


def sender_process(plan: Plan, shared: Shared, proc: int, connections: int, rate: float) -> None:
    shared.results.put(asyncio.run(_run_senders(plan, shared, proc, connections, rate)))


# -- the orchestrator ---------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the start
    rss_mb: float
    acked: int
    claimed: int


def warm_up(server: ServerProcess) -> str:
    """One whole run (create, mail, wait, read, claim) before the load; returns the domain."""

    async def one_run() -> str:
        run_id = f"soak-warmup-{uuid.uuid4().hex[:8]}"
        async with httpx.AsyncClient(base_url=server.url, timeout=30, trust_env=False) as http:
            created = await http.post(
                "/v1/inboxes", json={"run_id": run_id, "purpose": "soak", "policy": "soak"}
            )
            if created.status_code != 201:
                raise RuntimeError(f"warm-up create: {created.status_code} {created.text}")
            inbox = created.json()
            smtp = await SMTPClient.connect(server.smtp_port)
            try:
                code = await smtp.send(
                    MAIL_FROM, inbox["address"].encode(), soak_message(inbox["address"], "warmup")
                )
            finally:
                await smtp.close()
            if code != 250:
                raise RuntimeError(f"warm-up mail: SMTP {code}")
            waited = await http.post(
                f"/v1/inboxes/{inbox['inbox_id']}/wait", json={"timeout_s": 10, "run_id": run_id}
            )
            message = waited.json().get("message") or {}
            if waited.status_code != 200 or not message:
                raise RuntimeError(f"warm-up wait: {waited.status_code} {waited.text}")
            read = await http.get(f"/v1/messages/{message['message_id']}")
            claim = await http.post(
                f"/v1/messages/{message['message_id']}/claim", json={"run_id": run_id}
            )
            if read.status_code != 200 or claim.status_code != 200:
                raise RuntimeError(f"warm-up read/claim: {read.status_code}/{claim.status_code}")
            address: str = inbox["address"]
            return address.rpartition("@")[2]

    return asyncio.run(one_run())


def _spawn_helpers(
    plan: Plan, shared: Shared, agents: int, senders: int
) -> tuple[list[SpawnProcess], list[SpawnProcess]]:
    ctx = multiprocessing.get_context("spawn")
    agent_procs = min(AGENT_PROCESSES, agents)
    sender_procs = min(SENDER_PROCESSES, senders)
    agent_team = [
        ctx.Process(
            target=agent_process,
            args=(plan, shared, i, len(range(i, agents, agent_procs))),
            name=f"soak-agents-{i}",
        )
        for i in range(agent_procs)
    ]
    sender_team = [
        ctx.Process(
            target=sender_process,
            args=(
                plan,
                shared,
                i,
                len(range(i, senders, sender_procs)),
                plan.background_rate / sender_procs,
            ),
            name=f"soak-senders-{i}",
        )
        for i in range(sender_procs)
    ]
    for process in (*agent_team, *sender_team):
        process.start()
    return agent_team, sender_team


def _results(
    shared: Shared, want: int, until: float, processes: Sequence[SpawnProcess]
) -> list[dict[str, Any]]:
    """``want`` results (or fewer, if a process died or the deadline passed)."""
    got: list[dict[str, Any]] = []
    while len(got) < want and time.monotonic() < until:
        try:
            got.append(shared.results.get(timeout=0.5))
        except queue.Empty:
            if all(p.exitcode is not None for p in processes):
                break
    return got


def run_load(
    server: ServerProcess, plan: Plan, shared: Shared, args: argparse.Namespace
) -> dict[str, Any]:
    """Start the helpers, sample RSS while they work, collect what they saw."""
    agent_team, sender_team = _spawn_helpers(plan, shared, args.agents, args.senders)
    everyone = [*agent_team, *sender_team]
    try:
        ready = _results(shared, len(everyone), time.monotonic() + READY_DEADLINE_S, everyone)
        if len(ready) < len(everyone):
            raise RuntimeError(f"only {len(ready)} of {len(everyone)} helper processes started")
        start = time.monotonic() + 0.2
        shared.start_at.value = start
        shared.go.set()
        window = Window.of(plan, start)
        server_cpu_0 = server.cpu_s()
        print(
            f"load: {args.agents} agents in {len(agent_team)} process(es), {args.senders} SMTP "
            f"connections in {len(sender_team)}, {plan.duration:g} s (+ up to {plan.grace:g} s "
            "for work in flight)",
            file=sys.stderr,
            flush=True,
        )

        samples: list[Sample] = []
        results: list[dict[str, Any]] = []
        due = start
        until = window.hard + COLLECT_MARGIN_S
        while len(results) < len(agent_team) and time.monotonic() < until:
            if time.monotonic() >= due:
                samples.append(_sample(server, shared, start))
                _progress(samples[-1])
                due += args.sample_every
            try:
                results.append(shared.results.get(timeout=max(0.05, due - time.monotonic())))
            except queue.Empty:
                if all(p.exitcode is not None for p in agent_team):
                    break
        load_end = time.monotonic()
        server_cpu = server.cpu_s() - server_cpu_0
        for _ in sender_team:
            shared.addresses.put(None)
        results += _results(shared, len(sender_team), until, sender_team)
        samples.append(_sample(server, shared, start))
    finally:
        for process in everyone:
            process.join(10)
            if process.exitcode is None:
                process.kill()
                process.join(5)
    crashed = [p.name for p in everyone if p.exitcode]
    return {
        "results": results,
        "samples": samples,
        "load_s": load_end - start,
        "server_cpu_s": server_cpu,
        "crashed": crashed,
    }


def _sample(server: ServerProcess, shared: Shared, start: float) -> Sample:
    return Sample(
        round(time.monotonic() - start, 1),
        server.rss_mb() or 0.0,
        shared.acked.value,
        shared.claimed.value,
    )


def _progress(sample: Sample) -> None:
    print(
        f"  t={sample.t:5.1f}s  RSS {sample.rss_mb:6.1f} MB  acked {sample.acked:6d}  "
        f"claimed {sample.claimed:6d}  load average {os.getloadavg()[0]:.2f}",
        file=sys.stderr,
        flush=True,
    )


# -- the cross-check ----------------------------------------------------------------


@dataclass
class Check:
    acked: int = 0
    found: int = 0
    listed_only: list[str] = field(default_factory=list)  # stored, not found by the agent
    lost: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)  # an agent found another run's mail
    found_unacked: int = 0
    never_sent: int = 0
    ack_to_found_ms: list[float] = field(default_factory=list)
    announce_to_found_ms: list[float] = field(default_factory=list)


def cross_check(server: ServerProcess, records: list[dict[str, Any]], acks: list[Any]) -> Check:
    """Every acknowledged mail was found by its agent or is listed in its inbox."""
    check = Check(acked=len(acks))
    by_address = {record["address"]: record for record in records}
    acked_addresses = set()
    with httpx.Client(base_url=server.url, timeout=HTTP_TIMEOUT_S, trust_env=False) as http:
        for address, token, acked_at in acks:
            acked_addresses.add(address)
            record = by_address.get(address)
            if record is None:
                check.lost.append(f"{address}: no agent announced it")
                continue
            if "subject" in record:
                if record["subject"] != f"soak {token}":
                    check.wrong.append(f"{address}: found {record['subject']!r}")
                    continue
                check.found += 1
                check.ack_to_found_ms.append((record["found_at"] - acked_at) * 1000)
                check.announce_to_found_ms.append(
                    (record["found_at"] - record["announced_at"]) * 1000
                )
                continue
            listing = http.get(
                f"/v1/inboxes/{record['inbox_id']}/messages",
                params={"limit": 500},
                headers={"X-Run-Id": record["run_id"]},
            )
            subjects = [m["subject"] for m in listing.json().get("messages", [])]
            if listing.status_code == 200 and f"soak {token}" in subjects:
                check.listed_only.append(address)
            else:
                check.lost.append(f"{address} ({record['inbox_id']}): listed {subjects}")
    for record in records:
        if record["address"] not in acked_addresses:
            if "subject" in record:
                check.found_unacked += 1
            else:
                check.never_sent += 1
    return check


def server_metrics(server: ServerProcess) -> dict[str, float]:
    """The few /metrics figures the report shows, summed over their labels."""
    wanted = {
        'runsink_messages_total{outcome="stored"}': "stored",
        'runsink_messages_total{outcome="unrouted"}': "unrouted",
        "runsink_provider_failures_total": "provider failures",
        "runsink_blocked_calls_total": "blocked calls",
        "runsink_active_long_polls": "active long-polls",
        "runsink_smtp_connections": "SMTP connections",
    }
    figures = dict.fromkeys(wanted.values(), 0.0)
    figures["HTTP 5xx"] = 0.0
    text = httpx.get(f"{server.url}/metrics", timeout=30, trust_env=False).text
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        bare = name.split("{", 1)[0]
        for prefix, label in wanted.items():
            if name == prefix or ("{" not in prefix and bare == prefix):
                figures[label] += float(value)
        if bare == "runsink_http_request_duration_seconds_count" and 'status="5xx"' in name:
            figures["HTTP 5xx"] += float(value)
    return figures


# -- report -------------------------------------------------------------------------


def _sum(results: list[dict[str, Any]], key: str) -> Counter[str]:
    total: Counter[str] = Counter()
    for result in results:
        total.update(result.get(key, {}))
    return total


def _listing(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items())) or "none"


def _pcts(values: list[float]) -> str:
    if not values:
        return "n/a"
    return (
        f"p50 {percentile(values, 50):.1f} ms, p99 {percentile(values, 99):.1f} ms, "
        f"max {max(values):.1f} ms"
    )


def _slope_mb_per_min(samples: list[Sample]) -> float:
    """Least-squares slope of RSS over time."""
    if len(samples) < 2:
        return 0.0
    mean_t = sum(s.t for s in samples) / len(samples)
    mean_r = sum(s.rss_mb for s in samples) / len(samples)
    spread = sum((s.t - mean_t) ** 2 for s in samples)
    if not spread:
        return 0.0
    return sum((s.t - mean_t) * (s.rss_mb - mean_r) for s in samples) / spread * 60


def report(
    args: argparse.Namespace,
    plan: Plan,
    load: dict[str, Any],
    check: Check,
    metrics: dict[str, float],
    rss: dict[str, float],
) -> dict[str, Any]:
    agents = [r for r in load["results"] if r["role"] == "agents"]
    senders = [r for r in load["results"] if r["role"] == "senders"]
    counts = _sum(agents, "counts")
    http_5xx = _sum(agents, "http_5xx")
    unexpected = _sum(agents, "unexpected")
    timeouts = _sum(agents, "client_timeouts")
    transport = _sum(agents, "transport_errors")
    smtp_codes = _sum(senders, "codes")
    smtp_failures = _sum(senders, "failures")
    unrouted = sum(int(r["unrouted_acked"]) for r in senders)
    uncertain = sum(len(r["uncertain"]) for r in senders)
    latency: dict[str, list[float]] = {}
    for result in agents:
        for op, values in result["latency_ms"].items():
            latency.setdefault(op, []).extend(values)
    samples: list[Sample] = load["samples"]
    during = [s for s in samples[:-1] if s.t <= plan.duration + 0.5]  # the last: after
    settled = [s for s in during if s.t >= args.warmup] or during
    start_rss, end_rss = settled[0].rss_mb, settled[-1].rss_mb
    requests = sum(v for k, v in counts.items() if k.startswith("http "))
    seconds = load["load_s"]

    print()
    print(
        f"runsink soak ({'quick' if args.quick else 'full'}: {plan.duration:g} s, "
        f"{args.agents} agents, {args.senders} SMTP senders, ~{MESSAGE_BYTES} B messages, "
        f"grace {plan.grace:g} s; load lasted {load['load_s']:.1f} s)"
    )
    load_end = os.getloadavg()[0]
    print(
        f"load average {args.load_at_start:.2f} at start, {load_end:.2f} at end "
        "(2 shared cores: saturated on purpose)"
    )
    print()
    print(
        f"messages   acknowledged {check.acked} (250 after DATA), found by their agent "
        f"{check.found}, stored but not found by the deadline {len(check.listed_only)}, "
        f"LOST {len(check.lost)}, found in the wrong inbox {len(check.wrong)}"
    )
    print(
        f"           found without a 250 {check.found_unacked}; announced but never sent "
        f"{check.never_sent}; sessions broken mid-send {uncertain}"
    )
    print(
        f"agents     inboxes created {counts['inboxes created']}, waits {counts['http wait']}, "
        f"found {counts['messages found']}, reads {counts['reads']}, claims {counts['claims']}"
    )
    print(f"           wait answers (state/reason): {_listing(_sum(agents, 'wait_answers'))}")
    print(
        f"errors     HTTP 5xx {sum(http_5xx.values())} ({_listing(http_5xx)}); unexpected "
        f"answers {sum(unexpected.values())} ({_listing(unexpected)})"
    )
    print(
        f"           client timeouts {sum(timeouts.values())} ({_listing(timeouts)}); "
        f"transport errors {sum(transport.values())} ({_listing(transport)})"
    )
    print(
        f"           SMTP replies other than 250 {sum(smtp_codes.values())} "
        f"({_listing(smtp_codes)}); SMTP session failures {sum(smtp_failures.values())} "
        f"({_listing(smtp_failures)})"
    )
    gave_up = {k: v for k, v in counts.items() if "given up" in k}
    if gave_up:
        print(f"           gave up at the hard deadline: {_listing(Counter(gave_up))}")
    for result in agents:
        for line in result["samples"]:
            print(f"           sample: {line}")
    print(
        f"background unrouted mail acknowledged {unrouted} "
        f"(~{plan.background_rate:g}/s during the {plan.duration:g} s)"
    )
    print(
        f"throughput acknowledged {check.acked / seconds:.1f} msg/s, claims "
        f"{counts['claims'] / seconds:.1f}/s, HTTP {requests / seconds:.0f} req/s "
        f"(over the {seconds:.1f} s of load)"
    )
    print(f"latency    250 -> found by the waiting agent: {_pcts(check.ack_to_found_ms)}")
    print(f"           address announced -> found:       {_pcts(check.announce_to_found_ms)}")
    send_ms = [ms for r in senders for ms in r["send_ms"]]
    print(f"           SMTP transaction (MAIL to 250): {_pcts(send_ms)}")
    for op in ("create", "read", "claim"):
        print(f"           HTTP {op:<6} {_pcts(latency.get(op, []))}")
    print(
        f"server     stored {metrics['stored']:.0f} (acknowledged {check.acked} + 1 warm-up), "
        f"unrouted {metrics['unrouted']:.0f}, provider failures "
        f"{metrics['provider failures']:.0f}, blocked calls {metrics['blocked calls']:.0f}, "
        f"5xx {metrics['HTTP 5xx']:.0f}; after the load: active long-polls "
        f"{metrics['active long-polls']:.0f}, SMTP connections {metrics['SMTP connections']:.0f}"
    )
    shares = [f"server {load['server_cpu_s'] / load['load_s']:.0%}"]
    shares += [f"agents {r['cpu_s'] / load['load_s']:.0%}" for r in agents]
    shares += [f"senders {r['cpu_s'] / load['load_s']:.0%}" for r in senders]
    print(f"CPU        of one core, over the load: {', '.join(shares)}")
    print(
        f"RSS        idle (after warm-up run) {rss['idle']:.1f} MB; under load from "
        f"t={settled[0].t:g}s {start_rss:.1f} MB -> t={settled[-1].t:g}s {end_rss:.1f} MB "
        f"({end_rss - start_rss:+.1f} MB; slope {_slope_mb_per_min(settled):+.1f} MB/min, over "
        f"the second half {_slope_mb_per_min(settled[len(settled) // 2 :]):+.1f} MB/min); "
        f"after the load {rss['after']:.1f} MB; peak (VmHWM) {rss['peak']:.1f} MB"
    )
    print("RSS series (t s: MB): " + "  ".join(f"{s.t:g}: {s.rss_mb:.1f}" for s in samples))
    failed = bool(check.lost or check.wrong or http_5xx or unexpected or load["crashed"])
    if load["crashed"]:
        print(f"helper processes that failed: {', '.join(load['crashed'])}")
    print()
    print(
        f"verdict: lost {len(check.lost)}, wrong inbox {len(check.wrong)}, HTTP 5xx "
        f"{sum(http_5xx.values())}, unexpected answers {sum(unexpected.values())} -> "
        f"{'FAIL' if failed else 'ok'}"
    )
    for line in (check.lost + check.wrong)[:10]:
        print(f"  {line}")
    return {
        "failed": failed,
        "acknowledged": check.acked,
        "found": check.found,
        "stored_not_found": len(check.listed_only),
        "lost": check.lost,
        "wrong_inbox": check.wrong,
        "found_unacked": check.found_unacked,
        "never_sent": check.never_sent,
        "counts": dict(counts),
        "http_5xx": dict(http_5xx),
        "unexpected": dict(unexpected),
        "client_timeouts": dict(timeouts),
        "transport_errors": dict(transport),
        "smtp_codes": dict(smtp_codes),
        "smtp_failures": dict(smtp_failures),
        "unrouted_acked": unrouted,
        "server_metrics": metrics,
        "rss_mb": {**rss, "start": start_rss, "end": end_rss},
        "rss_series": [[s.t, s.rss_mb, s.acked, s.claimed] for s in samples],
        "ack_to_found_ms": {
            "p50": percentile(check.ack_to_found_ms, 50) if check.ack_to_found_ms else None,
            "p99": percentile(check.ack_to_found_ms, 99) if check.ack_to_found_ms else None,
        },
        "load_average": [args.load_at_start, load_end],
    }


# -- entry point --------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 s, 50 agents, 10 senders")
    parser.add_argument("--duration", type=float, help="seconds of load (default 60)")
    parser.add_argument("--agents", type=int, help="concurrent agents (default 500)")
    parser.add_argument("--senders", type=int, help="SMTP connections (default 50)")
    parser.add_argument("--grace", type=float, help="seconds for work in flight at the end")
    parser.add_argument("--background-rate", type=float, help="unrouted mail per second")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    args.duration = args.duration or (10.0 if args.quick else 60.0)
    args.agents = args.agents or (50 if args.quick else 500)
    args.senders = args.senders or (10 if args.quick else 50)
    args.grace = args.grace if args.grace is not None else (10.0 if args.quick else 20.0)
    if args.background_rate is None:
        args.background_rate = 5.0 if args.quick else 20.0
    args.sample_every = 1.0 if args.quick else 5.0
    args.warmup = min(10.0, args.duration / 5)
    if args.duration <= 0 or args.agents < 1 or args.senders < 1 or args.grace < 0:
        parser.error("--duration, --agents and --senders must be positive, --grace >= 0")
    args.load_at_start = os.getloadavg()[0]

    folder = Path(tempfile.mkdtemp(prefix="runsink-soak-"))
    policy_file = folder / "policy.toml"
    ttl = int(args.duration + args.grace + COLLECT_MARGIN_S + 600)
    policy_file.write_text(POLICY.format(ttl=ttl, wait=WAIT_S))
    server: ServerProcess | None = None
    try:
        server = start_runsink(folder, name="soak", policy_file=policy_file)
        domain = warm_up(server)
        idle_rss = server.rss_mb() or 0.0
        print(f"runsink up in {folder}, idle RSS {idle_rss:.1f} MB", file=sys.stderr, flush=True)
        plan = Plan(
            server.url,
            server.smtp_port,
            domain,
            args.duration,
            args.grace,
            args.background_rate,
        )
        ctx = multiprocessing.get_context("spawn")
        shared = Shared(
            addresses=ctx.Queue(),
            results=ctx.Queue(),
            go=ctx.Event(),
            start_at=ctx.Value("d", 0.0),
            acked=ctx.Value("q", 0),
            claimed=ctx.Value("q", 0),
        )
        load = run_load(server, plan, shared, args)
        print("cross-checking...", file=sys.stderr, flush=True)
        records = [rec for r in load["results"] if r["role"] == "agents" for rec in r["records"]]
        acks = [ack for r in load["results"] if r["role"] == "senders" for ack in r["acks"]]
        check = cross_check(server, records, acks)
        metrics = server_metrics(server)
        rss = {
            "idle": idle_rss,
            "after": server.rss_mb() or 0.0,
            "peak": server.peak_rss_mb() or 0.0,
        }
        summary = report(args, plan, load, check, metrics, rss)
        if args.json:
            args.json.write_text(json.dumps(summary, indent=2))
    finally:
        if server is not None:
            server.stop()
        if args.keep:
            print(f"kept {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
