"""The private internals of aiosmtpd, uvicorn and h11 that runsink overrides or reads are still
there in the installed versions, and pyproject.toml pins those packages to the minor versions
they were written for (issue 25).

A name that disappears in a new release would not always fail loudly on its own: an override
of a method the library no longer calls is silently dead (the idle timer, the command loop,
the signal handling go back to the library's own), and an attribute set on a connection that
the library no longer reads changes nothing. This test names the package, its version and
the missing name instead. ``INTERNALS`` lists every such name, each with where it is used;
whoever moves a pin reads this list against the new release first. A method that one of
runsink's subclasses of these libraries' classes overrides and the list lacks fails too, so an
override added later cannot go unlisted.
"""

from __future__ import annotations

import asyncio
import inspect
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import h11
import pytest
import uvicorn
from aiosmtpd import smtp as aiosmtpd_smtp
from packaging.requirements import Requirement
from packaging.version import Version
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from api.connections import GuardedH11Protocol
from api.serve import _UvicornServer
from sink.smtp.loop import LeanLoopSMTP
from sink.smtp.protocol import RunsinkSMTP
from tests import pins

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Internal:
    package: str  # the distribution that owns the name
    owner: str  # a key of the objects built by _objects(): where the name must be found
    name: str
    where: str  # where runsink uses it, and how
    equals: object = None  # when given, the value the name must still have


PROTOCOL = "sink/smtp/protocol.py RunsinkSMTP"
HANDLER = "sink/smtp/handler.py Handler"
LOOP = "sink/smtp/loop.py LeanLoopSMTP"
SETUP = "sink/smtp/setup.py set_up/learn"
GUARDED = "api/connections.py GuardedH11Protocol"
SERVE = "api/serve.py _UvicornServer"


def _set_up(name: str) -> Internal:
    return Internal("aiosmtpd", "SMTP connection", name, f"{SETUP}: set as SMTP.__init__ sets it")


