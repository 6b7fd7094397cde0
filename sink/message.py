"""Raw RFC 5322 bytes -> facts about a message (pure, and never raises on any input).

``summarize`` reads only the header block: ingest calls it for every SMTP message, so it is
built for speed (no ``email`` package parser). ``parse`` walks the MIME tree for read_message:
bodies, attachments and the links and codes in them (``sink.extract``).

Mail is hostile input. Every step is linear in the size of the message and bounded:
the MIME walk works on offsets into the one ``raw`` buffer (no copy per nesting level),
stops descending after ``MAX_DEPTH`` levels and ``MAX_PARTS`` parts, and every decoder
falls back instead of raising: unknown charsets, broken base64, missing boundaries.
"""

from __future__ import annotations

import binascii
import codecs
import hashlib
import json
import re
from dataclasses import dataclass, field
from email.message import Message
from html import unescape
from typing import TYPE_CHECKING

from sink.address import Mailbox, parse_from, parse_list

if TYPE_CHECKING:
    from sink.extract import Code

MAX_DEPTH = 50  # multipart nesting followed; deeper parts are ignored
MAX_PARTS = 1000  # MIME parts looked at per message
MAX_HEAD_BYTES = 1 << 20  # of one header block
MAX_FIELDS = 1000  # header fields kept per header block
MAX_VALUE_CHARS = 65536  # of one header value
MAX_ADDRESSES = 1000  # per address header
SUBJECT_MAX_CHARS = 998  # RFC 5322 2.1.1 line limit
FILENAME_MAX_CHARS = 255
# Bumped when what analyse() finds changes: kept analyses of another version are redone.
ANALYSIS_VERSION = 1


@dataclass(frozen=True, slots=True)
class Summary:
    """The header facts ingest stores for every message."""

    subject: str
    from_addr: str  # the first From mailbox's address, parsed strictly ("" when it cannot be)
    to: tuple[str, ...]
    cc: tuple[str, ...]
    date: str | None
    from_name: str | None = None  # its display name, decoded
    warnings: tuple[str, ...] = ()  # what could not be parsed strictly (sink.address)


@dataclass(frozen=True, slots=True)
class Attachment:
    """A MIME part that is not a body: a file, an inline image, a forwarded message."""

    filename: str  # safe to use as a file name: a basename, no control or bidi characters
    content_type: str
    size: int  # of the decoded payload
    sha256: str  # hex, of the decoded payload
    # The name as the mail gives it, decoded (at most 1,024 characters): it may hold bidi or
    # zero-width characters, which MCP answers show as visible escapes, as the web UI does.
    original_filename: str = ""


@dataclass(frozen=True, slots=True)
class ParsedMessage:
    """Everything read_message reports about a message's content."""

    headers: dict[str, list[str]]  # name as first seen -> decoded, sanitised values in order
    subject: str
    from_addr: str
    to: tuple[str, ...]
    cc: tuple[str, ...]
    date: str | None
    text: str | None
    html: str | None
    attachments: tuple[Attachment, ...]
    links: tuple[str, ...]  # best first, see sink.extract.find_links
    codes: tuple[str, ...]  # most likely first, see sink.extract.extract_evidence
    from_name: str | None = None
    parse_warnings: tuple[str, ...] = ()
    codes_detail: tuple[Code, ...] = ()  # the codes with where a person sees each
    hidden_text: str | None = None  # HTML text a reader would not see
    content_flags: tuple[str, ...] = ()  # see sink.flags


