"""The webhook calls' own rules, once: the HTTP endpoints (``api/webhooks.py``) and the fake
(``sink.fake``) both apply them over a ``WebhookStore``.

A webhook is made from a checked URL; its deliveries page by an opaque cursor (an attempt's
``position``); a test delivery (``ping``) goes only to a webhook that is not disabled.
Scopes stay with the HTTP endpoints (the fake has no tokens).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from sink.clock import rfc3339
from sink.errors import InvalidCursor, InvalidRequest, NotFound, WebhookDisabled
from sink.webhook_signature import new_secret
from sink.webhooks.model import EVENT_TYPES, Webhook, new_webhook_id

if TYPE_CHECKING:
    from sink.webhooks.port import WebhookStore

LIMIT_DEFAULT, LIMIT_MAX = 50, 500
_REG_NAME = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=%]*")  # RFC 3986 3.2.2, and non-ASCII
_PORT = re.compile(r"(:[0-9]*)?")


def new_webhook(
    url: str,
    *,
    events: list[str] | None,
    run_id: str | None,
    run_glob: str | None,
    description: str | None,
    now: float,
    by_admin: bool,
) -> Webhook:
    """A new webhook with its secret (``events`` omitted: all; in the contract's order)."""
    checked_url(url)
    wanted = set(events or EVENT_TYPES)
    return Webhook(
        webhook_id=new_webhook_id(),
        url=url,
        events=tuple(kind for kind in EVENT_TYPES if kind in wanted),
        run_id=run_id,
        run_glob=run_glob,
        description=description,
        secret=new_secret(),
        created_at=now,
        created_by_admin=by_admin,
    )


def checked_url(url: str) -> None:
    """A receiver's URL is http(s) with a host (any host: receivers are usually local); a
    ``user:password@`` in it is sent as HTTP Basic auth (``sink.webhooks.http``)."""
    problem = url_problem(url)
    if problem is not None:
        raise InvalidRequest(f"url: {problem}", {"field": "url"})


def url_problem(url: str) -> str | None:
    """What is wrong with a receiver's URL (http(s) with a host, any host), or None."""
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        return "no spaces or control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port out of range raises here)
    except ValueError:
        return "not a URL (expected http://host[:port]/path or https://...)"
    if parts.scheme.lower() not in ("http", "https"):
        return f"the scheme must be http or https, not {parts.scheme[:16]!r}"
    if not parts.hostname:
        return "a host is required (e.g. http://127.0.0.1:9000/hooks)"
    host = parts.netloc.rpartition("@")[2]
    if not _is_host(host):
        return f"{host[:80]!r} is not a host name or address (with an optional :port)"
    return None


def _is_host(authority: str) -> bool:
    """``host[:port]`` as RFC 3986 has it: a bracketed address (urlsplit checked what is
    inside), or a name whose non-ASCII part has an IDNA form (the delivery sends that)."""
    if authority.startswith("["):
        return _PORT.fullmatch(authority.partition("]")[2]) is not None
    name, colon, port = authority.rpartition(":")
    if not colon or not (port == "" or port.isdigit()):
        name = authority
    if _REG_NAME.fullmatch("".join(c for c in name if c.isascii())) is None:
        return False
    try:
        name.encode("idna")  # labels of 1-63 characters, and an IDNA form for the rest
    except UnicodeError:
        return False
    return True


def shown_url(url: str) -> str:
    """The URL without its password (``user:***@``): as lists, reads and the run page show
    it (only the create's answer gives it whole, as it gives the secret)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


async def ping(store: WebhookStore, hook: Webhook, now: float) -> str:
    """Queue a ``ping`` to ``hook`` now: its delivery_id (409 once a 410 disabled it)."""
    if hook.disabled_at is not None:
        raise WebhookDisabled(
            f"webhook {hook.webhook_id} was disabled at {rfc3339(hook.disabled_at)} (its "
            "receiver answered 410 Gone) and sends nothing more: create a new webhook",
            {"disabled_at": rfc3339(hook.disabled_at)},
        )
    delivery_id = await store.enqueue_ping(hook.webhook_id, now)
    if delivery_id is None:
        raise no_webhook(hook.webhook_id)  # deleted meanwhile
    return delivery_id


def no_webhook(webhook_id: str) -> NotFound:
    return NotFound(
        f"no webhook {webhook_id[:64]!r} (GET /v1/webhooks lists the ones this token may see)"
    )


def cursor(position: tuple[float, int, int]) -> str:
    raw = json.dumps(list(position), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def position(cursor: str | None) -> tuple[float, int, int] | None:
    """The attempt position a ``cursor`` names (None: from the newest); 400 if not ours."""
    if cursor is None or cursor == "":
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        at, seq, attempt = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        if (
            isinstance(at, int | float)
            and not isinstance(at, bool)
            and isinstance(seq, int)
            and isinstance(attempt, int)
        ):
            return float(at), seq, attempt
    except (ValueError, TypeError, UnicodeEncodeError, binascii.Error):
        pass
    raise InvalidCursor(
        "cursor: not one this server gave; pass next_cursor back as it is, or none for the newest",
        {"field": "cursor"},
    )
