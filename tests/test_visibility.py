"""What a reader of a mail's HTML cannot see (sink/visibility.py)."""

from __future__ import annotations

import pytest

from sink.visibility import (
    PAGE_SEEN,
    Seen,
    css_rules,
    declarations,
    hidden_selectors,
    hides,
    hiding,
)


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
    """White on the white page, or #111 on rgb(17,17,17), is unseen; white on blue is not."""
    assert hiding("span", {"style": "color:#FFF"}, PAGE_SEEN, set(), set())[1].unseen
    dark = Seen(background="#111111")
    assert hiding("span", {"style": "color:#111"}, dark, set(), set())[1].unseen
    hidden, button = hiding("td", {"bgcolor": "#1a73e8"}, PAGE_SEEN, set(), set())
    assert not hidden and button.background == "#1a73e8"
    assert not hiding("a", {"style": "color:#ffffff"}, button, set(), set())[1].unseen
    # an image behind the text: its colour is not known, so nothing is taken as hidden
    _, unknown = hiding("td", {"style": "background:url(x.png)"}, PAGE_SEEN, set(), set())
    assert unknown.background is None
    assert not hiding("p", {"style": "color:#fff"}, unknown, set(), set())[1].unseen


def test_what_a_child_sets_again_shows_and_what_hides_all_does_not() -> None:
    """A zero font size, visibility:hidden and a colour are inherited until a child sets
    them again; display:none hides all its element holds."""
    _, zeroed = hiding("td", {"style": "font-size:0px"}, PAGE_SEEN, set(), set())
    assert zeroed.unseen
    assert not hiding("div", {"style": "font-size:13px"}, zeroed, set(), set())[1].unseen
    assert hiding("span", {"style": "font-size:1.2em"}, zeroed, set(), set())[1].unseen
    _, invisible = hiding("div", {"style": "visibility:hidden"}, PAGE_SEEN, set(), set())
    assert not hiding("b", {"style": "visibility:visible"}, invisible, set(), set())[1].unseen
    hidden_for_good, _ = hiding("div", {"style": "display:none"}, PAGE_SEEN, set(), set())
    assert hidden_for_good


def test_style_sheets_hide_by_class_and_id_outside_media_rules() -> None:
    """Top-level rules count; rules inside @media (one kind of screen) and unclosed ones do not."""
    css = (
        ".pre, #note { display: none } p.x { color: red }"
        "@media (max-width:600px) { .desktop { display:none } } .open { display:none"
    )
    assert hidden_selectors(css) == ({"pre"}, {"note"})
    assert [selectors for selectors, _ in css_rules(css)] == [".pre, #note", "p.x"]
