"""What a run token's release check costs per request, on a run with many events.

    .venv/bin/python bench/run_token.py                   # SQLite, 1,000 events, 3 s per figure
    .venv/bin/python bench/run_token.py --backend memory --events 10000 --duration 2

Every request made with a run token asks the store whether its run was released since the
token was minted (``sink/run_tokens.py``: ``released_since``). This opens the real runtime
(a SQLite file in a temporary folder, or the memory backend) and the real app in this
process, gives one run an inbox and ``--events`` events, mints a token for it, then for
``--duration`` seconds each: calls ``released_since`` directly (µs per call), and makes
``GET /v1/inboxes/{id}`` with the run token over httpx's ASGI transport, one at a time
(requests per second; no socket, so the check's share is not hidden by the network).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from api.app import create_app
from sink import run_tokens
from sink.config import add_serve_arguments, settings_from
from sink.runtime import Runtime
from sink.storage.base import Event
from sink.storage.memory import memory_backend

ADMIN = "bench-admin-token-0000000000000001"


async def measure(folder: Path, backend: str, events: int, duration_s: float) -> None:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    argv = ["--smtp-port", "0", "--http-port", "0", "--db", str(folder / "runsink.db")]
    settings = settings_from(parser.parse_args([*argv, "--api-token", ADMIN]), {})
    runtime = Runtime(settings, memory_backend if backend == "memory" else None)
    await runtime.start()
    try:
        app = create_app(runtime)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as admin:
            admin.headers["Authorization"] = f"Bearer {ADMIN}"
            run_id = "bench-run-token"
            created = await admin.post("/v1/inboxes", json={"run_id": run_id, "purpose": "b"})
            inbox_id = created.json()["inbox_id"]
            now = time.time()
            await runtime.store.add_events(
                [Event(run_id, "token_minted", now) for _ in range(events)]
            )
            minted = await admin.post(f"/v1/runs/{run_id}/token", json={})
            token = minted.json()["token"]
        issued_at = time.time() - 1

        calls, started = 0, time.perf_counter()
        while time.perf_counter() - started < duration_s:
            await run_tokens.released_since(runtime.store, run_id, issued_at)
            calls += 1
        per_call_us = (time.perf_counter() - started) / calls * 1e6

        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", headers=headers
        ) as agent:
            requests, started = 0, time.perf_counter()
            while time.perf_counter() - started < duration_s:
                answer = await agent.get(f"/v1/inboxes/{inbox_id}")
                assert answer.status_code == 200, answer.text
                requests += 1
            rate = requests / (time.perf_counter() - started)
    finally:
        await runtime.close()
    print(f"backend {backend}, a run with {events:,} events (+ its inbox's own)")
    print(f"  released_since: {per_call_us:,.0f} µs per call ({calls:,} calls)")
    print(f"  GET /v1/inboxes/{{id}} with the run token: {rate:,.0f} requests/s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "memory"), default="sqlite")
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per figure")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(measure(Path(folder), args.backend, args.events, args.duration))
    return 0


if __name__ == "__main__":
    sys.exit(main())
