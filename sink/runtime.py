"""The runtime: opens and closes everything, in order. The only owner of the lifecycle.

One process, one event loop: the SMTP listener (``loop.create_server`` with
aiosmtpd's protocol, not its threaded Controller) and the HTTP server (``api/serve.py``
runs the HTTP server on the same loop) share the waiters, the store and the
breakers. This module knows nothing of HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import random
import ssl
from collections.abc import Callable

from sink import capacity
from sink.agent import Agent
from sink.clock import SystemClock
from sink.config import Settings
from sink.errors import ConfigError
from sink.events import Hub
from sink.faults import FaultRegistry
from sink.guard import Guard
from sink.ingest import Ingest
from sink.logs import announce, warn
from sink.mailbox import Mailbox
from sink.metrics import Metrics
from sink.smtp.auth import Logins
from sink.smtp.handler import Handler
from sink.smtp.limits import Limits
from sink.smtp.protocol import Connections
from sink.smtp.tls import server_context
from sink.storage.backend import Backend, Opener, open_backend
from sink.sweeper import Sweeper
from sink.tokens import Keyring
from sink.waiters import Waiters
from sink.webhooks.worker import Worker

_LISTEN_BACKLOG = 2048


class Runtime:
    """Everything one server process holds, opened in order and closed in reverse."""

    def __init__(self, settings: Settings, backend: Opener | None = None) -> None:
        """``backend``: how to get the storage backend (``open_backend``: by ``--db``;
        tests hand ``memory_backend``). It is opened in ``start``."""
        self.settings = settings
        self.metrics = Metrics()
        self.waiters = Waiters()
        self.events = Hub()  # live events (GET /v1/events): fed by the store's commits and ingest
        self.backend: Backend = (backend or open_backend)(settings, self.events)
        self.store = self.backend.store
        self.mail = self.backend.mail  # caught mail, search and the Mailpit subset
        self.webhooks = self.backend.webhooks  # webhooks and their outbox
        self.faults = FaultRegistry(random.Random()) if settings.enable_faults else None
        self.agent: Agent | None = None
        self.keyring: Keyring | None = None  # once the store is open (it keeps the signing key)
        self.clock = SystemClock()
        self.guard = Guard(
            self.faults, self.store, self.metrics, self.clock, self.backend.fleet_breakers
        )
        self.ingest = Ingest(
            self.store,
            self.waiters,
            settings,
            self.metrics,
            self.clock,
            # Mail is announced here unless the backend's feed announces it with its commit.
            events=None if self.backend.feed_announces_commits else self.events,
            faults=self.faults,
        )
        self.mailbox = Mailbox(self.mail)
        self.started_at = self.clock.now()
        self.smtp_server: asyncio.Server | None = None
        self.smtp_port = settings.smtp_port
        self.smtps_server: asyncio.Server | None = None
        self.smtps_port: int | None = None
        self.tls_context: ssl.SSLContext | None = None
        self.capacity: capacity.Capacity | None = None
        self.sweeper = Sweeper(self.backend, self.waiters, settings, self.metrics, self.clock)
        self._sweeping: asyncio.Task[None] | None = None
        self.deliverer = Worker(
            self.webhooks,
            self.metrics,
            self.clock,
            settings.webhook_retry_s,
            child=settings.webhook_child,
        )
        self._delivering: asyncio.Task[None] | None = None
        self.stopping = asyncio.Event()
        self._ping: asyncio.Future[None] | None = None  # the readiness probe in flight

    async def start(self) -> None:
        # What can still fail on a bad setting (the certificate) comes before anything opens.
        self.tls_context = server_context(self.settings)
        sized = self._size_connections()
        await self.store.open()
        signing_key = await self.store.signing_key()
        self.keyring = Keyring(self.settings.tokens, signing_key)
        self.events.keyed(signing_key)  # live event ids agree across replicas and restarts
        if self.backend.feed is not None:
            # Mail accepted by another replica wakes the waits held here.
            # And every replica's live events (this one's too) reach its /v1/events readers.
            self.backend.feed.follow(self.waiters, live=self.events)
        # Webhook deliveries: those left pending by the process before go out now; a commit
        # that queues more wakes the worker at once.
        self.webhooks.wake = self.deliverer.wake
        self.webhooks.hand = self.deliverer.hand
        self._delivering = asyncio.create_task(
            self.deliverer.run(self.stopping), name="webhook-deliveries"
        )
        self.agent = Agent(
            self.store,
            self.waiters,
            self.settings,
            self.guard,
            self.metrics,
            self.clock,
            poll_slots=self.backend.poll_slots,
        )
        loop = asyncio.get_running_loop()
        handler = Handler(
            self.ingest,
            self.metrics,
            None if self.settings.no_smtp_auth else Logins(self.settings.smtp_auth),
            Limits(max_connections=sized.smtp_connections),
            require_tls=self.settings.smtp_require_tls,
            accepted_domains=self.settings.accepted_domains,
        )
        connections = Connections(self.settings, handler, self.metrics, self.tls_context, loop)
        self.smtp_server = await _listen(
            loop,
            connections.plaintext,
            self.settings.smtp_host,
            self.settings.smtp_port,
            "--smtp-port",
        )
        self.smtp_port = self.smtp_server.sockets[0].getsockname()[1]
        if self.settings.smtps_port is not None:
            self.smtps_server = await _listen(
                loop,
                connections.smtps,
                self.settings.smtp_host,
                self.settings.smtps_port,
                "--smtps-port",
            )
            self.smtps_port = self.smtps_server.sockets[0].getsockname()[1]
        self._sweeping = asyncio.create_task(self.sweeper.run(self.stopping), name="sweeper")

    def _size_connections(self) -> capacity.Capacity:
        """Raise the descriptor limit as far as the caps need, then fit the caps under it."""
        smtp, http = self.settings.smtp_max_connections, self.settings.http_max_connections
        fd_limit = capacity.raise_fd_limit(capacity.needed(smtp, http))
        try:
            sized = capacity.plan(fd_limit, smtp, http)
        except ValueError as exc:
            raise ConfigError(f"--smtp-max-connections/--http-max-connections: {exc}") from exc
        report = warn if sized.lowered else announce
        report(
            "connection_caps",
            fd_limit=sized.fd_limit,
            reserved_fds=sized.reserved,
            smtp_max_connections=sized.smtp_connections,
            http_max_connections=sized.http_connections,
            max_long_polls=sized.long_polls,
            lowered=sized.lowered,
        )
        self.capacity = sized
        return sized

    async def store_answers(self, within_s: float) -> bool:
        """Whether the store commits within ``within_s`` (``/readyz``).

        One probe at a time, shared by every caller meanwhile. One the store does not answer
        is left to end by itself, never waited for past the deadline: cancelling a call to
        a database that hangs waits on that database too (asyncpg sends it a cancel request).
        """
        if self._ping is None or self._ping.done():
            self._ping = asyncio.ensure_future(self.store.ping())
            self._ping.add_done_callback(_retrieved)
        done, _ = await asyncio.wait({self._ping}, timeout=within_s)
        return bool(done) and not self._ping.cancelled() and self._ping.exception() is None

    def begin_shutdown(self) -> None:
        """Stop accepting mail and answer every wait in progress (called from a signal)."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.deliverer.wake()  # its loop sees stopping and ends
        self.waiters.close()
        self.events.close()
        for server in (self.smtp_server, self.smtps_server):
            if server is not None:
                server.close()

    async def close(self) -> None:
        self.begin_shutdown()
        if self._sweeping is not None:
            self._sweeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeping
        if self._delivering is not None:
            # Attempts in flight are cancelled: not settled, they are made again after the
            # restart (at least once).
            await self._delivering
        for server in (self.smtp_server, self.smtps_server):
            if server is not None:
                server.close()
        await self.store.close()
        announce("stopped")


async def _listen(
    loop: asyncio.AbstractEventLoop,
    factory: Callable[[], asyncio.BaseProtocol],
    host: str,
    port: int,
    flag: str,
) -> asyncio.Server:
    """A listening socket; a port in use is a ConfigError naming the flag to change."""
    try:
        # A burst past the cap must reach accept() to hear its 421: asyncio's default
        # backlog (100) drops the handshakes of a larger burst for a second or more.
        return await loop.create_server(factory, host=host, port=port, backlog=_LISTEN_BACKLOG)
    except OSError as exc:
        raise ConfigError(listen_error(flag, host, port, exc)) from exc


def listen_error(flag: str, host: str, port: int, exc: OSError) -> str:
    """What to change when a port cannot be bound (the same words for SMTP and HTTP)."""
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{flag} {port}: address already in use on {host} (another runsink, Mailpit or "
            f"MailHog?); choose another {flag}, or {flag} 0 for any free port"
        )
    return f"{flag} {port} on {host}: cannot listen ({exc.strerror or exc})"


def _retrieved(probe: asyncio.Future[None]) -> None:
    """A probe that ended with nobody waiting: its failure is the next probe's business."""
    if not probe.cancelled():
        probe.exception()
