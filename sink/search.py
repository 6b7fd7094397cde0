"""The search language (pure): a query string -> terms, and the terms' FTS5 expression.

Terms are ANDed and case-insensitive; ``-term`` negates one. Text terms are literal
substrings (never patterns, never stemmed: ``gmail`` does not match ``gamil.com``)::

    reset "your code"        words and phrases, in the subject or the text
    subject:welcome          in the subject
    from:acme                in the sender's address or display name (and the envelope's)
    to:someone@gmail.com     in a recipient's address or display name (cc:, bcc:, addressed:
                             are the same as to:, as in Mailpit)
    run:ci-1842 inbox:ib_x   one run's, one inbox's deliveries
    is:caught is:claimed is:unclaimed has:attachment
    before:2026-12-01 after:2026-12-01T10:00:00Z   (received; ISO date or date-time, UTC)
    larger:10k smaller:2MB   (message size; k/M/G are 1000s, KiB/MiB/GiB 1024s)

The index holds 3-character substrings (SQLite FTS5's trigram tokenizer), so every text
term needs 3 or more characters; a shorter one is refused rather than answered by a scan.
A ``key:value`` whose key is not one of the above is plain text (``https://app.test``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime

from sink.ids import INBOX_ID, RUN_ID

MAX_QUERY_CHARS = 512  # percent-encoded, it still fits the 8 KiB request target
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # C0 controls but tab, LF, CR; DEL
MAX_TERMS = 32
MIN_TEXT_CHARS = 3  # the trigram index cannot answer shorter substrings


class SearchSyntaxError(ValueError):
    """A query the language does not allow; the message says which term and why."""


class ShortTextTerm(SearchSyntaxError):
    """A text term shorter than the index can look up (``MIN_TEXT_CHARS``)."""


# Where a text term looks (the columns of the full-text index).
BODY = "body"
SUBJECT_AND_TEXT = ("subject", BODY)
SUBJECT = ("subject",)
SENDER = ("sender",)
RECIPIENTS = ("rcpts",)

_TEXT_KEYS: dict[str, tuple[str, ...]] = {
    "subject": SUBJECT,
    "from": SENDER,
    "to": RECIPIENTS,
    "cc": RECIPIENTS,
    "bcc": RECIPIENTS,
    "addressed": RECIPIENTS,
}
_IS_VALUES = ("caught", "claimed", "unclaimed")
_HAS_VALUES = ("attachment",)


@dataclass(frozen=True, slots=True)
class Text:
    """A literal substring, in the given columns of the index."""

    columns: tuple[str, ...]
    value: str
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Filter:
    """A condition on indexed columns: ``kind`` is run, inbox, is, has, before, after,
    larger or smaller; ``value`` a string, an epoch second (before/after) or bytes."""

    kind: str
    value: str | float | int
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Query:
    texts: tuple[Text, ...] = ()
    filters: tuple[Filter, ...] = ()

    @property
    def positive_texts(self) -> tuple[Text, ...]:
        return tuple(t for t in self.texts if not t.negated)

    @property
    def negative_texts(self) -> tuple[Text, ...]:
        return tuple(t for t in self.texts if t.negated)


def parse_query(query: str) -> Query:
    """The terms of ``query``; ``SearchSyntaxError`` names the first term that is wrong."""
    parsed, _ = _parse(query, skip_short=False)
    return parsed


def parse_skipping_short(query: str) -> tuple[Query, tuple[str, ...]]:
    """As ``parse_query``, but a text term too short for the index is left out and returned,
    as written, rather than refused (a person's search box answers with the rest)."""
    return _parse(query, skip_short=True)


def _parse(query: str, skip_short: bool) -> tuple[Query, tuple[str, ...]]:
    if len(query) > MAX_QUERY_CHARS:
        raise SearchSyntaxError(f"the query is over {MAX_QUERY_CHARS} characters")
    control = _CONTROL.search(query)
    if control is not None:
        # Neither store can look one up (SQLite's FTS5 strings end at a NUL; PostgreSQL
        # text holds none): bad input, never a provider error.
        code = ord(control.group())
        raise SearchSyntaxError(f"the query holds a control character (U+{code:04X})")
    tokens = _tokens(query)
    if len(tokens) > MAX_TERMS:
        raise SearchSyntaxError(f"the query has over {MAX_TERMS} terms")
    texts: list[Text] = []
    filters: list[Filter] = []
    skipped: list[str] = []
    for negated, key, value, quoted in tokens:
        try:
            term = _term(negated, key, value, quoted)
        except ShortTextTerm:
            if not skip_short:
                raise
            skipped.append(f"{'-' if negated else ''}{key + ':' if key else ''}{value}")
            continue
        if isinstance(term, Text):
            texts.append(term)
        else:
            filters.append(term)
    return Query(tuple(texts), tuple(filters)), tuple(skipped)


def folded(text: str) -> str:
    """The form the index stores a text in, and a text term is looked up in: case folded
    (``casefold``: ``Straße`` is ``strasse``, ``ÉCOLE`` is ``école``), so that matching is
    case-insensitive in every script, and exact (a case-sensitive substring of a folded
    text)."""
    return text.casefold()


def texts_match(texts: tuple[Text, ...], document: dict[str, str], released: bool = False) -> bool:
    """The texts' verdict on one document (column -> text), as the index would give it:
    literal, case-insensitive substrings; a negated text must be in none of its columns.
    A ``released`` entry (evidence whose body was released) has no body to match, even
    while the same message's caught mail keeps it."""
    for text in texts:
        needle = folded(text.value)
        columns = [c for c in text.columns if not (released and c == "body")]
        found = any(needle in folded(document.get(column, "")) for column in columns)
        if found == text.negated:
            return False
    return True


# -- terms -------------------------------------------------------------------------------

Token = tuple[bool, str | None, str, bool]  # negated, key (lower) or None, value, quoted


def _tokens(query: str) -> list[Token]:
    """Split on whitespace outside double quotes; ``-`` and ``key:`` prefixes kept apart."""
    tokens: list[Token] = []
    i, n = 0, len(query)
    while i < n:
        if query[i].isspace():
            i += 1
            continue
        negated = False
        if query[i] == "-" and i + 1 < n and not query[i + 1].isspace():
            negated = True
            i += 1
        key: str | None = None
        found = _KEY.match(query, i)
        if found is not None:
            key = found.group(1).lower()
            i = found.end()
        if i < n and query[i] == '"':
            end = query.find('"', i + 1)
            if end < 0:
                raise SearchSyntaxError(f"a quote is not closed: {query[i:][:40]!r}")
            value, quoted = query[i + 1 : end], True
            i = end + 1
            if i < n and not query[i].isspace():
                raise SearchSyntaxError(
                    f"put a space after the closing quote of {query[:i][-40:]!r}"
                )
        else:
            start = i
            while i < n and not query[i].isspace():
                i += 1
            value, quoted = query[start:i], False
        tokens.append((negated, key, value, quoted))
    return tokens


_KEY = re.compile(r"([A-Za-z][A-Za-z-]{0,15}):(?=\S)")


def _term(negated: bool, key: str | None, value: str, quoted: bool) -> Text | Filter:
    shown = f"{'-' if negated else ''}{key + ':' if key else ''}{value}"
    if key in _NOT_SEARCHED:
        # Mailpit's terms for what runsink does not keep: an error, not an empty answer.
        raise SearchSyntaxError(f"{shown!r}: {key}: is not searchable here ({_NOT_SEARCHED[key]})")
    if key is not None and key not in _TEXT_KEYS and key not in _FILTER_KEYS:
        # Not one of ours: the whole token is text (a URL, a time "10:30", "re:").
        value = f"{key}:{value}" if not quoted else f'{key}:"{value}"'
        key = None
    if key is None or key in _TEXT_KEYS:
        columns = SUBJECT_AND_TEXT if key is None else _TEXT_KEYS[key]
        if len(value.strip()) < MIN_TEXT_CHARS:
            raise ShortTextTerm(
                f"{shown!r}: a text term needs {MIN_TEXT_CHARS} or more characters "
                "(the index is of 3-character substrings)"
            )
        return Text(columns, value, negated)
    return _filter(key, value, negated, shown)


_NOT_SEARCHED = {
    "tag": "runsink has no tags; run: and is:caught say what a tag would",
    "message-id": "the Message-ID header is not indexed; search its subject or text",
    "reply-to": "the Reply-To header is not indexed; search from: or to:",
}


def _filter(key: str, value: str, negated: bool, shown: str) -> Filter:
    lowered = value.lower()
    if key == "run":
        if not RUN_ID.fullmatch(value):
            raise SearchSyntaxError(f"{shown!r}: a run id is 1-128 chars of A-Za-z0-9._:-")
        return Filter("run", value, negated)
    if key == "inbox":
        if not INBOX_ID.fullmatch(lowered):
            raise SearchSyntaxError(f"{shown!r}: not an inbox id (ib_...)")
        return Filter("inbox", lowered, negated)
    if key == "is":
        if lowered not in _IS_VALUES:
            raise SearchSyntaxError(f"{shown!r}: is: takes {', '.join(_IS_VALUES)}")
        return Filter("is", lowered, negated)
    if key == "has":
        if lowered not in _HAS_VALUES:
            raise SearchSyntaxError(f"{shown!r}: has: takes {', '.join(_HAS_VALUES)}")
        return Filter("has", lowered, negated)
    if key in ("before", "after"):
        return Filter(key, _instant(value, shown), negated)
    if key in ("larger", "smaller"):
        return Filter(key, _bytes(value, shown), negated)
    raise AssertionError(key)  # pragma: no cover - _FILTER_KEYS and the branches agree


_FILTER_KEYS = frozenset({"run", "inbox", "is", "has", "before", "after", "larger", "smaller"})


def _instant(value: str, shown: str) -> float:
    """An ISO date (midnight UTC) or date-time (UTC when it names no offset) as epoch s."""
    text = value.strip()
    try:
        if len(text) == 10:
            return datetime.combine(date.fromisoformat(text), datetime.min.time(), UTC).timestamp()
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise SearchSyntaxError(
            f"{shown!r}: expected an ISO date (2026-12-01) or date-time (2026-12-01T10:00:00Z)"
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


_SIZE = re.compile(r"(\d{1,12}(?:\.\d{1,3})?)\s*([kmg]i?b?|b)?", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9}


def _bytes(value: str, shown: str) -> int:
    found = _SIZE.fullmatch(value.strip())
    if found is None:
        raise SearchSyntaxError(f"{shown!r}: expected a size such as 500, 10k, 2MB or 1MiB")
    number, unit = found.group(1), (found.group(2) or "").lower()
    scale = 1024 ** " kmg".index(unit[0]) if "i" in unit else _UNITS[unit[:1]]
    return int(float(number) * scale)
