"""Mailpit's Snippet, made as Mailpit makes it (api/snippet.py)."""

from __future__ import annotations

from api.snippet import snippet


def test_html_wins_and_shows_only_what_a_reader_sees() -> None:
    """From the HTML when there is any: no head, title, style or script; blocks spaced."""
    html = (
        "<html><head><title>Title</title><style>p {color: red}</style></head><body>"
        "<div>One</div><div>Two</div><p>Three<br>Four<img src=x>Five</p>"
        "<script>alert(1)</script><noscript>no</noscript>&amp; six</body></html>"
    )
    assert snippet("the text part", html) == "One Two Three Four Five & six"


def test_a_head_left_open_ends_at_the_body() -> None:
    """An unclosed <head> does not hide the whole body."""
    assert snippet(None, "<head><title>x</title><body>Hello") == "Hello"


def test_text_whitespace_collapses_to_one_line() -> None:
    """Without HTML: the text, its runs of ASCII whitespace as one space, trimmed."""
    assert snippet("  Hello,\r\n\r\n\tworld \ufeff!  ", None) == "Hello, world !"
    assert snippet("a\u00a0b", None) == "a\u00a0b"  # Go's \s is ASCII: kept in text
    assert snippet("a\u00a0b", "") == "a\u00a0b"
    assert snippet(None, "a\u00a0b") == "a b"  # in HTML, unprintable characters are spaces


def test_empty_without_words() -> None:
    """No text and no HTML: an empty snippet."""
    assert snippet(None, None) == "" and snippet("  \n", "  ") == ""


def test_at_most_200_bytes_cut_before_the_character_at_the_cut() -> None:
    """Over 200 bytes of UTF-8: cut back to a character start, drop the one begun, add ..."""
    assert snippet("a" * 200, None) == "a" * 200
    assert snippet("a" * 201, None) == "a" * 200 + "..."
    # 'é' is two bytes: 199 a's and an é end at byte 201; the cut at 200 falls inside it.
    assert snippet("a" * 199 + "é", None) == "a" * 199 + "..."
    # A two-byte character ending exactly at byte 200 is dropped too, as Mailpit drops it.
    assert snippet("a" * 198 + "éz", None) == "a" * 198 + "..."
    assert snippet("€" * 100, None) == "€" * 66 + "..."
