"""The SMTP protocol: aiosmtpd's, with our connection gate, limits and command syntax.

One ``RunsinkSMTP`` per connection, made by ``Connections`` (the factory the listening
sockets share, with the gate that counts them); its MAIL, RCPT and DATA call the handler
(``sink/smtp/handler.py``), which knows what the mail means. It is fed by apps we do not
control, so it is strict where being lenient would let one message pass for another:

- DATA ends only at ``<CRLF>.<CRLF>`` (aiosmtpd reads DATA lines with
  ``readuntil(b"\\r\\n")`` and ends on a line that is exactly ``b".\\r\\n"``), so the
  malformed end markers of SMTP smuggling are message text, never a second message.
- Envelope paths are parsed here (``sink/smtp/syntax.py``), not by
  ``email._header_value_parser`` (which aiosmtpd uses and which repairs what it reads:
  ``<a b@x>`` becomes ``"a b"@x``, comments vanish). Nothing is repaired into another
  mailbox: a malformed path is a 5xx.
- A connection that opens with an HTTP request line (a browser made to post to this
  port) is answered with an error and closed before any of its bytes reach the SMTP reader.
- TLS only with the configured certificate (``sink/smtp/tls.py``): STARTTLS, or SMTPS from
  the first byte on ``--smtps-port``; a failed handshake is logged with OpenSSL's reason.
- Limits (``sink/smtp/limits.py``), each with its code: connections (421), command lines
  (500), DATA lines (500), message size (552), idle and DATA time (421); the handler
  answers recipients (452) and header fields (552).
- AUTH (``sink/smtp/auth.py``): any login by default, the configured pairs with
  ``--smtp-auth``, none with ``--no-smtp-auth``; the user name goes with the message.
- A message whose final dot arrived is stored even if the client is gone by then
  (``sink/smtp/loop.py``: the end of the client's side ends the reader, not the session).
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto as sslproto
import collections
import contextlib
import functools
import re
import ssl
from typing import Any, AnyStr

from aiosmtpd.smtp import SMTP, syntax

from sink.config import Settings
from sink.logs import log
from sink.metrics import Metrics
from sink.smtp.handler import TEMPORARY, Handler
from sink.smtp.limits import Limits
from sink.smtp.loop import LeanLoopSMTP
from sink.smtp.setup import KNOWN_ARGUMENTS, Learned, learn, set_up
from sink.smtp.syntax import command_path, http_request_line
from sink.smtp.tls import log_failure

_MAIL_SYNTAX = "501 5.5.4 Syntax: MAIL FROM:<address> [SP <mail-parameters>]"
_TOO_MUCH_DATA = "552 5.3.4 Error: too much mail data"
_RCPT_SYNTAX = "501 5.5.4 Syntax: RCPT TO:<address>"


_EVICTION_SCAN = 32


class ConnectionGate:
    """Counts the open SMTP connections, refusing entry past the limit.

    At the limit, a connection outside a mail transaction that has said nothing since its
    greeting for ``silent_s``, or nothing since its last message for ``idle_s``, is closed
    with a 421 to make room, oldest first: connections held open and silent cannot keep
    mail out (a client that means to send says EHLO at once; one that pools connections
    gets the longer grace). When none is, the newcomer gets its 421 at once.
    """

    def __init__(self, limit: int, silent_s: float = 1.0, idle_s: float = 5.0) -> None:
        self.limit = limit
        self.silent_s = silent_s
        self.idle_s = idle_s
        self.active = 0
        self._members: dict[RunsinkSMTP, None] = {}  # admitted, oldest first

    def enter(self, connection: RunsinkSMTP) -> bool:
        if self.active < self.limit:
            self.active += 1
            self._members[connection] = None
            return True
        # Look at a bounded number of the longest-admitted, sending the busy ones to the back
        # of the line: a flood past the limit costs the same per connection however many
        # are admitted.
        for _ in range(min(len(self._members), _EVICTION_SCAN)):
            member = next(iter(self._members))
            del self._members[member]
            if member.may_give_way(self.silent_s, self.idle_s):
                member.make_room()
                self._members[connection] = None
                return True  # the member's place passes to the newcomer
            self._members[member] = None
        return False

    def leave(self, connection: RunsinkSMTP) -> None:
        self.active -= 1
        self._members.pop(connection, None)


def _longest_line(data: bytes) -> int:
    """The longest line of DATA, its CRLF included (only asked of data over the line cap)."""
    longest = start = 0
    while (end := data.find(b"\r\n", start)) != -1:
        longest = max(longest, end + 2 - start)
        start = end + 2
    return max(longest, len(data) - start)


_STATUS_CODE = re.compile(r"[245]\.\d{1,3}\.\d{1,3}(?: |$)")
# RFC 3463 codes for aiosmtpd's replies that have none; otherwise the class's X.0.0.
_STATUS_CODES = {"500": "5.5.2", "501": "5.5.4", "502": "5.5.1", "503": "5.5.1", "504": "5.5.4"}
_STATUS_CODES |= {"530": "5.7.0", "535": "5.7.8", "552": "5.3.4", "553": "5.1.3"}


@functools.lru_cache(maxsize=256)  # pure, and most replies are a handful of strings
def with_status_code(reply: str) -> str:
    """``250 OK`` -> ``250 2.0.0 OK``: an enhanced status code on single-line 2xx/4xx/5xx
    replies that lack one (RFC 2034 3; not the 220 greeting, nor 3xx replies)."""
    code, separator, text = reply[:3], reply[3:4], reply[4:]
    if separator != " " or code[:1] not in "245" or not code.isdigit() or code == "220":
        return reply
    if _STATUS_CODE.match(text):
        return reply
    return f"{code} {_STATUS_CODES.get(code, code[0] + '.0.0')} {text}"


# -- the protocol: aiosmtpd's SMTP with our limits and our path syntax -------------------


class RunsinkSMTP(LeanLoopSMTP):
    """aiosmtpd's protocol (aiosmtpd 1.4.6, ``aiosmtpd/smtp.py``) with our limits.

    What we override, and the aiosmtpd behaviour each override relies on, is said at
    each method. Everything else (EHLO, DATA framing, STARTTLS, AUTH) is aiosmtpd's.
    """

    _COMMAND_NAMES: tuple[str, ...] = ()

    def __dir__(self) -> list[str]:
        # aiosmtpd's __init__ finds its commands and AUTH mechanisms on every connection
        # with ``dir(self)`` and ``inspect.getmembers(self)``, which read every attribute of
        # the protocol: most of a new connection's CPU. Those are the only callers of
        # dir() here, and they look only for ``smtp_*`` and ``auth_*``: name just those.
        cls = type(self)
        if not cls._COMMAND_NAMES:
            cls._COMMAND_NAMES = tuple(
                name for name in object.__dir__(self) if name.startswith(("smtp_", "auth_"))
            )
        return list(cls._COMMAND_NAMES)

    def __init__(
        self,
        connections: Connections,
        *,
        implicit_tls: ssl.SSLContext | None = None,
        **kwargs: Any,
    ) -> None:
        handler, limits = connections.handler, connections.limits
        # aiosmtpd sizes its StreamReader from `line_length_limit` in __init__: set it first.
        self.line_length_limit = limits.max_line_bytes
        # aiosmtpd keeps `command_size_limits` on the class: every new connection clears it
        # and every EHLO adds to it, for all connections at once. Keep ours per connection.
        self.command_size_limits = collections.defaultdict(lambda: SMTP.command_size_limit)
        authenticator = handler.logins.authenticator if handler.logins is not None else None
        options = dict(
            authenticator=authenticator,
            timeout=limits.idle_timeout_s,
            # Our own 530 at MAIL (Handler.handle_MAIL): aiosmtpd's auth_required=True with
            # auth_require_tls=False warns on every connection.
            auth_required=False,
            # --smtp-require-tls: AUTH is offered only once TLS is up (its EHLO rule).
            auth_require_tls=handler.requires_tls,
            **kwargs,
        )
        # aiosmtpd's set-up, less its introspection after the first connection (setup.py).
        leanable = options.keys() == KNOWN_ARGUMENTS and options["hostname"] and options["ident"]
        learned = connections.learned.get(type(self)) if leanable else None
        if learned is not None:
            set_up(self, learned, handler, **options)
        else:
            super().__init__(handler, **options)
            if leanable:
                connections.learned[type(self)] = learn(self, handler)
        self._connections = connections
        self._handler = handler
        self._limits = limits
        self._gate = connections.gate
        self._admitted = False
        self._over_limit = False  # the gate was full when this connection came
        self._active_at = 0.0
        self._spoke = False
        # Not "auth_*": aiosmtpd takes every auth_* member of the protocol and the handler
        # for an AUTH mechanism to advertise.
        self.offers_auth = authenticator is not None
        self._sniffing = True  # until the first line shows it is not an HTTP request
        self._held = b""
        self._implicit_tls = implicit_tls
        self._greeting_reply = False
        self._handshake: asyncio.Future[None] | None = None
        self._reply_lines: list[bytes] = []  # a multi-line reply's lines before its last
        self._storing = False  # DATA ended and the store has not answered yet

    # -- connection life ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # aiosmtpd calls this again on the same protocol when STARTTLS completes; it tells
        # the two apart by `_original_transport` (set by smtp_STARTTLS). Count only the first.
        first = self._original_transport is None
        if first:
            self._admitted = self._gate.enter(self)
            self._over_limit = not self._admitted
        super().connection_made(transport)
        if first and self._implicit_tls is not None:
            self._begin_implicit_tls(self._implicit_tls)

    def _begin_implicit_tls(self, context: ssl.SSLContext) -> None:
        """SMTPS (RFC 8314 3.3): the TLS layer first, then the greeting inside it.

        The same layering as aiosmtpd's smtp_STARTTLS (so its connection_made, session.ssl
        and EHLO rules apply as after STARTTLS), put in place here, before any byte of the
        client's hello can reach the SMTP reader. ``_handle_client`` awaits the handshake.
        """
        self._handshake = self.loop.create_future()
        self._tls_protocol = sslproto.SSLProtocol(
            self.loop, self, context, self._handshake, server_side=True
        )
        self._original_transport = self.transport
        assert self._original_transport is not None
        self._original_transport.set_protocol(self._tls_protocol)
        self.transport = self._tls_protocol._app_transport
        self._tls_protocol.connection_made(self._original_transport)

    def connection_lost(self, error: Exception | None) -> None:
        # aiosmtpd may call this twice (itself after a failed TLS handshake, then asyncio).
        if self._admitted:
            self._admitted = False
            self._gate.leave(self)
        super().connection_lost(error)

    def _reset_timeout(self, duration: float | None = None) -> None:
        # aiosmtpd restarts its timer at the greeting, at each accepted command and at DATA:
        # the moments this connection was last active.
        self._spoke = self._active_at != 0.0  # the first call is the greeting's
        self._active_at = self.loop.time()
        super()._reset_timeout(duration)

    def may_give_way(self, silent_s: float, idle_s: float) -> bool:
        """Idle long enough, outside a mail transaction, to lose this place to a newcomer."""
        in_transaction = self.envelope is not None and self.envelope.mail_from is not None
        if not self._admitted or in_transaction:
            return False
        return self.loop.time() - self._active_at >= (idle_s if self._spoke else silent_s)

    def make_room(self) -> None:
        """Give this idle connection's place to a newcomer (the gate is at its limit)."""
        self._admitted = False
        self._connections.refused("idle_evicted")
        self._hang_up(f"421 4.3.2 {self.hostname} Closing an idle connection, try again later")

    def data_received(self, data: bytes) -> None:
        # The bytes reach aiosmtpd's reader (StreamReaderProtocol.data_received) only once
        # the first line cannot be an HTTP request line: a browser's POST to this port
        # carries SMTP commands in its body, and none of them may ever run.
        if self._sniffing:
            self._held += data
            verdict = http_request_line(self._held)
            if verdict is None:
                return
            self._sniffing = False
            data, self._held = self._held, b""
            if verdict:
                log("smtp_refused", reason="http_request")
                self._connections.refused("http_request")
                self._hang_up(f"554 5.7.0 {self.hostname} speaks SMTP, not HTTP; closing")
                return
        super().data_received(data)

    async def _handle_client(self) -> None:
        # aiosmtpd's connection_made runs this as the connection's task; it sends the 220
        # greeting, then reads commands. A refused connection gets its 421 instead.
        if self._handshake is not None:
            try:
                await self._handshake
            except Exception as error:
                log_failure(error, "implicit")
                # asyncio's SSL layer tells the protocol nothing of a failed handshake: end
                # the connection here, as aiosmtpd does after a failed STARTTLS (the
                # connection slot, the idle timer).
                if self._original_transport is not None:
                    self._original_transport.close()
                self.connection_lost(error)
                return
        if self._hung_up:
            return  # refused while being set up (an HTTP request line): no greeting
        if self._over_limit:
            log("smtp_refused", reason="too_many_connections", limit=self._gate.limit)
            self._connections.refused("too_many_connections")
            self._hang_up(f"421 4.3.2 {self.hostname} Too many connections, try again later")
            return
        if await self._handler.refuses_connection():
            self._hang_up(f"421 4.3.0 {self.hostname} Service not available, try again later")
            return
        await super()._handle_client()

    def _timeout_cb(self) -> None:
        if self._storing:
            # The store has not answered for the whole idle window (a database that hangs):
            # nothing was acknowledged, so this is storage trouble (451), not the client's
            # silence. (The store may still commit it later: a sender that sends it again
            # may leave two copies, never none.)
            self._connections.refused("store_timeout")
            self._hang_up(TEMPORARY)
            return
        # aiosmtpd closes silently on timeout; RFC 5321 4.2.3 has a 421 for this.
        self._connections.refused("timeout")
        self._hang_up(f"421 4.4.2 {self.hostname} Timeout exceeded, closing")

    def _hang_up(self, reply: str) -> None:
        """Send a last reply and close; nothing more is read from this connection."""
        # The transport is asyncio's or uvloop's (which does not subclass asyncio's classes).
        transport: Any = self.transport
        self._hung_up = True
        if transport is None or transport.is_closing():
            return
        transport.write(reply.encode() + b"\r\n")
        transport.close()  # flushes the reply first

    # -- commands ------------------------------------------------------------------

    @syntax("EHLO hostname")
    async def smtp_EHLO(self, hostname: str) -> None:
        # aiosmtpd adds the SIZE and SMTPUTF8 allowances to the MAIL line limit on every
        # EHLO; start from the base each time so a repeated EHLO does not raise it.
        self.command_size_limits.clear()
        self._greeting_reply = True  # EHLO's lines name extensions: no status codes in them
        try:
            await super().smtp_EHLO(hostname)
        finally:
            self._greeting_reply = False

    @syntax("HELO hostname")
    async def smtp_HELO(self, hostname: str) -> None:
        self._greeting_reply = True
        try:
            await super().smtp_HELO(hostname)
        finally:
            self._greeting_reply = False

    @property
    def _helo_missing(self) -> bool:
        return self.session is None or not self.session.host_name

    async def push(self, status: AnyStr) -> None:
        if self._write_reply(status):
            await self._drain()

    async def _drain(self) -> None:
        # Lost under this reply: the reader ends after what had arrived, which is still
        # answered (sink/smtp/loop.py), the replies dropped.
        with contextlib.suppress(ConnectionResetError):
            await self._writer.drain()

    def _write_reply(self, status: AnyStr) -> bool:
        """Send one reply (or hold a line of a multi-line one); True when a drain is due.

        The commands on every message's path call this and await ``drain()`` only when it
        says so, not ``push``: one coroutine less per reply.
        """
        # ENHANCEDSTATUSCODES (RFC 2034) is advertised: aiosmtpd's own replies ("250 OK",
        # "221 Bye", "500 Error: bad syntax") get a status code too (RFC 3463).
        if isinstance(status, str):
            if not self._greeting_reply:
                status = with_status_code(status)
            reply = status.encode("utf-8" if self.enable_SMTPUTF8 else "ascii")
        else:
            reply = status
        # aiosmtpd's push, less its debug record, and less an await of drain() after every
        # reply: the transport sends at once what it can, and drain() only matters (waits
        # for a peer that stopped reading, or raises once the connection is lost) when
        # something is left in its buffer or it is closing.
        if self.transport is None:
            return False  # the client is gone: nobody to read it (sink/smtp/loop.py)
        if reply[3:4] == b"-":
            # A line of a multi-line reply (EHLO's seven): sent with its last line, in one
            # write, not one system call each.
            self._reply_lines.append(reply + b"\r\n")
            return False
        if self._reply_lines:
            reply = b"".join(self._reply_lines) + reply
            self._reply_lines.clear()
        writer = self._writer
        writer.write(reply + b"\r\n")
        if self.transport is None:
            return False  # lost in this very write (a broken pipe): nothing to drain
        transport = writer.transport
        return bool(transport.is_closing() or transport.get_write_buffer_size())

    @syntax("MAIL FROM: <address>", extended=" [SP <mail-parameters>]")
    async def smtp_MAIL(self, arg: str | None) -> None:
        # Replaces aiosmtpd's smtp_MAIL, whose parser repairs addresses and which refuses
        # the null reverse-path `<>` (RFC 5321 4.5.5: bounces use it).
        if self._helo_missing and await self.check_helo_needed():
            return
        assert self.session is not None and self.envelope is not None
        if self.envelope.mail_from is not None:
            await self.push("503 5.5.1 Error: nested MAIL command")
            return
        path = command_path(arg, "FROM:")
        if path is None:
            await self.push(_MAIL_SYNTAX)
            return
        address, params = path
        options: dict[str, str | None] = {}
        for param in params:
            key, eq, value = param.partition("=")
            if key.upper() in options:
                await self.push(_MAIL_SYNTAX)
                return
            options[key.upper()] = value if eq else None
        refusal = self._mail_options_refusal(options)
        if refusal is not None:
            await self.push(refusal)
            return
        self.envelope.smtp_utf8 = "SMTPUTF8" in options
        if not address.isascii() and not self.envelope.smtp_utf8:
            await self.push("553 5.6.7 A non-ASCII address needs the SMTPUTF8 parameter")
            return
        mail_options = [k if v is None else f"{k}={v}" for k, v in options.items()]
        reply = await self._handler.handle_MAIL(
            self, self.session, self.envelope, address, mail_options
        )
        if self._write_reply(reply):
            await self._drain()

    def _mail_options_refusal(self, options: dict[str, str | None]) -> str | None:
        for key, value in options.items():
            if key == "SIZE":
                if value is None or not value.isdigit() or len(value) > 20:
                    return _MAIL_SYNTAX
                if self.data_size_limit and int(value) > self.data_size_limit:
                    return "552 5.3.4 Message size exceeds fixed maximum message size"
            elif key == "BODY":
                if value is None or value.upper() not in ("7BIT", "8BITMIME"):
                    return "501 5.5.4 BODY can only be one of 7BIT, 8BITMIME"
            elif key == "SMTPUTF8":
                if value is not None:
                    return "501 5.5.4 SMTPUTF8 takes no value"
            elif key == "AUTH" and self.offers_auth:
                pass  # RFC 4954 5: the submitter's identity; we take the session's AUTH
            else:
                return f"555 5.5.4 MAIL FROM parameter {key} not recognized"
        return None

    @syntax("RCPT TO: <address>")
    async def smtp_RCPT(self, arg: str | None) -> None:
        # Replaces aiosmtpd's smtp_RCPT for the same parser, and because it takes an empty
        # `mail_from` (our null reverse-path) for "no MAIL yet".
        if self._helo_missing and await self.check_helo_needed():
            return
        assert self.session is not None and self.envelope is not None
        if self.envelope.mail_from is None:
            await self.push("503 5.5.1 Error: need MAIL command")
            return
        path = command_path(arg, "TO:")
        if path is None:
            await self.push(_RCPT_SYNTAX)
            return
        address, params = path
        if not address:
            await self.push("553 5.1.3 An empty recipient address is not a mailbox")
            return
        if params:
            await self.push("555 5.5.4 RCPT TO parameters not recognized")
            return
        if not address.isascii() and not self.envelope.smtp_utf8:
            await self.push("553 5.6.7 A non-ASCII address needs the SMTPUTF8 parameter")
            return
        reply = await self._handler.handle_RCPT(self, self.session, self.envelope, address, [])
        if self._write_reply(reply):
            await self._drain()

    @syntax("DATA")
    async def smtp_DATA(self, arg: str) -> None:
        # Replaces aiosmtpd's smtp_DATA, which reads one ``readuntil(b"\r\n")`` per line
        # (and logs each at debug level): most of a message's CPU went there. This reads
        # up to each ``.<CRLF>`` instead and keeps aiosmtpd's rules and replies: DATA
        # ends only at ``<CRLF>.<CRLF>`` (RFC 5321 4.1.1.4; the smuggling markers stay
        # text), a line over the cap is 500 and too much data is 552 after the final dot,
        # and dot-stuffing is undone per line (RFC 5321 4.5.2).
        if self._helo_missing and await self.check_helo_needed():
            return
        if self._auth_required and await self.check_auth_needed("DATA"):
            return
        assert self.session is not None and self.envelope is not None
        if not self.envelope.rcpt_tos:
            await self.push("503 5.5.1 Error: need RCPT command")
            return
        if arg:
            await self.push("501 5.5.4 Syntax: DATA")
            return
        # aiosmtpd's timer (`_reset_timeout`) is restarted before each accepted command and
        # not while DATA arrives: give the whole of DATA its own deadline, then the idle one
        # again (restarted at the final dot).
        self._reset_timeout(self._limits.data_timeout_s)
        if self._write_reply("354 End data with <CR><LF>.<CR><LF>"):
            await self._drain()
        try:
            content, reply = await self._read_data()
        except asyncio.CancelledError:
            self._writer.close()  # the connection went away during DATA
            raise
        if reply is None:
            self.envelope.content = content
            self.envelope.original_content = content
            # The final dot arrived: storing gets a fresh idle window, not DATA's leftover.
            self._reset_timeout()
            self._storing = True
            try:
                reply = await self._handler.handle_DATA(self, self.session, self.envelope)
            finally:
                self._storing = False
        self.envelope = self._create_envelope()  # aiosmtpd's post-DATA state
        if self._write_reply(reply):
            await self._drain()
        if self.transport is not None:
            self._reset_timeout()

    async def _read_data(self) -> tuple[bytes, str | None]:
        """The message up to its final dot, unstuffed; or a refusal once it has all arrived.

        Two or three reads for most messages: the first line up to its CR, then up to each
        ``<LF>.<CRLF>`` (the end marker is ``<CR><LF>.<CRLF>``: searching from the LF means
        the marker is always ahead in the stream, even right after the first line), checking
        that a CR came before it.
        """
        reader = self._reader
        size_limit = self.data_size_limit
        # The reads as they came, joined once at the end: for most messages the second read
        # is nearly all of it, and it is copied once (into the joined message), not twice
        # (into a growing buffer, then out of it): a large message holds less memory.
        pieces: list[bytes] = []
        size = 0
        tail = b""  # the last bytes read (up to 5): is the end marker preceded by a CR?
        too_much = False
        separator = b"\r"  # the first line's end; then the end marker from its LF on
        while True:
            try:
                chunk = await reader.readuntil(separator)
                found = True
            except asyncio.LimitOverrunError as over:
                # No separator within the reader's limit: none can start before
                # ``over.consumed``; take that much and read on.
                chunk = await reader.readexactly(over.consumed)
                found = False
            tail = chunk[-5:] if len(chunk) >= 5 else (tail + chunk)[-5:]
            if found and separator == b"\r":
                separator = b"\n.\r\n"
                if chunk == b".\r" and size == 0:  # nothing before it, even dropped
                    following = await reader.readexactly(1)
                    if following == b"\n":
                        break  # an empty message: DATA, then the final dot at once
                    chunk += following
                    tail = (tail + following)[-5:]
            elif found and tail[-5:-4] == b"\r":
                pieces.append(chunk[:-3])  # the final ".<CRLF>"; the last line keeps its CRLF
                break
            pieces.append(chunk)
            size += len(chunk)
            if too_much or (size_limit and size > size_limit + 3):
                # Read on to the final dot, keeping only ``tail``: what can still end a line.
                too_much = True
                pieces.clear()
        if too_much:
            return b"", _TOO_MUCH_DATA
        data = b"".join(pieces)  # one piece: that piece itself, no copy
        if len(data) > self.line_length_limit and _longest_line(data) > self.line_length_limit:
            return b"", "500 5.5.6 Line too long (see RFC 5321 4.5.3.1.6)"
        if data.startswith(b"."):
            data = data[1:]
        if b"\r\n." in data:
            data = data.replace(b"\r\n.", b"\r\n")
        if size_limit and len(data) > size_limit:
            # The whole message, the last read included (one read can hold all of it), as
            # SIZE counts it (RFC 1870: CRLFs in, the final dot and the stuffed dots out).
            return b"", _TOO_MUCH_DATA
        return data, None

    @syntax("QUIT")
    async def smtp_QUIT(self, arg: str | None) -> None:
        # aiosmtpd's, less its cancel of the command loop and its assert that the client
        # is still there (it may have left right after sending QUIT: sink/smtp/loop.py).
        if arg:
            await self.push("501 Syntax: QUIT")
            return
        await self.push("221 Bye")
        self._hung_up = True  # the loop ends here
        if self.transport is not None:
            self.transport.close()  # flushes the 221 first

    @syntax("STARTTLS", when="tls_context")
    async def smtp_STARTTLS(self, arg: str) -> None:
        # aiosmtpd would start a second TLS layer inside the first (RFC 3207 4.2 forbids it).
        if self._tls_protocol is not None:
            await self.push("503 5.5.1 TLS already active")
            return
        if self.tls_context is None:
            # Not offered (no certificate, or --smtp-no-starttls): a command this server does
            # not have is 502 (aiosmtpd says 454, a temporary failure a client retries).
            await self.push("502 5.5.1 STARTTLS is not offered by this server")
            return
        # aiosmtpd drops the plaintext pipelined after STARTTLS (RFC 3207 5, CVE-2011-0411)
        # by clearing its reader when the TLS connection is made.
        await super().smtp_STARTTLS(arg)

    @syntax("AUTH <mechanism>", when="offers_auth")
    async def smtp_AUTH(self, arg: str | None) -> None:
        # aiosmtpd's, with four replies of RFC 4954's and RFC 3207's that it lacks; its
        # mechanisms (sink/smtp/auth.py) and its replies to a malformed exchange stay.
        if not self.offers_auth:
            await self.push("502 5.5.1 AUTH is not enabled on this server")
            return
        if self._auth_require_tls and not self._tls_protocol:
            # --smtp-require-tls: nothing but EHLO, STARTTLS, NOOP and QUIT before TLS
            # (RFC 3207 4); aiosmtpd says 538, which asks for another mechanism.
            await self.push("530 5.7.0 Must issue a STARTTLS command first")
            return
        if self.envelope is not None and self.envelope.mail_from is not None:
            await self.push("503 5.5.1 AUTH is not allowed during a mail transaction")  # 4954 4
            return
        if self.session is not None and self.session.host_name and not self.session.extended_smtp:
            # After HELO: AUTH is an extension (RFC 4954 3), and only EHLO starts a session
            # with extensions. aiosmtpd says "500 command not recognized", a syntax error.
            await self.push("503 5.5.1 Send EHLO first: AUTH is an extension, HELO has none")
            return
        if arg:
            # Mechanism names are case-insensitive (RFC 4954 4); aiosmtpd's lookup is not.
            mechanism, space, response = arg.partition(" ")
            arg = mechanism.upper() + space + response
        await super().smtp_AUTH(arg)  # None: its 501


