"""Mailpit's ``Snippet``: the start of a message's words, on one line.

Built as Mailpit builds it (``internal/tools/snippets.go`` and its ``html2text``): from the
HTML when there is any (text outside script, style, title, head and noscript, with block
ends, ``<br>`` and images as spaces), else from the text; whitespace runs become one space;
at most 200 bytes of UTF-8, cut at a character boundary and followed by ``...``.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

LIMIT_BYTES = 200

# Go's RE2 \s: ASCII whitespace only (a no-break space is not collapsed in text).
_SPACES = re.compile(r"[\t\n\f\r ]+")
_BLOCK_END = re.compile(
    r"</(div|p|td|th|h[1-6]|ul|ol|li|address|article|aside|blockquote|dl|dt|footer|header|hr"
    r"|main|nav|pre|table|thead|tfoot|video)><",
    re.IGNORECASE,
)
_BREAK = re.compile(r"<(br /|br)>", re.IGNORECASE)
_IMAGE = re.compile(r"<(img)", re.IGNORECASE)
_UNSEEN = frozenset({"script", "style", "title", "head", "noscript"})


def snippet(text: str | None, html: str | None) -> str:
    html = (html or "").strip()
    if html:
        return _cut(_collapse(_printable(_html_words(html))))
    text = (text or "").strip()
    if text:
        return _cut(_collapse(text))
    return ""


def _html_words(html: str) -> str:
    html = _BLOCK_END.sub(r"</\1> <", html)
    html = _BREAK.sub(" ", html)
    html = _IMAGE.sub(r" <\1", html)
    words = _Words()
    words.feed(html)
    words.close()
    return "".join(words.found)


class _Words(HTMLParser):
    """The text nodes of a document, outside the elements a reader never sees."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._unseen = 0  # depth inside elements whose text is not shown

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _UNSEEN:
            self._unseen += 1
        elif tag == "body":  # a head left open ends here, as an HTML parser ends it
            self._unseen = 0

    def handle_endtag(self, tag: str) -> None:
        if tag in _UNSEEN and self._unseen:
            self._unseen -= 1

    def handle_data(self, data: str) -> None:
        if not self._unseen:
            self.found.append(data)


def _printable(text: str) -> str:
    # str.isprintable is Go's unicode.IsPrint: no controls, format characters or spaces
    # but U+0020 (a no-break space becomes a plain one).
    return text if text.isprintable() else "".join(c if c.isprintable() else " " for c in text)


def _collapse(text: str) -> str:
    return _SPACES.sub(" ", text.replace("\ufeff", " ")).strip()


def _cut(text: str) -> str:
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= LIMIT_BYTES:
        return text
    end = LIMIT_BYTES
    while end > 0 and data[end - 1] & 0xC0 == 0x80:  # inside a character: back to its start
        end -= 1
    if end > 0 and data[end - 1] & 0xC0 == 0xC0:  # and drop the character begun there
        end -= 1
    return data[:end].decode("utf-8", "surrogatepass") + "..."
