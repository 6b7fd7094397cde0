"""What a reader of a mail's HTML cannot see: hidden elements, style sheets, colours (pure).

``sink.extract``'s renderer asks ``hiding`` about every element it opens; text inside one
that hides is no source of codes or links (it is reported apart, as hidden text). What
hides all an element holds: ``display:none``, ``opacity:0``, a zero height or width with
``overflow:hidden``, off-screen positions and indents, the ``hidden`` attribute, classes
and ids a top-level ``<style>`` rule hides. What hides text until a descendant sets it
again, as CSS inherits it (``Seen``): ``visibility:hidden``, a zero font size (email
templates zero it on a column and size the text inside), and text coloured like the
background it sits on (mail is read on white unless it paints another). Every function is
linear in its input and never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PAGE = "#ffffff"  # mail is read on white unless it says otherwise
ALIKE = 8  # text whose colour is this close to its background's, in each channel, is unseen
_SIMPLE_SELECTOR = re.compile(r"(?:[a-z][a-z0-9]*)?([.#])([\w-]+)", re.IGNORECASE)
OFF_SCREEN = 500  # pixels (or any unit) left of or above the page: not on any screen
_CLIPPED_AWAY = re.compile(r"rect\(\s*0(?:px)?[\s,]+0(?:px)?[\s,]+0(?:px)?[\s,]+0(?:px)?\s*\)")
_LENGTH = re.compile(r"(-?[0-9]*\.?[0-9]+)\s*([a-z%]*)")
_NAMED_COLOURS = {
    "white": "#ffffff", "black": "#000000", "red": "#ff0000", "green": "#008000",
    "blue": "#0000ff", "yellow": "#ffff00", "gray": "#808080", "grey": "#808080",
    "silver": "#c0c0c0", "whitesmoke": "#f5f5f5", "snow": "#fffafa", "ivory": "#fffff0",
    "transparent": "transparent",
}  # fmt: skip
_RGB = re.compile(
    r"rgba?\(\s*([0-9.]+)%?\s*[, ]\s*([0-9.]+)%?\s*[, ]\s*([0-9.]+)%?"
    r"\s*(?:[,/]\s*([0-9.]+%?))?\s*\)"
)


def hidden_selectors(css: str) -> tuple[set[str], set[str]]:
    """The classes and ids a ``<style>`` block hides (its top-level rules; not those of
    @media, which hide things on one kind of screen only), lower-cased."""
    classes: set[str] = set()
    ids: set[str] = set()
    for selectors, body in css_rules(css[:65536]):
        if not hides(declarations(body)):
            continue
        for selector in selectors.split(","):
            found = _SIMPLE_SELECTOR.fullmatch(selector.strip())
            if found:
                (classes if found.group(1) == "." else ids).add(found.group(2).lower())
    return classes, ids


def css_rules(css: str) -> list[tuple[str, str]]:
    """The top-level rules of a style sheet as (selectors, declarations), in one pass: the
    rules inside ``@media`` (or any other block) are left out, as is anything unclosed."""
    rules: list[tuple[str, str]] = []
    depth = 0
    start = 0  # where the current selectors (or @-prelude) begin
    opened = 0  # where the current top-level block's body begins
    nested = False
    for position, char in enumerate(css):
        if char == "{":
            if depth == 0:
                opened = position + 1
                nested = False
            else:
                nested = True
            depth += 1
        elif char == "}" and depth:
            depth -= 1
            if depth == 0:
                selectors = css[start : opened - 1].strip()
                if not nested and not selectors.startswith("@"):
                    rules.append((selectors, css[opened:position]))
                start = position + 1
    return rules


def declarations(style: str) -> dict[str, str]:
    """The declarations in a style attribute or rule body (its first 4 KiB): names and values
    lower-cased, values without ``!important``; a repeated name keeps its last value."""
    found: dict[str, str] = {}
    for declaration in style[:4096].split(";"):
        name, colon, value = declaration.partition(":")
        if colon:
            value = value.lower().replace("!important", "").strip()
            found[name.strip().lower()] = value
    return found


@dataclass(frozen=True, slots=True)
class Seen:
    """What an element passes on to what it holds, which a descendant may set again: the
    colour behind its text (None: not known, an image), the text's colour (None: the
    default, or one not known), a zero font size, ``visibility: hidden``."""

    background: str | None = PAGE
    ink: str | None = None
    tiny: bool = False
    invisible: bool = False

    @property
    def unseen(self) -> bool:
        """Whether text with these properties is kept from a reader."""
        return self.tiny or self.invisible or _alike(self.ink, self.background)


PAGE_SEEN = Seen()


def hiding(
    tag: str,
    attrs: dict[str, str],
    outer: Seen,
    hidden_classes: set[str],
    hidden_ids: set[str],
) -> tuple[bool, Seen]:
    """Whether an element hides all it holds (nothing inside can show again), and what it
    passes on (``Seen``: whether its own text is seen, which a descendant may change)."""
    style = declarations(attrs.get("style", "")) if "style" in attrs else {}
    painted = attrs.get("bgcolor") or style.get("background-color") or style.get("background")
    background = outer.background
    if painted and _background(painted) != "transparent":
        background = _background(painted)
    ink = style.get("color") or (attrs.get("color") if tag == "font" else None)
    inherited_ink = None if tag == "a" and "href" in attrs else outer.ink  # the link colour
    size = style.get("font-size")
    visibility = style.get("visibility")
    seen = Seen(
        background=background,
        ink=_colour(ink) if ink else inherited_ink,
        tiny=outer.tiny if size is None else _tiny(size, outer.tiny),
        invisible=outer.invisible if visibility is None else visibility in _INVISIBLE,
    )
    if tag == "font" and attrs.get("size", "").strip() in ("0", "-7"):
        seen = Seen(seen.background, seen.ink, True, seen.invisible)
    if "hidden" in attrs or _hides_all(style):
        return True, seen
    if hidden_classes and any(c in hidden_classes for c in attrs.get("class", "").lower().split()):
        return True, seen
    if hidden_ids and attrs.get("id", "").lower() in hidden_ids:
        return True, seen
    return False, seen


_INVISIBLE = ("hidden", "collapse")
_RELATIVE = ("em", "%", "ex", "ch")  # font sizes relative to the enclosing one


def _tiny(size: str, inside_tiny: bool) -> bool:
    """Whether a font-size declaration makes text too small to see (a size relative to a
    zero one stays zero)."""
    found = _LENGTH.match(size.strip())
    if found is None:
        return inside_tiny
    try:
        value = float(found.group(1))
    except ValueError:
        return inside_tiny
    if found.group(2) in _RELATIVE:
        return inside_tiny or value == 0
    return value < 1


def _alike(ink: str | None, background: str | None) -> bool:
    """Whether text of colour ``ink`` on ``background`` is unseen: transparent, or within
    ``ALIKE`` of it in each channel."""
    if ink == "transparent":
        return True
    if ink is None or background is None or background == "transparent":
        return False
    return all(
        abs(int(ink[i : i + 2], 16) - int(background[i : i + 2], 16)) <= ALIKE for i in (1, 3, 5)
    )


def hides(style: dict[str, str]) -> bool:
    """Whether these declarations keep an element's text from being seen (as a class rule
    says them: for whatever the element holds)."""
    if not style:
        return False
    if style.get("visibility") in _INVISIBLE:
        return True
    size = style.get("font-size")
    return (size is not None and _tiny(size, False)) or _hides_all(style)


def _hides_all(style: dict[str, str]) -> bool:
    """Whether these declarations hide all an element holds, whatever is set inside it."""
    if not style:
        return False
    if style.get("display") == "none" or style.get("mso-hide") == "all":
        return True
    if _length(style.get("opacity")) == 0:
        return True
    clipped = style.get("overflow") == "hidden"
    if clipped and any(_length(style.get(k)) == 0 for k in ("max-height", "height", "width")):
        return True
    if style.get("position") in ("absolute", "fixed"):
        for side in ("left", "top", "right"):
            offset = _length(style.get(side))
            if offset is not None and offset <= -OFF_SCREEN:
                return True
        if _CLIPPED_AWAY.match(style.get("clip", "")):  # rect(0 0 0 0): screen-reader text
            return True
    for pushed in ("text-indent", "margin-left", "margin-top"):
        offset = _length(style.get(pushed))
        if offset is not None and offset <= -OFF_SCREEN:
            return True
    return False


def _length(value: str | None) -> float | None:
    """A CSS length or number in pixels' terms (units ignored but the sign and zero)."""
    if not value:
        return None
    found = _LENGTH.match(value.strip())
    if found is None:
        return None
    try:
        return float(found.group(1))
    except ValueError:
        return None


def _background(value: str) -> str | None:
    """The colour a background declaration paints, or None (an image, or unknown)."""
    if "url(" in value:
        return None
    for token in re.split(r"\s+(?![^(]*\))", value.strip()):
        colour = _colour(token)
        if colour is not None:
            return colour
    return None


def _colour(value: str) -> str | None:
    """A CSS colour as "#rrggbb" (or "transparent"); None when it is not one we know."""
    value = value.strip().lower()
    if value in _NAMED_COLOURS:
        return _NAMED_COLOURS[value]
    if re.fullmatch(r"#[0-9a-f]{3}", value):
        return "#" + "".join(c * 2 for c in value[1:])
    if re.fullmatch(r"#[0-9a-f]{6}", value):
        return value
    if re.fullmatch(r"#[0-9a-f]{8}", value):
        return "transparent" if value[7:] == "00" else value[:7]
    found = _RGB.fullmatch(value)
    if found:
        alpha = found.group(4)
        if alpha is not None and float(alpha.rstrip("%") or 0) == 0:
            return "transparent"
        try:
            channels = [min(255, round(float(found.group(i)))) for i in (1, 2, 3)]
        except ValueError:
            return None
        return "#" + "".join(f"{c:02x}" for c in channels)
    return None
