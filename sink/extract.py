"""Evidence in a message body: its text, its links and its one-time codes (pure).

This is what an agent finishing a sign-up or password-reset flow reads, so the order of the
answers matters as much as the answers: the link to click and the code to type come first.
Everything here is heuristic, standard library only, and bounded: hostile or enormous bodies
are looked at up to ``MAX_SCAN_CHARS`` and never make a function raise.

Only what a person sees counts (issue 21): HTML text hidden from a reader
(``sink/visibility.py``) is set apart as hidden text, zero-width characters are read as
absent and right-to-left overrides as the order they show; and a decoy in the subject cannot
outrank the body's code (a code in both ranks first, then the body's, then the subject's).
"""

from __future__ import annotations

import binascii
import itertools
import re
from bisect import bisect_left
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit

from sink.visibility import PAGE_SEEN, Seen, hidden_selectors, hiding

# Transactional mail is small (Gmail clips HTML at 102 KB); a body this long is not one, and
# html.parser costs microseconds per tag, so extraction looks at this much and no more.
MAX_SCAN_CHARS = 256 * 1024
MAX_CODE_SCAN_CHARS = 200_000  # codes sit near the top; Gmail clips a message at 102 KB
MAX_LINKS = 200
MAX_CODES = 20
MAX_URL_CHARS = 8192
MAX_CANDIDATES = 2000  # numbers looked at per source; a body with more is a report, not a code
MAX_LINK_OCCURRENCES = 2000  # hrefs and text URLs looked at per message


CODE_SOURCES = ("subject", "text", "html")  # where a code was seen; "html" is its visible text
MAX_HIDDEN_CHARS = 16_000  # of hidden HTML text reported (hidden_text)


@dataclass(frozen=True, slots=True)
class Code:
    """A likely one-time code and where a person sees it: "subject", "text", "html"."""

    value: str
    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Evidence:
    """Links and codes a person sees in one message, best first, and what they cannot see."""

    links: tuple[str, ...]
    codes: tuple[Code, ...]
    hidden_text: str | None = None  # HTML text a reader would not see (never a source)
    visible_html: str | None = None  # the HTML as a reader sees it, as text
    link_text_mismatch: bool = False  # a link's text is a URL on another host than its target
    attribute_text: str = ""  # alt, title and aria-label texts: shown when images are not


def html_to_text(html: str) -> str:
    """Render HTML as plain text: no script/style, block elements on their own lines."""
    return _render(html).text


def find_links(text: str | None, html: str | None) -> tuple[str, ...]:
    """Absolute http(s) URLs from hrefs and text, deduplicated, action links first."""
    return _rank_links(_as_seen(text), _render(html) if html else None)


def find_codes(text: str | None, html: str | None, subject: str = "") -> tuple[str, ...]:
    """Likely one-time codes, most likely first ("123 456" comes back as "123456")."""
    rendered = _render(html).text if html else None
    return tuple(code.value for code in _rank_codes(_as_seen(text), rendered, _as_seen(subject)))


def extract_evidence(text: str | None, html: str | None, subject: str = "") -> Evidence:
    """Links and codes from what a person sees, rendering the HTML once.

    Codes seen in the subject and the body come first, then codes seen only in the body,
    then codes seen only in the subject (a subject is the easiest place for a decoy).
    Hidden HTML text (``display:none``, white on white...) is reported apart, never used.
    """
    rendered = _render(html) if html else None
    seen_text = _as_seen(text)
    return Evidence(
        links=_rank_links(seen_text, rendered),
        codes=_rank_codes(seen_text, rendered.text if rendered else None, _as_seen(subject)),
        hidden_text=rendered.hidden or None if rendered else None,
        visible_html=rendered.text if rendered else None,
        link_text_mismatch=rendered is not None and _mismatched(rendered.anchors),
        attribute_text=rendered.attributes if rendered else "",
    )


_RLO_SPAN = re.compile("\u202e([^\u202c\n]*)\u202c?")


def _as_seen(text: str | None) -> str | None:
    """Text as a person sees it: no zero-width characters, right-to-left overrides applied
    ("\u202e319284\u202c" is read as 482913)."""
    if not text:
        return text
    text = text.translate(_INVISIBLE)
    if "\u202e" in text:
        text = _RLO_SPAN.sub(lambda m: m.group(1)[::-1], text)
    return text


