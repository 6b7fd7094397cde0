"""HTTP connections that cannot take the server down: timeouts, a cap, early refusals.

uvicorn's h11 protocol (``uvicorn/protocols/http/h11_impl.py``) arms its keep-alive timer
only after a response, so a client that connects and says nothing, or trickles one header
line every few seconds, holds its descriptor forever; ``limit_concurrency`` answers 503
only once a request arrives (the descriptor is already spent), and a request line longer
than h11's buffer is a 400 followed by a close with unread bytes, which the kernel turns
into a reset the client sees instead of the answer. ``GuardedH11Protocol`` keeps uvicorn's
request handling and adds, per connection:

- a **header deadline**: from the connection (or from the first byte of the next request
  on a kept-alive one) the request head, and its body, must be complete within
  ``header_timeout_s``, however steadily they trickle (408, then close, at a moment up to
  a tenth later so a flood does not time out all at once); a connection that sends
  nothing at all is closed at the same deadline;
- the **keep-alive idle timeout** (uvicorn's ``timeout_keep_alive``, from our flag);
- a **cap** on open connections, checked when the connection is made. At the cap the
  oldest connection with no request in progress (idle, or still sending its head) makes
  room, as nginx reuses idle keep-alive connections; only when every connection is busy
  (long-polls, requests being answered) is the newcomer answered 503 with ``Retry-After``;
- a word to a waiting request when its client hangs up (``api/hangup.py``), so a parked
  long-poll needs no task of its own listening to ``receive()``;
- **414** for a request line over 8 KiB and **431** for a head over h11's buffer, answered
  with a *lingering close* (stop writing, read and drop what the client still sends for a
  moment, then close) so the answer is not lost to a reset. Targets between 8 KiB and the
  buffer are answered 414 by the edge middleware (``api/middleware.py``).

Each refusal and timeout counts in ``runsink_connection_refusals{listener="http"}``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, cast

import h11
from starlette.types import Scope
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from api import hangup
from sink import ids
from sink.guidance import for_error

MAX_TARGET_BYTES = 8 * 1024
"""The longest request target (path and query) answered; RFC 9112 3 recommends at least
8000 octets."""
MAX_HEAD_BYTES = 16 * 1024
"""The request line and header fields together (h11's default incomplete-event limit)."""


def head_bytes(scope: Scope) -> int:
    """A request's head as it came: the request line, the header fields and the blank line
    (what ``MAX_HEAD_BYTES`` bounds, as h11 counts a head that is still incomplete)."""
    query = scope["query_string"]
    target = len(scope.get("raw_path") or b"") + (len(query) + 1 if query else 0)
    line = len(scope["method"]) + 1 + target + len(" HTTP/1.1\r\n")
    return line + sum(len(name) + len(value) + 4 for name, value in scope["headers"]) + 2


_LINGER_S = 1.0
_LINGER_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class HttpLimits:
    max_connections: int
    header_timeout_s: float
    keepalive_timeout_s: float
    retry_after_s: int = 1
    overflow: int = 16
    """Connections past the cap still read, to answer /healthz and /readyz (any other request
    on them is 503): the health check answers while slow clients hold every connection."""
    max_lingering: int = 256
    """Refused connections drained at once before closing (each holds a descriptor)."""


REFUSED, ADMITTED, OVERFLOW = 0, 1, 2  # a connection's place (GuardedH11Protocol._admitted)
OVERFLOW_SCOPE_KEY = "runsink.overflow"  # in a request's scope: it came past the cap


class ConnectionTable:
    """The open HTTP connections of one server, shared by every protocol instance.

    ``idle`` holds the connections without a request in progress, oldest first: the
    ones that may be closed to admit a newcomer at the cap.
    """

    def __init__(
        self,
        limits: HttpLimits,
        on_refusal: Callable[[str], None],
        on_count: Callable[[int], None],
    ) -> None:
        self.limits = limits
        self.open = 0
        self.overflowing = 0
        self.lingering = 0
        self._idle: OrderedDict[GuardedH11Protocol, None] = OrderedDict()
        self._on_refusal = on_refusal
        self._on_count = on_count

    def admit(self) -> int:
        """ADMITTED, OVERFLOW (past the cap: read only to answer a health check) or REFUSED."""
        if self.open < self.limits.max_connections:
            self.open += 1
            self._on_count(self.open)
            return ADMITTED
        while self._idle:
            victim, _ = self._idle.popitem(last=False)
            if victim.give_up_slot():
                return ADMITTED  # the victim's slot passes to the newcomer
        if self.overflowing < self.limits.overflow:
            self.overflowing += 1
            return OVERFLOW
        return REFUSED

    def leave(self, admitted: int) -> None:
        if admitted == OVERFLOW:
            self.overflowing -= 1
            return
        self.open -= 1
        self._on_count(self.open)

    def idle(self, connection: GuardedH11Protocol) -> None:
        """No request in progress: may be closed for a newcomer (keeps its place in line)."""
        if connection not in self._idle:
            self._idle[connection] = None

    def busy(self, connection: GuardedH11Protocol) -> None:
        self._idle.pop(connection, None)

    def refused(self, reason: str) -> None:
        self._on_refusal(reason)


class LongPollGate:
    """Counts waits holding their connection; past ``limit`` a wait is refused (503), so
    long-polls never take the connections that ``/healthz`` and short requests need."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0

    def enter(self) -> bool:
        if self.active >= self.limit:
            return False
        self.active += 1
        return True

    def leave(self) -> None:
        self.active -= 1


@functools.lru_cache(maxsize=64)
def _answer(
    status: int, code: str, message: str, headers: tuple[tuple[str, str], ...]
) -> tuple[bytes, bytes]:
    """A whole JSON error response but its trace header, as (head, end and body): built once
    per distinct answer (a wave of timeouts writes thousands of the same one)."""
    retry = dict(headers).get("Retry-After")
    guided = for_error(code, status, retry_after=float(retry) if retry else None)
    error = {"code": code, "message": message, "details": {}}
    body = json.dumps({"error": error, **guided.fields()}).encode()
    lines = [
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
        "cache-control: no-store",
        "x-content-type-options: nosniff",
        *(f"{name}: {value}" for name, value in headers),
    ]
    return ("\r\n".join(lines) + "\r\n").encode("latin-1"), b"\r\n" + body


class _Linger:
    """A connection answered early, being drained before it closes."""

    __slots__ = ("drained", "timer")

    def __init__(self, timer: asyncio.TimerHandle) -> None:
        self.timer = timer
        self.drained = 0


class LeanEvent:
    """``asyncio.Event`` as uvicorn uses it (set, clear, wait), without the deque every
    Event makes up front (about 700 bytes): uvicorn makes two per connection (the request's
    message event, the flow control's), and almost nobody ever waits on them while a
    long-poll is parked."""

    __slots__ = ("_value", "_waiters")

    def __init__(self, value: bool = False) -> None:
        self._value = value
        self._waiters: list[asyncio.Future[None]] | None = None

    def is_set(self) -> bool:
        return self._value

    def set(self) -> None:
        if self._value:
            return
        self._value = True
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    def clear(self) -> None:
        self._value = False

    async def wait(self) -> bool:
        if self._value:
            return True
        waiter = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if self._waiters is not None and waiter in self._waiters:
                self._waiters.remove(waiter)
        return True


def protocol_class(table: ConnectionTable) -> type[GuardedH11Protocol]:
    """uvicorn builds protocols from a class (``Config(http=...)``): bind the table to one."""
    return type("BoundGuardedH11Protocol", (GuardedH11Protocol,), {"table": table})


class GuardedH11Protocol(H11Protocol):
    table: ConnectionTable

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._admitted = REFUSED  # or ADMITTED, OVERFLOW
        self._head_timer: asyncio.TimerHandle | None = None
        # Few attributes of our own: uvicorn's protocol has 25, and past 30 an instance's
        # dict stops sharing its keys with the class's other instances (CPython 3.11's
        # SHARED_KEYS_MAX_SIZE), which costs about 1.5 KiB per connection.
        self._linger: _Linger | None = None

    # -- connection life -------------------------------------------------------------

    def connection_made(  # type: ignore[override]
        self, transport: asyncio.Transport
    ) -> None:
        # (uvloop's transports do not subclass asyncio's: no isinstance check here.)
        self._admitted = self.table.admit()
        if self._admitted == REFUSED:
            self.transport = transport
            self.table.refused("over_capacity")
            self._answer_and_close(
                503,
                "over_capacity",
                "too many open connections; retry shortly",
                [("retry-after", str(self.table.limits.retry_after_s))],
            )
            return
        super().connection_made(transport)
        flow: Any = self.flow
        if type(getattr(flow, "_is_writable_event", None)) is asyncio.Event:
            flow._is_writable_event = LeanEvent(flow._is_writable_event.is_set())
        self._settle()

    def connection_lost(self, exc: Exception | None) -> None:
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            hangup.lost(cast("dict[str, Any]", cycle.scope))
        self._cancel_head_timer()
        if self._linger is not None:
            self._linger.timer.cancel()
            self._linger = None
            self.table.lingering -= 1
        self.table.busy(self)
        if self._admitted != REFUSED:
            self.table.leave(self._admitted)
            self._admitted = REFUSED
        super().connection_lost(exc)

    def give_up_slot(self) -> bool:
        """Close this idle connection so a newcomer can have its slot."""
        if self._admitted != ADMITTED or self.transport is None or self.transport.is_closing():
            return False
        self._admitted = REFUSED
        self.table.refused("evicted")
        if self.cycle is None:
            # It has asked nothing yet, but its request may be on its way (a burst of
            # newcomers, each making room for the next before any is read): it gets the
            # cap's answer, never silence.
            self._answer_and_close(
                503,
                "over_capacity",
                "too many open connections; retry shortly",
                [("retry-after", str(self.table.limits.retry_after_s))],
            )
            return True
        # Between requests (kept alive): closed as HTTP lets a server close an idle one.
        self._cancel_head_timer()
        self._unset_keepalive_if_required()
        self.transport.close()
        return True

    def data_received(self, data: bytes) -> None:
        if self._linger is not None:
            self._linger.drained += len(data)
            if self._linger.drained > _LINGER_BYTES:
                self.transport.close()
            return
        super().data_received(data)
        self._settle()

    def handle_events(self) -> None:
        super().handle_events()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # A request it began (its task starts on the loop's next turn) learns that this
            # protocol tells it when the client hangs up, and waits on a lean event.
            hangup.mark(cast("dict[str, Any]", cycle.scope))
            if self._admitted == OVERFLOW:
                cycle.scope[OVERFLOW_SCOPE_KEY] = True  # type: ignore[literal-required]
            # uvicorn keeps the request's header list here too (read again only for a
            # WebSocket upgrade, decided above): the scope's copy is the one that counts.
            self.headers = []
            if type(cycle.message_event) is asyncio.Event:
                cycle.message_event = LeanEvent(cycle.message_event.is_set())  # type: ignore[assignment]

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._settle()

    def timeout_keep_alive_handler(self) -> None:
        if not self.transport.is_closing():
            self.table.refused("keepalive_timeout")
        super().timeout_keep_alive_handler()

    def shutdown(self) -> None:
        if self._linger is not None or not self._admitted:
            self.transport.close()
            return
        super().shutdown()

    # -- the header deadline -----------------------------------------------------------

    def _settle(self) -> None:
        """After every event: which deadline applies to this connection now."""
        if self._linger is not None or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A request in progress (a long-poll, a read): the application's business once
            # its body is in; a body still arriving keeps the head's deadline.
            self.table.busy(self)
            if not self.cycle.more_body:
                self._cancel_head_timer()
            return
        if self._admitted == ADMITTED:
            self.table.idle(self)
        if self._head_started() or self.cycle is None:
            # A head on its way, or a new connection that has asked nothing yet: the
            # deadline runs from its first byte (or the connection), and is not moved by
            # later bytes.
            if self._head_timer is None:
                self._unset_keepalive_if_required()
                # Up to a tenth later, at random: clients that connected together (a
                # flood) do not all time out in the same instant, stalling the loop.
                deadline = self.table.limits.header_timeout_s * (1 + random.random() / 10)
                self._head_timer = self.loop.call_later(deadline, self._head_timed_out)
        else:
            # Between requests: uvicorn's keep-alive timer (armed on the response) applies.
            self._cancel_head_timer()

    def _head_started(self) -> bool:
        buffered, _ = self.conn.trailing_data
        return bool(buffered) or self.conn.their_state is not h11.IDLE

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            if self.cycle.more_body:
                # The application is still reading the body (it has not answered): answer
                # for it; it sees the client gone once the connection closes.
                self.table.refused("body_timeout")
                self._answer_and_close(
                    408, "request_timeout", "the request body did not arrive in time", linger=False
                )
        elif self._head_started():
            self.table.refused("header_timeout")
            self._answer_and_close(
                408, "request_timeout", "the request head did not arrive in time", linger=False
            )
        else:
            self.table.refused("idle_timeout")
            self.transport.close()

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    # -- early answers -----------------------------------------------------------------

    def send_400_response(self, msg: str) -> None:
        # uvicorn calls this when h11 refuses the request head (RemoteProtocolError).
        buffered, _ = self.conn.trailing_data
        line_end = buffered.find(b"\n")
        # "GET " + target + " HTTP/1.1\r\n": allow for the method and version around it.
        if (line_end == -1 and len(buffered) > MAX_TARGET_BYTES) or line_end > (
            MAX_TARGET_BYTES + 64
        ):
            self.table.refused("uri_too_long")
            self._answer_and_close(
                414, "uri_too_long", f"the request target is over {MAX_TARGET_BYTES} bytes"
            )
        elif len(buffered) > MAX_HEAD_BYTES:
            self.table.refused("header_too_large")
            self._answer_and_close(
                431, "header_too_large", f"the request head is over {MAX_HEAD_BYTES} bytes"
            )
        else:
            self.table.refused("malformed")
            self._answer_and_close(400, "invalid_request", "malformed HTTP request")

    def _answer_and_close(
        self,
        status: int,
        code: str,
        message: str,
        headers: list[tuple[str, str]] | None = None,
        linger: bool = True,
    ) -> None:
        """Write a complete answer outside h11 (whatever its state), then close.

        With ``linger``, stop writing and drop what the client still sends for a moment
        before closing: closing with unread bytes makes the kernel send a reset, and a
        reset can destroy the answer before the client reads it.
        """
        self._cancel_head_timer()
        self._unset_keepalive_if_required()
        self.table.busy(self)
        transport = self.transport
        if transport.is_closing():
            return
        head, rest = _answer(status, code, message, tuple(headers or ()))
        # Every response carries a trace (the contract), this one too: a new one, since the
        # request never got far enough to name its own.
        transport.write(head + b"x-trace-id: " + ids.new_trace_id().encode() + b"\r\n" + rest)
        # Many refusals lingering at once (a flood) would hold descriptors: then close now.
        lingering_full = self.table.lingering >= self.table.limits.max_lingering
        if not linger or lingering_full or not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        transport.resume_reading()
        self.table.lingering += 1
        self._linger = _Linger(self.loop.call_later(_LINGER_S, transport.close))
