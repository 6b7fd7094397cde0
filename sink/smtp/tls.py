"""TLS for STARTTLS: the configured certificate, or a self-signed one made at start-up.

STARTTLS is always offered. Many mail libraries upgrade whenever the server offers it, and
some refuse to send without it; a sink should let such an app run its real code path.
Without ``--tls-cert/--tls-key`` the process makes a throwaway certificate for the mail
domain (clients of a sink do not verify it; those that do need the configured one).
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sink.config import Settings
from sink.errors import ConfigError
from sink.logs import log

_VALIDITY = datetime.timedelta(days=365)


def server_context(settings: Settings) -> ssl.SSLContext | None:
    if settings.smtp_no_starttls:
        # For apps whose mail library upgrades whenever STARTTLS is offered and then
        # refuses a self-signed certificate (and cannot be told otherwise).
        return None
    # CLIENT_AUTH is the server side: no client certificate asked for, no hostname check
    # (aiosmtpd warns about contexts that would make clients fail otherwise).
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    if settings.tls_cert is not None and settings.tls_key is not None:
        try:
            context.load_cert_chain(settings.tls_cert, settings.tls_key)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"--tls-cert {settings.tls_cert} / --tls-key {settings.tls_key}: "
                f"not a usable PEM certificate and key ({exc.__class__.__name__})"
            ) from exc
        return context
    cert_pem, key_pem = self_signed(settings.domain)
    # The ssl module loads certificates from files only; these live for the call.
    with tempfile.TemporaryDirectory(prefix="runsink-tls-") as folder:
        cert, key = Path(folder) / "cert.pem", Path(folder) / "key.pem"
        cert.write_bytes(cert_pem)
        key.touch(mode=0o600)
        key.write_bytes(key_pem)
        context.load_cert_chain(cert, key)
    log("tls_certificate_generated", domain=settings.domain)
    return context


def self_signed(domain: str) -> tuple[bytes, bytes]:
    """A self-signed certificate for ``domain`` (and localhost), and its key, as PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, domain)])
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [
        x509.DNSName(domain),
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem
