"""Address headers parsed strictly (RFC 5322 3.4): From's mailbox, To's and Cc's lists.

Agents decide on ``from``, so an address is taken only from where RFC 5322 puts it: inside
the angle brackets of ``name-addr``, or a bare ``addr-spec``. The display name is a phrase of
words (atoms, quoted strings, RFC 2047 encoded-words) and is decoded on its own; nothing in it
can become the address. ``=?utf-8?q?a@app.test?= <victim@x.test>`` is the address
``victim@x.test`` shown as "a@app.test" (a lenient parser reads the encoded-word's ``@`` as an
address and reports the display text as the sender).

What cannot be parsed strictly is not guessed at: the address is then empty (in To and Cc,
left out) and a warning says why. Pure, linear in the value's length, never raises.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from dataclasses import dataclass


def ascii_and_beyond(allowed: str, *, surrogates: bool = True) -> str:
    """A character class: the ``allowed`` ASCII characters and every non-ASCII one (without
    lone surrogates unless ``surrogates``), written as its complement: the same set, but
    ``re`` takes tens of milliseconds to compile a class that reaches U+10FFFF, and a few
    such classes were most of the server's start-up time spent in regexes."""
    refused = "".join(re.escape(chr(c)) for c in range(128) if chr(c) not in allowed)
    lone_surrogates = "" if surrogates else r"\ud800-\udfff"
    return f"[^{refused}{lone_surrogates}]"


_LETTERS_DIGITS = string.ascii_letters + string.digits
# RFC 5322 3.2.3 atext, plus RFC 6532 3.2's UTF8-non-ascii (mail sent with SMTPUTF8).
_ATEXT = ascii_and_beyond(_LETTERS_DIGITS + "!#$%&'*+/=?^_`{|}~-")
_DOT_ATOM = re.compile(rf"{_ATEXT}+(?:\.{_ATEXT}+)*")
_DOMAIN_LITERAL = re.compile(r"\[[!-Z^-~ \t]*\]")  # dtext: printable ASCII but [ ] \
_QUOTED_LOCAL = re.compile(r'"(?:[^"\\\r\n]|\\.)*"')
# RFC 2047 2: an encoded-word has no spaces and no "?" inside its text.
_ENCODED_WORD = re.compile(r"=\?[^?\s]+\?[bBqQ]\?[^?\s]*\?=")
# An atom-ish run: anything up to whitespace or a special. "." is allowed (obs-phrase, and
# dot-atoms); "@" is kept in the run so a bare addr-spec stays one token.
_RUN = re.compile(r'[^\s()<>\[\]:;,"\\]+')
_SPACE = re.compile(r"\s+")

MAX_NAME_CHARS = 256


@dataclass(frozen=True, slots=True)
class Mailbox:
    """The first mailbox of a From value."""

    address: str  # "" when none could be parsed strictly (see ``warnings``)
    name: str | None  # the decoded display name, None when there is none
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # word, quoted, encoded, comment, angle, comma, special
    text: str
    spaced: bool  # whitespace came before it


class _Malformed(Exception):
    pass


def parse_from(value: str | None, decode_words: Callable[[str], str]) -> Mailbox:
    """The first mailbox of a From value (``None``: no From header).

    ``decode_words`` decodes the RFC 2047 encoded-words of a string (``sink.message``'s).
    """
    if value is None:
        return Mailbox("", None, ("From: the message has no From header",))
    try:
        tokens = _tokens(value)
    except _Malformed as exc:
        return Mailbox("", None, (f"From: {exc}; no address taken",))
    mailboxes = _split(tokens)
    if not mailboxes or not mailboxes[0]:
        return Mailbox("", None, ("From: empty; no address taken",))
    warnings: list[str] = []
    try:
        address, name = _mailbox(mailboxes[0], decode_words, warnings)
    except _Malformed as exc:
        return Mailbox("", None, (f"From: {exc}; no address taken",))
    if len(mailboxes) > 1:
        warnings.append(f"From: {len(mailboxes)} mailboxes; `from` is the first")
    return Mailbox(address, name, tuple(warnings))


