"""What a reader of a mail's HTML cannot see (sink/visibility.py)."""

from __future__ import annotations

import pytest

from sink.visibility import PAGE, css_rules, declarations, hidden_selectors, hides, hiding


@pytest.mark.parametrize(
    "style",
    [
        "display:none",
        "DISPLAY : None !important",
        "visibility:hidden",
        "font-size:0",
        "font-size:0.5px",
        "opacity:0",
        "max-height:0;overflow:hidden",
        "position:absolute;left:-9999px",
        "text-indent:-10000px",
        "margin-left:-3000px",
        "position:absolute;clip:rect(0 0 0 0)",
        "mso-hide:all",
    ],
)
def test_these_declarations_hide(style: str) -> None:
    """Each way of keeping text from a reader is recognised, whatever its case or spacing."""
    assert hides(declarations(style))


@pytest.mark.parametrize(
    "style",
    ["display:block", "font-size:14px", "opacity:0.9", "max-height:0", "left:-9999px", ""],
)
def test_these_declarations_do_not_hide(style: str) -> None:
    """Ordinary styles (and a zero height that does not clip) hide nothing."""
    assert not hides(declarations(style))


def test_text_coloured_like_its_background_is_hidden() -> None:
    """White on the white page, or #111 on rgb(17,17,17), hides; white on blue does not."""
    assert hiding("span", {"style": "color:#FFF"}, PAGE, set(), set())[0]
    assert hiding("span", {"style": "color:#111"}, "#111111", set(), set())[0]
    hidden, background = hiding("td", {"bgcolor": "#1a73e8"}, PAGE, set(), set())
    assert not hidden and background == "#1a73e8"
    assert not hiding("a", {"style": "color:#ffffff"}, background, set(), set())[0]
    # an image behind the text: its colour is not known, so nothing is taken as hidden
    _, unknown = hiding("td", {"style": "background:url(x.png)"}, PAGE, set(), set())
    assert unknown is None and not hiding("p", {"style": "color:#fff"}, unknown, set(), set())[0]


def test_style_sheets_hide_by_class_and_id_outside_media_rules() -> None:
    """Top-level rules count; rules inside @media (one kind of screen) and unclosed ones do not."""
    css = (
        ".pre, #note { display: none } p.x { color: red }"
        "@media (max-width:600px) { .desktop { display:none } } .open { display:none"
    )
    assert hidden_selectors(css) == ({"pre"}, {"note"})
    assert [selectors for selectors, _ in css_rules(css)] == [".pre, #note", "p.x"]
