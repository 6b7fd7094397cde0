"""What the web UI's search box means: the API's search language, read as a person means it.

The box takes every term of ``GET /v1/messages?query=`` (sink/search.py) and searches
delivered and caught mail alike, with two differences, both for someone typing rather than
a program:

- a word or phrase without a key looks in the addresses and display names too (the API's
  free words look in the subject and text only, as its contract says): ``gamil.com`` finds
  mail to ``x@gamil.com``;
- a text term under 3 characters, which the trigram index cannot look up, is left out and
  the page says so, rather than refusing the whole search.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sink.search import (
    MIN_TEXT_CHARS,
    RECIPIENTS,
    SENDER,
    SUBJECT_AND_TEXT,
    Query,
    SearchSyntaxError,
    parse_skipping_short,
)

EVERYWHERE = (*SUBJECT_AND_TEXT, *SENDER, *RECIPIENTS)


@dataclass(frozen=True, slots=True)
class BoxQuery:
    query: Query | None  # None: nothing to search for
    left_out: tuple[str, ...]  # terms too short to look up, as typed
    problem: str | None  # why the query cannot be read (the language's own words)


def read_box(text: str) -> BoxQuery:
    try:
        parsed, short = parse_skipping_short(text)
    except SearchSyntaxError as exc:
        return BoxQuery(None, (), str(exc))
    if not parsed.texts and not parsed.filters:
        return BoxQuery(None, short, None)
    texts = tuple(
        replace(t, columns=EVERYWHERE) if t.columns == SUBJECT_AND_TEXT else t for t in parsed.texts
    )
    return BoxQuery(Query(texts, parsed.filters), short, None)


def left_out_note(left_out: tuple[str, ...]) -> str:
    shown = ", ".join(repr(term) for term in left_out)
    return (
        f"Left out {shown}: a word needs {MIN_TEXT_CHARS} or more characters (the index is of "
        '3-character pieces). Put it in a longer phrase, such as "is ok".'
    )
