"""A webhook receiver for tests: a real HTTP server in the test process that checks every
delivery's signature with the reference ``standardwebhooks`` package and answers as told.

    receiver = Receiver(secret, answer=lambda n: 500 if n == 1 else 200)  # n: the id's nth
    receiver.start(); ...; receiver.until(lambda got: len(got) >= 3)
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook as Verifier

Answer = Callable[[int], int | tuple[int, float]]  # the id's nth try -> status (, delay_s)


@dataclass(frozen=True)
class Received:
    webhook_id: str
    timestamp: int  # webhook-timestamp
    at: float  # monotonic, when the request arrived
    body: dict[str, Any]
    raw: bytes
    verified: bool
    wall: float = 0.0  # time.time() when the request arrived (the server's clock, in process)
    headers: dict[str, str] = field(default_factory=dict)  # names lowercased
    target: str = ""  # the request line's target (path and query)


class Receiver:
    def __init__(self, secret: str, answer: Answer = lambda _n: 200) -> None:
        self.secret = secret
        self.answer = answer
        self.got: list[Received] = []
        self.in_flight = 0  # requests being answered now
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        with socket.socket() as probe:  # a free port, kept for restarts
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    Verifier(receiver.secret).verify(raw, headers)
                    verified = True
                except Exception:
                    verified = False
                item = Received(
                    headers.get("webhook-id", ""),
                    int(headers.get("webhook-timestamp", "0")),
                    time.monotonic(),
                    json.loads(raw),
                    raw,
                    verified,
                    time.time(),
                    headers,
                    self.path,
                )
                with receiver._lock:
                    receiver.got.append(item)
                    receiver.in_flight += 1
                    nth = sum(g.webhook_id == item.webhook_id for g in receiver.got)
                answer = receiver.answer(nth)
                status, delay = answer if isinstance(answer, tuple) else (answer, 0.0)
                try:
                    if delay:
                        time.sleep(delay)  # the slow receiver under test (in its own thread)
                    self.send_response(status)
                    self.send_header("content-length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the sender gave up (timed out, or was killed) first
                finally:
                    with receiver._lock:
                        receiver.in_flight -= 1

            def log_message(self, *_args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def snapshot(self) -> list[Received]:
        with self._lock:
            return list(self.got)

    def until(
        self, done: Callable[[list[Received]], bool], deadline_s: float = 20.0
    ) -> list[Received]:
        deadline = time.monotonic() + deadline_s
        while True:
            got = self.snapshot()
            if done(got):
                return got
            assert time.monotonic() < deadline, f"the receiver got {len(got)} deliveries"
            time.sleep(0.02)
