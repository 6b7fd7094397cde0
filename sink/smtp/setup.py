"""aiosmtpd's per-connection set-up, without its introspection on every connection.

``SMTP.__init__`` (aiosmtpd 1.4.6) looks its commands, AUTH mechanisms and handler hooks up
anew for every connection: ``dir()`` and ``getattr`` over the protocol and the handler,
``inspect.getmembers`` on both, ``inspect.signature`` of ``handle_EHLO``, a sorted log line
of the mechanisms. A profile of ``bench/ingest.py``'s new-connection row (8 connections, a
connection per message) put that at 15% of the event loop. The answers never change for a
protocol class and a handler, so ``learn`` takes them once, from one connection set up by
aiosmtpd itself, and ``set_up`` sets up every later connection with them: the same
attributes, the same values, methods bound to that connection (``tests/test_smtp_setup.py``
compares both). ``Connections`` (``sink/smtp/protocol.py``) keeps what was learned.

Only for the arguments runsink passes (``KNOWN_ARGUMENTS``); any other falls back to
aiosmtpd's own ``__init__``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from aiosmtpd.smtp import SMTP, _AuthMechAttr, login_always_fail

# The keyword arguments set_up knows how to set up (aiosmtpd's defaults for the others).
KNOWN_ARGUMENTS = frozenset(
    {
        "data_size_limit",
        "enable_SMTPUTF8",
        "hostname",
        "ident",
        "tls_context",
        "timeout",
        "auth_required",
        "auth_require_tls",
        "authenticator",
        "loop",
    }
)


@dataclass(frozen=True)
class Learned:
    """What aiosmtpd's introspection found for one protocol class and one handler."""

    commands: tuple[tuple[str, str], ...]  # command -> the protocol's method name
    mechanisms: tuple[tuple[str, str, bool], ...]  # name -> method name, the protocol's?
    hooks: dict[str, Any]  # the handler's bound handle_* methods, by hook name
    ehlo_hook_version: str | None


def learn(connection: SMTP, handler: Any) -> Learned:
    """Read the introspection's results off a connection that aiosmtpd set up itself."""
    mechanisms = tuple(
        (name, impl.method.__name__, impl.is_builtin)
        for name, impl in connection._auth_methods.items()
    )
    return Learned(
        commands=tuple(
            (name, method.__name__) for name, method in connection._smtp_methods.items()
        ),
        mechanisms=mechanisms,
        hooks=dict(connection._handle_hooks),
        ehlo_hook_version=connection._ehlo_hook_ver,
    )


def set_up(
    connection: SMTP,
    learned: Learned,
    handler: Any,
    *,
    loop: asyncio.AbstractEventLoop,
    hostname: str,
    ident: str,
    data_size_limit: int | None,
    enable_SMTPUTF8: bool,
    tls_context: Any,
    timeout: float,
    auth_required: bool,
    auth_require_tls: bool,
    authenticator: Any,
) -> None:
    """What ``SMTP.__init__`` does for these arguments, with ``learned``'s answers.

    (Its TLS context warnings were given by the connection that was set up by aiosmtpd.)
    """
    c: Any = connection
    c.__ident__ = ident
    c.loop = loop
    asyncio.StreamReaderProtocol.__init__(
        c,
        asyncio.StreamReader(loop=loop, limit=c.line_length_limit),
        client_connected_cb=c._cb_client_connected,
        loop=loop,
    )
    c.event_handler = handler
    c.data_size_limit = data_size_limit
    c.enable_SMTPUTF8 = enable_SMTPUTF8
    c._decode_data = False
    c.command_size_limits.clear()
    c.hostname = hostname
    c.tls_context = tls_context
    c.require_starttls = tls_context and False
    c._timeout_duration = timeout
    c._timeout_handle = None
    c._tls_handshake_okay = True
    c._tls_protocol = None
    c._original_transport = None
    c.session = None
    c.envelope = None
    c.transport = None
    c._handler_coroutine = None
    c._auth_require_tls = auth_require_tls
    c._proxy_timeout = None
    if authenticator is not None:
        c._authenticator = authenticator
        c._auth_callback = None
    else:
        c._auth_callback = login_always_fail
        c._authenticator = None
    c._auth_required = auth_required
    c._auth_methods = {
        name: _AuthMechAttr(getattr(c if builtin else handler, method), builtin)
        for name, method, builtin in learned.mechanisms
    }
    c._handle_hooks = dict(learned.hooks)
    c._ehlo_hook_ver = learned.ehlo_hook_version
    c._smtp_methods = {name: getattr(c, method) for name, method in learned.commands}
    c._enforce_call_limit = False