class Connections:
    """The listening sockets' protocol factory, and what all their connections share.

    ``plaintext`` makes the protocol of a connection to ``--smtp-port`` (STARTTLS offered
    when a certificate is configured and not ``--smtp-no-starttls``), ``smtps`` one to
    ``--smtps-port`` (TLS from the first byte, RFC 8314); both count against one gate.
    """

    def __init__(
        self,
        settings: Settings,
        handler: Handler,
        metrics: Metrics,
        tls_context: ssl.SSLContext | None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.handler = handler
        self.limits: Limits = handler.limits
        self.gate = ConnectionGate(self.limits.max_connections)
        # aiosmtpd's introspection of a protocol class and the handler, taken once (setup.py).
        self.learned: dict[type[SMTP], Learned] = {}
        self._settings = settings
        self._metrics = metrics
        self._tls_context = tls_context
        self._loop = loop

    def refused(self, reason: str) -> None:
        """Count a connection refused or closed by a limit (one metric per reason)."""
        self._metrics.refused("smtp", reason)

    def plaintext(self) -> RunsinkSMTP:
        starttls = None if self._settings.smtp_no_starttls else self._tls_context
        return self._protocol(implicit_tls=None, starttls=starttls)

    def smtps(self) -> RunsinkSMTP:
        return self._protocol(implicit_tls=self._tls_context, starttls=None)

    def _protocol(
        self, implicit_tls: ssl.SSLContext | None, starttls: ssl.SSLContext | None
    ) -> RunsinkSMTP:
        return RunsinkSMTP(
            self,
            implicit_tls=implicit_tls,
            data_size_limit=self._settings.largest_message_bytes,
            enable_SMTPUTF8=True,
            hostname=self._settings.domain,
            ident="runsink",
            tls_context=starttls,
            loop=self._loop,
        )
