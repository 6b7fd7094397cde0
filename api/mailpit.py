"""A Mailpit-compatible subset under ``/api/v1/`` (contract v2), with Mailpit's JSON field names.

Existing Mailpit clients and test helpers switch by changing only a URL. The shapes follow
Mailpit's API v1 (``MessagesSummary``, ``MessageSummary``, ``Message``, ``Attachment``,
``AppInformation``); what differs, and why, is in ``docs/mailpit-compat.md``. Lists cover
evidence and caught mail, newest first. The bearer token applies as everywhere else.

Our rules stay ours: deleting named evidence of a live inbox is a 409 that deletes nothing,
and a part that a browser would run or render is served as ``application/octet-stream``.
"""

from __future__ import annotations

import asyncio
import hashlib
import resource
from datetime import UTC
from email.utils import getaddresses, parseaddr, parsedate_to_datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from api.inputs import json_body
from api.snippet import snippet
from api.state import state_of
from api.ui.render import frame_headers, inline_cids
from sink import __version__, clock
from sink.errors import EvidenceReleased, InvalidRequest, NotFound
from sink.mailbox import Mailbox
from sink.message import ParsedMessage, attachment_parts, parse
from sink.search import Filter, Query
from sink.storage.base import Listed

_MAX_LIMIT = 1000
_UNCLAIMED = Query(filters=(Filter("is", "claimed", negated=True),))
# Types a browser would run or render: served as bytes, never as themselves (contract v2).
_ACTIVE_TYPES = ("html", "svg", "xml", "javascript", "ecmascript", "xhtml")


def _mailbox(request: Request) -> Mailbox:
    return state_of(request).runtime.mailbox


def _whole(request: Request, name: str, default: int, high: int) -> int:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or int(text) > high:
        raise InvalidRequest(f"{name}: expected a whole number from 0 to {high}", {"field": name})
    return int(text)


def _address(address: str | None, name: str = "") -> dict[str, str]:
    # Always the object, as Mailpit: a missing or unparsable From is {Name: "", Address: ""}.
    return {"Name": name or "", "Address": address or ""}


def _tags(entry: Listed) -> list[str]:
    return ["caught"] if entry.caught else [f"run:{entry.run_id}"]


def _summary(entry: Listed, preview: tuple[str, str]) -> dict[str, Any]:
    """Mailpit's MessageSummary, from the listing and the (From name, Snippet) preview."""
    name, snippet_text = preview
    return {
        "ID": entry.id,
        "MessageID": "",
        "Read": entry.claimed,
        "From": _address(entry.from_addr, name),
        "To": [_address(a) for a in entry.to],
        "Cc": [_address(a) for a in entry.cc],
        "Bcc": [],
        "ReplyTo": [],
        "Subject": entry.subject,
        "Created": clock.rfc3339(entry.received_at),
        "Username": "",
        "Tags": _tags(entry),
        "Size": entry.size,
        "Attachments": int(entry.has_attachment),
        "Snippet": snippet_text,
    }


def _preview(raw: bytes | None) -> tuple[str, str]:
    """The From display name and Mailpit's Snippet; empty for a released body."""
    if raw is None:
        return "", ""
    parsed = parse(raw)
    return _sender_name(parsed), snippet(parsed.text, parsed.html)


async def _previews(mailbox: Mailbox, entries: list[Listed]) -> list[tuple[str, str]]:
    # Neither is kept in the listing: both come from each body, read and parsed per page.
    raws = [None if e.released else await mailbox.entry_raw(e) for e in entries]
    return await asyncio.to_thread(lambda: [_preview(raw) for raw in raws])


async def _summaries(request: Request, text: str | None) -> Response:
    start = _whole(request, "start", 0, 10**9)
    limit = _whole(request, "limit", 50, _MAX_LIMIT)
    mailbox = _mailbox(request)
    entries, matches, total = await mailbox.window(text, start, limit)
    previews = await _previews(mailbox, entries)
    unread = await mailbox.count(_UNCLAIMED)
    unread_matches = unread if text is None else await mailbox.count_unclaimed(text)
    return JSONResponse(
        {
            "total": total,
            "unread": unread,
            "count": len(entries),
            "messages_count": matches,
            "messages_unread": unread_matches,
            "start": start,
            "tags": [],
            "messages": [_summary(e, p) for e, p in zip(entries, previews, strict=True)],
        }
    )


async def list_messages(request: Request) -> Response:
    return await _summaries(request, None)


async def search(request: Request) -> Response:
    query = (request.query_params.get("query") or "").strip()
    if not query:
        raise InvalidRequest("query: a search needs a query (GET messages lists everything)")
    return await _summaries(request, query)


# -- one message --------------------------------------------------------------------------


