"""Live events: ``GET /v1/events``, a Server-Sent Events stream read from the in-process hub
(``sink/events.py``), for the web UI and for scripts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from prometheus_client import CollectorRegistry, Gauge
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from api.auth import grant_of, implied_run
from api.context import context_of
from api.inputs import caller_run
from api.state import state_of
from api.streams import StreamGate, holders
from sink import clock
from sink.events import Hub, Subscriber
from sink.scopes import Kind

KEEPALIVE_S = 15.0  # a comment line this often keeps proxies from closing an idle stream
# After each write a stream rests before it looks again, so that a burst of mail reaches each
# reader in a few large writes instead of one per event. The rest grows with the number of
# open streams, so that all of them together wake about WAKES_PER_S times a second at most
# (a hundred open tabs cost ingest little); a first event after a quiet spell goes at once.
PACE_S = 0.1
WAKES_PER_S = 250
MAX_REST_S = 0.5


def rest_s(streams: int) -> float:
    return min(MAX_REST_S, max(PACE_S, streams / WAKES_PER_S))


RECONNECT_MS = 1000  # EventSource's "retry:": reconnect quickly, then resume by Last-Event-ID

# -- live events --------------------------------------------------------------------------


async def events(request: Request) -> Response:
    # The run named by ?run_id= or X-Run-Id (as for search): checked against the token.
    run_id = caller_run(request)
    grant = grant_of(request.scope)
    glob = None
    if run_id is None and grant.scope.kind is Kind.RUNS:
        glob = grant.scope.glob  # every run of a runs: token, never caught mail
    elif run_id is None:
        run_id = implied_run(grant)  # a run token's stream is its run
    if run_id is not None:
        context_of(request.scope).note(run_id=run_id)
    state = state_of(request)
    runtime, gate = state.runtime, state.streams
    shares = holders(grant, run_id)
    refusal = gate.enter(shares)
    if refusal is not None:
        runtime.metrics.refused(
            "http", "too_many_streams" if refusal.status_code == 429 else "streams_full"
        )
        return refusal
    # EventSource sends Last-Event-ID on its own when it reconnects.
    last = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
    # A stream of one run ends with its run's release, whoever reads it (an admin's, or on a
    # server without tokens, reconnects and resumes by Last-Event-ID: its grant holds); one of
    # every run it may see (a runs: token naming none) goes on.
    ends = run_id is not None
    subscriber = runtime.events.subscribe(run_id, last, ends, glob)
    return _EventStream(
        runtime.events, subscriber, StreamGate.ends_at(grant, clock.now()), gate, shares
    )


class _EventStream(StreamingResponse):
    """The stream: the hub's frames as they come, a comment when idle, until either side
    ends, the hub closes, its run is released, or its grant ends (``ends_at``)."""

    def __init__(
        self,
        hub: Hub,
        subscriber: Subscriber,
        ends_at: float,
        gate: StreamGate,
        shares: frozenset[str],
    ) -> None:
        super().__init__(
            _nothing(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
        self.hub = hub
        self.subscriber = subscriber
        self.ends_at = ends_at
        self.gate = gate
        self.shares = shares

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hub, subscriber = self.hub, self.subscriber

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            hub.leave(subscriber)

        watcher = asyncio.ensure_future(watch())
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            await _body(send, f"retry: {RECONNECT_MS}\n: runsink live events\n\n".encode())
            while (left := self.ends_at - clock.now()) > 0:
                batch = await hub.wait(subscriber, idle_s=min(KEEPALIVE_S, left))
                if batch.frames:
                    await _body(send, b"".join(batch.frames))
                if batch.closed:
                    break
                if batch.frames:
                    await asyncio.sleep(min(rest_s(hub.subscribers), max(0.0, left)))
                elif batch.idle and self.ends_at > clock.now():
                    await _body(send, b": keep-alive\n\n")
            if not subscriber.gone:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away mid-write
        finally:
            hub.unsubscribe(subscriber)
            self.gate.leave(self.shares)
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


def instrument(registry: CollectorRegistry, hub: Hub) -> None:
    """``runsink_live_streams`` on /metrics: the open SSE streams (browser tabs, scripts)."""
    streams = Gauge("runsink_live_streams", "Open GET /v1/events streams", registry=registry)
    streams.set_function(lambda: hub.subscribers)


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""  # pragma: no cover - makes this an (empty) async generator


async def _body(send: Send, chunk: bytes) -> None:
    await send({"type": "http.response.body", "body": chunk, "more_body": True})
