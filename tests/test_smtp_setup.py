"""A connection's set-up (``sink/smtp/setup.py``): after the first connection, aiosmtpd's
introspection is not run again, and every later connection ends up as aiosmtpd would have
set it up: the same attributes, the same values, its methods bound to itself."""

from __future__ import annotations

import asyncio
import inspect
import ssl
from pathlib import Path
from typing import Any

import pytest

from sink.config import Settings
from sink.ingest import Ingest
from sink.metrics import Metrics
from sink.smtp.auth import Logins
from sink.smtp.handler import Handler
from sink.smtp.protocol import Connections, RunsinkSMTP
from sink.storage.memory import MemoryStore
from sink.waiters import Waiters
from tests.support import make_certificate


def _comparable(connection: RunsinkSMTP, value: Any) -> Any:
    """A value in a form two connections can be compared by: methods by their function
    and whether they are bound to the connection itself; readers by their limit."""
    if inspect.ismethod(value):
        mine = value.__self__ is connection
        return ("method", value.__func__, mine, None if mine else value.__self__)
    if isinstance(value, dict):
        return {key: _comparable(connection, item) for key, item in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # aiosmtpd's _AuthMechAttr
        return tuple(_comparable(connection, item) for item in value)
    if isinstance(value, asyncio.StreamReader):
        return ("reader", value._limit)  # type: ignore[attr-defined]
    if callable(value) and getattr(value, "__self__", None) is connection:
        return ("bound", getattr(value, "__func__", value))
    return value


def _state(connection: RunsinkSMTP) -> dict[str, Any]:
    state = {key: _comparable(connection, value) for key, value in vars(connection).items()}
    # Made per connection by asyncio (StreamReaderProtocol; where it was made, in debug
    # mode): compared by kind only.
    for key in ("_closed", "_stream_reader_wr", "_drain_waiters", "_source_traceback"):
        if key in state:
            state[key] = type(vars(connection)[key])
    return state


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "starttls"])
@pytest.mark.parametrize("auth", ["none", "any", "checked"])
def test_a_later_connection_is_set_up_as_aiosmtpd_sets_up_the_first(
    tmp_path: Path, tls: bool, auth: str
) -> None:
    settings = Settings(
        db=tmp_path / "runsink.db",
        smtp_auth=(("user", "secret"),) if auth == "checked" else (),
        no_smtp_auth=auth == "none",
    )
    logins = None if auth == "none" else Logins(settings.smtp_auth)
    context = None
    if tls:
        cert, key = make_certificate(tmp_path, "sink.test")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        handler = Handler(Ingest(MemoryStore(), Waiters(), settings, Metrics()), Metrics(), logins)
        connections = Connections(settings, handler, Metrics(), context, loop)
        first = connections.plaintext()  # aiosmtpd's own set-up
        assert RunsinkSMTP in connections.learned
        later = connections.plaintext()  # the learned one
        assert _state(later).keys() == _state(first).keys()
        for key, value in _state(first).items():
            assert _state(later)[key] == value, key
        assert set(later._smtp_methods) >= {"EHLO", "MAIL", "RCPT", "DATA", "QUIT"}
        assert later._ehlo_hook_ver == "new"

    asyncio.run(scenario())
