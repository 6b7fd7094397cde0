"""Reading an HTTP/1.x answer off a connection as common clients read it (``http.py``'s).

    status, version, fields = await read_head(conn)       # 1xx interim answers skipped
    how = framing(status, version, fields)                  # how its body ends
    kept = dropped(conn, how)          # the body already read (most answers): at once
    kept = await drop_body(conn, how)  # else: read to its end (None from dropped)

Lines may end in CRLF or a bare LF, empty lines before the status line are skipped, a
204 or 304 has no body, a body is framed by ``Transfer-Encoding: chunked``, else by
``Content-Length``, else by the close. The head is found in what one read brought (a
search, not a read per line); the bytes after it wait in ``Connection.rest``.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Literal

BODY_MAX = 64 * 1024  # an answer's body beyond this is not read: the connection closes
HEAD_MAX = 64 * 1024
_READ = 65536
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,15}")

Head = tuple[int, str, dict[str, str]]  # status, version, fields (names lowercased)


class ProtocolError(Exception):
    """The peer's answer was not HTTP/1.x."""


@dataclass(eq=False, slots=True)
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    rest: bytes = b""  # read from the peer, not taken yet

    async def fill(self) -> None:
        """Add what the peer sends next to ``rest`` (IncompleteReadError at its close)."""
        chunk = await self.reader.read(_READ)
        if not chunk:
            raise asyncio.IncompleteReadError(self.rest, None)
        self.rest += chunk


@dataclass(frozen=True, slots=True)
class Framing:
    """How an answer's body ends: after ``length`` bytes, its last chunk, the connection's
    close, or unknown (``drop``: not read, the connection closed); and whether the
    connection can carry another request once it has."""

    kind: Literal["length", "chunked", "close", "drop"]
    length: int = 0
    reusable: bool = False


async def read_head(conn: Connection) -> Head:
    """The answer's status line and header fields (1xx interim answers skipped)."""
    while True:
        while not conn.rest or (end := _HEAD_END.search(conn.rest)) is None:
            if len(conn.rest) > HEAD_MAX:
                raise ProtocolError("answer head too long")
            await conn.fill()
        raw, conn.rest = conn.rest[: end.start()], conn.rest[end.end() :]
        lines = raw.decode("latin-1").split("\n")
        while lines and not lines[0].rstrip("\r"):
            del lines[0]  # empty lines before the status line (RFC 9112, 2.2)
        if not lines:
            continue
        version, _, tail = lines[0].rstrip("\r").partition(" ")
        code = tail[:3]
        if (
            not version.startswith("HTTP/1.")
            or not (code.isascii() and code.isdigit())
            or tail[3:4] not in ("", " ")
        ):
            raise ProtocolError("not an HTTP/1.x answer")
        status = int(code)
        if 100 <= status < 200:
            continue
        fields: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                name, value = name.strip().lower(), value.strip()
                seen = fields.get(name)
                fields[name] = value if seen is None else f"{seen}, {value}"
        return status, version, fields


def framing(status: int, version: str, fields: dict[str, str]) -> Framing:
    connection = fields.get("connection", "").lower()
    reusable = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
    if status in (204, 304):
        return Framing("length", 0, reusable)  # no body, whatever the fields say (RFC 9112, 6.3)
    coding = fields.get("transfer-encoding")
    if coding is not None:
        if coding.lower().rpartition(",")[2].strip() == "chunked":
            return Framing("chunked", 0, reusable)
        return Framing("close")
    length = fields.get("content-length", "")
    if "," in length:  # the field repeated: one length, or an unknown end
        lengths = {n.strip() for n in length.split(",")}
        length = lengths.pop() if len(lengths) == 1 else "?"
    if not length:
        return Framing("close")  # no length: the body runs to the close
    if not (length.isascii() and length.isdigit()) or int(length) > BODY_MAX:
        return Framing("drop")
    return Framing("length", int(length), reusable)


def dropped(conn: Connection, how: Framing) -> bool | None:
    """Whether the connection can carry another request, if the body is all read already
    (most answers: it came with the head); None if more is to come (``drop_body``)."""
    if how.kind == "drop":
        return False
    end = _body_end(conn.rest, how)
    if end is None:
        return None
    conn.rest = conn.rest[end:]
    return how.reusable and not conn.rest  # (anything past the answer: not ours to read)


async def drop_body(conn: Connection, how: Framing) -> bool:
    """Read the answer's body to its end and drop it; whether the connection can carry
    another request."""
    if how.kind == "close":
        while len(conn.rest) <= BODY_MAX and (chunk := await conn.reader.read(_READ)):
            conn.rest += chunk
        return False
    while (kept := dropped(conn, how)) is None:
        if len(conn.rest) > BODY_MAX:
            return False
        await conn.fill()
    return kept


def _body_end(data: bytes, how: Framing) -> int | None:
    """Where the body that starts ``data`` ends in it; None if it has not all come."""
    if how.kind == "length":
        return how.length if len(data) >= how.length else None
    if how.kind == "chunked":
        return _chunked_end(data)
    return None  # "close": only the close ends it


def _chunked_end(data: bytes) -> int | None:
    at = 0
    while True:
        size_line, at = _line(data, at)
        if size_line is None:
            return None
        size_text = size_line.split(b";")[0].strip()
        if not _CHUNK_SIZE.fullmatch(size_text):
            raise ProtocolError("not a chunk size")
        size = int(size_text, 16)
        if size == 0:
            while True:  # trailer fields, up to the empty line that ends the message
                trailer, at = _line(data, at)
                if trailer is None:
                    return None
                if not trailer:
                    return at
        if len(data) < at + size:
            return None
        after, at = _line(data, at + size)
        if after is None:
            return None
        if after:
            raise ProtocolError("a chunk longer than its size")


def _line(data: bytes, at: int) -> tuple[bytes | None, int]:
    """The line starting at ``at`` without its CRLF or LF, and where the next starts (None:
    it has not ended yet)."""
    end = data.find(b"\n", at)
    if end < 0:
        return None, at
    return data[at:end].rstrip(b"\r"), end + 1
