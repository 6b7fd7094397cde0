"""What a web page on the developer's own machine may do: nothing, unless it is ours.

A sink on loopback without a token is safe from other machines, not from the browser on
this one. Two attacks reach it (they reached Mailpit and MailHog users):

- **DNS rebinding**: a page on ``attacker.example`` rebinds that name to 127.0.0.1 and
  reads the API as its own origin. Its requests carry ``Host: attacker.example``, so
  only names that cannot be rebound are served (``HostRule``): ``localhost``, loopback
  literals, the address the server is bound to, and ``--allowed-hosts``. Anything else
  is 421 (RFC 9110 15.5.20: not a server for that authority).
- **Cross-site writes**: a page's ``fetch`` or form may POST ``text/plain`` to any
  origin without a CORS preflight. So a body must be ``application/json`` (415
  otherwise; the UI's own same-origin sign-in forms excepted), and a change sent from
  another origin (``Origin``, or ``Sec-Fetch-Site: cross-site``) is 403 unless
  ``--allowed-origins`` names it (``WriteRule``). Nothing here answers a CORS preflight
  permissively: no route sends ``Access-Control-Allow-*``.

``LocalSafety`` sits in front of everything (the wait path, the UI, MCP, the health
checks), so there is one rule for every route, as the contract says. A probe still gets
through: a container runtime's from inside asks 127.0.0.1, and an orchestrator's asks the
address of a server bound to every address, where any IP literal is served.
"""

from __future__ import annotations

import ipaddress
import re
import time
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.context import KEY as CONTEXT
from api.endpoints import FORM_PATHS
from api.errors import error_response
from api.middleware import begin, outgoing, oversized, record
from api.ui.access import same_origin
from sink.config import Settings, browser_origin
from sink.metrics import Metrics

_LOOPBACK_NAMES = frozenset({"localhost"})
_WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})
_SAFE_METHODS = frozenset({"GET", "HEAD"})
_DEFAULT_PORTS = {"http": "80", "https": "443"}
_FORM_TYPE = "application/x-www-form-urlencoded"
_PORT = re.compile(r"(:[0-9]*)?")


