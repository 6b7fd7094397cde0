"""Reading an HTTP/1.x answer off a connection as common clients read it (``http.py``'s).

    head = await read_head(conn)            # (status, version, fields); 1xx skipped
    keep = await drop_body(conn, *head)     # whether the connection can carry another

Lines may end in CRLF or a bare LF, empty lines before the status line are skipped, a
204 or 304 has no body, a body is framed by ``Transfer-Encoding: chunked``, else by
``Content-Length``, else by the close. The head is found in what one read brought (a
search, not a read per line): the bytes after it wait in ``Connection.rest``.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

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
    until: float | None = None  # the loop time reads end by (TimeoutError), if any

    async def read(self) -> bytes:
        """What the peer sends next (b"" at its close)."""
        if self.until is None:
            return await self.reader.read(_READ)
        async with asyncio.timeout_at(self.until):
            return await self.reader.read(_READ)

    async def fill(self) -> None:
        """Add what the peer sends next to ``rest`` (IncompleteReadError at its close)."""
        chunk = await self.read()
        if not chunk:
            raise asyncio.IncompleteReadError(self.rest, None)
        self.rest += chunk

    async def line(self) -> bytes:
        """The next line, without its CRLF or LF."""
        while (end := self.rest.find(b"\n")) < 0:
            if len(self.rest) > HEAD_MAX:
                raise ProtocolError("a line too long")
            await self.fill()
        line, self.rest = self.rest[:end], self.rest[end + 1 :]
        return line.rstrip(b"\r")

    async def skip(self, size: int) -> None:
        while len(self.rest) < size:
            await self.fill()
        self.rest = self.rest[size:]


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


async def drop_body(conn: Connection, status: int, version: str, fields: dict[str, str]) -> bool:
    """Read the answer's body and drop it; whether the connection can be used again."""
    connection = fields.get("connection", "").lower()
    closing = "close" in connection or (version == "HTTP/1.0" and "keep-alive" not in connection)
    if status in (204, 304):
        kept = not closing  # no body, whatever the fields say (RFC 9112, 6.3)
    elif (coding := fields.get("transfer-encoding")) is not None:
        if coding.lower().rpartition(",")[2].strip() != "chunked":
            return await _to_close(conn)
        kept = await _chunked(conn) and not closing
    else:
        length = fields.get("content-length", "")
        if "," in length:  # the field repeated: one length, or an unknown end
            lengths = {n.strip() for n in length.split(",")}
            length = lengths.pop() if len(lengths) == 1 else "?"
        if not length:
            return await _to_close(conn)  # no length: the body runs to the close
        if not (length.isascii() and length.isdigit()) or int(length) > BODY_MAX:
            return False
        await conn.skip(int(length))
        kept = not closing
    return kept and not conn.rest  # (anything sent past the answer: not ours to read)


async def _chunked(conn: Connection) -> bool:
    seen = 0
    while True:
        size_text = (await conn.line()).split(b";")[0].strip()
        if not _CHUNK_SIZE.fullmatch(size_text):
            raise ProtocolError("not a chunk size")
        size = int(size_text, 16)
        if size == 0:
            while await conn.line():
                pass  # trailer fields, up to the empty line that ends the message
            return True
        seen += size
        if seen > BODY_MAX:
            return False
        await conn.skip(size)
        if await conn.line():
            raise ProtocolError("a chunk longer than its size")


async def _to_close(conn: Connection) -> bool:
    """A body that ends with its connection: read (up to ``BODY_MAX``) to the close."""
    seen = len(conn.rest)
    while seen <= BODY_MAX and (chunk := await conn.read()):
        seen += len(chunk)
    return False
