"""Web UI figures: page load with 10k runs, live delay, memory and ingest with 100 streams.

    .venv/bin/python bench/ui.py            # the full run (about 2 minutes)
    .venv/bin/python bench/ui.py --quick    # a smoke run (< 1 minute)

What it measures, on this machine, now:
- **page load with 10k runs stored**: the runs list (first page, and a later page), the
  server's answer over HTTP (p50/p95), and a real browser's navigation until `load`
  (Playwright driving Debian's Chromium; skipped when either is missing).
- **live delay**: from the SMTP 250 after DATA to the message's row in the open run page's
  DOM (a MutationObserver stamps it), p50/p95, one message at a time.
- **RSS with 100 SSE clients** connected to `GET /v1/events` (unfiltered: every event to
  every client), against the same server before they connect.
- **ingest with and without 100 SSE clients**: msg/s over 8 reused SMTP connections (the
  sender in its own process, as bench/ingest.py), alternating, median of the repeats.

It only talks to 127.0.0.1, every loop is bounded, and it exits 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import smtplib
import sys
import tempfile
import threading
import time
import uuid
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _common import (  # noqa: E402 - the bench folder is not a package: see sys.path above
    HOST,
    ServerProcess,
    median,
    percentile,
    run_sender,
    start_runsink,
)

from tests.support_ui import (  # noqa: E402
    chromium_available,
    chromium_path,
    playwright_available,
    seed_runs,
)

POLICIES = """
[policy.ci]
poll_interval_s = [0]
poll_budget = 100000
ttl_default_s = 3600
ttl_max_s = 3600
inboxes_per_purpose = 100
"""


def create_inbox(server: ServerProcess, run_id: str | None = None) -> dict[str, Any]:
    payload = {"run_id": run_id or f"bench-ui-{uuid.uuid4().hex[:10]}", "purpose": "bench"}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        response = client.post("/v1/inboxes", json=payload)
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


# -- page load ---------------------------------------------------------------------------


def http_page_times(server: ServerProcess, path: str, n: int) -> list[float]:
    times = []
    with httpx.Client(base_url=server.url, timeout=30) as client:
        client.get(path).raise_for_status()  # warm
        for _ in range(n):
            started = time.perf_counter()
            response = client.get(path)
            times.append((time.perf_counter() - started) * 1000)
            response.raise_for_status()
    return times


def browser_load_times(browser: Any, url: str, n: int) -> list[float]:
    page = browser.new_page()
    times = []
    try:
        page.goto(url)
        for _ in range(n):
            page.goto(url, wait_until="load")
            entry = page.evaluate(
                "(() => { const e = performance.getEntriesByType('navigation')[0];"
                " return e.loadEventEnd - e.startTime; })()"
            )
            times.append(float(entry))
    finally:
        page.close()
    return times


# -- live delay -----------------------------------------------------------------------------

_OBSERVE = """
(() => {
  window.__seen = {};
  const list = document.getElementById('messages');
  new MutationObserver((changes) => {
    const now = Date.now();
    for (const change of changes) for (const node of change.addedNodes) {
      if (node.nodeType === 1) window.__seen[node.textContent] = now;
    }
  }).observe(list, { childList: true });
})()
"""


def live_delays(browser: Any, server: ServerProcess, n: int, gap_s: float = 0.0) -> list[float]:
    """One message at a time; ``gap_s`` between them (0: the next right after the row shows,
    while the stream still rests from its last write; above PACE_S: a quiet stream)."""
    inbox = create_inbox(server)
    page = browser.new_page()
    delays = []
    try:
        page.goto(f"{server.url}/runs/{inbox['run_id']}")
        page.wait_for_selector("body[data-live=open]", timeout=10_000)
        page.evaluate(_OBSERVE)
        with smtplib.SMTP(HOST, server.smtp_port, timeout=30) as client:
            client.ehlo()
            for i in range(n):
                subject = f"live-{i}-{uuid.uuid4().hex[:6]}"
                message = EmailMessage()
                message["From"] = "app@example.test"
                message["To"] = inbox["address"]
                message["Subject"] = subject
                message.set_content("bench")
                client.mail("app@example.test")
                client.rcpt(inbox["address"])
                code, _ = client.data(message.as_bytes())
                acknowledged = time.time() * 1000
                assert code == 250
                seen = _seen(page, subject)
                delays.append(float(seen) - acknowledged)
                if gap_s:
                    time.sleep(gap_s)
    finally:
        page.close()
    return delays


def _seen(page: Any, subject: str, deadline_s: float = 10.0) -> float:
    """When the observer saw the row (the page's CSP forbids eval, so poll from here)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        seen = page.evaluate(
            "(s) => { for (const [k, v] of Object.entries(window.__seen))"
            " if (k.includes(s)) return v; return null; }",
            subject,
        )
        if seen is not None:
            return float(seen)
        time.sleep(0.005)
    raise RuntimeError(f"the row for {subject} never appeared")