INTERNALS: tuple[Internal, ...] = (
    # -- aiosmtpd (aiosmtpd/smtp.py) ---------------------------------------------------------
    Internal("aiosmtpd", "aiosmtpd.smtp", "_AuthMechAttr", f"{SETUP}: builds the AUTH table"),
    Internal("aiosmtpd", "_AuthMechAttr", "method", f"{SETUP} learn: an AUTH method's name"),
    Internal("aiosmtpd", "_AuthMechAttr", "is_builtin", f"{SETUP} learn: the protocol's?"),
    Internal("aiosmtpd", "aiosmtpd.smtp", "login_always_fail", f"{SETUP}: AUTH callback"),
    Internal("aiosmtpd", "aiosmtpd.smtp", "ALLOWED_BEFORE_STARTTLS", f"{LOOP}: the 530 check"),
    Internal("aiosmtpd", "aiosmtpd.smtp", "BOGUS_LIMIT", f"{LOOP}: unrecognised commands"),
    Internal("aiosmtpd", "aiosmtpd.smtp", "sanitize", f"{LOOP}._log_line: AUTH lines masked"),
    Internal("aiosmtpd", "aiosmtpd.smtp", "TLSSetupException", f"{LOOP}, {HANDLER}"),
    Internal(
        "aiosmtpd",
        "aiosmtpd.smtp.log",
        "name",
        "sink/logs.py, sink/smtp/loop.py: aiosmtpd's logger, kept at ERROR",
        equals="mail.log",
    ),
    Internal("aiosmtpd", "SMTP", "_handle_client", f"{LOOP} and {PROTOCOL}: overridden"),
    Internal("aiosmtpd", "SMTP", "_reset_timeout", f"{LOOP} and {PROTOCOL}: overridden"),
    Internal("aiosmtpd", "SMTP", "_timeout_cb", f"{LOOP} and {PROTOCOL}: overridden"),
    Internal("aiosmtpd", "SMTP", "eof_received", f"{LOOP}: overridden, the loop not cancelled"),
    Internal("aiosmtpd", "SMTP", "connection_lost", f"{LOOP}: overridden, the loop not cancelled"),
    Internal("aiosmtpd", "SMTP", "_cb_client_connected", f"{SETUP}: the reader's callback"),
    Internal("aiosmtpd", "SMTP", "_create_envelope", f"{PROTOCOL}.smtp_DATA: post-DATA state"),
    Internal("aiosmtpd", "SMTP", "check_helo_needed", f"{PROTOCOL}: MAIL, RCPT, DATA"),
    Internal("aiosmtpd", "SMTP", "check_auth_needed", f"{PROTOCOL}.smtp_DATA"),
    Internal("aiosmtpd", "SMTP", "command_size_limits", f"{PROTOCOL}: made per connection"),
    Internal("aiosmtpd", "SMTP", "command_size_limit", f"{PROTOCOL}: the per-connection base"),
    Internal("aiosmtpd", "SMTP", "line_length_limit", f"{PROTOCOL}: set before __init__ reads it"),
    Internal("aiosmtpd", "SMTP connection", "_reader", f"{LOOP}, {PROTOCOL}: read directly"),
    Internal("aiosmtpd", "SMTP connection", "_writer", f"{LOOP}, {PROTOCOL}: written directly"),
    Internal("aiosmtpd", "SMTP connection", "_proxy_timeout", f"{LOOP}: falls back if set"),
    Internal("aiosmtpd", "SMTP connection", "_enforce_call_limit", f"{LOOP}: falls back if set"),
    Internal("aiosmtpd", "SMTP connection", "_smtp_methods", f"{LOOP}: the command table"),
    Internal("aiosmtpd", "SMTP connection", "_timeout_duration", f"{LOOP}: the idle window"),
    Internal("aiosmtpd", "SMTP connection", "_timeout_handle", f"{LOOP}: the one timer"),
    Internal("aiosmtpd", "SMTP connection", "_tls_handshake_okay", f"{LOOP}: the 554 check"),
    Internal("aiosmtpd", "SMTP connection", "_tls_protocol", f"{LOOP}, {PROTOCOL}: TLS on?"),
    Internal("aiosmtpd", "SMTP connection", "_original_transport", f"{PROTOCOL}: after TLS?"),
    Internal("aiosmtpd", "SMTP connection", "_auth_required", f"{PROTOCOL}.smtp_DATA"),
    Internal("aiosmtpd", "SMTP connection", "_auth_methods", f"{SETUP}: the AUTH table"),
    Internal("aiosmtpd", "SMTP connection", "_handle_hooks", f"{SETUP}: the handler's hooks"),
    Internal("aiosmtpd", "SMTP connection", "_ehlo_hook_ver", f"{SETUP}: the EHLO hook form"),
    _set_up("_decode_data"),
    _set_up("_handler_coroutine"),
    Internal("aiosmtpd", "SMTP connection", "_auth_require_tls", f"{PROTOCOL}.smtp_AUTH, {SETUP}"),
    _set_up("_authenticator"),
    _set_up("_auth_callback"),
    # -- uvicorn (uvicorn/protocols/http/h11_impl.py, flow_control.py, server.py) ------------
    Internal("uvicorn", "H11Protocol.__init__", "_loop", f"{GUARDED}.__init__: passed on"),
    Internal("uvicorn", "H11Protocol", "handle_events", f"{GUARDED}: overridden"),
    Internal("uvicorn", "H11Protocol", "on_response_complete", f"{GUARDED}: overridden"),
    Internal("uvicorn", "H11Protocol", "timeout_keep_alive_handler", f"{GUARDED}: overridden"),
    Internal("uvicorn", "H11Protocol", "shutdown", f"{GUARDED}: overridden"),
    Internal("uvicorn", "H11Protocol", "send_400_response", f"{GUARDED}: overridden (414, 431)"),
    Internal("uvicorn", "H11Protocol", "_unset_keepalive_if_required", f"{GUARDED}: called"),
    Internal("uvicorn", "H11 connection", "conn", f"{GUARDED}._head_started: h11's state"),
    Internal("uvicorn", "H11 connection", "cycle", f"{GUARDED}: the request in progress"),
    Internal("uvicorn", "H11 connection", "flow", f"{GUARDED}.connection_made: LeanEvent"),
    Internal("uvicorn", "H11 connection", "headers", f"{GUARDED}.handle_events: dropped"),
    Internal("uvicorn", "H11 request", "response_complete", f"{GUARDED}: answered yet?"),
    Internal("uvicorn", "H11 request", "more_body", f"{GUARDED}: body still arriving?"),
    Internal("uvicorn", "H11 request", "message_event", f"{GUARDED}.handle_events: LeanEvent"),
    Internal("uvicorn", "H11 request", "scope", f"{GUARDED}: hang-up and overflow marks"),
    Internal("uvicorn", "FlowControl", "_is_writable_event", f"{GUARDED}: LeanEvent"),
    Internal("uvicorn", "Server", "capture_signals", f"{SERVE}: overridden (our own signals)"),
    Internal("uvicorn", "Server instance", "should_exit", f"{SERVE}, api/serve.py _stop_when"),
    Internal("uvicorn", "Server instance", "force_exit", f"{SERVE}._exit: a second SIGINT"),
    Internal(
        "uvicorn",
        "H11 connection logger",
        "name",
        "api/cli.py: uvicorn's loggers quietened",
        equals="uvicorn.error",
    ),
    Internal(
        "uvicorn",
        "H11 connection access logger",
        "name",
        "api/cli.py: uvicorn's loggers quietened",
        equals="uvicorn.access",
    ),
    # -- h11 (read through uvicorn's protocol) -----------------------------------------------
    Internal("h11", "h11", "IDLE", f"{GUARDED}._head_started"),
    Internal("h11", "h11.Connection", "trailing_data", f"{GUARDED}: the head's bytes so far"),
    Internal("h11", "h11.Connection", "their_state", f"{GUARDED}._head_started"),
)

