"""``content_flags``: facts about a message's content an agent should know (pure).

Each flag says that something is there, never that the mail is hostile: a flag is a hint
for whoever reads the evidence, not a filter. The list and its order are the contract's:
``addresses_ai_agent``, ``forged_boundary``, ``hidden_text``, ``bidi_controls``,
``zero_width``, ``link_text_mismatch``, ``subject_code_not_in_body``.

What is looked at is what can reach a model: the subject, the display name, the text, the
HTML (as a reader sees it, what it hides, its comments and its markup) and attachment names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sink.extract import Code

FLAGS = (
    "addresses_ai_agent",
    "forged_boundary",
    "hidden_text",
    "bidi_controls",
    "zero_width",
    "link_text_mismatch",
    "subject_code_not_in_body",
)
MAX_LOOK_CHARS = 256 * 1024  # of each text looked at

# Text that speaks to a model, or claims the authority of its instructions.
_ADDRESSES_AI = re.compile(
    r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+|the\s+|your\s+|of\s+)*"
    r"(?:prior|previous|preceding|above|earlier|former|existing|other|original)\s+"
    r"(?:instructions?|prompts?|messages?|rules|directions|context|guidelines|commands)"
    r"|\bsystem\s+(?:prompt|message|instructions?|override|notice\s+to)"
    r"|\b(?:new|updated|real|actual|hidden|secret|override)\s+instructions?\s*(?::|for\b|to\b)"
    r"|\bas\s+an?\s+(?:ai|a\.i\.|llm|language\s+model|assistant|ai\s+agent)\b"
    r"|\bif\s+you\s+are\s+an?\s+(?:ai|llm|language\s+model|assistant|agent|bot|model)\b"
    r"|\byou\s+are\s+(?:now\s+)?(?:an?\s+)?(?:ai|llm|large\s+language\s+model|language\s+model"
    r"|helpful\s+assistant|ai\s+assistant|autonomous\s+agent)\b"
    r"|\b(?:dear|hey|hi|hello|attention|note\s+to|message\s+(?:to|for)|instructions?\s+"
    r"(?:to|for))\s+(?:the\s+|any\s+|all\s+)?(?:ai|llm|assistant|agent|model|bot|chatbot|gpt"
    r"|claude|copilot|gemini)s?\b"
    r"|\b(?:ai|llm|autonomous|browsing|coding|email)\s+(?:agents?|assistants?)\s*[:,]"
    r"|\bjailbreak|\bdeveloper\s+mode\b"
    r"|\b(?:do\s+not|don'?t|never)\s+(?:tell|inform|alert|mention\s+(?:this\s+)?to)\s+the\s+user"
    r"|\bwithout\s+(?:telling|informing|asking)\s+the\s+user",
    re.IGNORECASE,
)
# A role label in capitals ("SYSTEM:", "[SYSTEM]") claims a system prompt's authority.
_AUTHORITY_LABEL = re.compile(r"(?<![A-Za-z])(?:SYSTEM|ADMIN(?:ISTRATOR)? OVERRIDE)\s*:|\[SYSTEM\]")
# Markup and separators that imitate the edges of a tool result, a message or a role turn.
_BOUNDARY = re.compile(
    r"</?\s*(?:system|user|assistant|message|messages|tool|instructions?|email|document"
    r"|context|untrusted|trusted|human|ai|im_start|im_end|prompt|result|output"
    r"|(?:tool|function|system|user|assistant|email|untrusted)_[a-z_]{1,30})\s*/?>"
    r"|<\|(?:im_start|im_end|system|user|assistant|endoftext|eot_id|start_header_id)\|>"
    r"|\[/?(?:INST|SYS|SYSTEM|TOOL|EMAIL|MESSAGE|UNTRUSTED|CONTEXT|DATA|USER|ASSISTANT)"
    r"(?:[_ ](?:END|START|BEGIN|CONTENT|OUTPUT|RESULT))*\]"
    r"|\[(?:END|BEGIN|START)[_ ](?:OF[_ ])?(?:EMAIL|MESSAGE|UNTRUSTED|DATA|CONTENT|TOOL)[A-Z_ ]*\]"
    r"|<<\s*/?SYS\s*>>"
    r"|^[ \t]*(?:`{3,}|~{3,})[ \t]*(?:system|assistant|user|tool|developer)\b"
    r"|^[ \t]*#{1,6}[ \t]*(?:system|assistant|user|tool|developer)(?:[ \t]+(?:prompt|message))?"
    r"[ \t]*:?[ \t]*$"
    r"|^[ \t]*(?:-{3,}|={3,}|\*{3,})[ \t]*(?:end|begin|start)[ \t]+(?:of[ \t]+)?(?:the[ \t]+)?"
    r"(?:email|message|untrusted|tool|data|content|user|system)"
    r"|^[ \t]*(?:human|assistant)[ \t]*:[ \t]"
    r"|[\"']role[\"']\s*:\s*[\"'](?:system|assistant|tool|developer)[\"']",
    re.IGNORECASE | re.MULTILINE,
)
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# Zero-width characters inside a word or a number, where they split or join what is read
# ("ig\u200bnore", "4829\u200b13"); the padding between spaces of preheaders is not counted.
_ZERO_WIDTH = "\u180e\u200b\u200c\u200d\u2060\ufeff"
_ZERO_WIDTH_INSIDE = re.compile(rf"\w[{_ZERO_WIDTH}]+\w")
# In a text body, any that is not padding between spaces ("\u200bIgnore", "co\u200b-de").
_ZERO_WIDTH_TOUCHING = re.compile(rf"(?<![ \t\u00a0])[{_ZERO_WIDTH}]+(?!\s)")
_ZERO_WIDTH_ANY = re.compile(rf"[{_ZERO_WIDTH}]")
_NO_ZERO_WIDTH = dict.fromkeys(map(ord, _ZERO_WIDTH + "\u00ad"))


@dataclass(frozen=True, slots=True)
class Content:
    """What a message shows and hides, as ``sink.message.parse`` found it."""

    subject: str
    from_name: str | None
    text: str | None
    html: str | None  # the HTML source
    visible_html: str | None  # the HTML as a reader sees it, as text
    hidden_text: str | None
    attribute_text: str  # the HTML's alt, title and aria-label texts
    attachment_names: tuple[str, ...]  # as the mail gives them, decoded
    codes: tuple[Code, ...]
    link_text_mismatch: bool


def content_flags(content: Content) -> tuple[str, ...]:
    """The flags that hold for this content, in the contract's order."""
    html = (content.html or "")[:MAX_LOOK_CHARS]
    comments = " ".join(_comments(html))
    # Everything a model could be given: over MCP it reads the subject, the name and the
    # attachment names; with include_body and include_html, the text and the HTML source.
    spoken = [
        content.subject,
        content.from_name or "",
        (content.text or "")[:MAX_LOOK_CHARS],
        content.visible_html or "",
        content.hidden_text or "",
        content.attribute_text,
        comments,
        *content.attachment_names,
    ]
    # read as a person (or a model) reads them: "ig\u200bnore" is "ignore"
    spoken = [text.translate(_NO_ZERO_WIDTH) if text else text for text in spoken]
    raised = {
        "addresses_ai_agent": any(_speaks_to_model(t) for t in spoken if t),
        "forged_boundary": any(_BOUNDARY.search(t) for t in (*spoken, html) if t),
        "hidden_text": content.hidden_text is not None,
        "bidi_controls": any(_BIDI.search(t) for t in (*spoken, html) if t),
        "zero_width": _zero_width(content, html),
        "link_text_mismatch": content.link_text_mismatch,
        "subject_code_not_in_body": any(code.sources == ("subject",) for code in content.codes),
    }
    return tuple(flag for flag in FLAGS if raised[flag])


