"""The one HTTP request the worker makes, ``POST``, over HTTP/1.1 on asyncio streams.

A delivery is a small POST whose answer only matters by its status, so this is all of the
client it needs: kept-alive connections per origin (``http``/``https``, host, port), at most
``max_connections`` open in all, no redirects followed (a 3xx is an answer like any other).
It costs about a twentieth of a general-purpose client's CPU per request (~0.05 ms against
~1.2 ms for httpx on loopback), which is what lets deliveries keep up with ingest on the
same core. A ``user:password@`` in the URL is sent as HTTP Basic auth, never in the request
line or ``Host``.

The answer is read as common clients read it (``answer.py``: bare LF line ends, 1xx skipped,
chunked). Its status is the result as soon as its head has come within the post's limit.
The body only decides whether the connection is kept: read at once when it came with the
head (most answers), else after the status is returned, for at most ``BODY_S`` (a receiver
that writes its head and body apart, Nagle holding the body for the head's delayed ACK,
costs an attempt nothing). A body that is slow, cut short, malformed or runs to the close
costs the connection, never the status. A kept connection the peer has closed is not used;
one that turns out closed before any answer is replaced once (the peer read nothing on it).
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections import defaultdict
from urllib.parse import quote, unquote_to_bytes, urlsplit

from sink.webhooks.answer import (
    Connection,
    Framing,
    Head,
    ProtocolError,
    drop_body,
    dropped,
    framing,
    read_head,
)

BODY_S = 1.0  # after the head, the body's time to end before the connection is dropped
KEEP_PER_ORIGIN = 8
_URL_SAFE = "!#$%&'()*+,/:;=?@[]~"  # what a request target may hold as it is (%XX kept)
# What a body may run into after its head (TimeoutError: ``BODY_S`` passed).
_BODY_TROUBLE = (TimeoutError, ProtocolError, OSError, asyncio.IncompleteReadError)

Origin = tuple[str, str, int]

__all__ = ["Http1", "ProtocolError"]


class _Stale(Exception):
    """A kept connection the peer had closed: nothing was read from it."""


class Http1:
    def __init__(self, max_connections: int) -> None:
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: dict[Origin, list[Connection]] = defaultdict(list)
        self._tls: ssl.SSLContext | None = None
        # The connections whose body is read after its status was returned.
        self._draining: dict[asyncio.Task[None], Connection] = {}

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], timeout_s: float | None = None
    ) -> int:
        """POST ``body`` to ``url``: the answer's status, once its head has come within
        ``timeout_s`` (TimeoutError otherwise; the wait for a connection slot included)."""
        origin, request = _request(url, body, headers)
        async with asyncio.timeout(timeout_s):
            await self._slots.acquire()
            try:
                conn, (status, version, fields) = await self._answer(origin, request)
            except BaseException:
                self._slots.release()
                raise
        # The status is the result from here: the body only decides whether the connection
        # is kept, read now if it came with the head (most answers), else after returning.
        how = framing(status, version, fields)
        try:
            kept = dropped(conn, how)
        except ProtocolError:
            self._release(origin, conn, None)
        else:
            if kept is None:
                task = asyncio.get_running_loop().create_task(self._drain(origin, conn, how))
                self._draining[task] = conn
                task.add_done_callback(self._draining.pop)
            else:
                self._release(origin, conn, kept)
        return status

    async def close(self) -> None:
        for conn in self._draining.values():
            conn.writer.transport.abort()  # its drain ends at once (a task not started too)
        await asyncio.gather(*self._draining, return_exceptions=True)
        for conns in self._idle.values():
            for conn in conns:
                conn.writer.close()
        self._idle.clear()

    async def _drain(self, origin: Origin, conn: Connection, how: Framing) -> None:
        """Read the rest of a body whose status was returned, for at most ``BODY_S``."""
        kept: bool | None = None  # broken, unless the body ends
        try:
            async with asyncio.timeout(BODY_S):
                kept = await drop_body(conn, how)
        except _BODY_TROUBLE:
            pass  # only the connection is lost
        finally:
            self._release(origin, conn, kept)

    async def _answer(self, origin: Origin, request: bytes) -> tuple[Connection, Head]:
        """The answer's head, on a kept connection if one still works, else a new one."""
        idle = self._idle[origin]
        while idle:
            conn = idle.pop()
            if conn.reader.at_eof() or conn.writer.transport.is_closing():
                conn.writer.transport.abort()  # closed by the peer while it waited: not tried
                continue
            try:
                return conn, await _exchange(conn, request, reused=True)
            except _Stale:
                continue
        conn = Connection(*await self._connect(origin))
        return conn, await _exchange(conn, request, reused=False)

    async def _connect(self, origin: Origin) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        scheme, host, port = origin
        if scheme == "https":
            if self._tls is None:
                self._tls = ssl.create_default_context()
            return await asyncio.open_connection(host, port, ssl=self._tls, server_hostname=host)
        return await asyncio.open_connection(host, port)

    def _release(self, origin: Origin, conn: Connection, keep: bool | None) -> None:
        """Free the connection's slot: keep it for the next post, close it, or (broken, or
        cut off mid-answer: None) drop it at once, never waiting on a peer that may not read."""
        self._slots.release()
        if keep and len(self._idle[origin]) < KEEP_PER_ORIGIN:
            self._idle[origin].append(conn)
        elif keep is None:
            conn.writer.transport.abort()
        elif not conn.writer.transport.is_closing():
            conn.writer.close()


def _request(url: str, body: bytes, headers: dict[str, str]) -> tuple[Origin, bytes]:
    """The origin to connect to, and the request's bytes."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ProtocolError(f"not an http(s) URL with a host: {scheme}")
    port = parts.port or (443 if scheme == "https" else 80)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not host.isascii():
        host = host.encode("idna").decode("ascii")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    target = quote(target, safe=_URL_SAFE)  # beyond ASCII: UTF-8 %XX, as httpx sends it
    lines = [f"POST {target} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
    if at:
        lines.append(f"Authorization: {_basic_auth(userinfo)}")
    lines += [f"{name}: {value}" for name, value in headers.items()]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return (scheme, parts.hostname, port), head + body


def _basic_auth(userinfo: str) -> str:
    """``Basic`` + base64 of ``user:password``, each percent-decoded (as curl and browsers
    send a URL's ``user:password@``; no password: ``user:``)."""
    user, _, password = userinfo.partition(":")
    raw = unquote_to_bytes(user) + b":" + unquote_to_bytes(password)
    return "Basic " + base64.b64encode(raw).decode("ascii")


async def _exchange(conn: Connection, request: bytes, reused: bool) -> Head:
    """Send the request and read the answer's head (the connection is dropped on failure)."""
    try:
        try:
            conn.writer.write(request)
            await conn.writer.drain()
            return await read_head(conn)
        except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError):
            if reused and not conn.rest:
                raise _Stale from None
            raise
    except BaseException:
        # Timed out, cancelled, or the peer misbehaved: drop the connection at once, never
        # waiting on a peer that may not read.
        conn.writer.transport.abort()
        raise
