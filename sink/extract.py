"""Evidence in a message body: its text, its links and its one-time codes (pure).

This is what an agent finishing a sign-up or password-reset flow reads, so the order of the
answers matters as much as the answers: the link to click and the code to type come first.
Everything here is heuristic, standard library only, and bounded: hostile or enormous bodies
are looked at up to ``MAX_SCAN_CHARS`` and never make a function raise.
"""

from __future__ import annotations

import binascii
import itertools
import re
from bisect import bisect_left
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit

# Transactional mail is small (Gmail clips HTML at 102 KB); a body this long is not one, and
# html.parser costs microseconds per tag, so extraction looks at this much and no more.
MAX_SCAN_CHARS = 1_000_000
MAX_LINKS = 200
MAX_CODES = 20
MAX_URL_CHARS = 8192
MAX_CANDIDATES = 2000  # numbers looked at per source; a body with more is a report, not a code


@dataclass(frozen=True, slots=True)
class Evidence:
    """Links and codes found in one message, best first."""

    links: tuple[str, ...]
    codes: tuple[str, ...]


def html_to_text(html: str) -> str:
    """Render HTML as plain text: no script/style, block elements on their own lines."""
    return _render(html).text


def find_links(text: str | None, html: str | None) -> tuple[str, ...]:
    """Absolute http(s) URLs from hrefs and text, deduplicated, action links first."""
    return _rank_links(text, _render(html) if html else None)


def find_codes(text: str | None, html: str | None, subject: str = "") -> tuple[str, ...]:
    """Likely one-time codes, most likely first ("123 456" comes back as "123456")."""
    return _rank_codes(text, _render(html).text if html else None, subject)


def extract_evidence(text: str | None, html: str | None, subject: str = "") -> Evidence:
    """``find_links`` and ``find_codes`` together, rendering the HTML once."""
    rendered = _render(html) if html else None
    return Evidence(
        links=_rank_links(text, rendered),
        codes=_rank_codes(text, rendered.text if rendered else None, subject),
    )


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
# Invisible padding that marketing mail puts in its preheader (zero-width joiners, soft hyphens).
_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u034f\u200b\u200c\u200d\u2060\ufeff"))
_TAG_OPEN = re.compile(r"</?[A-Za-z]")
_QUOTES_BALANCED = re.compile(r"""(?:[^"']|"[^"]*"|'[^']*')*""")


@dataclass(frozen=True, slots=True)
class _Anchor:
    url: str
    label: str  # the anchor's text, alt and title: what the link says it is
    image: bool


@dataclass(frozen=True, slots=True)
class _Rendered:
    text: str
    anchors: tuple[_Anchor, ...]


