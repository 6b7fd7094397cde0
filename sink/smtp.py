"""The SMTP listener: aiosmtpd's protocol with our handler, on the server's one event loop.

This is the only module that knows SMTP reply codes. aiosmtpd's default answer to
an exception (``500 Error: (Class) text``) leaks internals and tells the sender not
to retry; ``handle_exception`` answers 451 instead (temporary: send again later).
"""

from __future__ import annotations

import asyncio
import ssl
import weakref
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from sink.config import Settings
from sink.errors import ProviderTrouble
from sink.faults import FaultRegistry
from sink.guard import apply_fault
from sink.ingest import DataVerdict, Ingest, Recipient, Verdict
from sink.logs import log, warn
from sink.metrics import Metrics

MAX_RECIPIENTS = 100
TEMPORARY = "451 4.3.0 Temporary failure: please try again later"

_RCPT_REPLIES = {
    Verdict.ACCEPT: "250 2.1.5 OK",
    Verdict.UNROUTED: "250 2.1.5 OK (no inbox for this address; kept as unrouted)",
    Verdict.LATE_DROP: "250 2.1.5 OK",
    Verdict.LATE_REJECT: "550 5.1.1 This inbox has expired",
    Verdict.FOREIGN: "550 5.7.1 Relaying denied: this sink only accepts its own domain",
    Verdict.BAD_ADDRESS: "553 5.1.3 Malformed address",
    Verdict.TOO_BIG: "552 5.3.4 Message size exceeds this inbox's limit",
}


class Handler:
    """aiosmtpd hooks: RCPT routing, DATA -> ingest, and the replies for each outcome."""

    def __init__(
        self, ingest: Ingest, metrics: Metrics, faults: FaultRegistry | None, auth_enabled: bool
    ) -> None:
        self._ingest = ingest
        self._auth_enabled = auth_enabled
        self._metrics = metrics
        self._faults = faults
        self._recipients: weakref.WeakKeyDictionary[Envelope, list[Recipient]] = (
            weakref.WeakKeyDictionary()
        )
        self._runs: weakref.WeakKeyDictionary[Envelope, str] = weakref.WeakKeyDictionary()

    async def handle_EHLO(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        hostname: str,
        responses: list[str],
    ) -> list[str]:
        session.host_name = hostname
        if not self._auth_enabled:
            # aiosmtpd advertises AUTH (always failing) without credentials; we offer none.
            responses = [r for r in responses if not r.startswith("250-AUTH")]
        # aiosmtpd answers pipelined commands in order but does not advertise it (RFC 2920).
        return [*responses[:-1], "250-PIPELINING", responses[-1]]

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        if not self._ingest.check_sender(address):
            return "553 5.1.7 Malformed sender address"
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        self._recipients[envelope] = []
        return "250 2.1.0 OK"

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        recipients = self._recipients.setdefault(envelope, [])
        if len(recipients) >= MAX_RECIPIENTS:
            return "452 4.5.3 Too many recipients"
        recipient = await self._ingest.route(address, _declared_size(envelope.mail_options))
        fault_reply = await self._fault(
            "smtp.rcpt", recipient.route.run_id if recipient.route else None
        )
        if fault_reply:
            return fault_reply
        if recipient.verdict in (Verdict.ACCEPT, Verdict.UNROUTED, Verdict.LATE_DROP):
            recipients.append(recipient)
            envelope.rcpt_tos.append(address)
            envelope.rcpt_options.extend(options)
            if recipient.route is not None:
                self._runs.setdefault(envelope, recipient.route.run_id)
        elif recipient.verdict is Verdict.LATE_REJECT:
            self._metrics.message("rejected")
            assert recipient.route is not None
            log(
                "late_arrival",
                run_id=recipient.route.run_id,
                inbox_id=recipient.route.inbox_id,
                action="rejected",
            )
        return _RCPT_REPLIES[recipient.verdict]

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        fault_reply = await self._fault("smtp.data", self._runs.get(envelope))
        if fault_reply:
            return fault_reply
        raw = envelope.original_content or b""
        recipients = self._recipients.get(envelope, [])
        verdict = await self._ingest.deliver(envelope.mail_from or "", recipients, raw)
        if verdict is DataVerdict.TOO_BIG:
            return "552 5.3.4 Message size exceeds this inbox's limit"
        if verdict is DataVerdict.ALL_LATE_REJECTED:
            return "550 5.1.1 The recipient's inbox has expired"
        return "250 2.0.0 OK: stored"

    async def handle_exception(self, error: Exception) -> str:
        if isinstance(error, ProviderTrouble):
            warn("smtp_storage_trouble", error=type(error).__name__)
        else:
            warn("smtp_handler_error", error=type(error).__name__)
        return TEMPORARY

    async def _fault(self, target: str, run_id: str | None) -> str | None:
        if self._faults is None or self._faults.is_empty:
            return None
        fault = self._faults.take(target, run_id)
        if fault is None:
            return None
        if fault.mode == "delay":
            await apply_fault(fault, 0)
            return None
        if fault.mode == "timeout":
            await asyncio.sleep(2.0)
        return TEMPORARY


def _declared_size(options: list[str]) -> int | None:
    for option in options:
        key, _, value = option.partition("=")
        if key.upper() == "SIZE" and value.isdigit():
            return int(value)
    return None


class Authenticator:
    """AUTH PLAIN/LOGIN against the one configured credential (constant-time compare)."""

    def __init__(self, user: str, password: str) -> None:
        self._user = user.encode()
        self._password = password.encode()

    def __call__(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
    ) -> AuthResult:
        import hmac

        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        ok = hmac.compare_digest(auth_data.login, self._user) & hmac.compare_digest(
            auth_data.password, self._password
        )
        return AuthResult(success=bool(ok), handled=False)


class RunsinkSMTP(SMTP):
    """aiosmtpd's protocol with our limits."""

    # Apps send long HTML lines: accept up to this rather than lose the mail (RFC 5321
    # 4.5.3.1.6 asks for 1000; being liberal in what we accept costs nothing here).
    line_length_limit = 64 * 1024


def smtp_factory(
    settings: Settings,
    handler: Handler,
    tls_context: ssl.SSLContext | None,
    loop: asyncio.AbstractEventLoop,
) -> SMTP:
    auth = settings.smtp_auth
    return RunsinkSMTP(
        handler,
        data_size_limit=settings.largest_message_bytes,
        enable_SMTPUTF8=True,
        hostname=settings.domain,
        ident="runsink",
        tls_context=tls_context,
        timeout=120,
        auth_required=False,
        auth_require_tls=False,
        authenticator=Authenticator(*auth) if auth else None,
        loop=loop,
    )
