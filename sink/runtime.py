"""The runtime: opens and closes everything, in order. The only owner of the lifecycle.

One process, one event loop: the SMTP listener (``loop.create_server`` with
aiosmtpd's protocol, not its threaded Controller) and the HTTP server (uvicorn's
``Server.serve`` on our loop) share the waiters, the store and the breakers.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import socket
import ssl
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

from sink import clock
from sink.agent import Agent
from sink.config import Settings
from sink.faults import FaultRegistry
from sink.guard import Guard
from sink.ingest import Ingest
from sink.logs import announce, warn
from sink.metrics import Metrics
from sink.smtp import Handler, Limits, smtp_factory
from sink.storage.sqlite import SQLiteStore
from sink.tls import server_context
from sink.waiters import Waiters

_SWEEP_EVERY_S = 1.0
_SWEEP_BATCH = 500
_UNROUTED_KEPT = 10_000


class Runtime:
    """Everything one server process holds, opened in order and closed in reverse."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.waiters = Waiters()
        self.store = SQLiteStore(settings.db)
        self.faults = FaultRegistry(random.Random()) if settings.enable_faults else None
        self.agent: Agent | None = None
        self.guard = Guard(self.faults, self._on_breaker_change)
        self.ingest = Ingest(self.store, self.waiters, settings, self.metrics)
        self.smtp_server: asyncio.Server | None = None
        self.smtp_port = settings.smtp_port
        self.tls_context: ssl.SSLContext | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._over_cap = False
        self.stopping = asyncio.Event()

    def _on_breaker_change(self, change: Any) -> None:
        if self.agent is not None:
            self.agent.on_breaker_change(change)

    async def start(self) -> None:
        # What can still fail on a bad setting (the certificate) comes before anything opens.
        self.tls_context = server_context(self.settings)
        await self.store.open()
        self.agent = Agent(self.store, self.waiters, self.settings, self.guard, self.metrics)
        loop = asyncio.get_running_loop()
        handler = Handler(
            self.ingest,
            self.metrics,
            self.faults,
            self.settings.smtp_auth is not None,
            Limits(max_connections=self.settings.smtp_max_connections),
        )
        self.smtp_server = await loop.create_server(
            lambda: smtp_factory(self.settings, handler, self.tls_context, loop),
            host=self.settings.smtp_host,
            port=self.settings.smtp_port,
        )
        self.smtp_port = self.smtp_server.sockets[0].getsockname()[1]
        self._sweeper = asyncio.create_task(self._sweep(), name="sweeper")

    def begin_shutdown(self) -> None:
        """Stop accepting mail and answer every wait in progress (called from a signal)."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.waiters.close()
        if self.smtp_server is not None:
            self.smtp_server.close()

    async def close(self) -> None:
        self.begin_shutdown()
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self.smtp_server is not None:
            self.smtp_server.close()
        if self.agent is not None:
            await self.agent.drain()
        await self.store.close()
        announce("stopped")

    async def _sweep(self) -> None:
        """Persist lease expiries, release evidence past retention; never blocks ingest."""
        while True:
            await asyncio.sleep(_SWEEP_EVERY_S)
            try:
                now = clock.now()
                for inbox in await self.store.expire_due(now, _SWEEP_BATCH):
                    expired = inbox.effective(now)
                    policy = self.settings.policy(inbox.policy_name)
                    await self.store.expire(expired, policy.retention_s)
                    self.metrics.expired("lease")
                    self.waiters.end([inbox.inbox_id])
                await self.store.release_due(now, _SWEEP_BATCH)
                await self._enforce_size_cap(now)
                await self.store.trim_unrouted(_UNROUTED_KEPT)
                self.metrics.sweeps.inc()
            except Exception as exc:  # the sweeper must outlive a bad moment of the store
                warn("sweep_failed", error=type(exc).__name__)

    async def _enforce_size_cap(self, now: float) -> None:
        """Over --max-store-mb: release the oldest released-eligible evidence first.

        Live evidence is never released for space; the store may stay over the cap
        until leases end (a warning says so).
        """
        if self.settings.max_store_mb is None:
            return
        cap = self.settings.max_store_mb * 1024 * 1024
        while await self.store.used_bytes() > cap:
            if await self.store.release_oldest_expired(now, 50) == 0:
                if not self._over_cap:
                    used_mb = round(await self.store.used_bytes() / 2**20, 1)
                    warn("store_over_cap", used_mb=used_mb, cap_mb=self.settings.max_store_mb)
                self._over_cap = True
                return
        self._over_cap = False


class _UvicornServer(uvicorn.Server):
    """uvicorn's server, with shutdown owned by our runtime.

    uvicorn re-raises the captured signal once ``serve`` returns, which would kill the
    process before the store is flushed and closed; we handle SIGINT/SIGTERM ourselves.
    """

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._exit, sig)
                installed.append(sig)
            except (RuntimeError, ValueError):  # not the main thread (an embedded server)
                break
        try:
            yield
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    def _exit(self, sig: int) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        self.should_exit = True
        self._on_exit()


def bind_http(settings: Settings) -> socket.socket:
    family = socket.AF_INET6 if ":" in settings.http_host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose protocol says
    # TCP, and without it a response's second segment waits for the client's delayed ACK
    # (about 40 ms per request on Linux).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.http_host, settings.http_port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


async def serve(
    settings: Settings,
    app_factory: Callable[[Runtime], Any],
    lifespan: Callable[[], contextlib.AbstractAsyncContextManager[object]] | None = None,
) -> None:
    """Run one server until SIGINT/SIGTERM (or ``runtime.begin_shutdown``).

    ``lifespan``, when given, runs what the app needs running (the MCP session manager)
    while HTTP serves: uvicorn runs with lifespan="off", the runtime owns the lifecycle.
    """
    runtime = Runtime(settings)
    try:
        await runtime.start()
        sock = bind_http(settings)
        config = uvicorn.Config(
            app_factory(runtime),
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=5,
            proxy_headers=False,
            server_header=False,
        )
        server = _UvicornServer(config, runtime.begin_shutdown)
        announce(
            "listening",
            smtp_host=settings.smtp_host,
            smtp_port=runtime.smtp_port,
            http_host=settings.http_host,
            http_port=sock.getsockname()[1],
            domain=settings.domain,
            db=str(settings.db),
        )
        stopper = asyncio.create_task(_stop_when(runtime, server), name="stopper")
        try:
            async with contextlib.AsyncExitStack() as running:
                if lifespan is not None:
                    await running.enter_async_context(lifespan())
                await server.serve(sockets=[sock])
        finally:
            stopper.cancel()
    finally:
        await runtime.close()


async def _stop_when(runtime: Runtime, server: uvicorn.Server) -> None:
    await runtime.stopping.wait()
    server.should_exit = True