# -- SSE clients -------------------------------------------------------------------------------


class Streams:
    """``count`` SSE clients on a thread of their own, draining everything they are sent."""

    def __init__(self, server: ServerProcess, count: int) -> None:
        self.server = server
        self.count = count
        self.received = 0
        self.opened = 0
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Streams:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError(f"only {self.opened} of {self.count} streams opened")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def _run(self) -> None:
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        tasks = [asyncio.ensure_future(self._one()) for _ in range(self.count)]
        await self._stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _one(self) -> None:
        reader, writer = await asyncio.open_connection(HOST, self.server.http_port)
        try:
            writer.write(b"GET /v1/events HTTP/1.1\r\nHost: localhost\r\n\r\n")
            await writer.drain()
            await reader.readuntil(b"runsink live events")
            self.opened += 1
            if self.opened == self.count:
                self._ready.set()
            while chunk := await reader.read(65536):
                self.received += len(chunk)
        finally:
            writer.close()


def ingest_rate(server: ServerProcess, rcpt: str, duration: float) -> tuple[float, float]:
    """msg/s, and the server's CPU per message in µs (less sensitive to a busy machine)."""
    result = run_sender(server.smtp_port, rcpt, 8, duration, server_pid=server.pid)
    return float(result["rate"]), float(result["server_cpu_us_per_msg"] or 0.0)


