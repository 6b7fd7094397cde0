"""The real app in this process: no server subprocess, no HTTP socket.

``InProcess`` opens the real ``Runtime`` (over the memory backend, a SQLite file or a
PostgreSQL database) and the real application (``api/app.py``'s ``create_app``, ``/mcp``
included) on an event loop of its own, in a thread, as ``runsink serve`` does on its main
loop, minus uvicorn. Its ``http()`` is an ``httpx.Client`` whose transport hands each
request to the app on that loop (``_Bridge``: httpx's ``ASGITransport``, streamed: an
event stream is read as it comes, and closing the response is the client hanging up). The
SMTP listener is the runtime's own, on a free loopback port, so tests send mail as they do
to a subprocess server (``Mailer.send``); ``ingest`` puts a message in through the real
``Ingest`` without a socket.

Use it where the socket is not what a test is about; connection limits, hang-ups,
crashes, replicas and the JSON logs need ``tests.support.start_server``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import queue
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import httpx
import httpx2
from starlette.types import Message, Scope

from sink.config import add_serve_arguments, settings_from
from sink.runtime import Runtime
from sink.storage.backend import Opener
from tests.support import Mailer, Server

T = TypeVar("T")

_HOST = "127.0.0.1"
_STOP_S = 20.0


class InProcess(Mailer):
    """A started runtime and its app on a loop in a thread; ``stop()`` closes both."""

    def __init__(
        self,
        folder: Path,
        *args: str,
        db: Path | str | None = None,
        backend: Opener | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``args`` are ``runsink serve`` flags; ``db`` a SQLite file or a postgresql:// URL
        (a SQLite file in ``folder`` by default); ``backend`` another opener (the memory
        backend's) instead of the one ``db`` names; ``env`` the RUNSINK_* variables read."""
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.db: Path | str = db or folder / "runsink.db"
        parser = argparse.ArgumentParser()
        add_serve_arguments(parser)
        argv = ["--smtp-port", "0", "--http-port", "0", "--db", str(self.db), *args]
        self.settings = settings_from(parser.parse_args(argv), env or {})
        self._backend = backend
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="inproc", daemon=True)
        self._thread.start()
        self._stack = contextlib.AsyncExitStack()
        try:
            self.runtime, self.app = self.call(self._open())
        except BaseException:
            self._end_loop()
            raise
        self.smtp_port = self.runtime.smtp_port
        self.smtps_port = self.runtime.smtps_port

    @property
    def url(self) -> str:
        """The base URL requests name (nothing listens there: the bridge carries them)."""
        return f"http://{_HOST}:{self.settings.http_port or 80}"

    def http(self, **kwargs: Any) -> httpx.Client:
        kwargs.setdefault("timeout", 30)
        return httpx.Client(base_url=self.url, transport=self.transport(), **kwargs)

    def transport(self) -> httpx.BaseTransport:
        """An httpx transport to the app (for a client that takes one: ``sink.client.Sink``)."""
        return _Bridge(self.app, self._loop)

    def async_transport(self) -> httpx2.AsyncBaseTransport:
        """An httpx2 transport to the app, for a client on another loop (the MCP SDK's)."""
        return _AsyncBridge(self.app, self._loop)

    def call(self, coroutine: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        """Run ``coroutine`` on the server's loop and return its result."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result(timeout_s)

    def ingest(self, raw: bytes, recipients: list[str], sender: str = "app@example.test") -> Any:
        """Deliver ``raw`` through the real Ingest as the SMTP handler would, minus the socket:
        each recipient routed (RCPT), then the message delivered (DATA); the DATA verdict."""
        return self.call(self._ingest(sender, recipients, raw))

    async def _ingest(self, sender: str, recipients: list[str], raw: bytes) -> Any:
        ingest = self.runtime.ingest
        routed = [await ingest.route(address, len(raw)) for address in recipients]
        return await ingest.deliver(sender, routed, raw)

    def stop(self) -> None:
        try:
            self.call(self._close(), _STOP_S)
        finally:
            self._end_loop()

    async def _close(self) -> None:
        await self._stack.aclose()
        # What still runs (a request whose client never hung up) ends as asyncio.run ends it.
        rest = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    async def _open(self) -> tuple[Runtime, Any]:
        from api.app import create_app
        from api.mcp_route import LazyMcp

        runtime = Runtime(self.settings, self._backend)
        await runtime.start()
        self._stack.push_async_callback(runtime.close)
        mcp = LazyMcp()
        await self._stack.enter_async_context(mcp.running())
        return runtime, create_app(runtime, mcp=mcp)

    def _end_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_STOP_S)
        self._loop.close()


Served = Server | InProcess
"""What a helper sending mail and calling the API takes: a subprocess or this process."""

_END = object()  # the response is complete


class _Bridge(httpx.BaseTransport):
    """httpx -> the ASGI app on its loop: the head as soon as it is sent, the body as it comes."""

    def __init__(self, app: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._app = app
        self._loop = loop

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        exchange = _Exchange(self._app, self._loop, request, request.read())
        timeout = request.extensions.get("timeout", {}).get("read")
        asyncio.run_coroutine_threadsafe(exchange.run(), self._loop)
        head = exchange.next(timeout, _timed_out(request))
        if head is _END:
            raise httpx.RemoteProtocolError("the app sent no response", request=request)
        status, headers = head
        return httpx.Response(
            status,
            headers=headers,
            stream=_Body(exchange, timeout, request),
            request=request,
        )


class _Exchange:
    """One request's run through the app; what it sends goes to a queue the client reads."""

    def __init__(
        self,
        app: Any,
        loop: asyncio.AbstractEventLoop,
        request: httpx.Request | httpx2.Request,
        body: bytes,
    ) -> None:
        self._app = app
        self._loop = loop
        self._body: bytes | None = body
        self._outbox: queue.Queue[Any] = queue.Queue()
        self._gone = asyncio.Event()  # the client hung up (binds to the loop at its first wait)
        self.scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": request.method,
            "headers": [(k.lower(), v) for k, v in request.headers.raw],
            "scheme": request.url.scheme,
            "path": request.url.path,
            "raw_path": request.url.raw_path.split(b"?")[0],
            "query_string": request.url.query,
            "server": (request.url.host, request.url.port),
            "client": (_HOST, 40000),
            "root_path": "",
        }

    async def run(self) -> None:
        started = False

        async def receive() -> Message:
            if self._body is not None:
                body, self._body = self._body, None
                return {"type": "http.request", "body": body, "more_body": False}
            await self._gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                self._outbox.put((message["status"], message.get("headers", [])))
            elif message["type"] == "http.response.body":
                if message.get("body") and self.scope["method"] != "HEAD":
                    self._outbox.put(bytes(message["body"]))
                if not message.get("more_body", False):
                    self._outbox.put(_END)

        try:
            await self._app(self.scope, receive, send)
        except Exception:
            if not started:  # as uvicorn answers an app that fails before its response
                self._outbox.put((500, [(b"content-type", b"text/plain")]))
                self._outbox.put(b"Internal Server Error")
        finally:
            self._outbox.put(_END)

    def next(self, timeout: float | None, timed_out: Callable[[], Exception]) -> Any:
        """What the app sent next; past the read timeout the client gives up and hangs up."""
        try:
            return self._outbox.get(timeout=timeout)
        except queue.Empty:
            self.hang_up()
            raise timed_out() from None

    def hang_up(self) -> None:
        """The client is gone: the app's ``receive()`` answers ``http.disconnect``."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._gone.set)


class _Body(httpx.SyncByteStream):
    """The response body as the app sends it; closing it is the client hanging up."""

    def __init__(self, exchange: _Exchange, timeout: float | None, request: httpx.Request) -> None:
        self._exchange = exchange
        self._timeout = timeout
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        timed_out = _timed_out(self._request)
        while (chunk := self._exchange.next(self._timeout, timed_out)) is not _END:
            yield chunk

    def close(self) -> None:
        self._exchange.hang_up()


def _timed_out(request: httpx.Request) -> Callable[[], Exception]:
    return lambda: httpx.ReadTimeout("the app did not answer in time", request=request)


class _AsyncBridge(httpx2.AsyncBaseTransport):
    """``_Bridge`` for an httpx2 client on a loop of its own: the waits in threads."""

    def __init__(self, app: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._app = app
        self._loop = loop

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        exchange = _Exchange(self._app, self._loop, request, await request.aread())
        timeout = request.extensions.get("timeout", {}).get("read")
        timed_out = _async_timed_out(request)
        asyncio.run_coroutine_threadsafe(exchange.run(), self._loop)
        head = await asyncio.to_thread(exchange.next, timeout, timed_out)
        if head is _END:
            raise httpx2.RemoteProtocolError("the app sent no response", request=request)
        status, headers = head
        stream = _AsyncBody(exchange, timeout, timed_out)
        return httpx2.Response(status, headers=headers, stream=stream, request=request)


class _AsyncBody(httpx2.AsyncByteStream):
    def __init__(
        self, exchange: _Exchange, timeout: float | None, timed_out: Callable[[], Exception]
    ) -> None:
        self._exchange = exchange
        self._timeout = timeout
        self._timed_out = timed_out

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await asyncio.to_thread(self._exchange.next, self._timeout, self._timed_out)
            if chunk is _END:
                return
            yield chunk

    async def aclose(self) -> None:
        self._exchange.hang_up()


def _async_timed_out(request: httpx2.Request) -> Callable[[], Exception]:
    return lambda: httpx2.ReadTimeout("the app did not answer in time", request=request)
