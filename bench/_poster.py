"""Signed webhook POSTs from a process of its own: the HTTP work of webhook deliveries, made
without runsink (``bench/webhooks.py``'s HTTP floor).

    python bench/_poster.py URL SECRET RATE BODY_FILE [--raw]

POSTs the body in ``BODY_FILE`` to ``URL`` at ``RATE`` a second, at most 8 in flight (as one
webhook's deliveries are), at the delivery child's priority (``sink.webhooks.child.NICE``),
until it is killed. Each is made as the child makes a delivery (``sink.webhooks.attempt.post``:
signed anew, a ``webhook-id`` of its own, ``floor_<n>``); with ``--raw`` the cheapest way
Python can: one request signed once, its bytes written again and again on 8 kept connections,
each answer's head read (the receiver's share of the work, nearly alone).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sink.webhook_signature import signed_headers
from sink.webhooks.attempt import post
from sink.webhooks.child import NICE
from sink.webhooks.http import Http1

IN_FLIGHT = 8


async def serve(rate: float, attempt: Callable[[int], Awaitable[object]]) -> None:
    """``attempt(n)`` at ``rate`` a second, at most IN_FLIGHT at once, for ever."""
    flying: set[asyncio.Future[object]] = set()
    start = time.monotonic()
    sent = 0
    while True:
        wait = start + sent / rate - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        if len(flying) >= IN_FLIGHT:
            await asyncio.wait(flying, return_when=asyncio.FIRST_COMPLETED)
            continue
        task = asyncio.ensure_future(attempt(sent))
        flying.add(task)
        task.add_done_callback(flying.discard)
        sent += 1


async def as_the_child(url: str, secret: str, rate: float, body: bytes) -> None:
    http = Http1(IN_FLIGHT)

    async def attempt(n: int) -> object:
        return await post(http, url, secret, f"floor_{n}", int(time.time()), body)

    await serve(rate, attempt)


async def raw(url: str, secret: str, rate: float, body: bytes) -> None:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    headers = signed_headers(secret, "floor_raw", int(time.time()), body)
    head = f"POST {parts.path} HTTP/1.1\r\nhost: {parts.netloc}\r\n"
    head += f"content-length: {len(body)}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    request = head.encode() + b"\r\n" + body
    free: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(IN_FLIGHT):
        free.put_nowait(await asyncio.open_connection(parts.hostname, parts.port))

    async def attempt(n: int) -> object:
        reader, writer = await free.get()
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")  # the bench's receiver answers 204
        free.put_nowait((reader, writer))
        return head

    await serve(rate, attempt)


def main() -> None:
    url, secret, rate, body_file = sys.argv[1:5]
    os.nice(NICE)
    way = raw if "--raw" in sys.argv[5:] else as_the_child
    asyncio.run(way(url, secret, float(rate), Path(body_file).read_bytes()))


if __name__ == "__main__":
    main()