async def _entry_and_raw(request: Request, entry_id: str | None = None) -> tuple[Listed, bytes]:
    mailbox = _mailbox(request)
    entry = await mailbox.entry(request.path_params["id"] if entry_id is None else entry_id)
    raw = await mailbox.entry_raw(entry)
    if raw is None:
        raise EvidenceReleased(f"message {entry.id}: its body was released; only metadata is left")
    return entry, raw


def _named(parsed: ParsedMessage, header: str) -> list[dict[str, str]]:
    values = [v for k, vs in parsed.headers.items() if k.lower() == header for v in vs]
    try:
        pairs = getaddresses(values)
    except Exception:  # the pure-Python address parser can fail on hostile input
        return []
    return [_address(address, name) for name, address in pairs if "@" in address]


def _first(parsed: ParsedMessage, header: str) -> str:
    for key, values in parsed.headers.items():
        if key.lower() == header and values:
            return values[0]
    return ""


def _date(parsed: ParsedMessage, entry: Listed) -> str:
    try:
        moment = parsedate_to_datetime(parsed.date or "")
    except (TypeError, ValueError, IndexError):
        return clock.rfc3339(entry.received_at)
    if moment.tzinfo is None:
        return clock.rfc3339(moment.replace(tzinfo=UTC).timestamp())
    return moment.isoformat().replace("+00:00", "Z")


def _attachments(raw: bytes) -> list[dict[str, Any]]:
    found = []
    for number, part in enumerate(attachment_parts(raw), start=1):
        attachment, payload = part.attachment, part.payload
        found.append(
            {
                "PartID": str(number),
                "FileName": attachment.filename,
                "ContentType": attachment.content_type,
                "ContentID": part.content_id or "",
                "Size": attachment.size,
                "Checksums": {
                    "MD5": hashlib.md5(payload, usedforsecurity=False).hexdigest(),
                    "SHA1": hashlib.sha1(payload, usedforsecurity=False).hexdigest(),
                    "SHA256": attachment.sha256,
                },
            }
        )
    return found


def _sender_name(parsed: ParsedMessage) -> str:
    return parseaddr(_first(parsed, "from"))[0]


def _text(parsed: ParsedMessage) -> str:
    # As Mailpit (enmime): an HTML-only message's text is its HTML rendered as text.
    if parsed.text or not parsed.html:
        return parsed.text or ""
    from sink.extract import html_to_text  # not at start-up (see sink.message.analyse)

    return html_to_text(parsed.html)


def _message(entry: Listed, raw: bytes) -> dict[str, Any]:
    parsed = parse(raw)
    listed_to = {a["Address"].lower() for a in _named(parsed, "to") + _named(parsed, "cc")}
    unsubscribe = _first(parsed, "list-unsubscribe")
    return {
        "ID": entry.id,
        "MessageID": _first(parsed, "message-id").strip().strip("<>"),
        "From": _address(entry.from_addr, _sender_name(parsed)),
        "To": _named(parsed, "to"),
        "Cc": _named(parsed, "cc"),
        # Mailpit's Bcc: envelope recipients the headers do not show.
        "Bcc": [_address(r) for r in entry.rcpts if r.lower() not in listed_to],
        "ReplyTo": _named(parsed, "reply-to"),
        "ReturnPath": entry.mail_from,
        "Subject": entry.subject,
        "ListUnsubscribe": {
            "Header": unsubscribe,
            "Links": [],
            "Errors": "",
            "HeaderPost": _first(parsed, "list-unsubscribe-post"),
        },
        "Date": _date(parsed, entry),
        "Tags": _tags(entry),
        "Username": "",
        "Text": _text(parsed),
        "HTML": parsed.html or "",
        "Size": entry.size,
        "Inline": [],
        "Attachments": _attachments(raw),
    }


async def get_message(request: Request) -> Response:
    entry, raw = await _entry_and_raw(request)
    return JSONResponse(await asyncio.to_thread(_message, entry, raw))


async def get_raw(request: Request) -> Response:
    entry, raw = await _entry_and_raw(request)
    headers = {"X-Content-Type-Options": "nosniff"}
    if request.query_params.get("dl") == "1":
        headers["Content-Disposition"] = f'attachment; filename="{entry.id}.eml"'
    return Response(raw, media_type="text/plain; charset=utf-8", headers=headers)


def _canonical(name: str) -> str:
    """Go's textproto.CanonicalMIMEHeaderKey, which Mailpit's header map uses."""
    return "-".join(word[:1].upper() + word[1:].lower() for word in name.split("-"))


async def get_headers(request: Request) -> Response:
    _, raw = await _entry_and_raw(request)
    parsed = await asyncio.to_thread(parse, raw)
    merged: dict[str, list[str]] = {}
    for name, values in parsed.headers.items():
        merged.setdefault(_canonical(name), []).extend(values)
    return JSONResponse(dict(sorted(merged.items())))