@dataclass(frozen=True, slots=True)
class Analysis:
    """What read_message works out from a message's content; kept by the store after the
    first read, so later reads (on any replica) give the same answer without the work."""

    links: tuple[str, ...]
    codes: tuple[Code, ...]
    hidden_text: str | None
    content_flags: tuple[str, ...]

    def to_json(self) -> str:
        return json.dumps(
            {
                "v": ANALYSIS_VERSION,
                "links": list(self.links),
                "codes": [[code.value, list(code.sources)] for code in self.codes],
                "hidden_text": self.hidden_text,
                "content_flags": list(self.content_flags),
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | None) -> Analysis | None:
        """The kept analysis, or None when there is none (or it is of another version, which
        the read then works out and keeps anew)."""
        if not text:
            return None
        from sink.extract import Code  # the analysis's modules load on the first read

        try:
            data = json.loads(text)
            if data.get("v") != ANALYSIS_VERSION:
                return None
            return cls(
                links=tuple(str(link) for link in data["links"]),
                codes=tuple(Code(str(v), tuple(map(str, s))) for v, s in data["codes"]),
                hidden_text=None if data["hidden_text"] is None else str(data["hidden_text"]),
                content_flags=tuple(str(flag) for flag in data["content_flags"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    @classmethod
    def of(cls, parsed: ParsedMessage) -> Analysis:
        return cls(parsed.links, parsed.codes_detail, parsed.hidden_text, parsed.content_flags)


@dataclass(frozen=True, slots=True)
class Part:
    """An attachment with its bytes: for download, and for the cid: images of the HTML."""

    attachment: Attachment
    name: str  # the name as the mail gives it, decoded: may hold bidi or zero-width characters
    content_id: str | None  # without the angle brackets
    payload: bytes


def summarize(raw: bytes) -> Summary:
    """Subject, From, To, Cc and Date from the header block only."""
    try:
        head_end, _ = _head_span(raw, 0, len(raw))
        return _summary(_summary_fields(raw[: min(head_end, MAX_HEAD_BYTES)]))
    except Exception:  # a bug here must not lose mail: ingest stores what it can
        return Summary(subject="", from_addr="", to=(), cc=(), date=None)


def parse(raw: bytes, kept: Analysis | None = None) -> ParsedMessage:
    """The whole message: headers, bodies, attachments, links and codes.

    ``kept`` is the analysis of an earlier parse of the same bytes (the store keeps it from
    the first read): its links, codes, hidden text and flags are taken as they are, not
    worked out again.
    """
    try:
        head_end, body_start = _head_span(raw, 0, len(raw))
        fields = _fields(raw[: min(head_end, MAX_HEAD_BYTES)])
        summary = _summary(fields)
        bodies = _Bodies(scan_budget=_scan_budget(raw))
        _walk(raw, body_start, len(raw), fields, 0, bodies)
        text, html = bodies.text(), bodies.html()
        found = kept or analyse(summary, text, html, tuple(bodies.names))
        return ParsedMessage(
            headers=_headers(fields),
            subject=summary.subject,
            from_addr=summary.from_addr,
            to=summary.to,
            cc=summary.cc,
            date=summary.date,
            text=text,
            html=html,
            attachments=tuple(bodies.attachments),
            links=found.links,
            codes=tuple(code.value for code in found.codes),
            from_name=summary.from_name,
            parse_warnings=summary.warnings,
            codes_detail=found.codes,
            hidden_text=found.hidden_text,
            content_flags=found.content_flags,
        )
    except Exception:  # a bug here must not make a message unreadable: keep the header facts
        summary = summarize(raw)
        return ParsedMessage(
            headers={},
            subject=summary.subject,
            from_addr=summary.from_addr,
            to=summary.to,
            cc=summary.cc,
            date=summary.date,
            text=None,
            html=None,
            attachments=(),
            links=(),
            codes=(),
            from_name=summary.from_name,
            parse_warnings=(*summary.warnings, "the message body could not be parsed"),
        )


def analyse(
    summary: Summary, text: str | None, html: str | None, attachment_names: tuple[str, ...]
) -> Analysis:
    """Links, codes, hidden text and flags: what a person sees in the content, and what not."""
    # Imported here, not at the top: their patterns take ~30 ms to compile, which start-up
    # would pay before the first message is read (bench/startup.py).
    from sink.extract import extract_evidence
    from sink.flags import Content, content_flags, demoted

    evidence = extract_evidence(text, html, summary.subject)
    content = Content(
        subject=summary.subject,
        from_name=summary.from_name,
        text=text,
        html=html,
        visible_html=evidence.visible_html,
        hidden_text=evidence.hidden_text,
        attribute_text=evidence.attribute_text,
        attachment_names=attachment_names,
        codes=evidence.codes,
        link_text_mismatch=evidence.link_text_mismatch,
    )
    flags = content_flags(content)
    codes = demoted(evidence.codes, content) if flags else evidence.codes
    return Analysis(evidence.links, codes, evidence.hidden_text, flags)


def searchable_text(raw: bytes) -> str:
    """The text body and the HTML body rendered as text, for ``body_contains`` matching."""
    try:
        head_end, body_start = _head_span(raw, 0, len(raw))
        bodies = _Bodies(scan_budget=_scan_budget(raw))
        _walk(raw, body_start, len(raw), _fields(raw[: min(head_end, MAX_HEAD_BYTES)]), 0, bodies)
        text, html = bodies.text(), bodies.html()
        if not html:
            return text or ""
        from sink.extract import html_to_text

        return "\n".join(part for part in (text, html_to_text(html)) if part)
    except Exception:  # matching must not fail on a message: it then matches nothing
        return ""


def attachment_parts(raw: bytes) -> tuple[Part, ...]:
    """The attachments of ``parse(raw)``, in the same order, with their decoded bytes."""
    try:
        head_end, body_start = _head_span(raw, 0, len(raw))
        bodies = _Bodies(scan_budget=_scan_budget(raw), kept=[])
        _walk(raw, body_start, len(raw), _fields(raw[: min(head_end, MAX_HEAD_BYTES)]), 0, bodies)
        return tuple(bodies.kept or ())
    except Exception:  # like parse: a message always reads, with what could be found
        return ()


# --- header block ------------------------------------------------------------------------------

_FIELD_NAME = re.compile(r"[!-9;-~]+")  # RFC 5322 2.2: printable US-ASCII except ":"
_CONTROLS = dict.fromkeys([*range(32), *range(127, 160), 0x2028, 0x2029], " ")
_ENCODED_WORD = re.compile(r"=\?([^?\s*]+)(?:\*[^?\s]*)?\?([bBqQ])\?([^?\s]*)\?=")
# "Name <local@domain>" or "local@domain": most From/To values, without the strict tokenizer.
_ADDR_SPEC = r'[^<>\s@",;:()\\]+@[^<>\s@",;:()\\]+'
_SIMPLE_ADDRESS = re.compile(rf'[^<>"(),;:@\\]*<({_ADDR_SPEC})>|({_ADDR_SPEC})')


def _head_span(raw: bytes, start: int, end: int) -> tuple[int, int]:
    """Where the header block at ``start`` ends, and where the body after it begins."""
    if raw.startswith(b"\n", start, end):
        return start, start + 1
    if raw.startswith(b"\r\n", start, end):
        return start, start + 2
    crlf = raw.find(b"\n\r\n", start, end)
    lf = raw.find(b"\n\n", start, crlf + 2 if crlf >= 0 else end)
    if lf >= 0:
        return lf + 1, lf + 2
    if crlf >= 0:
        return crlf + 1, crlf + 3
    return end, end


def _fields(head: bytes, wanted: frozenset[str] | None = None) -> list[tuple[str, str]]:
    """Header fields in order, unfolded (RFC 5322 2.2.3), values not yet decoded.

    With ``wanted`` (lower-case names), other fields are skipped (``_summary_fields``).
    """
    try:
        lines = head.decode("utf-8").split("\n")
    except UnicodeDecodeError:  # 8-bit headers without SMTPUTF8: decode line by line
        lines = [_decode_8bit(line) for line in head.split(b"\n")]
    fields: list[list[str]] = []
    current: list[str] | None = None  # the field that continuation lines belong to
    for line in lines:
        if line.endswith("\r"):
            line = line[:-1]
        if not line:
            continue
        if line[0] in " \t":
            if current is not None:
                current.append(line)
            continue
        name, colon, value = line.partition(":")
        name = name.rstrip(" \t")
        current = None
        if wanted is not None and name.lower() not in wanted:
            continue
        if not colon or not _FIELD_NAME.fullmatch(name):
            continue  # an mbox "From " line, or junk: not a field
        if len(fields) == MAX_FIELDS:
            break
        current = [name, value]
        fields.append(current)
    return [(f[0], "".join(f[1:])[:MAX_VALUE_CHARS].strip()) for f in fields]


_SUMMARY_FIELDS = frozenset({"subject", "from", "to", "cc", "date"})
# One of them at a line start, its value, and the lines folded into it (RFC 5322 2.2.3).
# ASCII-only case folding: str.lower() maps no other character onto these names' letters.
_SUMMARY_FIELD = re.compile(
    r"^(subject|from|to|cc|date)[ \t]*:([^\n]*(?:\n[ \t][^\n]*)*)", re.M | re.I | re.A
)
_LINE_BREAK = re.compile(r"\r?\n")


def _summary_fields(head: bytes) -> list[tuple[str, str]]:
    """``_fields(head, _SUMMARY_FIELDS)``, found by one regex over the block: the same list,
    in a third of the time (ingest summarizes every message). 8-bit and very large blocks
    take ``_fields``, whose line-by-line decoding and value cap this does not repeat."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return _fields(head, _SUMMARY_FIELDS)
    if len(text) > MAX_VALUE_CHARS:  # then a value might need the cap
        return _fields(head, _SUMMARY_FIELDS)
    fields = [
        (name, (_LINE_BREAK.sub("", value) if "\n" in value else value).strip())
        for name, value in _SUMMARY_FIELD.findall(text)
    ]
    return fields[:MAX_FIELDS]


def _summary(fields: list[tuple[str, str]]) -> Summary:
    subject = ""
    from_value: str | None = None
    date: str | None = None
    to: list[str] = []
    cc: list[str] = []
    seen: set[str] = set()
    warnings: list[str] = []
    for name, value in fields:
        key = name.lower()
        if key == "to":
            to += _addresses(value, "To", warnings)
        elif key == "cc":
            cc += _addresses(value, "Cc", warnings)
        elif key in seen:  # the first Subject, From and Date win
            continue
        elif key == "subject":
            subject = _clean(_decode_words(value))[:SUBJECT_MAX_CHARS].strip()
        elif key == "from":
            from_value = value
        elif key == "date":
            date = _clean(value)[:SUBJECT_MAX_CHARS] or None
        seen.add(key)
    sender = _from(from_value)
    if sender.name and from_value and "=?" in from_value:
        warnings += _unknown_charsets(from_value, "From: the display name")
    return Summary(
        subject=subject,
        from_addr=sender.address,
        to=tuple(to),
        cc=tuple(cc),
        date=date,
        from_name=sender.name,
        warnings=(*sender.warnings, *warnings),
    )


def _unknown_charsets(value: str, where: str) -> list[str]:
    """A warning for each charset of the value's encoded words that no codec knows (the text
    is then read as UTF-8, a character it cannot be shown as becoming U+FFFD)."""
    unknown = {
        charset
        for charset, _, _ in _ENCODED_WORD.findall(value)
        if _codec(charset) is None and charset.lower() not in ("us-ascii", "ascii")
    }
    return [
        f"{where} is in an unknown charset {name[:40]!r}; read as UTF-8" for name in sorted(unknown)
    ]


def _from(value: str | None) -> Mailbox:
    """The From mailbox: the usual ``Name <a@b>`` by a regex, anything else strictly."""
    if value is not None:
        value = _no_controls(value).strip()
        simple = _SIMPLE_ADDRESS.fullmatch(value)
        if simple and "=?" not in value and '"' not in value:
            address = simple.group(1) or simple.group(2)
            local, _, domain = address.rpartition("@")
            name = value[: simple.start(1) - 1].strip() if simple.group(1) else ""
            return Mailbox(f"{local}@{domain.lower()}", " ".join(name.split()) or None)
    return parse_from(value, _decode_words)


def _headers(fields: list[tuple[str, str]]) -> dict[str, list[str]]:
    headers: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    for name, value in fields:
        key = names.setdefault(name.lower(), name)
        headers.setdefault(key, []).append(_clean(_decode_words(value)))
    return headers


def _clean(value: str) -> str:
    """Control characters (CR, LF, NUL, TAB...) become spaces; ends stripped."""
    return _no_controls(value).strip()


def _no_controls(value: str) -> str:
    """Control characters (CR, LF, NUL, TAB...) as spaces. Every one of them is unprintable:
    ``isprintable`` (one C pass) spares most values ``translate``'s lookup per character."""
    return value if value.isprintable() else value.translate(_CONTROLS)


def _addresses(value: str, field: str, warnings: list[str]) -> list[str]:
    """A To or Cc value's addresses: the usual forms by a regex, anything else strictly."""
    value = _no_controls(value).strip()
    simple = _SIMPLE_ADDRESS.fullmatch(value)
    if simple and "=?" not in value:
        local, _, domain = (simple.group(1) or simple.group(2)).rpartition("@")
        return [f"{local}@{domain.lower()}"]
    if not value:
        return []
    found, problems = parse_list(value, _decode_words, field)
    warnings.extend(problems)
    return list(found[:MAX_ADDRESSES])


def _decode_words(value: str) -> str:
    """Decode RFC 2047 encoded words; adjacent words share bytes, so decode runs together."""
    if "=?" not in value:
        return value
    out: list[str] = []
    run = bytearray()
    run_charset = ""
    pos = 0
    for match in _ENCODED_WORD.finditer(value):
        gap = value[pos : match.start()]
        if gap and not (run_charset and gap.isspace()):  # space between words is not text
            out.append(_decode_text(bytes(run), run_charset))
            run, run_charset = bytearray(), ""
            out.append(gap)
        charset, encoding, payload = match.groups()
        data = payload.encode("ascii", "ignore")
        decoded = _b64decode(data) if encoding in "bB" else binascii.a2b_qp(data, header=True)
        if run_charset and charset.lower() != run_charset:
            out.append(_decode_text(bytes(run), run_charset))
            run = bytearray()
        run += decoded
        run_charset = charset.lower()
        pos = match.end()
    out.append(_decode_text(bytes(run), run_charset or None))
    out.append(value[pos:])
    return "".join(out)


# --- bytes -> text -----------------------------------------------------------------------------

# Names mailers use that Python's codec registry does not know (or knows as a subset).
_CHARSET_ALIASES = {
    "x-sjis": "shift_jis",
    "shift-jis": "shift_jis",
    "x-euc-jp": "euc_jp",
    "ks_c_5601-1987": "cp949",
    "ks_c_5601": "cp949",
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "windows-874": "cp874",
    "unicode-1-1-utf-8": "utf-8",
    "utf8mb4": "utf-8",
}
# Charsets whose bytes are all ASCII: ASCII-only data is not plain text in these.
_SEVEN_BIT_CHARSETS = frozenset(
    {"iso2022_jp", "iso2022_jp_1", "iso2022_jp_2", "iso2022_jp_2004", "iso2022_jp_3"}
    | {"iso2022_jp_ext", "iso2022_kr", "utf-7", "hz"}
)
# Declared charsets that mislabelled UTF-8 usually hides behind.
_WEAK_CHARSETS = frozenset({"ascii", "iso8859-1", "cp1252"})


def _decode_text(data: bytes, charset: str | None) -> str:
    """Decode a body or word: the declared charset if it fits, else the best fallback."""
    codec = _codec(charset)
    if data.isascii() and codec not in _SEVEN_BIT_CHARSETS:
        return data.decode("ascii")
    if codec is None and charset and charset.strip().lower() not in ("us-ascii", "ascii"):
        return data.decode("utf-8", "replace")  # declared but unknown
    if codec is None or codec in _WEAK_CHARSETS:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
        if codec is None or codec == "ascii":  # 8-bit with no (usable) charset declared
            return data.decode("cp1252", "replace")
    try:
        return data.decode(codec)
    except UnicodeError:
        pass
    try:
        return data.decode(codec, "replace")
    except (UnicodeError, LookupError):  # e.g. idna refuses long labels even with "replace"
        return data.decode("utf-8", "replace")


def _codec(charset: str | None) -> str | None:
    """Python's name for a declared text charset, or None if absent, unknown or not text."""
    if not charset:
        return None
    name = charset.strip().strip("\"'").lower()
    try:
        info = codecs.lookup(_CHARSET_ALIASES.get(name, name))
    except (LookupError, ValueError, TypeError):
        return None
    # "base64", "zlib", "rot13"... are codecs too, but not text encodings (bytes.decode
    # refuses them the same way, through this flag).
    return info.name if getattr(info, "_is_text_encoding", True) else None


def _decode_8bit(line: bytes) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return line.decode("cp1252", "replace")


_NOT_BASE64 = bytes(
    c for c in range(256) if not (chr(c).isascii() and (chr(c).isalnum() or chr(c) in "+/"))
)


def _b64decode(data: bytes) -> bytes:
    """Lenient base64: junk characters are skipped and bad padding is repaired."""
    clean = data.translate(None, _NOT_BASE64)
    extra = len(clean) % 4
    if extra == 1:
        clean = clean[:-1]
    elif extra:
        clean += b"=" * (4 - extra)
    try:
        return binascii.a2b_base64(clean)
    except binascii.Error:  # pragma: no cover - cleaned input always decodes
        return b""


# --- MIME walk ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Bodies:
    texts: list[str] = field(default_factory=list)
    htmls: list[str] = field(default_factory=list)
    attachments: list[Attachment] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # the attachments' names as given, decoded
    parts: int = 0
    scan_budget: int = 0  # bytes multipart splitting may still search through
    kept: list[Part] | None = None  # attachments with their bytes, when asked for

    def text(self) -> str | None:
        return "\n".join(self.texts) if self.texts else None

    def html(self) -> str | None:
        return "\n".join(self.htmls) if self.htmls else None


def _scan_budget(raw: bytes) -> int:
    return 4 * len(raw) + (1 << 20)


def _walk(
    raw: bytes, start: int, end: int, fields: list[tuple[str, str]], depth: int, bodies: _Bodies
) -> None:
    """Collect the bodies and attachments of the entity whose body is raw[start:end]."""
    if bodies.parts >= MAX_PARTS:
        return
    bodies.parts += 1
    heads: dict[str, str] = {}  # the first Content-Type and Content-Disposition
    encoding = ""
    for name, value in fields:
        key = name.lower()
        if key in ("content-type", "content-disposition"):
            heads.setdefault(key, value)
        elif key == "content-transfer-encoding" and not encoding:
            encoding = value.strip().lower()
    simple = None if "content-disposition" in heads else _simple_text(heads.get("content-type"))
    if simple is not None:  # most mail: a text part with no parameter but its charset
        content_type, charset = simple
        payload = _transfer_decoded(raw[start:end], encoding)
        if payload.strip():
            decoded = _decode_text(payload, charset)
            (bodies.texts if content_type == "text/plain" else bodies.htmls).append(decoded)
        return
    info = Message()  # only for its Content-Type/-Disposition parameter parsing (RFC 2231)
    for key, value in heads.items():
        info[key] = value
    content_type = info.get_content_type()
    if content_type.startswith("multipart/"):
        # Each level searches its whole span for its boundary, so nesting costs depth x size;
        # the budget (a few times the message) keeps a deeply nested 25 MB message linear.
        if depth >= MAX_DEPTH or bodies.scan_budget < end - start:
            return
        bodies.scan_budget -= end - start
        spans = _split_multipart(raw, start, end, info.get_boundary() or "")
        if spans is not None:
            for part_start, part_end in spans:
                head_end, body_start = _head_span(raw, part_start, part_end)
                head = raw[part_start : min(head_end, part_start + MAX_HEAD_BYTES)]
                _walk(raw, body_start, part_end, _fields(head), depth + 1, bodies)
            return
        content_type = "text/plain"  # no delimiter anywhere: the body is all there is
    payload = _transfer_decoded(raw[start:end], encoding)
    filename = info.get_filename()
    disposition = info.get_content_disposition()
    if content_type in ("text/plain", "text/html") and not filename and disposition != "attachment":
        if payload.strip():
            decoded = _decode_text(payload, info.get_content_charset())
            (bodies.texts if content_type == "text/plain" else bodies.htmls).append(decoded)
        return
    name = _decode_words(filename or "")
    attachment = Attachment(
        filename=safe_filename(name),
        content_type=content_type,
        size=len(payload),
        sha256=hashlib.sha256(payload).hexdigest(),
        original_filename=name[:1024],
    )
    bodies.attachments.append(attachment)
    if name:
        bodies.names.append(name[:1024])
    if bodies.kept is not None:
        content_id = next((v for n, v in fields if n.lower() == "content-id"), None)
        cid = content_id.strip().strip("<>").strip() if content_id else None
        bodies.kept.append(Part(attachment, name, cid or None, payload))


# ``text/plain``, ``text/html; charset=utf-8``, ``text/plain; charset="ISO-8859-1"``: read
# here, without ``email.message.Message``'s parameter parser (RFC 2231), to the same result.
_SIMPLE_TEXT = re.compile(
    r"[ \t]*text/(plain|html)[ \t]*"
    r'(?:;[ \t]*charset[ \t]*=[ \t]*("?)([A-Za-z0-9_.:+-]+)\2[ \t]*;?[ \t]*)?',
    re.IGNORECASE,
)


def _simple_text(content_type: str | None) -> tuple[str, str | None] | None:
    """(type, charset) of a Content-Type naming text/plain or text/html and at most a
    charset; None for anything else (``Message`` parses it). No Content-Type is text/plain
    (RFC 2045 5.2)."""
    if content_type is None:
        return "text/plain", None
    match = _SIMPLE_TEXT.fullmatch(content_type)
    if match is None:
        return None
    charset = match.group(3)
    return "text/" + match.group(1).lower(), charset.lower() if charset else None


def _transfer_decoded(payload: bytes, encoding: str) -> bytes:
    if encoding == "base64":
        return _b64decode(payload)
    if encoding == "quoted-printable":
        return binascii.a2b_qp(payload)
    return payload


def _split_multipart(
    raw: bytes, start: int, end: int, boundary: str
) -> list[tuple[int, int]] | None:
    """The spans of the parts between boundary delimiters (RFC 2046 5.1.1), or None."""
    marker = ("--" + boundary).encode("utf-8", "replace") if boundary else b""
    delimiters = _delimiters(raw, start, end, marker) if marker else []
    if not delimiters:  # the declared boundary is wrong or missing: trust the first "--" line
        marker = _sniff_boundary(raw, start, end)
        delimiters = _delimiters(raw, start, end, marker) if marker else []
    if not delimiters:
        return None
    spans: list[tuple[int, int]] = []
    for (_, body_start, closing), (line_start, _, _) in zip(
        delimiters, [*delimiters[1:], (end, end, True)], strict=True
    ):
        if closing:
            break
        part_end = line_start
        # the line break before a delimiter belongs to the delimiter
        if part_end > body_start and raw[part_end - 1 : part_end] == b"\n":
            part_end -= 1
            if part_end > body_start and raw[part_end - 1 : part_end] == b"\r":
                part_end -= 1
        spans.append((body_start, part_end))
        if len(spans) >= MAX_PARTS:
            break
    return spans or None


def _delimiters(raw: bytes, start: int, end: int, marker: bytes) -> list[tuple[int, int, bool]]:
    """Delimiter lines as (line start, next line start, closing), up to the closing one."""
    # A delimiter is a whole line: "\n--boundary", optional "--", optional blanks, end of line.
    # The leading "\n" gives the regex a literal prefix, so lines that merely start like
    # one ("--boundary-2", spam) cost no Python.
    line = re.compile(b"\n" + re.escape(marker) + rb"(--)?[ \t]*(?:\r?\n|\r?\Z)")
    from_ = start - 1 if start > 0 and raw[start - 1 : start] == b"\n" else start
    found: list[tuple[int, int, bool]] = []
    for match in line.finditer(raw, from_, end):
        closing = match.group(1) is not None
        found.append((match.start() + 1, match.end(), closing))
        if closing or len(found) > MAX_PARTS:
            break
    return found


_FIRST_DELIMITER = re.compile(rb"(?m)^--([^\s]{1,200}?)(?:--)?[ \t]*\r?$")


def _sniff_boundary(raw: bytes, start: int, end: int) -> bytes:
    match = _FIRST_DELIMITER.search(raw, start, min(end, start + 8192))
    return b"--" + match.group(1) if match else b""


# --- attachment names --------------------------------------------------------------------------

# Control characters, and the bidi controls that make "exe.pdf" read as "fdp.exe" (CVE-2021-42574).
_UNSAFE_IN_NAMES = dict.fromkeys(
    [
        *range(32),
        *range(127, 160),
        0x061C,
        *range(0x200B, 0x2010),  # zero-width space, non-joiner, joiner; LRM, RLM
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        0x2028,
        0x2029,
        0x2060,  # word joiner
        0xFEFF,
    ]
)
_DRIVE = re.compile(r"^[A-Za-z]:")


def safe_filename(name: str) -> str:
    """A name safe to save an attachment under: a plain basename of at most 255 characters."""
    name = name.translate(_UNSAFE_IN_NAMES).replace("\\", "/")
    name = _DRIVE.sub("", name.rsplit("/", 1)[-1]).strip()
    if not name.strip("."):
        return "attachment"
    if len(name) > FILENAME_MAX_CHARS:
        stem, dot, suffix = name.rpartition(".")
        if dot and stem and 0 < len(suffix) <= 16:
            name = stem[: FILENAME_MAX_CHARS - len(suffix) - 1].rstrip() + "." + suffix
        else:
            name = name[:FILENAME_MAX_CHARS].rstrip()
    return name


# --- the search index's view of a message --------------------------------------------------

SEARCH_BODY_MAX_CHARS = 32_000  # of text indexed per message (the text, then the HTML as text)


@dataclass(frozen=True, slots=True)
class SearchFields:
    """What the search index holds of a message: literal text, lower-cased by the index."""

    subject: str
    body: str  # the text part and the HTML rendered as text
    sender: str  # the From header as written (display name and address), decoded
    recipients: str  # the To and Cc headers as written, decoded
    has_attachment: bool


def search_fields(raw: bytes) -> SearchFields:
    """One MIME walk: subject, text, sender, recipients, and whether it has attachments."""
    try:
        head_end, body_start = _head_span(raw, 0, len(raw))
        fields = _fields(raw[: min(head_end, MAX_HEAD_BYTES)])
        summary = _summary(fields)
        bodies = _Bodies(scan_budget=_scan_budget(raw))
        _walk(raw, body_start, len(raw), fields, 0, bodies)
        text, html = bodies.text(), bodies.html()
        body = "\n".join(part for part in (text, _html_words(html) if html else None) if part)
        named = {"from": [], "to": [], "cc": []}  # type: dict[str, list[str]]
        for name, value in fields:
            if name.lower() in named:
                named[name.lower()].append(_clean(_decode_words(value)))
        return SearchFields(
            subject=summary.subject,
            body=body[:SEARCH_BODY_MAX_CHARS],
            sender=" ".join(named["from"])[:4096],
            recipients=" ".join(named["to"] + named["cc"])[:65536],
            has_attachment=bool(bodies.attachments),
        )
    except Exception:  # indexing must not lose mail: index what the summary has
        summary = summarize(raw)
        return SearchFields(summary.subject, "", summary.from_addr, " ".join(summary.to), False)


_INVISIBLE = re.compile(r"<(script|style|head)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")
_SPACES = re.compile(r"\s+")


def _html_words(html: str) -> str:
    """The HTML's visible words for the index: tags out, entities decoded. A cheap cousin of
    ``html_to_text`` (which ranks links and keeps layout): ingest pays for this one."""
    text = _TAG.sub(" ", _INVISIBLE.sub(" ", html[: SEARCH_BODY_MAX_CHARS * 4]))
    return _SPACES.sub(" ", unescape(text)).strip()
