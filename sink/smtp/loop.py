"""aiosmtpd's command loop, leaner: the same checks and replies at less CPU per command.

aiosmtpd (1.4.6) stays the protocol: its ``Session``, ``Envelope``, handler hooks, EHLO,
STARTTLS, AUTH and the reader they share. This takes over only the loop that reads a
command line and dispatches it (``SMTP._handle_client``) and the idle timer, the per-command
costs a profile of ``bench/ingest.py`` (8 connections, ~4 KB messages, no pipelining) found
on the event loop beside the ``send()`` of each reply:

- the idle timer: aiosmtpd cancels its timer and starts a new one (``call_later``) at every
  command, at DATA and after it: five to six timers a message, each a heap entry that is
  never due. Here a restart only moves a deadline; the one timer, when it fires before the
  deadline, starts again for the rest (a shorter duration, DATA's end, still re-arms at once);
- the two ``sanitized_log`` calls per command line (a list, a regular-expression match
  against AUTH lines and a logger call each), made whether or not ``mail.log`` would emit
  them (runsink keeps it at ERROR: ``sink/logs.py``): here only when it would.

Every check of aiosmtpd's loop is kept, in its order and with its reply: the command line
over the reader's limit (read to its end, then 500), the empty line, a non-ASCII command
name, the per-command size limit after EHLO, a failed STARTTLS handshake (554), the
commands allowed before STARTTLS when it is required (530), the budget of unrecognised
commands (502 and close), and the exception handling (``handle_exception``; a failed
TLS handshake closes). A PROXY-protocol listener or a per-command call limit (neither used
by runsink) falls back to aiosmtpd's own loop.

How a connection ends differs from aiosmtpd's on purpose. aiosmtpd cancels the command loop
as soon as the client's side ends (``eof_received``, ``connection_lost``), and with it the
store of a message whose final dot had arrived: a client that closes right after the dot,
without waiting for the 250, lost its message in some tries and not in others (issue 22).
Here the end of the client's side only ends the reader: the loop answers everything the
client sent before it (the replies are dropped when nobody is left to read them), the store
of a complete message runs to its commit, and the loop ends at the end of the stream. Only
a hang-up of ours (``_hung_up``) stops reading at once.

Measured (``bench/README.md``, 2026-12-01): with the direct hook calls and replies of
``protocol.py``'s MAIL/RCPT/DATA, server CPU per message fell 7-12% (8 connections: 321 ->
283 µs/msg, side by side). What is left on the event loop is mostly not this loop: a third
in uvloop's own C (polling, ``recv``, waking tasks), a fifth in the ``send()`` of the four
replies, a quarter in ingest (the summary parse, the log line, the store); a protocol-level
reader (no ``StreamReader``, no task per connection) could take only part of the rest, at
the price of re-implementing what STARTTLS and AUTH do with the reader.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiosmtpd.smtp import (
    ALLOWED_BEFORE_STARTTLS,
    BOGUS_LIMIT,
    SMTP,
    TLSSetupException,
    sanitize,
)

_MAIL_LOG = logging.getLogger("mail.log")  # aiosmtpd's logger


class LeanLoopSMTP(SMTP):
    """aiosmtpd's ``SMTP`` with a leaner command loop and a lazily restarted idle timer."""

    _deadline = 0.0  # when the connection times out, unless something happens first
    _timer_at = 0.0  # when the armed timer fires (it may be before the deadline)
    _hung_up = False  # we closed the connection: nothing more it sent is read
    _lost = False  # the transport is gone; what had arrived before is still read

    @property
    def _lean(self) -> bool:
        """Whether this loop runs the connection (else aiosmtpd's, for what it alone has)."""
        return self._proxy_timeout is None and not self._enforce_call_limit

    # -- the end of the client's side -----------------------------------------------

    def eof_received(self) -> bool | None:
        if not self._lean:
            return super().eof_received()
        # The client closed its sending side (a half-close, or the start of a close): the
        # reader ends after what arrived; the loop answers it (module docstring).
        self._reader.feed_eof()
        # Keep a plain transport open for the replies still due; a TLS layer cannot be half
        # open (asyncio closes it, then connection_lost follows).
        return self._tls_protocol is None

    def connection_lost(self, error: Exception | None) -> None:
        if not self._lean:
            super().connection_lost(error)
            return
        # aiosmtpd's, without cancelling the command loop (module docstring), and ending the
        # reader rather than failing it: after a reset too, what had arrived is read.
        self._lost = True
        if self._timeout_handle is not None:
            self._timeout_handle.cancel()
        if self._original_transport is not None:
            self._original_transport.close()  # the plain transport under a TLS layer
        asyncio.StreamReaderProtocol.connection_lost(self, None)
        self.transport = None

    # -- the idle timer --------------------------------------------------------------

    def _reset_timeout(self, duration: float | None = None) -> None:
        # aiosmtpd calls this at the greeting, at each accepted command, at DATA and after
        # it. Its contract: the connection times out `duration` (or the idle timeout) from
        # now, and not before.
        if self._lost:
            return  # nothing left to time out
        deadline = self.loop.time() + (duration or self._timeout_duration)
        self._deadline = deadline
        if self._timeout_handle is None or deadline < self._timer_at:
            if self._timeout_handle is not None:
                self._timeout_handle.cancel()
            self._arm(deadline)

    def _arm(self, when: float) -> None:
        self._timer_at = when
        self._timeout_handle = self.loop.call_at(when, self._timer_fired)

    def _timer_fired(self) -> None:
        if self.transport is None:
            return  # already gone (connection_lost cancels the timer; this is belt and braces)
        if self.loop.time() < self._deadline:
            self._arm(self._deadline)  # something happened since: wait for the rest
            return
        self._timeout_cb()

    def _timeout_cb(self) -> None:
        self._hung_up = True
        super()._timeout_cb()  # type: ignore[no-untyped-call]  # aiosmtpd's: close

    # -- the command loop --------------------------------------------------------------

    async def _handle_client(self) -> None:
        if self._proxy_timeout is not None or self._enforce_call_limit:
            await super()._handle_client()
            return
        await self.push(f"220 {self.hostname} {self.__ident__}")
        reader = self._reader
        methods: dict[str, Any] = self._smtp_methods
        limits = self.command_size_limits
        bogus_budget = BOGUS_LIMIT
        while not self._hung_up:
            try:
                try:
                    line = await reader.readuntil()
                except asyncio.LimitOverrunError as error:
                    await self._discard_long_line(error.consumed)
                    await self.push("500 Command line too long")
                    continue
                if _MAIL_LOG.isEnabledFor(logging.INFO):
                    self._log_line(line)
                line = line.rstrip(b"\r\n")
                if not line:
                    await self.push("500 Error: bad syntax")
                    continue
                command_bytes, _, arg_bytes = line.partition(b" ")
                try:
                    command = command_bytes.upper().decode("ascii")
                except UnicodeDecodeError:
                    await self.push("500 Error: bad syntax")
                    continue
                arg: str | None = None
                if arg_bytes:
                    arg_bytes = arg_bytes.strip()
                    if self.enable_SMTPUTF8:
                        # surrogateescape: the original bytes can be had back (aiosmtpd's rule)
                        arg = str(arg_bytes, "utf-8", "surrogateescape")
                    else:
                        try:
                            arg = str(arg_bytes, "ascii", "strict")
                        except UnicodeDecodeError:
                            await self.push("500 Error: strict ASCII mode")
                            continue
                assert self.session is not None
                max_size = (
                    limits[command] if self.session.extended_smtp else self.command_size_limit
                )
                if len(line) > max_size:
                    await self.push("500 Command line too long")
                    continue
                if not self._tls_handshake_okay and command != "QUIT":
                    await self.push("554 Command refused due to lack of security")
                    continue
                if (
                    self.require_starttls
                    and not self._tls_protocol
                    and command not in ALLOWED_BEFORE_STARTTLS
                ):
                    await self.push("530 Must issue a STARTTLS command first")  # RFC 3207 4
                    continue
                method = methods.get(command)
                if method is None:
                    bogus_budget -= 1
                    if bogus_budget < 1:
                        await self.push("502 5.5.1 Too many unrecognized commands, goodbye.")
                        self._hung_up = True
                        if self.transport is not None:
                            self.transport.close()
                        continue
                    await self.push(f'500 Error: command "{command}" not recognized')
                    continue
                self._reset_timeout()  # a valid command: the idle window starts again
                await method(arg)
            except asyncio.IncompleteReadError:
                break  # the end of the client's stream: all it sent before has been answered
            except ConnectionResetError:
                if not self._lost:
                    break
                # Gone while a reply was on its way: what it sent before is still read.
            except asyncio.CancelledError:
                self._writer.close()  # the server is stopping
                raise
            except Exception as error:
                await self._answer_exception(error)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # flushes the last replies first

    async def _discard_long_line(self, consumed: int) -> None:
        """Read a command line over the reader's limit to its end, keeping none of it."""
        reader = self._reader
        await reader.read(consumed)
        while True:
            try:
                await reader.readuntil()
                return
            except asyncio.LimitOverrunError as error:
                await reader.read(error.consumed)

    def _log_line(self, line: bytes) -> None:
        # Only when mail.log is on (never in runsink's own setup): aiosmtpd's record, with
        # AUTH's credentials masked by its sanitizer.
        _MAIL_LOG.info("%r >> %r", self.session.peer if self.session else None, sanitize(line))

    async def _answer_exception(self, error: Exception) -> None:
        """aiosmtpd's answer to an exception in a command (``handle_exception``'s reply)."""
        status: str | None = None
        try:
            status = await self.handle_exception(error)
        except Exception as inner:
            try:
                _MAIL_LOG.exception("Exception in handle_exception()")
                status = f"500 Error: ({inner.__class__.__name__}) {inner}"
            except Exception:
                status = "500 Error: Cannot describe error"
        finally:
            if isinstance(error, TLSSetupException):
                # Nothing more is read: plaintext pipelined before the handshake must never
                # run as commands (RFC 3207 5).
                self._hung_up = True
                if self.transport is not None:
                    self.transport.close()
                self.connection_lost(error)
            else:
                assert status is not None
                await self.push(status)
