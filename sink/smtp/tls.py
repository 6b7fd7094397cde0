"""TLS for SMTP: STARTTLS and implicit TLS, only with the configured certificate.

STARTTLS is offered only when ``--tls-cert/--tls-key`` are given (Mailpit's rule, contract
v2 "SMTP"). Common mailers (Nodemailer, PHPMailer, Ruby's mail gem, so Rails) upgrade
whenever the server offers STARTTLS and then refuse a certificate they cannot verify: a
generated self-signed certificate made their default settings fail to send at all. Without a
certificate, mail is plaintext, as every other sink does it on a test network.
"""

from __future__ import annotations

import contextlib
import ssl

from sink.config import Settings
from sink.errors import ConfigError
from sink.logs import warn


def server_context(settings: Settings) -> ssl.SSLContext | None:
    """The configured certificate as a server context, or None when none is configured."""
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    # CLIENT_AUTH is the server side: no client certificate asked for, no hostname check
    # (aiosmtpd warns about contexts that would make clients fail otherwise).
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"--tls-cert {settings.tls_cert} / --tls-key {settings.tls_key}: "
            f"not a usable PEM certificate and key ({exc.__class__.__name__})"
        ) from exc
    # No TLS 1.3 session tickets. OpenSSL sends them right after it reads the client's
    # Finished, before the client's first command: to a client that already sent its
    # transaction and reset the connection, that write fails, and the event loop (uvloop's
    # and asyncio's transports alike) closes the socket unread, the transaction with it
    # (README "Choices"). The cost: a reconnecting client makes a full handshake.
    context.num_tickets = 0
    return context


def failure_cause(error: BaseException) -> dict[str, object]:
    """Why a handshake failed, for the log: OpenSSL's reason, and whether the client said so.

    A reason with ``ALERT`` in it is the client's alert: it refused the handshake, most
    often because it does not trust the certificate (``TLSV1_ALERT_UNKNOWN_CA``,
    ``SSLV3_ALERT_BAD_CERTIFICATE``). Never anything the client sent besides that.
    """
    cause = error.__cause__ or error
    if isinstance(cause, ssl.SSLError):
        reason = cause.reason or type(cause).__name__
        return {"reason": reason, "client_alert": "ALERT" in reason}
    if isinstance(cause, ConnectionError | EOFError):
        return {"reason": "connection_closed", "client_alert": False}
    return {"reason": type(cause).__name__, "client_alert": False}


def log_failure(error: BaseException, mode: str) -> None:
    """Log why a handshake failed (``starttls`` or ``implicit``), with OpenSSL's reason."""
    # A failure to log must not become the reply (aiosmtpd formats what its hook raises).
    with contextlib.suppress(Exception):
        warn("smtp_tls_failed", mode=mode, **failure_cause(error))