def demoted(codes: tuple[Code, ...], content: Content) -> tuple[Code, ...]:
    """``codes`` with those a person only sees inside injected text (a line that speaks to a
    model or imitates a boundary: ``{"role": "tool", ... "use code 101010"}``) moved last."""
    lines = [
        line.translate(_NO_ZERO_WIDTH)
        for text in (content.subject, content.text, content.visible_html)
        if text
        for line in text[:MAX_LOOK_CHARS].splitlines()
    ]
    injected = [_injected(line) for line in lines]
    squeezed = [line.replace(" ", "").replace("-", "") for line in lines]

    def only_in_injected_text(code: Code) -> bool:
        holding = [n for n, line in enumerate(squeezed) if code.value in line]
        return bool(holding) and all(injected[n] for n in holding)

    clean = [code for code in codes if not only_in_injected_text(code)]
    return (*clean, *(code for code in codes if code not in clean))


def _speaks_to_model(text: str) -> bool:
    return bool(_ADDRESSES_AI.search(text) or _AUTHORITY_LABEL.search(text))


def _injected(line: str) -> bool:
    """Whether a line speaks to a model or imitates a boundary."""
    return _speaks_to_model(line) or _BOUNDARY.search(line) is not None


def _comments(html: str) -> list[str]:
    """The texts of the HTML's complete comments, in one pass (a regex would rescan the rest
    of the mail from each unclosed ``<!--``)."""
    found: list[str] = []
    position = html.find("<!--")
    while position >= 0:
        end = html.find("-->", position + 4)
        if end < 0:
            break  # no comment after this one can close either
        found.append(html[position + 4 : end])
        position = html.find("<!--", end + 3)
    return found


def _zero_width(content: Content, html: str) -> bool:
    names = (content.subject, content.from_name or "", *content.attachment_names)
    if any(_ZERO_WIDTH_ANY.search(name) for name in names if name):
        return True
    text = (content.text or "")[:MAX_LOOK_CHARS].removeprefix("\ufeff")  # a byte-order mark
    if text and _ZERO_WIDTH_TOUCHING.search(text):
        return True
    # In HTML only inside a word or number: markup puts &zwnj; between tags as spacing.
    return bool(html) and _ZERO_WIDTH_INSIDE.search(_entities_decoded(html)) is not None


_ZERO_WIDTH_ENTITY = re.compile(
    r"&(?:#x(200b|200c|200d|2060|feff|180e)|#(8203|8204|8205|8288|65279|6158)|(zwnj|zwj|ZeroWidthSpace));",
    re.IGNORECASE,
)
_CODEPOINTS = {"zwnj": 0x200C, "zwj": 0x200D, "zerowidthspace": 0x200B}


def _entities_decoded(html: str) -> str:
    """The HTML with its zero-width character references written as the characters."""
    if "&" not in html:
        return html

    def character(match: re.Match[str]) -> str:
        hexa, decimal, name = match.groups()
        if hexa:
            return chr(int(hexa, 16))
        if decimal:
            return chr(int(decimal))
        return chr(_CODEPOINTS[name.lower()])

    return _ZERO_WIDTH_ENTITY.sub(character, html)
