"""How the UI shows untrusted text: templates with autoescape, and names made visible.

Every value from mail (subjects, names, addresses, filenames, headers, bodies) reaches a
page through Jinja2's autoescape. Characters that change how text *looks* without being
seen (bidi overrides, zero-width characters, controls) are shown as visible escapes such
as ``⟨U+202E⟩``, so ``invoice\u202efdp.exe`` cannot pass for a PDF.
"""

from __future__ import annotations

import base64
import re
import unicodedata
from importlib import resources
from typing import TYPE_CHECKING
from urllib.parse import unquote

from markupsafe import Markup, escape

from sink import untrusted
from sink.clock import rfc3339
from sink.message import Part

if TYPE_CHECKING:
    from starlette.templating import Jinja2Templates

CID_INLINE_MAX = 5 * 1024 * 1024  # bytes of cid: images inlined as data: URIs per message

_KEEP = frozenset("\n\t")


def visible(value: object, keep: frozenset[str] = frozenset()) -> Markup:
    """Escape ``value``; show each invisible or direction-changing character as ⟨U+XXXX⟩."""
    text = "" if value is None else str(value)
    if text.isprintable():  # the usual case, checked at C speed: nothing hidden in it
        return escape(text)
    out: list[str] = []
    plain: list[str] = []
    for char in text:
        if char not in keep and untrusted.hidden(char):
            if plain:
                out.append(str(escape("".join(plain))))
                plain.clear()
            name = unicodedata.name(char, "unnamed")
            out.append(f'<span class="cp" title="{escape(name)}">{untrusted.escape(char)}</span>')
        else:
            plain.append(char)
    if plain:
        out.append(str(escape("".join(plain))))
    return Markup("".join(out))


def visible_plain(value: object) -> str:
    """``visible`` without markup, where none is allowed (a page's title, an attribute)."""
    return untrusted.visible("" if value is None else str(value))


def visible_text(value: object) -> Markup:
    """Like ``visible``, for bodies: line breaks and tabs stay what they are."""
    text = "" if value is None else str(value)
    keep = _KEEP | frozenset("\r")
    return Markup("\n").join(visible(line, keep) for line in text.split("\n"))


def when(ts: float | None) -> str:
    return "" if ts is None else rfc3339(ts)


def size(n: int | None) -> str:
    if n is None:
        return ""
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 1024 / 1024:.1f} MiB"


def offset(ts: float, start: float) -> str:
    """A time relative to the run's start: +1.234 s, +2 min 03.4 s."""
    delta = max(0.0, ts - start)
    if delta < 60:
        return f"+{delta:.3f} s"
    minutes, seconds = divmod(delta, 60)
    return f"+{int(minutes)} min {seconds:04.1f} s"


def templates() -> Jinja2Templates:
    """The pages' templates; Jinja2 is imported here, when the UI is first used (it costs
    start-up time that a server nobody browses would pay for nothing)."""
    import jinja2
    from starlette.templating import Jinja2Templates

    folder = resources.files("api.ui") / "templates"
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        visible=visible,
        visible_plain=visible_plain,
        visible_text=visible_text,
        when=when,
        size=size,
    )
    env.globals.update(offset=offset)
    return Jinja2Templates(env=env)


# -- mail HTML, for the sandboxed frame ---------------------------------------------------

_CID = re.compile(r"cid:([^\"'\s)<>]+)", re.IGNORECASE)


def inline_cids(html: str, parts: tuple[Part, ...]) -> str:
    """Rewrite ``cid:`` references to the message's own parts as ``data:`` URIs.

    Only the message's own parts: nothing is fetched, and the frame's CSP (``img-src data:
    cid:``) needs no origin of ours. Unknown ids stay as they are (and load nothing).
    """
    by_id = {p.content_id: p for p in parts if p.content_id}
    if not by_id:
        return html
    budget = CID_INLINE_MAX

    def replace(match: re.Match[str]) -> str:
        nonlocal budget
        part = by_id.get(unquote(match.group(1)))
        if part is None or len(part.payload) > budget:
            return match.group(0)
        budget -= len(part.payload)
        kind = part.attachment.content_type
        if not re.fullmatch(r"image/[a-z0-9.+-]+", kind):
            kind = "application/octet-stream"
        return f"data:{kind};base64,{base64.b64encode(part.payload).decode()}"

    return _CID.sub(replace, html)


def frame_csp(remote_origins: tuple[str, ...] = ()) -> str:
    """The mail frame's policy; ``remote_origins`` (``api/ui/remote.py``) are the only
    places its images may come from besides the message itself."""
    images = " ".join(("data:", "cid:", *remote_origins))
    return f"sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src {images}"


def frame_headers(remote_origins: tuple[str, ...] = ()) -> dict[str, str]:
    """The headers of every response that carries mail HTML (contract v2, Web UI)."""
    return {
        "Content-Security-Policy": frame_csp(remote_origins),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "SAMEORIGIN",  # our own page frames it; nobody else
        "Cache-Control": "no-store",
    }
