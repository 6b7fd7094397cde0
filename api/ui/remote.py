"""Which hosts "Load remote images" may contact for one message, and which it never will.

A click on "Load remote images" lets the browser fetch what the mail's HTML names. Its
sender chooses those URLs, and from a developer's browser ``http://127.0.0.1:8025/...``,
``http://[::ffff:127.0.0.1]/`` or ``http://169.254.169.254/`` reach services that trust
the machine (this sink, cloud metadata). So the frame's CSP names the allowed origins one by
one (``img-src https://cdn.example.com ...``) rather than ``http: https:``: anything this
module does not list, the browser refuses; and it never lists loopback, link-local or
private addresses, names that only mean something locally (``localhost``, one-label names,
``.local``, ``.internal``, ``.home.arpa``, ``.test``...), IPv6 literals (a CSP host source
cannot name one) or a host spelled in a way a browser would read differently (``%``).

Names are not resolved here: a public name that points at a private address is the DNS
rebinding case the server's Host check covers for this sink, not for other local services.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

_ATTRIBUTE_URL = re.compile(
    r"""\b(?:src|background|poster)\s*=\s*["']?\s*((?:https?:)?//[^\s"'<>]+)""", re.I
)
_SRCSET = re.compile(r"""\bsrcset\s*=\s*(["'])(.*?)\1""", re.I | re.S)
_CSS_URL = re.compile(r"""url\(\s*["']?\s*((?:https?:)?//[^\s"')]+)""", re.I)
_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*")
# Names that mean something only locally (mDNS, split DNS, Valet's and dnsmasq's .test) or
# nothing at all (RFC 6761's .invalid).
_LOCAL_SUFFIXES = (
    *(".localhost", ".local", ".internal", ".lan", ".home.arpa", ".intranet", ".corp"),
    *(".test", ".invalid", ".example"),
)
MAX_HOSTS = 50


@dataclass(frozen=True, slots=True)
class RemoteImages:
    allowed: tuple[str, ...]  # origins the frame may load images from: "https://host[:port]"
    refused: tuple[str, ...]  # hosts named but never contacted: "127.0.0.1:8025", ...


def remote_images(html: str) -> RemoteImages:
    allowed: dict[str, None] = {}
    refused: dict[str, None] = {}
    for url in _urls(html):
        origin, host = _origin(url)
        if origin is None:
            refused[host] = None
        else:
            allowed[origin] = None
    return RemoteImages(tuple(allowed)[:MAX_HOSTS], tuple(refused)[:MAX_HOSTS])


def _urls(html: str) -> list[str]:
    found = [m.group(1) for m in _ATTRIBUTE_URL.finditer(html)]
    found += [m.group(1) for m in _CSS_URL.finditer(html)]
    for match in _SRCSET.finditer(html):
        for candidate in match.group(2).split(","):
            first = candidate.strip().split(" ", 1)[0]
            if first.lower().startswith(("http://", "https://", "//")):
                found.append(first)
    return found


def _origin(url: str) -> tuple[str | None, str]:
    """(the origin to allow, or None when refused; the host as shown)."""
    if url.startswith("//"):
        url = "http:" + url  # the frame is served over http: a scheme-relative URL follows it
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None, url[:80]
    netloc = parts.netloc.rpartition("@")[2].lower()
    host = (parts.hostname or "").rstrip(".")
    if not host or "%" in netloc or not _public(host):
        return None, netloc or url[:80]
    suffix = f":{port}" if port is not None else ""
    return f"{parts.scheme.lower()}://{host}{suffix}", netloc


def _public(host: str) -> bool:
    if ":" in host:
        return False  # an IPv6 literal: never listed (and a CSP source cannot name one)
    if not _NAME.fullmatch(host):
        return False
    last = host.rsplit(".", 1)[-1]
    if last.isdigit() or last.startswith("0x"):
        # Browsers read a host ending in a number as IPv4, also as 127.1 or 0x7f.1.
        address = _ipv4(host)
        return address is not None and address.is_global
    return "." in host and host != "localhost" and not host.endswith(_LOCAL_SUFFIXES)


def _ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The address a browser reads (WHATWG URL's IPv4 parser: 1-4 parts, each decimal,
    0x hex or 0-led octal, the last filling the remaining bytes), else None."""
    parts = host.split(".")
    if len(parts) > 4:
        return None
    numbers = []
    for part in parts:
        try:
            if part.lower().startswith("0x"):
                numbers.append(int(part[2:] or "0", 16))
            elif len(part) > 1 and part.startswith("0"):
                numbers.append(int(part, 8))
            else:
                numbers.append(int(part, 10))
        except ValueError:
            return None
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for index, number in enumerate(head):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)