# --- HTML rendering ---------------------------------------------------------------------------

_SKIP = frozenset({"script", "style", "title", "template", "xml"})
_BLOCK = frozenset(
    {
        "address", "article", "aside", "blockquote", "br", "center", "dd", "div", "dl", "dt",
        "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6",
        "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section", "table", "tbody",
        "tfoot", "thead", "tr", "ul",
    }
)  # fmt: skip
_CELL = frozenset({"td", "th"})
_SOURCE_BREAKS = dict.fromkeys(map(ord, "\r\n\t\f"), " ")
# Invisible padding that marketing mail puts in its preheader (zero-width joiners, soft hyphens).
_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u034f\u200b\u200c\u200d\u2060\ufeff"))
_TAG_OPEN = re.compile(r"</?[A-Za-z]")
_QUOTES_BALANCED = re.compile(r"""(?:[^"']|"[^"]*"|'[^']*')*""")


_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
     "source", "track", "wbr"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Anchor:
    url: str
    label: str  # the anchor's text, alt and title: what the link says it is
    image: bool
    text: str = ""  # the anchor's own visible text


@dataclass(frozen=True, slots=True)
class _Rendered:
    text: str
    anchors: tuple[_Anchor, ...]
    hidden: str = ""  # the text a reader would not see
    attributes: str = ""  # alt, title and aria-label texts


@dataclass(slots=True)
class _Open:
    tag: str
    hides: bool  # all it holds, whatever is set inside it
    seen: Seen  # what it passes on (colours, font size, visibility), which may be set again