async def get_part(request: Request) -> Response:
    _, raw = await _entry_and_raw(request)
    part = request.path_params["part_id"]
    found = await asyncio.to_thread(attachment_parts, raw)
    if not part.isdigit() or not 1 <= int(part) <= len(found):
        raise NotFound(f"no part {part[:16]!r} in this message")
    attachment, payload = found[int(part) - 1].attachment, found[int(part) - 1].payload
    media = attachment.content_type
    if any(active in media for active in _ACTIVE_TYPES):
        media = "application/octet-stream"
    name = attachment.filename or f"part-{part}"
    return Response(
        payload,
        media_type=media,
        headers={
            "Content-Disposition": f'attachment; filename="{name.replace(chr(34), "")}"',
            "X-Content-Type-Options": "nosniff",
        },
    )


# -- the views for tests of an app's mail (/view/{ID}.txt and .html) -----------------------


async def view(request: Request) -> Response:
    """``/view/{ID}.txt``: the text body; ``.html``: the HTML body, served exactly as the web
    UI serves mail HTML (sandboxed by its own CSP, cid: images inlined from the message)."""
    name: str = request.path_params["name"]
    stem, dot, kind = name.rpartition(".")
    if not dot or kind not in ("txt", "html"):
        raise NotFound("no such view: /view/{ID}.txt or /view/{ID}.html")
    entry, raw = await _entry_and_raw(request, stem)
    parsed = await asyncio.to_thread(parse, raw)
    if kind == "txt":
        headers = {"X-Content-Type-Options": "nosniff"}
        return Response(_text(parsed), media_type="text/plain; charset=utf-8", headers=headers)
    if not parsed.html:
        raise NotFound(f"message {entry.id} has no HTML part (its text is /view/{entry.id}.txt)")
    html = parsed.html
    if "cid:" in html.lower():
        html = inline_cids(html, await asyncio.to_thread(attachment_parts, raw))
    return HTMLResponse(html, headers=frame_headers())


# -- delete and info -----------------------------------------------------------------------


async def delete_messages(request: Request) -> Response:
    body = await json_body(request, required=False)
    if not isinstance(body, dict):
        raise InvalidRequest('the body must be a JSON object such as {"IDs": ["..."]}')
    # Field names match whatever their case, as Go's JSON decoding in Mailpit does ("ids" is
    # IDs). Any other field is refused: Mailpit ignores it and deletes everything, which a
    # caller who misspelt IDs never meant.
    fields = list(body)
    if len(fields) > 1 or (fields and fields[0].lower() != "ids"):
        field = next((f for f in fields if f.lower() != "ids"), fields[0])[:64]
        raise InvalidRequest(
            f'unknown field {field!r}: the body is {{"IDs": ["..."]}}, '
            "or nothing to delete all that may go",
            {"field": field},
        )
    named = body[fields[0]] if fields else None
    if named is not None and (
        not isinstance(named, list) or not all(isinstance(i, str) for i in named)
    ):
        raise InvalidRequest("IDs: expected a list of message IDs", {"field": "IDs"})
    if named is not None and len(named) > 10_000:
        raise InvalidRequest("IDs: at most 10000 at once", {"field": "IDs"})
    # As Mailpit: no IDs (no body, {} or an empty list) means everything that may go.
    await _mailbox(request).delete(list(dict.fromkeys(named)) if named else None)
    return Response("ok", media_type="text/plain")


async def info(request: Request) -> Response:
    runtime = state_of(request).runtime
    mailbox = runtime.mailbox
    metrics = runtime.metrics.registry

    def sample(outcome: str) -> int:
        value = metrics.get_sample_value("runsink_messages_total", {"outcome": outcome})
        return int(value or 0)

    accepted = sample("stored") + sample("caught")
    return JSONResponse(
        {
            "Version": __version__,
            "LatestVersion": "",
            # A PostgreSQL URL may hold a password: only the kind of store is named.
            "Database": "postgresql" if runtime.settings.db_url else str(runtime.settings.db),
            "DatabaseSize": await runtime.store.used_bytes(),
            "Messages": await mailbox.count(Query()),
            "Unread": await mailbox.count(_UNCLAIMED),
            "Tags": {},
            "RuntimeStats": {
                "Uptime": int(clock.now() - runtime.started_at),
                "Memory": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "MessagesDeleted": mailbox.deleted,
                "SMTPAccepted": accepted,
                "SMTPAcceptedSize": 0,
                "SMTPRejected": sample("rejected"),
                "SMTPIgnored": sample("late_dropped"),
            },
        }
    )