class _Renderer(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.pieces: list[str] = []
        self.anchors: list[_Anchor] = []
        self._skip = 0
        self._href: str | None = None
        self._label: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self._skip += 1
            return
        if tag in _BLOCK:
            self.pieces.append("\n")
        elif tag in _CELL:
            self.pieces.append(" ")
        values = {name: value or "" for name, value in attrs}
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
            if values.get("src"):
                self.anchors.append(_Anchor(values["src"], alt, image=True))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _SKIP:  # "<script/>" opens nothing
            self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag == "a":
            self._close_anchor()
        elif tag in _BLOCK:
            self.pieces.append("\n")

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        self.pieces.append(data)
        if self._href is not None:
            self._label.append(data)

    def _close_anchor(self) -> None:
        if self._href is not None:
            label = " ".join(" ".join(self._label).split())
            self.anchors.append(_Anchor(self._href, label, image=False))
        self._href = None
        self._label = []


def _render(html: str) -> _Rendered:
    renderer = _Renderer()
    try:
        renderer.feed(_tidy(html[:MAX_SCAN_CHARS]))
        renderer.close()
    except Exception:
        pass
    renderer._close_anchor()
    lines = "".join(renderer.pieces).translate(_INVISIBLE).split("\n")
    out: list[str] = []
    for line in lines:
        words = " ".join(line.split())
        if words or (out and out[-1]):
            out.append(words)
    return _Rendered("\n".join(out).strip(), tuple(renderer.anchors))


def _tidy(html: str) -> str:
    """Rewrite markup so html.parser only ever sees complete tags, in linear time.

    html.parser rescans to the end of the input for every construct left unfinished
    (``<!--``, ``</x``, ``<a href="``), which is quadratic on crafted mail (CVE-2025-6069).
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

_ACTION_TIER, _WEAK_TIER, _PLAIN_TIER, _LOW_TIER = 0, 1, 2, 3


def _rank_links(text: str | None, rendered: _Rendered | None) -> tuple[str, ...]:
    best: dict[str, tuple[int, int]] = {}  # url -> (tier, first seen)

    def offer(raw_url: str, label: str, image: bool) -> None:
        url = _clean_url(raw_url)
        if url is None:
            return
        tier = _link_tier(url, label, image)
        seen = best.get(url)
        if seen is None:
            if len(best) < MAX_LINKS:
                best[url] = (tier, len(best))
        elif tier < seen[0]:
            best[url] = (tier, seen[1])

    if rendered is not None:
        for anchor in rendered.anchors:
            offer(anchor.url, anchor.label, anchor.image)
        for url, context in _urls_in_text(rendered.text):
            offer(url, context, False)
    if text:
        for url, context in _urls_in_text(text[:MAX_SCAN_CHARS]):
            offer(url, context, False)
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
    for match in _TEXT_URL.finditer(text):
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
        return _LOW_TIER
    if _HARD_LOW.search(about) or _HARD_LOW.search(label):
        return _LOW_TIER
    if any(_SOCIAL_HOSTS.search(_host(target)) for target in targets):
        return _LOW_TIER
    if _ACTION.search(about) or _ACTION.search(label):
        return _ACTION_TIER
    if _SOFT_LOW.search(about) or _SOFT_LOW.search(label):
        return _LOW_TIER
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

# Spans that hold digits but no code: links, addresses, phone numbers, dates, times, prices,
# colours. They are blanked (same length, so positions hold) before codes are looked for.
_NOT_CODES = re.compile(
    r"(?:https?://|www\.)\S+"
    r"|(?<![\w.+-])[\w.+-]++@[\w-]+(?:\.[\w-]+)+"
    r"|\+\s?[0-9][0-9 ().-]{5,}[0-9]"
    r"|\(?\b[0-9]{3}\)?[ .-][0-9]{3}[ .-][0-9]{4}\b"
    r"|\b[0-9]{1,4}[./-][0-9]{1,2}[./-][0-9]{1,4}\b"
    r"|\b[0-9]{1,2}:[0-9]{2}(?::[0-9]{2})?(?:\s?[AaPp]\.?[Mm]\b\.?)?"
    r"|[$€£¥₹]\s?[0-9][0-9.,]*|(?<![0-9.,])[0-9][0-9.,]*+\s?(?:€|EUR|USD|GBP|JPY|円|ドル|元)"
    r"|#[0-9A-Fa-f]{3,8}\b",
    re.IGNORECASE,
)
_DIGIT_CODE = re.compile(
    r"(?<![0-9A-Za-z_#$€£¥.,/@+%&=-])(?<![0-9][ -])"
    r"(?:(?P<grouped>[0-9]{3,4}[ -][0-9]{3,4})"
    r"|(?P<spaced>[0-9](?: [0-9]){3,7})"
    r"|(?P<plain>[0-9]{4,10}))"
    r"(?![0-9A-Za-z_%@]|[ -][0-9]|[.,/][0-9])"
)
_ALNUM_CODE = re.compile(
    r"(?<![0-9A-Za-z_#$.,/@+%&=-])"
    r"(?:[A-Z0-9]{2,6}(?:-[A-Z0-9]{2,6}){1,2}|[A-Z0-9]{4,10})"
    r"(?![0-9A-Za-z_%@]|-[0-9A-Za-z])"
)
# "code" inside a compound counts (Bestätigungscode, passcode); zip/promo/error codes do not.
_STRONG_WORDS = re.compile(
    r"(?<!zip )(?<!postal )(?<!promo )(?<!coupon )(?<!discount )(?<!error )(?<!country )"
    r"(?<!source )(?<!qr )(?<!\bbar)(?<!\ben)(?<!\bde)(?<!\buni)"
    r"(?:code|c[óo]digo|codice|\botp\b|\bpin\b|\btan\b|one[- ]time|einmal|contrase[ñn]a de un solo"
    r"|код|コード|認証番号|確認番号|暗証番号|ワンタイム|验证码|驗證碼|인증)",
    re.IGNORECASE,
)
_MEDIUM_WORDS = re.compile(
    r"v[ée]rif|best[äa]tig|confirm|authenticat|\b2fa\b|two[- ]factor|security|sicherheit"
    r"|seguridad|log[- ]?in|sign[- ]?in|anmeld|iniciar sesi|connexion|\benter\b|eingeben|ingresa"
    r"|introduce|saisi|expire|valid for|g[üu]ltig|caduca|入力|有効|認証|確認",
    re.IGNORECASE,
)
_NEGATIVE_WORDS = re.compile(
    r"\border|invoice|receipt|\bref\b|reference|ticket|\bcase\b|tracking|customer|\bphone"
    r"|\btel\b|\bfax\b|\bcall\b|\bzip\b|postal|\bsuite\b|\bstreet\b|\bave\b|\bid\b|pedido"
    r"|factura|bestellung|rechnung|kundennummer|注文|請求|電話",
    re.IGNORECASE,
)
_DATE_CONTEXT = re.compile(
    r"©|\(c\)|copyright|\b(?:jan|feb|m[äa]r|apr|ma[iy]|jun|jul|aug|sep|o[ck]t|nov|de[cz]"
    r"|enero|febrero|marzo|abril|mayo|junio|julio|agosto|septiembre|octubre|noviembre|diciembre"
    r"|januar|februar|juni|juli|oktober|dezember)|年|月|日",
    re.IGNORECASE,
)
_UNIT_AFTER = re.compile(
    r"\s?(?:%|px|ms|kb|mb|gb|kg|km|min|minutes|minuten|minutos|seconds|hours|días|days|tage"
    r"|points|puntos|punkte|users|分|時間|円|件)\b",
    re.IGNORECASE,
)

_STRONG_WINDOW = 160
_MEDIUM_WINDOW = 60
_ACCEPT = 45


@dataclass(slots=True)
class _Score:
    score: float
    first: int
    in_subject: bool


def _rank_codes(text: str | None, html_text: str | None, subject: str) -> tuple[str, ...]:
    scores: dict[str, _Score] = {}
    order = 0
    for source, in_subject in ((subject, True), (text, False), (html_text, False)):
        if not source:
            continue
        for code, score in _score_codes(source[:MAX_SCAN_CHARS]):
            order += 1
            seen = scores.get(code)
            if seen is None:
                scores[code] = _Score(score, order, in_subject)
            else:
                seen.score = max(seen.score, score)
                seen.in_subject = seen.in_subject or in_subject
    ranked = [
        (-(s.score + (25 if s.in_subject else 0)), s.first, code)
        for code, s in scores.items()
        if s.score >= _ACCEPT
    ]
    return tuple(code for _, _, code in sorted(ranked)[:MAX_CODES])


def _score_codes(source: str) -> list[tuple[str, float]]:
    """Each candidate code in ``source`` with its score (>= _ACCEPT means: report it)."""
    masked = _NOT_CODES.sub(lambda m: "\x00" * len(m.group()), source)
    strong = [(m.start(), m.end()) for m in _STRONG_WORDS.finditer(masked)]
    medium = [(m.start(), m.end()) for m in _MEDIUM_WORDS.finditer(masked)]
    negative = [(m.start(), m.end()) for m in _NEGATIVE_WORDS.finditer(masked)]
    found: list[tuple[str, float]] = []
    for match in itertools.islice(_DIGIT_CODE.finditer(masked), MAX_CANDIDATES):
        token = match.group()
        code = token.replace(" ", "").replace("-", "")
        bonus = 0.0
        if match.group("plain") is not None:
            bonus = {6: 10, 4: 5, 8: 5}.get(len(code), 2)
            if len(code) == 4 and 1900 <= int(code) <= 2099:
                window = masked[max(0, match.start() - 30) : match.end() + 30]
                if _DATE_CONTEXT.search(window):
                    continue
                bonus = -15
        else:
            bonus = 8 if match.group("grouped") is not None else 4
        if _UNIT_AFTER.match(masked, match.end()):
            continue
        score = _proximity(match.start(), match.end(), strong, medium, negative, masked)
        found.append((code, score + bonus))
    for match in itertools.islice(_ALNUM_CODE.finditer(masked), MAX_CANDIDATES):
        token = match.group()
        if not (any(c.isdigit() for c in token) and any(c.isalpha() for c in token)):
            continue
        score = _proximity(match.start(), match.end(), strong, medium, negative, masked)
        found.append((token, score - 5))
    return found


def _proximity(
    start: int,
    end: int,
    strong: list[tuple[int, int]],
    medium: list[tuple[int, int]],
    negative: list[tuple[int, int]],
    masked: str,
) -> float:
    """How strongly the words around [start, end) say "this is a one-time code"."""
    gap = _distance(start, end, strong, _STRONG_WINDOW)
    if gap is not None:
        score = 100 - gap / 3
    else:
        gap = _distance(start, end, medium, _MEDIUM_WINDOW)
        if gap is None:
            return 0.0
        score = 55 - gap / 3
    bad = _distance(start, end, negative, 25, before_only=True)
    if bad is not None and bad < gap:  # "order 123456" is an order number, not a code
        score -= 60
    line_start = masked.rfind("\n", max(0, start - 200), start) + 1
    line_end = masked.find("\n", end, end + 200)
    if line_end < 0:
        line_end = len(masked) if len(masked) - end <= 200 else end + 200
    if not masked[line_start:start].strip() and not masked[end:line_end].strip(" \t\r."):
        score += 10  # alone on its line, as codes are usually shown
    return score


def _distance(
    start: int, end: int, spans: list[tuple[int, int]], window: int, *, before_only: bool = False
) -> float | None:
    """Characters between [start, end) and the nearest span within ``window``; after counts 1.5x."""
    if not spans:
        return None
    best: float | None = None
    i = bisect_left(spans, (start, start))
    # spans ending before the candidate: walk left while within the window
    j = i - 1
    while j >= 0 and start - spans[j][1] <= window and i - j <= 8:
        gap: float = max(0, start - spans[j][1])
        best = gap if best is None else min(best, gap)
        j -= 1
    if not before_only:
        k = i
        while k < len(spans) and spans[k][0] - end <= window and k - i < 8:
            gap = max(0, spans[k][0] - end) * 1.5
            best = gap if best is None else min(best, gap)
            k += 1
    return best