def parse_list(
    value: str, decode_words: Callable[[str], str], field: str = "To"
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Every address of a To or Cc value, parsed as strictly as From, and the warnings.

    Groups (``Team: a@x, b@x;``, ``undisclosed-recipients:;``) give their members. A mailbox
    that cannot be parsed strictly is left out, and a warning says so.
    """
    try:
        tokens = _tokens(value)
    except _Malformed as exc:
        return (), (f"{field}: {exc}; no address taken",)
    addresses: list[str] = []
    skipped = 0
    for chunk in _split_groups(tokens):
        try:
            address, _ = _mailbox(chunk, decode_words, [])
        except _Malformed:
            skipped += 1
            continue
        addresses.append(address)
    warnings = (f"{field}: {skipped} entries are not valid addresses; left out",) if skipped else ()
    return tuple(addresses), warnings


def _split_groups(tokens: list[_Token]) -> list[list[_Token]]:
    """Mailboxes of an address list: commas and group ends split, group names dropped."""
    chunks: list[list[_Token]] = [[]]
    for token in tokens:
        if token.kind == "comma" or (token.kind == "special" and token.text == ";"):
            chunks.append([])
        elif token.kind == "special" and token.text == ":":
            chunks[-1] = []  # what came before was the group's display name
        else:
            chunks[-1].append(token)
    return [c for c in chunks if any(t.kind != "comment" for t in c)]


def _tokens(value: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos, end = 0, len(value)
    while pos < end:
        space = _SPACE.match(value, pos)
        spaced = space is not None
        if space is not None:
            pos = space.end()
            if pos == end:
                break
        char = value[pos]
        if char == "(":
            text, pos = _comment(value, pos)
            tokens.append(_Token("comment", text, spaced))
        elif char == '"':
            text, pos = _quoted(value, pos)
            tokens.append(_Token("quoted", text, spaced))
        elif char == "<":
            close = value.find(">", pos)
            if close < 0:
                raise _Malformed("an unclosed <")
            tokens.append(_Token("angle", value[pos + 1 : close], spaced))
            pos = close + 1
        elif char == ",":
            tokens.append(_Token("comma", ",", spaced))
            pos += 1
        elif (word := _ENCODED_WORD.match(value, pos)) is not None and _ends_word(value, word):
            tokens.append(_Token("encoded", word.group(), spaced))
            pos = word.end()
        elif (run := _RUN.match(value, pos)) is not None:
            # A domain literal may follow "@" in a bare addr-spec: keep it in the word.
            text, pos = run.group(), run.end()
            if text.endswith("@") and (literal := _DOMAIN_LITERAL.match(value, pos)):
                text, pos = text + literal.group(), literal.end()
            tokens.append(_Token("word", text, spaced))
        else:
            tokens.append(_Token("special", char, spaced))
            pos += 1
    return tokens


def _ends_word(value: str, word: re.Match[str]) -> bool:
    """An encoded-word is a word of its own only when whitespace or a special follows it."""
    following = value[word.end() : word.end() + 1]
    return following == "" or following.isspace() or following in '(<,"'


def _comment(value: str, pos: int) -> tuple[str, int]:
    depth, out, i = 0, [], pos
    while i < len(value):
        char = value[i]
        if char == "\\" and i + 1 < len(value):
            out.append(value[i + 1])
            i += 2
            continue
        if char == "(":
            depth += 1
            if depth > 1:
                out.append(char)
        elif char == ")":
            depth -= 1
            if depth == 0:
                return "".join(out), i + 1
            out.append(char)
        else:
            out.append(char)
        i += 1
    raise _Malformed("an unclosed comment")


def _quoted(value: str, pos: int) -> tuple[str, int]:
    out, i = [], pos + 1
    while i < len(value):
        char = value[i]
        if char == "\\" and i + 1 < len(value):
            out.append(value[i + 1])
            i += 2
            continue
        if char == '"':
            return "".join(out), i + 1
        out.append(char)
        i += 1
    raise _Malformed("an unclosed quoted string")


def _split(tokens: list[_Token]) -> list[list[_Token]]:
    mailboxes: list[list[_Token]] = [[]]
    for token in tokens:
        if token.kind == "comma":
            mailboxes.append([])
        else:
            mailboxes[-1].append(token)
    return [m for m in mailboxes if any(t.kind != "comment" for t in m)] or [[]]


def _mailbox(
    tokens: list[_Token], decode_words: Callable[[str], str], warnings: list[str]
) -> tuple[str, str | None]:
    angles = [i for i, t in enumerate(tokens) if t.kind == "angle"]
    if len(angles) > 1:
        raise _Malformed("more than one <address> in one mailbox")
    if angles:
        at = angles[0]
        phrase = tokens[:at]
        after = [t for t in tokens[at + 1 :] if t.kind != "comment"]
        if after:
            raise _Malformed("text after the <address>")
        address = _addr_spec(_strip_route(tokens[at].text.strip()))
        if any(t.kind == "special" or (t.kind == "word" and "@" in t.text) for t in phrase):
            # The address stands (it is in its brackets); the name is shown as written.
            warnings.append("From: the display name has an @ or a special character outside quotes")
        return address, _display_name(phrase, decode_words)
    # No angle brackets: a bare addr-spec, with comments around it (an obsolete name).
    words = [t for t in tokens if t.kind != "comment"]
    if len(words) == 1 and words[0].kind == "word":
        text = words[0].text
    elif (
        len(words) == 2
        and words[0].kind == "quoted"
        and words[1].kind == "word"
        and words[1].text.startswith("@")
        and not words[1].spaced
    ):
        text = _quote(words[0].text) + words[1].text
    else:
        raise _Malformed("not an address: expected local@domain or Name <local@domain>")
    comments = [t.text for t in tokens if t.kind == "comment"]
    name = _clean(" ".join(c for c in comments if c.strip())) or None
    return _addr_spec(text), name


def _strip_route(inner: str) -> str:
    """RFC 5322 4.4 obs-route: ``<@relay1,@relay2:local@domain>`` keeps only the address."""
    if inner.startswith("@") and ":" in inner:
        return inner.rpartition(":")[2].strip()
    return inner


def _addr_spec(text: str) -> str:
    local, at, domain = text.rpartition("@")
    if not at or not local or not domain:
        raise _Malformed("no local@domain address")
    local_ok = _DOT_ATOM.fullmatch(local) or _QUOTED_LOCAL.fullmatch(local)
    domain_ok = _DOT_ATOM.fullmatch(domain) or _DOMAIN_LITERAL.fullmatch(domain)
    if not local_ok or not domain_ok:
        raise _Malformed("the address is not a valid local@domain")
    return f"{local}@{domain.lower()}"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _display_name(phrase: list[_Token], decode_words: Callable[[str], str]) -> str | None:
    parts: list[str] = []
    previous = ""
    for token in phrase:
        if token.kind == "comment":
            continue
        if token.kind == "encoded":
            text = decode_words(token.text)
            # RFC 2047 6.2: whitespace between adjacent encoded-words is not displayed.
            if token.spaced and parts and previous != "encoded":
                parts.append(" ")
        else:
            text = decode_words(token.text) if "=?" in token.text else token.text
            if token.spaced and parts:
                parts.append(" ")
        parts.append(text)
        previous = token.kind
    return _clean("".join(parts)) or None


_CONTROLS = dict.fromkeys([*range(32), *range(127, 160), 0x2028, 0x2029], " ")


def _clean(text: str) -> str:
    return " ".join(text.translate(_CONTROLS).split())[:MAX_NAME_CHARS]