class _Renderer(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.pieces: list[str] = []
        self.hidden_pieces: list[str] = []
        self.anchors: list[_Anchor] = []
        self.attributes: list[str] = []
        self._skip = 0
        self._pre = 0
        self._href: str | None = None
        self._label: list[str] = []
        self._text: list[str] = []
        self._pictured = False  # the open link holds an image
        self._unseen_text = False  # the open link holds text a reader would not see
        self._open: list[_Open] = []
        self._hiding = 0  # open elements that hide all they hold
        self._style: list[str] | None = None  # a <style> block being read
        self._hidden_classes: set[str] = set()
        self._hidden_ids: set[str] = set()

    def _unseen(self) -> bool:
        """Whether a reader would not see the text that comes now."""
        return bool(self._hiding) or (bool(self._open) and self._open[-1].seen.unseen)

    def _gone(self) -> bool:
        """Whether a reader would see nothing at all here, images included (an image shows
        whatever the text's size or colour)."""
        return bool(self._hiding) or (bool(self._open) and self._open[-1].seen.invisible)

    def _out(self) -> list[str]:
        return self.hidden_pieces if self._unseen() else self.pieces

    def handle_starttag(
        self, tag: str, attrs: list[tuple[str, str | None]], closed: bool = False
    ) -> None:
        if tag in _SKIP:
            self._skip += 1
            if tag == "style" and self._skip == 1 and not closed:
                self._style = []
        if self._skip:
            return
        values = {name: value or "" for name, value in attrs}
        outer = self._open[-1].seen if self._open else PAGE_SEEN
        hides, seen = hiding(tag, values, outer, self._hidden_classes,
                             self._hidden_ids)  # fmt: skip
        if tag not in _VOID and not closed:
            self._open.append(_Open(tag, hides, seen))
            self._hiding += hides
        elif hides or seen.invisible:  # an <img hidden>: nothing of it is seen
            return
        if tag in _BLOCK:
            self._out().append("\n")
            self._pre += tag == "pre"
        elif tag in _CELL:
            self._out().append(" ")
        if self._gone():  # links and images nobody sees are no evidence
            return
        for name in ("alt", "title", "aria-label"):
            if values.get(name) and len(self.attributes) < 1000:
                self.attributes.append(values[name][:1000])
        if tag in ("a", "area"):
            self._close_anchor()
            if values.get("href"):
                self._href = values["href"]
                self._label = [values.get("title", ""), values.get("aria-label", "")]
                if tag == "area":
                    self._label.append(values.get("alt", ""))
                    self._close_anchor()
        elif tag == "img":
            alt = values.get("alt", "")
            if self._href is not None:
                self._label.append(alt)
                self._pictured = True
            if values.get("src"):
                self.anchors.append(_Anchor(values["src"], alt, image=True))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _SKIP:  # "<script/>" opens nothing
            self.handle_starttag(tag, attrs, closed=True)

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self._skip = max(0, self._skip - 1)
            if tag == "style" and self._style is not None:
                classes, ids = hidden_selectors("".join(self._style))
                self._hidden_classes |= classes
                self._hidden_ids |= ids
                self._style = None
            return
        if self._skip:
            return
        if tag == "a":
            self._close_anchor()
        elif tag in _BLOCK:
            self._out().append("\n")
            if tag == "pre":
                self._pre = max(0, self._pre - 1)
        for depth in range(len(self._open) - 1, max(-1, len(self._open) - 64), -1):
            if self._open[depth].tag == tag:  # close it and whatever was left open inside
                for element in self._open[depth:]:
                    self._hiding -= element.hides
                del self._open[depth:]
                break

    def handle_data(self, data: str) -> None:
        if self._skip:
            if self._style is not None:
                self._style.append(data)
            return
        if not self._pre:  # in HTML a newline in the source is just a space
            data = data.translate(_SOURCE_BREAKS)
        self._out().append(data)
        if self._href is not None and self._unseen():
            self._unseen_text = self._unseen_text or bool(data.strip())
        elif self._href is not None:
            self._label.append(data)
            self._text.append(data)

    def _close_anchor(self) -> None:
        if self._href is not None:
            label = " ".join(" ".join(self._label).split())
            text = " ".join("".join(self._text).split())
            # A link whose only text is too small or coloured away, with no image, is unseen.
            if text or self._pictured or not self._unseen_text:
                self.anchors.append(_Anchor(self._href, label, image=False, text=text))
        self._href = None
        self._label = []
        self._text = []
        self._pictured = False
        self._unseen_text = False


def _render(html: str) -> _Rendered:
    renderer = _Renderer()
    try:
        renderer.feed(_tidy(html[:MAX_SCAN_CHARS]))
        renderer.close()
    except Exception:  # html.parser asserts on some oddities: keep what was rendered so far
        pass
    renderer._close_anchor()
    hidden = _lines(renderer.hidden_pieces)[:MAX_HIDDEN_CHARS]
    attributes = "\n".join(renderer.attributes)
    return _Rendered(_lines(renderer.pieces), tuple(renderer.anchors), hidden, attributes)


def _lines(pieces: list[str]) -> str:
    lines = "".join(pieces).translate(_INVISIBLE).split("\n")
    out: list[str] = []
    for line in lines:
        words = " ".join(line.split())
        if words or (out and out[-1]):
            out.append(words)
    return "\n".join(out).strip()


# --- links that say one host and go to another ----------------------------------------------

_URLISH_TEXT = re.compile(
    r"(?:https?://)?((?:[\w-]+\.)+[a-z\u00a1-\uffff]{2,63})(?::[0-9]+)?(?:[/?#]\S*)?",
    re.IGNORECASE,
)


def _mismatched(anchors: tuple[_Anchor, ...]) -> bool:
    """Whether a link's visible text is a URL (or a host name) on another host than its href."""
    for anchor in anchors:
        text = anchor.text.strip().rstrip(".")
        if anchor.image or " " in text or "." not in text:
            continue
        shown = _URLISH_TEXT.fullmatch(text)
        if shown is None or "@" in text:
            continue
        named = text.lower().startswith(("http://", "https://", "www.")) or "/" in text
        # a bare name must end like a host name to count ("example.com", not "v1.2")
        if not named and not re.search(r"\.[a-z]{2,24}$", shown.group(1), re.IGNORECASE):
            continue
        target = _host(anchor.url.strip())
        if target and _bare(shown.group(1).lower()) != _bare(target):
            return True
    return False


def _bare(host: str) -> str:
    return host[4:] if host.startswith("www.") else host


def _tidy(html: str) -> str:
    """Rewrite markup so html.parser only ever sees complete tags, in linear time.

    html.parser rescans to the end of the input for every construct left unfinished
    (``<!--``, ``</x``, ``<![``), which is quadratic on crafted mail (python/cpython#135462,
    CVE-2025-6069; the Python here predates the fix).
    Here every ``<`` that does not open a complete tag becomes text, comments and
    declarations go, and a tag with an unbalanced quote loses its quotes.
    """
    out: list[str] = []
    n = len(html)
    never = n + 1
    next_gt = -1  # cached position of the next ">" (or `never`): keeps the scan linear
    next_comment_end = -1
    i = 0
    while i < n:
        lt = html.find("<", i)
        if lt < 0:
            out.append(html[i:])
            break
        out.append(html[i:lt])
        if html.startswith("<!--", lt):
            if next_comment_end < lt + 4:
                found = html.find("-->", lt + 4)
                next_comment_end = never if found < 0 else found
            if next_comment_end == never:
                out.append("&lt;")
                i = lt + 1
            else:
                i = next_comment_end + 3
            continue
        if next_gt <= lt:
            found = html.find(">", lt + 1)
            next_gt = never if found < 0 else found
        following_lt = html.find("<", lt + 1, next_gt if next_gt != never else n)
        if next_gt == never or following_lt >= 0:
            out.append("&lt;")
            i = lt + 1
            continue
        tag = html[lt : next_gt + 1]
        i = next_gt + 1
        if tag.startswith(("<!", "<?")):
            continue
        if not _TAG_OPEN.match(tag):
            out.append("&lt;" + tag[1:])
            continue
        if not _QUOTES_BALANCED.fullmatch(tag):
            tag = tag.replace('"', "").replace("'", "")
        out.append(tag)
    return "".join(out)


# --- links ------------------------------------------------------------------------------------

_TEXT_URL = re.compile(r"""https?://[^\s<>"'`\\^{}|\x00-\x1f\x7f]+""", re.IGNORECASE)
_TRAILING = ".,;:!?)]}>'\"*"
_UTM = re.compile(r"[?&]utm_[a-z]+=[^&#]*", re.IGNORECASE)
_B64_URL = re.compile(r"aHR0c[A-Za-z0-9+/_-]{8,}={0,2}")
_EMBEDDED_URL = re.compile(r"https?://[^\s&\"'<>]+")
_IMAGE_PATH = (".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".bmp", ".ico")
_SOCIAL_HOSTS = re.compile(
    r"(?:^|\.)(?:facebook|twitter|x|linkedin|instagram|youtube|tiktok|pinterest|threads)"
    r"\.com$|(?:^|\.)(?:t\.co|youtu\.be|fb\.me)$"
)
# Words that make a link not worth clicking, whatever else it says.
_HARD_LOW = re.compile(
    r"unsub|opt[-_ ]?out|list-manage|email[-_ ]?pref|manage[-_ ]?pref|notification[-_ ]?pref"
    r"|view[-_ ]?(?:it )?(?:in|on)[-_ ]?(?:your[-_ ])?(?:browser|online|web)|web[-_ ]?version"
    r"|pixel|beacon|/open\b|track(?:ing)?/open|abbestell|abmeld|darse de baja|desuscrib"
    r"|cancelar (?:la )?suscripci|d[ée]sabonn|d[ée]sinscri|配信停止|購読解除|登録解除|メール設定"
)
# Words that make a link the one to click: verify, confirm, reset, magic, invite...
_ACTION = re.compile(
    r"v[ée]rif|confirm|activ[ae]t|activar|activer|aktivier|reset|password|passwort|passwd"
    r"|contrase[ñn]a|mot[-_ ]de[-_ ]passe|magic|token|invit|einladung|accept|validat|valider"
    r"|validar|best[äa]tig|bestaetig|restablec|r[ée]initialis|zur[üu]cksetz|one[-_ ]?time|\botp\b"
    r"|\bauth(?!or)|approv|[?&](?:code|key|otp|ticket)=|確認|認証|有効化|本登録|再設定|パスワード"
)
# Words of the fine print: help, privacy, terms...
_SOFT_LOW = re.compile(
    r"privacy|privacidad|datenschutz|confidentialit|\bterms\b|t[ée]rminos|\bagb\b|\blegal\b"
    r"|impressum|imprint|\bhelp\b|ayuda|hilfe|\baide\b|support|soporte|\bfaq\b|contact|kontakt"
    r"|\babout\b|\bblog\b|careers|\bpolicy\b|settings|preferenc|einstellungen|ヘルプ|プライバシー"
    r"|利用規約|お問い合わせ"
)
_WEAK_ACTION = re.compile(
    r"log[-_ ]?in|sign[-_ ]?in|signin|anmeld|iniciar sesi|connexion|se connecter|ログイン"
)

# Link tiers, best first. The fine print (help, privacy) still beats what no agent wants to
# open at all (unsubscribe, tracking pixels, images, social profiles).
_ACTION_TIER, _WEAK_TIER, _PLAIN_TIER, _FINE_PRINT_TIER, _USELESS_TIER = range(5)


def _rank_links(text: str | None, rendered: _Rendered | None) -> tuple[str, ...]:
    occurrences: list[tuple[str, str, bool]] = []  # url, what it says, is an image
    if rendered is not None:
        occurrences += [(a.url, a.label, a.image) for a in rendered.anchors]
        # A URL written as a link's text is that link's label, not a link of its own
        # (<a href="https://evil.example">https://acme.example</a> goes to evil.example).
        labels = {a.text for a in rendered.anchors if a.text}
        occurrences += [
            (url, context, False)
            for url, context in _urls_in_text(rendered.text)
            if url not in labels
        ]
    if text:
        occurrences += [(url, context, False) for url, context in _urls_in_text(text)]
    best: dict[str, tuple[int, int]] = {}  # url -> (tier, first seen)
    for raw_url, label, image in occurrences[:MAX_LINK_OCCURRENCES]:
        url = _clean_url(raw_url)
        if url is None:
            continue
        tier = _link_tier(url, label, image)
        seen = best.get(url)
        if seen is None:
            if len(best) < MAX_LINKS:
                best[url] = (tier, len(best))
        elif tier < seen[0]:
            best[url] = (tier, seen[1])
    return tuple(sorted(best, key=best.__getitem__))


def _clean_url(raw: str) -> str | None:
    url = raw.strip().replace("\t", "").replace("\n", "").replace("\r", "").replace(" ", "%20")
    if len(url) > MAX_URL_CHARS or not url[:8].lower().startswith(("http://", "https://")):
        return None
    if any(ord(c) < 32 or ord(c) == 127 for c in url):
        return None
    try:
        host = urlsplit(url).hostname
    except ValueError:  # e.g. an unbalanced "[" in the host
        return None
    return url if host else None


def _urls_in_text(text: str) -> list[tuple[str, str]]:
    """URLs in running text, each with the words just before it (its context)."""
    found: list[tuple[str, str]] = []
    line_start = scanned = 0
    for match in itertools.islice(_TEXT_URL.finditer(text[:MAX_SCAN_CHARS]), MAX_LINK_OCCURRENCES):
        url = match.group()
        while url and url[-1] in _TRAILING:
            if url[-1] == ")" and url.count("(") >= url.count(")"):
                break
            url = url[:-1]
        newline = text.rfind("\n", scanned, match.start())
        if newline >= 0:
            line_start = newline + 1
        scanned = match.end()
        before = text[max(line_start, match.start() - 80) : match.start()]
        if not before.strip() and line_start > 0:  # alone on its line: the line above says
            above = max(0, line_start - 81)
            before = text[text.rfind("\n", above, line_start - 1) + 1 : line_start - 1]
        found.append((url, before))
    return found


def _link_tier(url: str, label: str, image: bool) -> int:
    about = _about(url)
    label = label.lower()
    targets = [url, *_EMBEDDED_URL.findall(about[8:])]
    if image or any(_is_image(target) for target in targets):
        return _USELESS_TIER
    if _HARD_LOW.search(about) or _HARD_LOW.search(label):
        return _USELESS_TIER
    if any(_SOCIAL_HOSTS.search(_host(target)) for target in targets):
        return _USELESS_TIER
    if _ACTION.search(about) or _ACTION.search(label):
        return _ACTION_TIER
    if _SOFT_LOW.search(about) or _SOFT_LOW.search(label):
        return _FINE_PRINT_TIER
    if _WEAK_ACTION.search(about) or _WEAK_ACTION.search(label):
        return _WEAK_TIER
    return _PLAIN_TIER


def _about(url: str) -> str:
    """What a URL is about: itself, percent-decoded, plus any redirect target it carries."""
    about = url
    for _ in range(3):  # redirectors nest encodings
        decoded = unquote(about)
        if decoded == about:
            break
        about = decoded
    for blob in _B64_URL.findall(about):  # base64 targets ("aHR0c" is "http")
        try:
            target = binascii.a2b_base64(blob.replace("-", "+").replace("_", "/") + "==")
        except (binascii.Error, ValueError):
            continue
        about += " " + target.decode("utf-8", "replace")
    return _UTM.sub("", about).lower()


def _host(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def _is_image(url: str) -> bool:
    try:
        path = urlsplit(url).path.lower()
    except ValueError:
        return False
    return path.endswith(_IMAGE_PATH)


# --- codes ------------------------------------------------------------------------------------

# Links and e-mail domains hold digits but no code: they are blanked (same length, so
# positions hold) before codes are looked for. Dates, times, phone numbers, prices and
# colours need no blanking: the boundaries of _DIGIT_CODE already refuse "2024-05-30",
# "10:30", "+1 415 555 0100", "$12.00" and "#ffffff".
_LINKISH = re.compile(r"(?:https?://|www\.)\S+|@[\w-]+(?:\.[\w-]+)+")
_DIGIT_CODE = re.compile(
    r"(?<![0-9A-Za-z_#$€£¥.,/@+%&=:-])(?<![0-9][ -])(?<![0-9]\) )"
    r"(?:(?P<grouped>[0-9]{3,4}[ -][0-9]{3,4})"
    r"|(?P<spaced>[0-9](?: [0-9]){3,7})"
    r"|(?P<plain>[0-9]{4,10}))"
    r"(?![0-9A-Za-z_%@]|[ -][0-9]|[.,/:][0-9])"
)
_ALNUM_CODE = re.compile(
    r"(?<![0-9A-Za-z_#$.,/@+%&=-])"
    r"(?:[A-Z0-9]{2,6}(?:-[A-Z0-9]{2,6}){1,2}|[A-Z0-9]{4,10})"
    r"(?![0-9A-Za-z_%@]|-[0-9A-Za-z])"
)
_CURRENCY_BEFORE = re.compile(r"(?:[$€£¥₹]|usd|eur|gbp|chf|jpy)\s?$")
_AFTER_NUMBER = re.compile(
    r"\s?(?:%|€|円|元|ドル|分|時間|件|年|月|日|(?:px|ms|kb|mb|gb|kg|km|min|minutes|minuten"
    r"|minutos|seconds|hours|días|days|tage|points|puntos|punkte|users|eur|usd|gbp|chf|jpy)\b)"
)
_DATE_CONTEXT = re.compile(
    r"©|\(c\)|copyright|年|月|日|\b(?:jan(?:uary|uar)?|feb(?:ruary|ruar)?|mar(?:ch)?|märz|apr(?:il)?"
    r"|ma[iy]|june?|juni|july?|juli|aug(?:ust)?|sept?(?:ember)?|o[ck]t(?:ober)?|nov(?:ember)?"
    r"|de[cz](?:ember)?|enero|febrero|marzo|abril|mayo|junio|julio|agosto|septiembre|octubre"
    r"|noviembre|diciembre)\b"
)


@dataclass(frozen=True, slots=True)
class _Keywords:
    """Words looked for in lower-cased text: one alternation, so the regex engine can skip."""

    pattern: re.Pattern[str]
    whole: frozenset[str] = frozenset()  # matches that must stand alone ("pin", not "spinner")
    word_start: bool = False  # every ASCII match must begin a word ("order", not "border")

    def spans(self, lowered: str) -> list[tuple[int, int]]:
        found: list[tuple[int, int]] = []
        for match in self.pattern.finditer(lowered):
            start, end = match.span()
            word = match.group()
            before = lowered[start - 1 : start] if start else ""
            after = lowered[end : end + 1]
            if (self.word_start or word in self.whole) and word.isascii() and _is_word(before):
                continue
            if word in self.whole and _is_word(after):
                continue
            if word.startswith("code") and _NOT_OTP_CODE.search(lowered, max(0, start - 14), start):
                continue
            found.append((start, end))
        return found


def _is_word(char: str) -> bool:
    return char.isascii() and char.isalnum()


# "code" inside a compound counts (Bestätigungscode, passcode); zip, promo, error codes do not.
_NOT_OTP_CODE = re.compile(
    r"(?:(?:zip|postal|promo|promotional|coupon|discount|voucher|gift|referral|error|status"
    r"|country|area|source|sort|swift|bank|qr) |(?:^|[^a-z])(?:bar|en|de|uni|zip))$"
)
_STRONG = _Keywords(
    re.compile(
        r"code|c[óo]digo|codice|otp|pin|tan|one[- ]time|einmal|contraseña de un solo|код"
        r"|コード|認証番号|確認番号|暗証番号|ワンタイム|验证码|驗證碼|인증"
    ),
    whole=frozenset({"otp", "pin", "tan"}),
)
_MEDIUM = _Keywords(
    re.compile(
        r"verif|vérif|bestätig|confirm|authenticat|2fa|two[- ]factor|security|sicherheit"
        r"|seguridad|log[- ]?in|sign[- ]?in|anmeld|iniciar sesi|connexion|enter|eingeben"
        r"|ingresa|introduce|saisi|expire|valid for|gültig|caduca|入力|有効|認証|確認"
    ),
    whole=frozenset({"2fa", "enter"}),
)
_NEGATIVE = _Keywords(
    re.compile(
        r"order|invoice|receipt|ref|reference|ticket|case|tracking|customer|phone|account"
        r"|card|ending in|no\.|registered|nr\.|tel|fax|call|zip|postal|suite|street|ave|id"
        r"|pedido|factura|bestellung|rechnung|kundennummer|注文|請求|電話"
    ),
    whole=frozenset({"ref", "case", "tel", "fax", "call", "zip", "ave", "id", "card"}),
    word_start=True,
)

_STRONG_WINDOW = 160
_MEDIUM_WINDOW = 60
_ACCEPT = 45


@dataclass(slots=True)
class _Score:
    score: float
    first: int
    sources: set[str]


def _rank_codes(text: str | None, html_text: str | None, subject: str | None) -> tuple[Code, ...]:
    scores: dict[str, _Score] = {}
    order = 0
    for source, name in ((subject, "subject"), (text, "text"), (html_text, "html")):
        if not source:
            continue
        for code, score in _score_codes(source[:MAX_CODE_SCAN_CHARS]):
            order += 1
            seen = scores.get(code)
            if seen is None:
                scores[code] = _Score(score, order, {name})
            else:
                seen.score = max(seen.score, score)
                seen.sources.add(name)
    ranked = [
        (_standing(s.sources), -s.score, s.first, code)
        for code, s in scores.items()
        if s.score >= _ACCEPT
    ]
    return tuple(
        Code(code, tuple(name for name in CODE_SOURCES if name in scores[code].sources))
        for _, _, _, code in sorted(ranked)[:MAX_CODES]
    )


def _standing(sources: set[str]) -> int:
    """Subject and body agree (0), the body alone (1), the subject alone (2)."""
    in_body = "text" in sources or "html" in sources
    if "subject" in sources:
        return 0 if in_body else 2
    return 1


def _lower(text: str) -> str:
    """``text.lower()`` with positions kept ("İ" lower-cases to two characters)."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


def _blank(text: str, spans: list[tuple[int, int]]) -> str:
    pieces: list[str] = []
    pos = 0
    for start, end in spans:
        pieces += (text[pos:start], "\x00" * (end - start))
        pos = end
    pieces.append(text[pos:])
    return "".join(pieces)


def _score_codes(source: str) -> list[tuple[str, float]]:
    """Each candidate code in ``source`` with its score (>= _ACCEPT means: report it)."""
    lowered = _lower(source)
    # an address keeps its "@", so that "482913@example.test" is not taken for a code
    linkish = [
        (match.start() + (match.group()[0] == "@"), match.end())
        for match in _LINKISH.finditer(lowered)
    ]
    masked, lowered = _blank(source, linkish), _blank(lowered, linkish)
    words = _Words(
        strong=_STRONG.spans(lowered),
        medium=_MEDIUM.spans(lowered),
        negative=_NEGATIVE.spans(lowered),
    )
    candidates: list[tuple[int, int, str, float]] = []  # start, end, code, bonus
    for match in itertools.islice(_DIGIT_CODE.finditer(masked), MAX_CANDIDATES):
        start, end = match.span()
        code = match.group().replace(" ", "").replace("-", "")
        if match.group("plain") is None:
            bonus = 8.0 if match.group("grouped") is not None else 4.0
        elif len(code) == 4 and 1900 <= int(code) <= 2099:
            if _DATE_CONTEXT.search(lowered, max(0, start - 30), end + 30):
                continue  # "© 2024", "May 2024": a year
            bonus = -15.0
        else:
            bonus = {6: 10.0, 4: 5.0, 8: 5.0}.get(len(code), 2.0)
        if _AFTER_NUMBER.match(lowered, end) or _CURRENCY_BEFORE.search(
            lowered, max(0, start - 5), start
        ):
            continue  # "15 minutes", "1200 €", "USD 1200"
        candidates.append((start, end, code, bonus))
    for match in itertools.islice(_ALNUM_CODE.finditer(masked), MAX_CANDIDATES):
        token = match.group()
        if any(c.isdigit() for c in token) and any(c.isalpha() for c in token):
            candidates.append((*match.span(), token, -5.0))
    candidates.sort()
    spans = [(start, end) for start, end, _, _ in candidates]
    return [
        (code, bonus + _context_score(start, end, words, spans, masked))
        for start, end, code, bonus in candidates
    ]


@dataclass(frozen=True, slots=True)
class _Words:
    strong: list[tuple[int, int]]  # spans of "code", "OTP", "PIN", "código", "コード"...
    medium: list[tuple[int, int]]  # "verify", "sign in", "expires"...
    negative: list[tuple[int, int]]  # "order", "invoice", "phone"...


def _context_score(
    start: int, end: int, words: _Words, candidates: list[tuple[int, int]], masked: str
) -> float:
    """How strongly the words around [start, end) say "this is a one-time code"."""
    near = _nearest(start, end, words.strong, _STRONG_WINDOW)
    if near is not None:
        score = 100 - near[0] / 3
    else:
        near = _nearest(start, end, words.medium, _MEDIUM_WINDOW)
        if near is None:
            return 0.0
        score = 55 - near[0] / 3
    gap, word_start, word_end = near
    # A keyword speaks of the number next to it: "code: 123456 ... CA 94104" is about 123456.
    closest = _nearest(word_start, word_end, candidates, _STRONG_WINDOW, reverse=True)
    if closest is not None and closest[0] < gap:
        score -= 40
    bad = _nearest(start, end, words.negative, 25, before_only=True)
    if bad is not None and bad[0] < gap:  # "order 123456" is an order number, not a code
        score -= 60
    line_start = masked.rfind("\n", max(0, start - 200), start) + 1
    line_end = masked.find("\n", end, end + 200)
    if line_end < 0:
        line_end = min(len(masked), end + 200)
    if not masked[line_start:start].strip() and not masked[end:line_end].strip(" \t\r."):
        score += 10  # alone on its line, as codes are usually shown
    return score


def _nearest(
    start: int,
    end: int,
    spans: list[tuple[int, int]],
    window: int,
    *,
    before_only: bool = False,
    reverse: bool = False,
) -> tuple[float, int, int] | None:
    """The span nearest [start, end) within ``window``, as (gap, span start, span end).

    A keyword after its code ("482913 is your code") is less usual than before it, so gaps
    to spans after [start, end) count 1.5 times; ``reverse`` is the same rule seen from the
    keyword (gaps to spans before it count 1.5 times).
    """
    best: tuple[float, int, int] | None = None
    before_weight, after_weight = (1.5, 1.0) if reverse else (1.0, 1.5)
    i = bisect_left(spans, (start, start))
    j = i - 1
    while j >= 0 and start - spans[j][1] <= window and i - j <= 8:
        gap = max(0, start - spans[j][1]) * before_weight
        if best is None or gap < best[0]:
            best = (gap, *spans[j])
        j -= 1
    k = i
    while not before_only and k < len(spans) and spans[k][0] - end <= window and k - i < 8:
        gap = max(0, spans[k][0] - end) * after_weight
        if best is None or gap < best[0]:
            best = (gap, *spans[k])
        k += 1
    return best
