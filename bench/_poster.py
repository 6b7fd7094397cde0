"""Signed webhook POSTs from a process of its own: the HTTP work of webhook deliveries, made
without runsink (``bench/webhooks.py``'s HTTP floor).

    python bench/_poster.py URL SECRET RATE BODY_FILE

POSTs the body in ``BODY_FILE`` to ``URL`` at ``RATE`` a second (at most 8 in flight, as one
webhook's deliveries are), each signed anew with ``SECRET`` and a ``webhook-id`` of its own
(``floor_<n>``), with the delivery child's own code (``sink.webhooks.attempt.post``) at the
child's priority (``sink.webhooks.child.NICE``), until it is killed.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sink.webhooks.attempt import post
from sink.webhooks.child import NICE
from sink.webhooks.http import Http1

IN_FLIGHT = 8


async def serve(url: str, secret: str, rate: float, body: bytes) -> None:
    http = Http1(IN_FLIGHT)
    flying: set[asyncio.Task[object]] = set()
    start = time.monotonic()
    sent = 0
    while True:
        wait = start + sent / rate - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        if len(flying) >= IN_FLIGHT:
            await asyncio.wait(flying, return_when=asyncio.FIRST_COMPLETED)
            continue
        attempt = post(http, url, secret, f"floor_{sent}", int(time.time()), body)
        task: asyncio.Task[object] = asyncio.ensure_future(attempt)
        flying.add(task)
        task.add_done_callback(flying.discard)
        sent += 1


def main() -> None:
    url, secret, rate, body_file = sys.argv[1:5]
    os.nice(NICE)
    asyncio.run(serve(url, secret, float(rate), Path(body_file).read_bytes()))


if __name__ == "__main__":
    main()
