"""The search language (sink/search.py): pure parsing, no store."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sink.search import (
    RECIPIENTS,
    SENDER,
    SUBJECT,
    SUBJECT_AND_TEXT,
    Filter,
    SearchSyntaxError,
    Text,
    parse_query,
    parse_skipping_short,
)
from sink.storage.sqlite.fts import fts_any, fts_expression, trigrams


def test_words_and_phrases_are_literal_texts_in_subject_and_body() -> None:
    """Free words and "quoted phrases" look in the subject and the text, as written."""
    query = parse_query('reset "your code is"  Welcome')
    assert query.texts == (
        Text(SUBJECT_AND_TEXT, "reset"),
        Text(SUBJECT_AND_TEXT, "your code is"),
        Text(SUBJECT_AND_TEXT, "Welcome"),
    )
    assert query.filters == ()


def test_keys_pick_the_column() -> None:
    """to:/cc:/bcc:/addressed: are recipients, from: the sender, subject: the subject."""
    query = parse_query('to:someone@gmail.com cc:boss from:Acme subject:"Your order"')
    assert query.texts == (
        Text(RECIPIENTS, "someone@gmail.com"),
        Text(RECIPIENTS, "boss"),
        Text(SENDER, "Acme"),
        Text(SUBJECT, "Your order"),
    )


def test_negation_applies_to_texts_and_filters() -> None:
    """A leading - negates one term; a lone - is text."""
    query = parse_query("-newsletter -is:caught -from:spam.example")
    assert query.texts == (
        Text(SUBJECT_AND_TEXT, "newsletter", negated=True),
        Text(SENDER, "spam.example", negated=True),
    )
    assert query.filters == (Filter("is", "caught", negated=True),)
    assert query.negative_texts == query.texts and query.positive_texts == ()


def test_filters_parse_their_values() -> None:
    """run:, inbox:, is:, has:, before:/after: (epoch s, UTC), larger:/smaller: (bytes)."""
    query = parse_query(
        "run:ci-1842 inbox:ib_abcdefghijklmnopqrst is:Unclaimed has:attachment "
        "before:2026-12-01 after:2026-12-01T10:30:00Z larger:10k smaller:1MiB"
    )
    midnight = datetime(2026, 12, 1, tzinfo=UTC).timestamp()
    assert query.filters == (
        Filter("run", "ci-1842"),
        Filter("inbox", "ib_abcdefghijklmnopqrst"),
        Filter("is", "unclaimed"),
        Filter("has", "attachment"),
        Filter("before", midnight),
        Filter("after", midnight + 10.5 * 3600),
        Filter("larger", 10_000),
        Filter("smaller", 1024 * 1024),
    )


def test_offsets_and_naive_times() -> None:
    """A date-time with an offset is converted; one without is UTC."""
    with_offset = parse_query("after:2026-12-01T12:00:00+02:00").filters[0].value
    naive = parse_query("after:2026-12-01T10:00:00").filters[0].value
    assert with_offset == naive


def test_unknown_keys_are_plain_text() -> None:
    """https://app.test or 10:30 are text, not filters."""
    query = parse_query("https://app.test/verify at:10:30")
    assert [t.value for t in query.texts] == ["https://app.test/verify", "at:10:30"]


def test_literal_values_never_become_fts_syntax() -> None:
    """Each text is folded and cut into trigrams, each one FTS5 string: quotes are doubled,
    and *, ^, NEAR, OR stay text inside them."""
    query = parse_query("NEAR* ^abc AND")
    assert fts_expression(query.texts) == (
        '{subject body} : ("nea" AND "ar*") AND {subject body} : ("^ab" AND "abc") '
        'AND {subject body} : ("and")'
    )
    either = fts_any((Text(SENDER, 'x"y z'), Text(SUBJECT, "OR")))
    assert either == 'sender : ("x""y" AND "y z") OR subject : ("or")'


@pytest.mark.parametrize(
    ("needle", "grams"),
    [
        ("abc", ["abc"]),
        ("abcd", ["abc", "bcd"]),
        ("abcdef", ["abc", "def"]),
        ("abcdefg", ["abc", "def", "efg"]),
        ("aaaaaa", ["aaa"]),
        ("strasse", ["str", "ass", "sse"]),
    ],
)
def test_trigrams_cover_every_character_once_each(needle: str, grams: list[str]) -> None:
    assert trigrams(needle) == grams
    covered: set[int] = set()
    for gram in grams:
        start = needle.find(gram)
        while start != -1:
            covered.update(range(start, start + 3))
            start = needle.find(gram, start + 1)
    assert covered == set(range(len(needle)))


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("ab", "3 or more characters"),
        ("to:x", "3 or more characters"),
        ('"unclosed phrase', "not closed"),
        ('"phrase"glued', "space after"),
        ("is:read", "is: takes"),
        ("has:inline", "has: takes"),
        ("run:b@d", "run id"),
        ("inbox:nope", "inbox id"),
        ("before:yesterday", "ISO date"),
        ("larger:big", "size"),
        ("x" * 513, "over 512"),
        (" ".join(["word"] * 33), "over 32 terms"),
        ("abc\x00def", "control character \\(U\\+0000\\)"),
        ("tag:billing", "tag: is not searchable"),  # Mailpit's terms runsink cannot answer
        ("message-id:abc123", "message-id: is not searchable"),
        ("-reply-to:someone", "reply-to: is not searchable"),
        ("abc\x1b", "control character"),
    ],
)
def test_bad_queries_say_which_term_and_why(query: str, needle: str) -> None:
    """Each refusal names the term and the rule."""
    with pytest.raises(SearchSyntaxError, match=needle):
        parse_query(query)


def test_the_empty_query_lists_everything() -> None:
    """No terms: every entry matches."""
    query = parse_query("   ")
    assert query.texts == () and query.filters == ()


def test_skipping_short_leaves_out_short_text_terms_as_written() -> None:
    """The lenient parse drops text terms under 3 characters and names them; the strict one
    still refuses them, and other errors stay errors."""
    query, skipped = parse_skipping_short('ok -to:ab invoice is:caught "x"')
    assert skipped == ("ok", "-to:ab", "x")
    assert query.texts == (Text(SUBJECT_AND_TEXT, "invoice"),)
    assert query.filters == (Filter("is", "caught"),)
    with pytest.raises(SearchSyntaxError, match="3 or more"):
        parse_query("ok invoice")
    with pytest.raises(SearchSyntaxError, match="is: takes"):
        parse_skipping_short("ok is:nope")
