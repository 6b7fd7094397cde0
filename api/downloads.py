"""Attachments as downloads: one part of a stored message, never as something a browser runs
or renders (``/v1/messages/{id}/attachments/{index}``, and caught mail's in ``api/mailbox.py``).
"""

from __future__ import annotations

import asyncio
import re
import unicodedata
from urllib.parse import quote, unquote

from starlette.requests import Request
from starlette.responses import Response

from api.apidoc import DOWNLOAD_TYPES
from sink.errors import NotFound
from sink.message import Part, attachment_parts

# Types a browser shows without running or rendering anything active, served as declared (the
# OpenAPI document lists them: api/apidoc.py); all others (HTML, SVG, XML, JavaScript, and
# whatever is unknown) download as application/octet-stream.
_INERT_TYPES = frozenset(DOWNLOAD_TYPES)
_ASCII_SAFE = re.compile(r"[^A-Za-z0-9._ ()+-]")


_ESCAPES = re.compile(r"(?:%[0-9A-Fa-f]{2})+")


def download_type(content_type: str) -> str:
    declared = content_type.strip().lower()
    return declared if declared in _INERT_TYPES else "application/octet-stream"


def download_name(name: str) -> str:
    """No control, format (bidi, zero-width) or separator characters; never empty.

    Percent-escapes in the name count as what they spell (``%E2%80%AE`` is U+202E), so that
    none of those characters survives in encoded form either: a name that is decoded once
    more (by a browser, a download manager, a person) stays what the list showed.
    """
    name = _ESCAPES.sub(lambda found: unquote(found.group(0), errors="replace"), name)
    kept = "".join(c for c in name if unicodedata.category(c)[0] not in "CZ" or c == " ")
    kept = kept.replace("/", "_").replace("\\", "_").strip(" .")
    return kept or "attachment"


def content_disposition(name: str) -> str:
    """``attachment`` with an ASCII fallback and the RFC 6266 / 8187 UTF-8 name."""
    safe = download_name(name)
    fallback = _ASCII_SAFE.sub("_", safe) or "attachment"
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(safe, safe='')}"


def part_at(raw: bytes, index: int) -> Part:
    found = attachment_parts(raw)
    if not 0 <= index < len(found):
        raise NotFound(f"no attachment {index} (this message has {len(found)})")
    return found[index]


def attachment_index(request: Request) -> int:
    """The ``{index}`` of an attachment's path (a number; else no such attachment)."""
    index: str = request.path_params["index"]
    if not index.isdigit() or len(index) > 6:
        raise NotFound(f"no attachment {index[:16]!r}")
    return int(index)


async def attachment_response(raw: bytes, index: int) -> Response:
    """Attachment ``index`` of ``raw`` as a download that no browser runs or renders."""
    part = await asyncio.to_thread(part_at, raw, index)
    return Response(
        part.payload,
        media_type=download_type(part.attachment.content_type),
        headers={
            "Content-Disposition": content_disposition(part.attachment.filename),
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "sandbox; default-src 'none'",
        },
    )
