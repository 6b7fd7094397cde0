"""TLS for STARTTLS: the configured certificate, or none (a generated one comes with hardening)."""

from __future__ import annotations

import ssl

from sink.config import Settings


def server_context(settings: Settings) -> ssl.SSLContext | None:
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(settings.tls_cert), str(settings.tls_key))
    return context
