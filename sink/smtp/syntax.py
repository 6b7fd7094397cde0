"""SMTP syntax, pure: envelope paths, parameters, HTTP request lines, header counts.

Separate from the protocol (``sink/smtp/protocol.py``) so the grammar can be read and tested
on its own; nothing here knows a reply code.
"""

from __future__ import annotations

import re

_HTTP_METHODS = frozenset(b"GET HEAD POST PUT DELETE CONNECT OPTIONS TRACE PATCH PRI".split())
_LONGEST_METHOD = max(len(m) for m in _HTTP_METHODS)
# RFC 5321 4.1.2 esmtp-param: esmtp-keyword ["=" esmtp-value]
_PARAM = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*(?:=[\x21-\x3c\x3e-\x7e]+)?")
# RFC 5321 4.1.2 A-d-l (a source route, to be ignored: RFC 5321 C)
_SOURCE_ROUTE = re.compile(r"@[^\s,:@<>\"]+(?:,@[^\s,:@<>\"]+)*:")


def http_request_line(prefix: bytes) -> bool | None:
    """Whether a connection's first bytes open an HTTP request; None: too few bytes yet."""
    word, space, _ = prefix.partition(b" ")
    if space:
        return word.upper() in _HTTP_METHODS
    if b"\n" in prefix or len(prefix) > _LONGEST_METHOD:
        return False
    return None


def command_path(arg: str | None, keyword: str) -> tuple[str, list[str]] | None:
    """``FROM:<path> params`` -> (mailbox, params); None when malformed.

    RFC 5321 4.1.2, strictly, with two tolerances most servers share: a space after the
    colon, and a path without its angle brackets. Spaces and controls are taken only inside
    a quoted local part; a NUL, CR or LF anywhere is malformed. The mailbox's own grammar
    is checked by ingest; nothing here rewrites it.
    """
    if arg is None or any(c in arg for c in "\x00\r\n"):
        return None
    if arg[: len(keyword)].upper() != keyword:
        return None
    text = arg[len(keyword) :].lstrip(" ")
    bracketed = text.startswith("<")
    end = _path_end(text, bracketed)
    if end is None:
        return None
    path = text[1:end] if bracketed else text[:end]
    rest = text[end + 1 :] if bracketed else text[end:]
    if rest and not rest.startswith(" "):
        return None
    if not bracketed and not path:
        return None
    route = _SOURCE_ROUTE.match(path)
    if route is not None:
        path = path[route.end() :]
        if not path:
            return None
    params = rest.split(" ")
    params = [p for p in params if p]
    if not all(_PARAM.fullmatch(p) for p in params):
        return None
    return path, params


def _path_end(text: str, bracketed: bool) -> int | None:
    """Index of the closing ``>`` (or of the end of a bare path); None if malformed."""
    stop = ">" if bracketed else " "
    quoted = escaped = False
    for index in range(1 if bracketed else 0, len(text)):
        c = text[index]
        if escaped:
            escaped = False
        elif quoted:
            if c == "\\":
                escaped = True
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c == stop:
            return index
        elif c.isspace() or not c.isprintable() or c in "<>":
            return None
    if bracketed or quoted:
        return None
    return len(text)


def header_field_count(raw: bytes, stop_after: int) -> int:
    """Header fields before the first empty line (RFC 5322 2.2), counted up to stop_after + 1."""
    count = 0
    start = 0
    while count <= stop_after:
        end = raw.find(b"\n", start)
        line = raw[start:] if end < 0 else raw[start:end]
        if line in (b"", b"\r"):
            break
        if line[:1] not in (b" ", b"\t"):  # a folded line continues the field before it
            count += 1
        if end < 0:
            break
        start = end + 1
    return count