def host_name(host: str) -> str:
    """The name in a ``Host`` value, without its port: lowercase, no final dot, no brackets."""
    host = host.strip().lower()
    if host.startswith("["):  # an IPv6 literal, then nothing or a port; else no address
        address, bracket, rest = host[1:].partition("]")
        return address if bracket and _PORT.fullmatch(rest) else host
    name, colon, port = host.rpartition(":")
    if colon and _PORT.fullmatch(colon + port) and ":" not in name:
        host = name  # "name:" too: an empty port is the scheme's own (RFC 3986 3.2.3)
    return host.rstrip(".")


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def _loopback(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


@dataclass(frozen=True, slots=True)
class HostRule:
    """Which ``Host`` names are served."""

    names: frozenset[str]
    suffixes: tuple[str, ...]  # from ``*.example.test`` entries: ".example.test"
    any_address: bool  # bound to every address: any IP literal is one of ours
    off: bool  # --allowed-hosts '*'

    @classmethod
    def of(cls, bound: str, allowed: tuple[str, ...]) -> HostRule:
        bound_name = host_name(bound)
        if (address := _ip(bound_name)) is not None:
            bound_name = str(address)  # as serves() writes a Host's address: fd00::2
        names = set(_LOOPBACK_NAMES) | {bound_name}
        suffixes = []
        for entry in allowed:
            if entry.startswith("*."):
                suffixes.append(entry[1:])
            else:
                names.add(entry)
        return cls(
            names=frozenset(names),
            suffixes=tuple(suffixes),
            any_address=bound_name in _WILDCARD_BINDS,
            off="*" in allowed,
        )

    def serves(self, host: str | None) -> bool:
        if self.off or host is None:  # no Host (HTTP/1.0): nothing a browser would send
            return True
        name = host_name(host)
        if name in self.names or name.endswith(self.suffixes):
            return True
        address = _ip(name)
        if address is None:
            return False
        # An address cannot be rebound: loopback always, any other when bound to them all.
        return _loopback(address) or self.any_address or str(address) in self.names


@dataclass(frozen=True, slots=True)
class WriteRule:
    """Which requests may change state: JSON bodies, from no origin or an allowed one."""

    allowed_origins: frozenset[str]

    def refusal(self, scope: Scope, headers: Headers) -> tuple[int, str, str] | None:
        """(status, code, message) for a write a web page must not make, else None."""
        if scope["method"] not in _SAFE_METHODS:
            origin = headers.get("origin")
            site = headers.get("sec-fetch-site")
            cross = site == "cross-site" or (
                origin is not None
                and not _same_origin(origin, headers.get("host"))
                # Browsers send "null" for a page of ours under Referrer-Policy: no-referrer
                # (the UI's), and say where it came from in a header no page can set.
                and not (origin == "null" and site == "same-origin")
            )
            if cross and (origin is None or browser_origin(origin) not in self.allowed_origins):
                where = "from another site" if origin is None else f"from {origin[:100]!r}"
                return 403, "cross_site_request", _cross_site(where)
        if _has_body(headers):
            media = headers.get("content-type", "").partition(";")[0].strip().lower()
            if media == "application/json":
                return None
            if media == _FORM_TYPE and scope["path"] in FORM_PATHS and same_origin(headers):
                return None  # the UI's own sign-in and sign-out forms
            return (
                415,
                "unsupported_media_type",
                "a request body must be sent as Content-Type: application/json "
                f"(got {media[:60] or 'none'!r})",
            )
        return None


def _same_origin(origin: str, host: str | None) -> bool:
    """The page that sent it was served by this very authority (scheme's port included)."""
    scheme, sep, authority = origin.strip().lower().rstrip("/").partition("://")
    if not sep or host is None:
        return False  # "null" (a sandboxed frame, a file), or no Host to compare with
    default = _DEFAULT_PORTS.get(scheme)
    return _authority(authority, default) == _authority(host.strip().lower(), default)


def _authority(value: str, default_port: str | None) -> str:
    """``host:port`` with the scheme's default port spelled out, for comparing."""
    has_port = value.rpartition(":")[2].isdigit() and not value.endswith("]")
    if default_port is None or has_port:
        return value
    return f"{value}:{default_port}"


def _cross_site(where: str) -> str:
    return (
        f"a change sent {where} is refused: web pages of other sites may not write to this "
        "server; to allow one, start it with --allowed-origins ORIGIN"
    )


def _has_body(headers: Headers) -> bool:
    length = headers.get("content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return "transfer-encoding" in headers


class LocalSafety:
    """In front of the whole application: the Host check, then the write rules."""

    def __init__(self, app: ASGIApp, settings: Settings, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics
        self.hosts = HostRule.of(settings.http_host, settings.allowed_hosts)
        self.writes = WriteRule(frozenset(settings.allowed_origins))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self._refusal(scope, headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, code, message = refusal
        self.metrics.refused("http", code)
        await self._refuse(scope, receive, send, headers, error_response(status, code, message))

    def _refusal(self, scope: Scope, headers: Headers) -> tuple[int, str, str] | None:
        if oversized(scope):
            return None  # 414 or 431 first, from the edge (api/middleware.py)
        host = headers.get("host")
        if not self.hosts.serves(host):
            shown = (host or "")[:100]
            return (
                421,
                "host_not_allowed",
                f"this server does not answer to the Host {shown!r} (a guard against DNS "
                "rebinding); if that name is really this server, start it with "
                f"--allowed-hosts {host_name(shown) or 'NAME'} (or RUNSINK_ALLOWED_HOSTS)",
            )
        return self.writes.refusal(scope, headers)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, headers: Headers, response: Response
    ) -> None:
        """The answer, with the trace and safe headers every answer has, and its log line."""
        started = time.perf_counter()
        context = begin(headers)
        scope[CONTEXT] = context

        async def traced(message: Message) -> None:
            if message["type"] == "http.response.start":
                outgoing(message, context.trace)
            await send(message)

        try:
            await response(scope, receive, traced)
        finally:
            elapsed = time.perf_counter() - started
            record(
                self.metrics, scope["method"], "unmatched", response.status_code, elapsed, context
            )