PINNED = ("aiosmtpd", "uvicorn", "h11")

# runsink's subclasses of the pinned libraries' classes: what each overrides must be listed.
SUBCLASSES: tuple[tuple[str, type, type], ...] = (
    ("aiosmtpd", LeanLoopSMTP, aiosmtpd_smtp.SMTP),
    ("aiosmtpd", RunsinkSMTP, aiosmtpd_smtp.SMTP),
    ("uvicorn", GuardedH11Protocol, H11Protocol),
    ("uvicorn", _UvicornServer, uvicorn.Server),
)
# Overridable without a listing: asyncio's protocol interface, and aiosmtpd's documented
# command methods (``smtp_<COMMAND>``) and ``push``.
_ASYNCIO_PROTOCOL = frozenset(name for name in dir(asyncio.Protocol) if not name.startswith("_"))


def _documented(package: str, name: str) -> bool:
    if name in _ASYNCIO_PROTOCOL:
        return True
    return package == "aiosmtpd" and (name.startswith("smtp_") or name == "push")


# -- the objects the names are looked up on, built by the libraries themselves ------------


class _NoHooks:
    """An aiosmtpd handler with no hooks: aiosmtpd answers everything itself."""


async def _smtp_connection() -> aiosmtpd_smtp.SMTP:
    """A connection that aiosmtpd set up and greeted over a real socket, then closed."""
    loop = asyncio.get_running_loop()
    made: list[aiosmtpd_smtp.SMTP] = []

    def factory() -> aiosmtpd_smtp.SMTP:
        made.append(aiosmtpd_smtp.SMTP(_NoHooks(), hostname="sink.test", ident="t", loop=loop))
        return made[-1]

    server = await loop.create_server(factory, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        assert (await reader.readline()).startswith(b"220 ")
        writer.write(b"QUIT\r\n")
        assert (await reader.readline()).startswith(b"221 ")
    finally:
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
    return made[0]


async def _h11_connection() -> tuple[H11Protocol, Any]:
    """uvicorn's protocol over a real socket, and its request cycle, taken mid-request."""
    loop = asyncio.get_running_loop()
    entered, release = asyncio.Event(), asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        entered.set()
        await release.wait()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    config = uvicorn.Config(app, log_config=None, lifespan="off", access_log=False)
    state = ServerState()
    made: list[H11Protocol] = []

    def factory() -> H11Protocol:
        made.append(H11Protocol(config, state, {}, _loop=loop))
        return made[-1]

    server = await loop.create_server(factory, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        await asyncio.wait_for(entered.wait(), 10)
        protocol = made[0]
        cycle = protocol.cycle
        release.set()
        assert (await reader.readline()).startswith(b"HTTP/1.1 204")
        await reader.read()  # to the server's close
    finally:
        release.set()
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        for task in list(state.tasks):
            await task
    return protocol, cycle


async def _objects() -> dict[str, Any]:
    """Each owner in INTERNALS, as the library itself builds it."""
    connection = await _smtp_connection()
    protocol, cycle = await _h11_connection()
    return {
        "aiosmtpd.smtp": aiosmtpd_smtp,
        "aiosmtpd.smtp.log": aiosmtpd_smtp.log,
        "_AuthMechAttr": getattr(aiosmtpd_smtp, "_AuthMechAttr", None),
        "SMTP": aiosmtpd_smtp.SMTP,
        "SMTP connection": connection,
        "H11Protocol": H11Protocol,
        "H11Protocol.__init__": inspect.signature(H11Protocol.__init__).parameters,
        "H11 connection": protocol,
        "H11 connection logger": protocol.logger,
        "H11 connection access logger": protocol.access_logger,
        "H11 request": cycle,
        "FlowControl": protocol.flow,
        "Server": uvicorn.Server,
        "Server instance": uvicorn.Server(config=uvicorn.Config(_NoHooks)),
        "h11": h11,
        "h11.Connection": h11.Connection(h11.SERVER),
    }


def _problem(internal: Internal, objects: Mapping[str, Any]) -> str | None:
    """What is wrong with one internal, or None."""
    owner = objects[internal.owner]
    if owner is None:
        return f"{internal.owner} is gone"
    if isinstance(owner, Mapping):
        return None if internal.name in owner else f"{internal.owner} has no {internal.name}"
    if not hasattr(owner, internal.name):
        return f"{internal.owner} has no {internal.name}"
    found = getattr(owner, internal.name)
    if internal.equals is not None and found != internal.equals:
        return f"{internal.owner}.{internal.name} is {found!r}, not {internal.equals!r}"
    return None


@pytest.fixture(scope="module")
def objects() -> dict[str, Any]:
    return asyncio.run(_objects())


@pytest.mark.parametrize("package", PINNED)
def test_every_internal_runsink_touches_is_still_there(
    package: str, objects: dict[str, Any]
) -> None:
    """Every listed internal is in the installed version; a missing one is named with its use."""
    problems = [
        f"{package} {version(package)}: {problem} (used by {internal.where})"
        for internal in INTERNALS
        if internal.package == package and (problem := _problem(internal, objects)) is not None
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("package", "ours", "theirs"), SUBCLASSES, ids=[ours.__name__ for _, ours, _ in SUBCLASSES]
)
def test_every_library_method_a_runsink_subclass_overrides_is_listed(
    package: str, ours: type, theirs: type
) -> None:
    """An override of a library's name (past its documented interface) is in INTERNALS."""
    listed = {internal.name for internal in INTERNALS if internal.package == package}
    overridden = [
        name for name in vars(ours) if not name.startswith("__") and hasattr(theirs, name)
    ]
    unlisted = [
        name for name in overridden if name not in listed and not _documented(package, name)
    ]
    assert not unlisted, f"{ours.__name__} overrides {package}'s {unlisted}: list them in INTERNALS"


def _requirements() -> dict[str, Requirement]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = (Requirement(line) for line in pyproject["project"]["dependencies"])
    return {requirement.name: requirement for requirement in listed}


@pytest.mark.parametrize("package", PINNED)
def test_the_packages_whose_internals_are_used_are_pinned_to_their_minor_version(
    package: str,
) -> None:
    """pyproject pins each to the installed minor version, and constraints.txt lies inside it."""
    requirement = _requirements().get(package)
    assert requirement is not None, f"{package} is not listed in pyproject.toml's dependencies"
    specifier = requirement.specifier
    installed = Version(version(package))
    assert installed in specifier, f"{package} {installed} is outside pyproject's {specifier}"
    upper = [spec for spec in specifier if spec.operator == "<"]
    assert upper, f"{package}: pyproject's {specifier} has no upper bound"
    next_minor = Version(f"{installed.major}.{installed.minor + 1}")
    assert Version(upper[0].version) == next_minor, (
        f"{package}: pyproject's {specifier} does not stop at {next_minor}, the minor version "
        f"after the installed {installed} whose internals INTERNALS lists"
    )
    pinned = Version(pins.read()[package])
    assert pinned in specifier, f"constraints.txt's {package}=={pinned} is outside {specifier}"
