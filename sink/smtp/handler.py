"""The SMTP handler: aiosmtpd's hooks for MAIL, RCPT and DATA, routed through Ingest, and
the reply for each outcome.

The protocol (``sink/smtp/protocol.py``) parses each command and calls these hooks; they ask
``sink/ingest.py`` what the mail means (a route for each recipient, a stored message at the
final dot) and turn its answer into a reply code. Ingest knows no reply codes.

aiosmtpd's default answer to an exception (``500 Error: (Class) text``) leaks internals and
tells the sender not to retry; trouble is a 451 here (temporary: send again later), a full
store a 452 (RFC 5321 4.2.2, RFC 3463 4.3.1).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, Session, TLSSetupException

from sink.errors import StoreFull
from sink.faults import Fault
from sink.ingest import DataVerdict, Ingest, Recipient, Verdict
from sink.logs import log, warn
from sink.metrics import Metrics
from sink.smtp.auth import Logins
from sink.smtp.limits import Limits
from sink.smtp.syntax import header_field_count
from sink.smtp.tls import log_failure

TEMPORARY = "451 4.3.0 Temporary failure: please try again later"
NO_SPACE = "452 4.3.1 Insufficient system storage: please try again later"

_RCPT_REPLIES = {
    Verdict.ACCEPT: "250 2.1.5 OK",
    # Caught mail: accepted and kept, never relayed (contract v2, "Catch-all").
    Verdict.CAUGHT: "250 2.1.5 OK (no inbox for this address; kept as caught mail)",
    Verdict.LATE_DROP: "250 2.1.5 OK",
    Verdict.LATE_REJECT: "550 5.1.1 This inbox has expired",
    Verdict.BAD_ADDRESS: "553 5.1.3 Malformed address",
    Verdict.TOO_BIG: "552 5.3.4 Message size exceeds this inbox's limit",
}
_AUTH_LINE = "250-AUTH PLAIN LOGIN CRAM-MD5"


class Handler:
    """aiosmtpd hooks: RCPT routing, DATA -> ingest, and the replies for each outcome.

    One instance serves every connection (of the SMTP and the SMTPS listener alike).
    """

    def __dir__(self) -> list[str]:
        # aiosmtpd's SMTP.__init__ looks for ``handle_*`` hooks with dir() and for ``auth_*``
        # mechanisms with inspect.getmembers() on this handler, for every new connection
        # (as on the protocol: RunsinkSMTP.__dir__): name just those.
        return [n for n in object.__dir__(self) if n.startswith(("handle_", "auth_"))]

    def __init__(
        self,
        ingest: Ingest,
        metrics: Metrics,
        logins: Logins | None,
        limits: Limits | None = None,
        require_tls: bool = False,
        accepted_domains: tuple[str, ...] = (),
    ) -> None:
        self._ingest = ingest
        # --reject-unknown-recipients: the refusal names the domains with inboxes.
        self._unknown_reply = "550 5.1.1 No inbox for this address; this sink accepts mail for " + (
            ", ".join(accepted_domains) or "its own domain"
        )
        self.logins = logins  # None: no AUTH at all (--no-smtp-auth)
        self.requires_tls = require_tls
        self.limits = limits or Limits()
        self._metrics = metrics
        self._recipients: weakref.WeakKeyDictionary[Envelope, list[Recipient]] = (
            weakref.WeakKeyDictionary()
        )

    async def refuses_connection(self) -> bool:
        """True when an injected ``smtp.connect`` fault refuses this connection."""
        fault = self._ingest.fault("smtp.connect", ())
        return fault is not None and await _acted_out(fault, self._ingest.fault_deadline_s(()))

    async def handle_EHLO(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        hostname: str,
        responses: list[str],
    ) -> list[str]:
        session.host_name = hostname
        if self.logins is None:
            # --no-smtp-auth: aiosmtpd advertises AUTH whatever its set-up; we offer none.
            responses = [r for r in responses if not r.startswith("250-AUTH")]
        else:
            # The contract's order, strongest last (aiosmtpd sorts them by name).
            responses = [_AUTH_LINE if r.startswith("250-AUTH") else r for r in responses]
        # aiosmtpd answers pipelined commands in order but does not advertise it (RFC 2920);
        # every reply carries an enhanced status code (RunsinkSMTP.push).
        return [*responses[:-1], "250-PIPELINING", "250-ENHANCEDSTATUSCODES", responses[-1]]

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        if self.requires_tls and session.ssl is None:
            # --smtp-require-tls: nothing travels in the clear (RFC 3207 4: 530).
            return "530 5.7.0 Must issue a STARTTLS command first"
        if self.logins is not None and self.logins.checking and not session.authenticated:
            # --smtp-auth: mail from a client that did not use its login is refused, so an
            # app that forgot its SMTP login fails here as it would in production (RFC 4954
            # 6). By default a client that does not authenticate is served as before.
            return "530 5.7.0 Authentication required"
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
        if len(recipients) >= self.limits.max_recipients:
            return "452 4.5.3 Too many recipients"
        try:
            recipient = await self._ingest.route(address, _declared_size(envelope.mail_options))
        except Exception as exc:  # storage trouble: this RCPT may be tried again
            return self._trouble("rcpt", exc)
        routes = (recipient.route,)
        fault = self._ingest.fault("smtp.rcpt", routes)
        if fault is not None and await _acted_out(fault, self._ingest.fault_deadline_s(routes)):
            return TEMPORARY
        if recipient.verdict is Verdict.UNKNOWN:
            self._metrics.message("rejected")
            return self._unknown_reply
        if recipient.verdict in (Verdict.ACCEPT, Verdict.CAUGHT, Verdict.LATE_DROP):
            recipients.append(recipient)
            envelope.rcpt_tos.append(address)
            envelope.rcpt_options.extend(options)
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
        recipients = self._recipients.get(envelope, [])
        routes = [r.route for r in recipients]
        fault = self._ingest.fault("smtp.data", routes)
        if fault is not None and await _acted_out(fault, self._ingest.fault_deadline_s(routes)):
            return TEMPORARY
        raw = envelope.original_content or b""
        limit = self.limits.max_header_fields
        if header_field_count(raw, stop_after=limit) > limit:
            self._metrics.message("rejected")
            return f"552 5.3.4 Too many header fields (the limit is {limit})"
        # Only the user name is in the session (sink/smtp/auth.py), never a password.
        auth_user = session.auth_data if session.authenticated else None
        try:
            verdict = await self._ingest.deliver(
                envelope.mail_from or "", recipients, raw, auth_user=auth_user
            )
        except Exception as exc:  # nothing was acknowledged: the sender sends it again
            return self._trouble("data", exc)
        if verdict is DataVerdict.TOO_BIG:
            return "552 5.3.4 Message size exceeds this inbox's limit"
        if verdict is DataVerdict.ALL_LATE_REJECTED:
            return "550 5.1.1 The recipient's inbox has expired"
        return "250 2.0.0 OK: stored"

    async def auth_CRAM__MD5(self, server: SMTP, args: list[str]) -> AuthResult:
        """AUTH CRAM-MD5 (RFC 2195): aiosmtpd's hook for a mechanism of the handler's."""
        if self.logins is None:  # never offered: RunsinkSMTP.smtp_AUTH answers first
            return AuthResult(success=False, handled=False)
        return await self.logins.cram_md5(server, args)

    async def handle_exception(self, error: Exception) -> str:
        """The last resort for an exception in a command: never aiosmtpd's ``500 Error``."""
        if isinstance(error, TLSSetupException):
            # A client that fails the handshake; aiosmtpd closes the connection after this.
            log_failure(error, "starttls")
            return TEMPORARY
        return self._trouble("command", error)

    def _trouble(self, step: str, error: Exception) -> str:
        # A failure to log must not turn the reply into aiosmtpd's 500 (it calls this from
        # an `except` that formats any exception raised here into the reply).
        with contextlib.suppress(Exception):
            warn("smtp_trouble", step=step, error=type(error).__name__)
        return NO_SPACE if isinstance(error, StoreFull) else TEMPORARY


async def _acted_out(fault: Fault, deadline_s: float) -> bool:
    """Act out the injected fault Ingest chose for this step; True when the step fails.

    A delay holds the reply and lets the step go on; a timeout holds it until the policy's
    provider deadline (``deadline_s``), then fails it.
    """
    if fault.mode == "delay":
        if fault.delay_s:
            await asyncio.sleep(fault.delay_s)
        return False
    if fault.mode == "timeout":
        await asyncio.sleep(deadline_s)
    return True


def _declared_size(options: list[str]) -> int | None:
    for option in options:
        key, _, value = option.partition("=")
        if key.upper() == "SIZE" and value.isdigit():
            return int(value)
    return None
