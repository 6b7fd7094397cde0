"""Abuse: slow HTTP clients and held SMTP connections against one runsink, while an agent works.

    .venv/bin/python bench/abuse.py            # 2,000 slow HTTP clients + 600 SMTP, 100 loops
    .venv/bin/python bench/abuse.py --quick    # 300 + 100, 20 loops

The attackers run in a process of their own: each slow HTTP client sends a request line,
then one header line every 5 s, and reconnects as soon as the server closes it (the 408 at
``--http-header-timeout``); each SMTP client connects, reads its first line (220 or 421)
and then says nothing, reconnecting when closed. With them held open, the bench measures
``GET /healthz`` (a new connection each time, and on a kept-alive one) and runs a normal
agent loop: create an inbox, send it a mail over SMTP, wait for it (long-poll), read it,
claim it. It prints a Markdown table: latencies before and under load, the refusals the
server counted, and its RSS and descriptors. Loopback only; every loop is bounded in time.

Then the stream flood (issue 23), on a server of its own: ``--streams`` live-event streams
(``GET /v1/events``) asked for with one minted run token, then as many again with a run
token per run of 32 until the streams' own cap is full; with all of them held, an admin's
create and ``/healthz`` are timed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import smtplib
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import HOST, percentile, start_runsink  # the bench folder is not a package

TRICKLE_S = 5.0
HTTP_TIMEOUT_S = 30.0


# -- the attackers (a process of their own) -----------------------------------------


async def _slow_http(port: int, end: float, stats: Counter[str]) -> None:
    while time.monotonic() < end:
        try:
            reader, writer = await asyncio.open_connection(HOST, port)
        except OSError:
            stats["http_connect_failed"] += 1
            await asyncio.sleep(0.5)
            continue
        stats["http_held"] += 1
        try:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
            line = 0
            while time.monotonic() < end:
                try:
                    answer = await asyncio.wait_for(reader.read(1024), TRICKLE_S)
                except TimeoutError:
                    line += 1
                    writer.write(b"X-Slow-%d: 1\r\n" % line)
                    continue
                stats["http_408" if answer.startswith(b"HTTP/1.1 408") else "http_closed"] += 1
                break
        except OSError:
            stats["http_reset"] += 1
        finally:
            stats["http_held"] -= 1
            writer.close()


async def _silent_smtp(port: int, end: float, stats: Counter[str]) -> None:
    while time.monotonic() < end:
        try:
            reader, writer = await asyncio.open_connection(HOST, port)
        except OSError:
            stats["smtp_connect_failed"] += 1
            await asyncio.sleep(0.5)
            continue
        try:
            first = await asyncio.wait_for(reader.readline(), 10)
            stats[f"smtp_first_{first[:3].decode(errors='replace') or 'none'}"] += 1
            if first.startswith(b"220"):
                stats["smtp_held"] += 1
                try:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(reader.read(), max(0.0, end - time.monotonic()))
                finally:
                    stats["smtp_held"] -= 1
            else:
                await asyncio.sleep(0.5)
        except (OSError, TimeoutError):
            stats["smtp_silent_or_reset"] += 1
        finally:
            writer.close()


async def _attack(args: argparse.Namespace) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = args.slow + args.smtp + 256
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    stats: Counter[str] = Counter()
    end = time.monotonic() + args.duration
    tasks = [asyncio.create_task(_slow_http(args.http_port, end, stats)) for _ in range(args.slow)]
    tasks += [
        asyncio.create_task(_silent_smtp(args.smtp_port, end, stats)) for _ in range(args.smtp)
    ]
    while time.monotonic() < end:
        print(json.dumps(dict(stats)), flush=True)
        await asyncio.sleep(1.0)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps(dict(stats)), flush=True)


# -- the measurements ---------------------------------------------------------------


def _healthz(url: str, port: int, count: int, fresh: bool) -> list[float]:
    """``GET /healthz`` latencies in ms (inf for anything but 200): on a new TCP connection
    each time (a raw socket: no client-side set-up in the figure), or on one kept alive."""
    latencies = []
    with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S) as kept:
        for _ in range(count):
            started = time.perf_counter()
            if fresh:
                with socket.create_connection((HOST, port), HTTP_TIMEOUT_S) as sock:
                    sock.sendall(
                        b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
                    )
                    answer = b""
                    while chunk := sock.recv(65536):
                        answer += chunk
                ok = answer.startswith(b"HTTP/1.1 200")
            else:
                ok = kept.get("/healthz").status_code == 200
            latencies.append((time.perf_counter() - started) * 1000 if ok else float("inf"))
            time.sleep(0.01)
    return latencies


def _agent_loops(url: str, smtp_port: int, count: int) -> tuple[dict[str, list[float]], int]:
    steps: dict[str, list[float]] = {s: [] for s in ("create", "send", "wait", "read", "claim")}
    failures = 0
    with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S) as client:
        for _ in range(count):
            run_id = f"abuse-{uuid.uuid4().hex[:12]}"
            try:
                started = time.perf_counter()
                inbox = client.post("/v1/inboxes", json={"run_id": run_id, "purpose": "bench"})
                inbox.raise_for_status()
                created = inbox.json()
                steps["create"].append((time.perf_counter() - started) * 1000)

                started = time.perf_counter()
                _send(smtp_port, created["address"])
                steps["send"].append((time.perf_counter() - started) * 1000)

                started = time.perf_counter()
                waited = client.post(
                    f"/v1/inboxes/{created['inbox_id']}/wait", json={"timeout_s": 20}
                ).json()
                steps["wait"].append((time.perf_counter() - started) * 1000)
                message_id = waited["message"]["message_id"]

                started = time.perf_counter()
                client.get(f"/v1/messages/{message_id}").raise_for_status()
                steps["read"].append((time.perf_counter() - started) * 1000)

                started = time.perf_counter()
                claim = client.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id})
                claim.raise_for_status()
                steps["claim"].append((time.perf_counter() - started) * 1000)
            except Exception as exc:
                failures += 1
                print(f"agent loop failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    return steps, failures


def _send(smtp_port: int, to: str) -> None:
    """A normal send; at a full listener the 421 says try again, as a mailer would."""
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "app@example.test", to, "Code 428913"
    message.set_content("Your code is 428913.")
    deadline = time.monotonic() + 30
    while True:
        try:
            with smtplib.SMTP(HOST, smtp_port, timeout=30) as smtp:
                smtp.send_message(message)
            return
        except smtplib.SMTPConnectError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _row(name: str, values: list[float]) -> str:
    if not values:
        return f"| {name} | 0 | - | - | - | - |"
    return (
        f"| {name} | {len(values)} | {percentile(values, 50):.1f} | {percentile(values, 95):.1f} "
        f"| {percentile(values, 99):.1f} | {max(values):.1f} |"
    )


# -- the stream flood -------------------------------------------------------------------


async def _open_streams(port: int, tokens: list[str], per_token: int) -> tuple[Counter[str], list]:
    """Ask for ``per_token`` streams with each token at once; keep the ones that open."""
    statuses: Counter[str] = Counter()
    held: list[asyncio.StreamWriter] = []

    async def one(token: str) -> None:
        try:
            reader, writer = await asyncio.open_connection(HOST, port)
        except OSError:
            statuses["connect_failed"] += 1
            return
        writer.write(
            f"GET /v1/events HTTP/1.1\r\nHost: localhost\r\n"
            f"Authorization: Bearer {token}\r\n\r\n".encode()
        )
        try:
            line = await asyncio.wait_for(reader.readline(), HTTP_TIMEOUT_S)
        except (OSError, TimeoutError):
            line = b""
        status = line.split(b" ")[1].decode() if line.count(b" ") >= 2 else "closed"
        statuses[status] += 1
        if status == "200":
            held.append(writer)
        else:
            writer.close()

    await asyncio.gather(*(one(t) for t in tokens for _ in range(per_token)))
    return statuses, held


def _admin_creates(url: str, count: int) -> list[float]:
    latencies = []
    with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S) as client:
        for _ in range(count):
            started = time.perf_counter()
            answer = client.post(
                "/v1/inboxes", json={"run_id": f"admin-{uuid.uuid4().hex[:8]}", "purpose": "p"}
            )
            ok = answer.status_code == 201
            latencies.append((time.perf_counter() - started) * 1000 if ok else float("inf"))
    return latencies


def _mint(url: str, run_id: str) -> str:
    answer = httpx.post(f"{url}/v1/runs/{run_id}/token", json={}, timeout=HTTP_TIMEOUT_S)
    answer.raise_for_status()
    token: str = answer.json()["token"]
    return token


def _stream_flood(args: argparse.Namespace) -> list[str]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2 * args.streams + 256
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    folder = Path(tempfile.mkdtemp(prefix="runsink-streams-"))
    server = start_runsink(folder, extra_args=["--event-loop", args.event_loop])
    assert server.http_port is not None
    url, port = server.url, server.http_port
    loop = asyncio.new_event_loop()
    try:
        one, held = loop.run_until_complete(
            _open_streams(port, [_mint(url, "flood-one")], args.streams)
        )
        runs = [_mint(url, f"flood-{n}") for n in range(max(1, args.streams // 32))]
        many, more = loop.run_until_complete(_open_streams(port, runs, 32))
        held += more
        fresh = _healthz(url, port, args.samples // 4, fresh=True)
        creates = _admin_creates(url, args.samples // 4)
        refusals = _refusals(url)
        for writer in held:
            writer.close()
    finally:
        loop.close()
        server.stop()
    return [
        "",
        f"Stream flood: {args.streams} streams asked for at once with one run token: "
        + ", ".join(f"{k} x {v}" for k, v in sorted(one.items()))
        + f"; then 32 each with {len(runs)} more run tokens: "
        + ", ".join(f"{k} x {v}" for k, v in sorted(many.items()))
        + f". {len(held)} streams held while an admin was timed:",
        "",
        "| latency (ms) | n | p50 | p95 | p99 | max |",
        "|---|---|---|---|---|---|",
        _row("/healthz, new connection, streams' caps full", fresh),
        _row("admin create, streams' caps full", creates),
        "",
        "Refusals the server counted: "
        + (", ".join(f"`{k}` {v:.0f}" for k, v in sorted(refusals.items())) or "none"),
    ]


def _refusals(url: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=HTTP_TIMEOUT_S).text.splitlines():
        if line.startswith("runsink_connection_refusals_total{"):
            labels, value = line.rsplit(" ", 1)
            found[labels.removeprefix("runsink_connection_refusals_total")] = float(value)
    return found


def _measure(args: argparse.Namespace) -> int:
    load = os.getloadavg()[0]
    folder = Path(tempfile.mkdtemp(prefix="runsink-abuse-"))
    server = start_runsink(folder, extra_args=["--event-loop", args.event_loop])
    assert server.http_port is not None
    url = server.url
    lines = []
    try:
        port = server.http_port
        base_fresh = _healthz(url, port, args.samples // 2, fresh=True)
        base_kept = _healthz(url, port, args.samples // 2, fresh=False)
        base_steps, _ = _agent_loops(url, server.smtp_port, max(5, args.loops // 5))

        attack = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "attack",
                "--http-port",
                str(server.http_port),
                "--smtp-port",
                str(server.smtp_port),
                "--slow",
                str(args.slow),
                "--smtp",
                str(args.smtp),
                "--duration",
                str(args.duration),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert attack.stdout is not None
        held: dict[str, Any] = {}
        ramp_end = time.monotonic() + 60
        while time.monotonic() < ramp_end:
            held = json.loads(attack.stdout.readline() or "{}")
            if held.get("http_held", 0) >= args.slow * 0.95 and (
                held.get("smtp_first_220", 0) + held.get("smtp_first_421", 0) >= args.smtp
            ):
                break
        ramped = dict(held)
        fds_under_load = len(os.listdir(f"/proc/{server.pid}/fd"))

        load_fresh = _healthz(url, port, args.samples // 2, fresh=True)
        load_kept = _healthz(url, port, args.samples // 2, fresh=False)
        started = time.monotonic()
        load_steps, failures = _agent_loops(url, server.smtp_port, args.loops)
        loops_s = time.monotonic() - started
        during = dict(held)
        with contextlib.suppress(Exception):
            # the attackers' latest counts (the pipe holds one line a second)
            os.set_blocking(attack.stdout.fileno(), False)
            for raw in attack.stdout:
                during = json.loads(raw)
        rss = server.rss_mb()
        refusals = _refusals(url)
        attack.terminate()
        attack.wait(30)
    finally:
        server.stop()

    lines += [
        f"{args.slow} slow HTTP clients (a header line every {TRICKLE_S:g} s) and {args.smtp} "
        f"silent SMTP connections against one runsink ({args.event_loop} loop), on "
        f"{os.cpu_count()} CPUs (load average {load:.1f} at the start, the attackers and "
        f"this client included); at ramp-up the attackers held {ramped.get('http_held', 0)} "
        f"HTTP and {ramped.get('smtp_held', 0)} SMTP connections "
        f"(first SMTP lines: {ramped.get('smtp_first_220', 0)} x 220, "
        f"{ramped.get('smtp_first_421', 0)} x 421). Server: {fds_under_load} descriptors "
        f"open under load, RSS {rss or 0:.0f} MiB at the end.",
        "",
        "| latency (ms) | n | p50 | p95 | p99 | max |",
        "|---|---|---|---|---|---|",
        _row("/healthz, new connection, idle server", base_fresh),
        _row("/healthz, kept-alive, idle server", base_kept),
        _row("/healthz, new connection, under attack", load_fresh),
        _row("/healthz, kept-alive, under attack", load_kept),
        *(_row(f"agent {step}, idle server", values) for step, values in base_steps.items()),
        *(_row(f"agent {step}, under attack", values) for step, values in load_steps.items()),
        "",
        f"{args.loops - failures} of {args.loops} agent loops (create, send, wait, read, claim) "
        f"completed under attack in {loops_s:.1f} s; {failures} failed. Attackers at the end: "
        + ", ".join(f"{k}={v}" for k, v in sorted(during.items())),
        "",
        "Refusals the server counted (`runsink_connection_refusals_total`): "
        + (", ".join(f"`{k}` {v:.0f}" for k, v in sorted(refusals.items())) or "none"),
    ]
    lines += _stream_flood(args)
    print("\n".join(lines))
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "mode", nargs="?", default="measure", choices=["measure", "attack", "streams"]
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--slow", type=int, default=None)
    parser.add_argument("--smtp", type=int, default=None)
    parser.add_argument("--loops", type=int, default=None)
    parser.add_argument("--samples", type=int, default=None)
    parser.add_argument("--duration", type=float, default=None)
    parser.add_argument("--streams", type=int, default=None)
    parser.add_argument("--event-loop", default="auto", choices=["auto", "uvloop", "asyncio"])
    parser.add_argument("--http-port", type=int)
    parser.add_argument("--smtp-port", type=int)
    args = parser.parse_args()
    quick = args.quick
    args.slow = args.slow if args.slow is not None else (300 if quick else 2000)
    args.smtp = args.smtp if args.smtp is not None else (100 if quick else 600)
    args.loops = args.loops if args.loops is not None else (20 if quick else 100)
    args.samples = args.samples if args.samples is not None else (200 if quick else 1000)
    args.duration = args.duration if args.duration is not None else (120 if quick else 300)
    args.streams = args.streams if args.streams is not None else (600 if quick else 4200)
    if args.mode == "streams":
        print("\n".join(_stream_flood(args)))
        return 0
    if args.mode == "attack":
        asyncio.run(_attack(args))
        return 0
    return _measure(args)


if __name__ == "__main__":
    sys.exit(main())
