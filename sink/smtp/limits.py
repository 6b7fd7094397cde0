"""What one SMTP client may take of the listener: the limits, each answered with its own code.

Read by the protocol (connections, command and DATA lines, idle and DATA time:
``sink/smtp/protocol.py``) and by the handler (recipients, header fields: ``sink/smtp/handler.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    """What one client may take of the listener. The defaults are the product's."""

    max_connections: int = 512
    """Open SMTP connections; one more is answered 421 and closed (the listener goes on)."""
    idle_timeout_s: float = 120.0
    """From the last accepted command to the next (RFC 5321 4.5.3.2 asks servers for 5 min;
    the apps that feed a sink talk or hang up)."""
    data_timeout_s: float = 300.0
    """From DATA to the final dot, however steadily the client trickles."""
    max_recipients: int = 100
    """Per message (RFC 5321 4.5.3.1.8: at least 100); the next RCPT gets 452."""
    max_header_fields: int = 1000
    max_line_bytes: int = 1024 * 1024
    """A text line in DATA. Apps send long HTML lines unencoded: take them rather than lose
    the mail (aiosmtpd's default is RFC 5321's 1001 octets). Also caps a command line's
    buffering; the 512-octet command limit is aiosmtpd's ``command_size_limit``."""