# -- the run ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (< 1 minute)")
    parser.add_argument("--runs", type=int, default=10_000, help="runs stored for page load")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    quick = args.quick
    samples = 10 if quick else 50
    live_n = 20 if quick else 100
    duration = 2.0 if quick else 5.0
    repeats = 1 if quick else 3
    figures: dict[str, Any] = {}

    with tempfile.TemporaryDirectory(prefix="runsink-bench-ui-") as tmp:
        folder = Path(tmp)
        policy_file = folder / "policies.toml"
        policy_file.write_text(POLICIES)
        seeded_at = time.perf_counter()
        seed_runs(folder / "bench.db", args.runs)
        figures["seed_s"] = round(time.perf_counter() - seeded_at, 2)
        server = start_runsink(folder, policy_file=policy_file)
        try:
            first = http_page_times(server, "/", samples)
            with httpx.Client(base_url=server.url, timeout=30) as client:
                html = client.get("/").text
            later = html.split('rel="next"', 1)[0].rsplit('href="', 1)[-1].split('"', 1)[0]
            later = later.replace("&amp;", "&")
            second = http_page_times(server, later, samples)
            run_page = http_page_times(server, "/runs/seed-00000", samples)
            figures["http_ms"] = {
                "runs_first_page": [round(median(first), 1), round(percentile(first, 95), 1)],
                "runs_later_page": [round(median(second), 1), round(percentile(second, 95), 1)],
                "run_page": [round(median(run_page), 1), round(percentile(run_page, 95), 1)],
            }
            browser_ok = playwright_available() and chromium_available()
            if browser_ok:
                from playwright.sync_api import sync_playwright

                with sync_playwright() as playwright:
                    browser = playwright.chromium.launch(executable_path=chromium_path())
                    try:
                        loads = browser_load_times(browser, server.url + "/", samples)
                        figures["browser_load_ms"] = [
                            round(median(loads), 1),
                            round(percentile(loads, 95), 1),
                        ]
                        for key, gap in (("live_delay_ms", 0.0), ("live_delay_quiet_ms", 0.15)):
                            delays = live_delays(browser, server, live_n, gap)
                            figures[key] = [
                                round(median(delays), 1),
                                round(percentile(delays, 95), 1),
                                round(max(delays), 1),
                            ]
                    finally:
                        browser.close()
            else:
                figures["browser"] = "skipped: playwright or chromium missing"

            rcpt = create_inbox(server)["address"]
            without: list[tuple[float, float]] = []
            with_streams: list[tuple[float, float]] = []
            # Memory first, before any ingest round grows the heap (and the kept event log).
            rss_before = server.rss_mb()
            with Streams(server, 100):
                rss_with = server.rss_mb()
            for _ in range(repeats):
                without.append(ingest_rate(server, rcpt, duration))
                with Streams(server, 100) as streams:
                    with_streams.append(ingest_rate(server, rcpt, duration))
                    received = streams.received
            figures["rss_mb"] = {"before": rss_before, "with_100_streams": rss_with}
            rate_without = median([r for r, _ in without])
            rate_with = median([r for r, _ in with_streams])
            figures["ingest_msg_s"] = {
                "without_streams": round(rate_without, 1),
                "with_100_streams": round(rate_with, 1),
                "ratio": round(rate_with / rate_without, 3),
                "server_cpu_us_per_msg": [
                    round(median([c for _, c in without]), 1),
                    round(median([c for _, c in with_streams]), 1),
                ],
                "stream_bytes_last_round": received,
            }
        finally:
            server.stop()

    print(_table(figures, args.runs))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def _table(f: dict[str, Any], runs: int) -> str:
    rows = ["| figure | value |", "|---|---|"]
    http = f["http_ms"]
    rows.append(
        f"| runs list, first page, {runs} runs stored (server, p50 / p95) | "
        f"{http['runs_first_page'][0]} / {http['runs_first_page'][1]} ms |"
    )
    rows.append(
        f"| runs list, a later page (server, p50 / p95) | "
        f"{http['runs_later_page'][0]} / {http['runs_later_page'][1]} ms |"
    )
    rows.append(
        f"| a run page (server, p50 / p95) | {http['run_page'][0]} / {http['run_page'][1]} ms |"
    )
    if "browser_load_ms" in f:
        b = f["browser_load_ms"]
        rows.append(
            f"| runs list in Chromium, navigation to `load` (p50 / p95) | {b[0]} / {b[1]} ms |"
        )
        d = f["live_delay_ms"]
        rows.append(
            "| SMTP 250 -> row in the open run page, back to back (p50 / p95 / max) | "
            f"{d[0]} / {d[1]} / {d[2]} ms |"
        )
        q = f["live_delay_quiet_ms"]
        rows.append(
            "| SMTP 250 -> row in the open run page, 150 ms apart (p50 / p95 / max) | "
            f"{q[0]} / {q[1]} / {q[2]} ms |"
        )
    else:
        rows.append(f"| browser figures | {f['browser']} |")
    r = f["rss_mb"]
    rows.append(
        "| server RSS: no streams / 100 SSE clients | "
        f"{r['before']:.1f} / {r['with_100_streams']:.1f} MiB |"
    )
    i = f["ingest_msg_s"]
    rows.append(
        f"| ingest, 8 connections: no streams / 100 SSE clients (ratio) | "
        f"{i['without_streams']} / {i['with_100_streams']} msg/s ({i['ratio']}) |"
    )
    c = i["server_cpu_us_per_msg"]
    rows.append(f"| server CPU per message: no streams / 100 SSE clients | {c[0]} / {c[1]} µs |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
