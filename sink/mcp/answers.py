"""The HTTP API's JSON, reshaped for a model: sender-written text under ``untrusted`` (pure).

Both transports get the HTTP API's JSON from their backend; this is the one place that
turns it into what an MCP tool answers. Sender-written strings (subject, display name,
``from``, bodies) go under ``untrusted``, made visible (``sink/untrusted.py``); the
server's own words (state, next_action, hint, ids, times) stay where they are.

``read_message`` gives the evidence first: codes, links, attachment metadata and content
flags, and the body only when asked for (``include_body``, ``include_html``), cut to
``max_body_chars``.
"""

from __future__ import annotations

from typing import Any

from sink.untrusted import MAX_BODY_CHARS, SENDER_FIELDS, untrusted, untrusted_body, visible, wrap

Json = dict[str, Any]
MAX_BODY_CHARS_LIMIT = 1_000_000  # the most max_body_chars may ask for

# Answer members that hold summaries of mail: the wait's message; a mismatch's unmatched and
# a list's messages.
_SUMMARY_MEMBERS = ("message",)
_SUMMARY_LISTS = ("unmatched", "messages")


def for_agent(tool: str, arguments: Json, body: Json) -> Json:
    """The tool's answer for ``body``, the HTTP API's JSON (an error body is left as it is)."""
    if "error" in body:
        return body
    if tool == "read_message":
        return read_answer(body, arguments)
    answer = dict(body)
    for name in _SUMMARY_MEMBERS:
        if isinstance(answer.get(name), dict):
            answer[name] = wrap(answer[name])
    for name in _SUMMARY_LISTS:
        if isinstance(answer.get(name), list):
            answer[name] = [wrap(item) if isinstance(item, dict) else item for item in answer[name]]
    return answer


def read_answer(message: Json, arguments: Json) -> Json:
    """``read_message``: the evidence, the sender's words under ``untrusted``, and a body
    only when asked for."""
    limit = _max_chars(arguments.get("max_body_chars"))
    sender = untrusted({name: message.get(name) for name in SENDER_FIELDS})
    answer: Json = {
        "message_id": message.get("message_id"),
        "received_at": message.get("received_at"),
        "codes": [visible(code) for code in message.get("codes") or []],
        "links": [visible(link) for link in message.get("links") or []],
        "attachments": [_attachment(item) for item in message.get("attachments") or []],
        "content_flags": list(message.get("content_flags") or []),
        "untrusted": sender,
    }
    cut = False
    for name, wanted in (("text", "include_body"), ("html", "include_html")):
        if _yes(arguments.get(wanted)):
            shown, was_cut = untrusted_body(message.get(name), limit)
            sender[name] = shown
            cut = cut or was_cut
    if _yes(arguments.get("include_body")) or _yes(arguments.get("include_html")):
        answer["truncated"] = cut
    return answer


def _attachment(item: Any) -> Any:
    """An attachment's metadata, its name as the mail gives it with bidi and zero-width
    characters made visible (``invoice⟨U+202E⟩fdp.exe``, as the web UI shows it)."""
    if not isinstance(item, dict):
        return item
    shown = {k: v for k, v in item.items() if k != "original_filename"}
    name = item.get("original_filename") or item.get("filename", "")
    return {**shown, "filename": visible(str(name))}


def read_options_refused(arguments: Json) -> tuple[str, str] | None:
    """The field and what is wrong with ``read_message``'s options, or None."""
    for name in ("include_body", "include_html"):
        if name in arguments and arguments[name] not in (True, False, "true", "false"):
            return name, "expected true or false"
    if "max_body_chars" in arguments and _number(arguments["max_body_chars"]) is None:
        return "max_body_chars", f"expected an integer from 1 to {MAX_BODY_CHARS_LIMIT:,}"
    return None


def _yes(value: Any) -> bool:
    return value is True or value == "true"


def _max_chars(value: Any) -> int:
    """``max_body_chars`` as given (a number or a numeric string), else the default."""
    return MAX_BODY_CHARS if value is None else _number(value) or MAX_BODY_CHARS


def _number(value: Any) -> int | None:
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 9:
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value != int(value) or not 1 <= value <= MAX_BODY_CHARS_LIMIT:
        return None
    return int(value)
