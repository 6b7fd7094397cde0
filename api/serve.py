"""Serving HTTP beside the runtime: uvicorn's ``Server.serve`` on the runtime's own loop.

The runtime (``sink/runtime.py``) owns SMTP, the store and the waiters; this module adds
the HTTP listener and the signal handling, and is the only place that knows uvicorn.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import uvicorn

from api.connections import MAX_HEAD_BYTES, ConnectionTable, HttpLimits, protocol_class
from api.warmup import LoadWireAfterFirstAnswer
from sink.config import Settings
from sink.errors import ConfigError
from sink.logs import announce
from sink.runtime import Runtime, listen_error


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
    try:
        sock.bind((settings.http_host, settings.http_port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            listen_error("--http-port", settings.http_host, settings.http_port, exc)
        ) from exc
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
        assert runtime.capacity is not None, "the runtime sizes its caps in start()"
        table = ConnectionTable(
            HttpLimits(
                max_connections=runtime.capacity.http_connections,
                header_timeout_s=settings.http_header_timeout,
                keepalive_timeout_s=settings.http_keepalive_timeout,
                # Both hold descriptors beyond the caps: from the reserve, a quarter each.
                overflow=min(16, runtime.capacity.reserved // 4),
                max_lingering=min(256, runtime.capacity.reserved // 4),
            ),
            on_refusal=partial(runtime.metrics.refused, "http"),
            on_count=runtime.metrics.http_connections.set,
        )
        config = uvicorn.Config(
            LoadWireAfterFirstAnswer(app_factory(runtime)),
            interface="asgi3",
            http=protocol_class(table),
            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
            # uvicorn hands this to loop.call_later, which takes fractions of a second.
            timeout_keep_alive=settings.http_keepalive_timeout,  # type: ignore[arg-type]
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
            smtps_port=runtime.smtps_port,
            http_host=settings.http_host,
            http_port=sock.getsockname()[1],
            domain=settings.domain,
            db=settings.store,
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
