"""The injection corpus (tests/corpus/injection.py): what a person sees, and the flags raised."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from sink.mcp.answers import read_answer
from sink.message import ParsedMessage, parse
from tests.corpus.injection import HOSTILE, ORDINARY, Case, mail


def _http_json(parsed: ParsedMessage) -> dict[str, Any]:
    """The fields of GET /v1/messages/{id} that an MCP read is built from."""
    return {
        "message_id": "msg_" + "a" * 24,
        "received_at": "2026-12-05T00:00:00.000Z",
        "from": parsed.from_addr,
        "from_name": parsed.from_name,
        "subject": parsed.subject,
        "text": parsed.text,
        "html": parsed.html,
        "codes": list(parsed.codes),
        "links": list(parsed.links),
        "attachments": [{"filename": a.filename, "size": a.size} for a in parsed.attachments],
        "content_flags": list(parsed.content_flags),
    }


def test_the_corpus_has_thirty_hostile_and_ten_ordinary_mails() -> None:
    """At least 30 hostile mails and 10 ordinary ones, each named once."""
    assert len(HOSTILE) >= 30 and len(ORDINARY) == 10
    names = [case.name for case in HOSTILE + ORDINARY]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("case", HOSTILE, ids=lambda case: case.name)
def test_hostile_mail_gives_what_a_person_sees_and_its_flags(case: Case) -> None:
    """Codes and links as a person sees them (decoys hidden or injected come last or not at
    all), exactly the flags the case names, and no hidden decoy in what an agent reads."""
    parsed = parse(case.raw)
    assert parsed.codes == case.codes
    assert parsed.links == case.links
    assert parsed.content_flags == case.flags
    evidence = json.dumps(read_answer(_http_json(parsed), {}), ensure_ascii=False)
    for text in case.absent:
        assert text not in evidence, text


@pytest.mark.parametrize("case", ORDINARY, ids=lambda case: case.name)
def test_ordinary_mail_raises_no_flag_and_puts_the_right_code_first(case: Case) -> None:
    """Transactional mail: no flag, the right code first, the links in their order."""
    parsed = parse(case.raw)
    assert parsed.content_flags == ()
    assert parsed.codes == case.codes
    assert parsed.links == case.links


def test_an_agent_reads_bidi_controls_as_visible_escapes() -> None:
    """A right-to-left override in a subject or an attachment name reaches the model escaped."""
    by_name = {case.name: case for case in HOSTILE}
    subject = read_answer(_http_json(parse(by_name["rlo_subject"].raw)), {})
    assert subject["untrusted"]["subject"] == "Your document ⟨U+202E⟩fdp.exe is ready"
    body = read_answer(_http_json(parse(by_name["rlo_reversed_code"].raw)), {"include_body": True})
    assert body["untrusted"]["text"] == "Your code is ⟨U+202E⟩319284⟨U+202C⟩.\n"
    assert body["codes"] == ["482913"]


@pytest.mark.parametrize(
    ("text", "html"),
    [
        (None, "<style>" + "a" * 65536 + "</style>"),  # a rule regex would be quadratic here
        (None, "<style>" + "{a{" * 20000 + "</style>"),
        (None, "<p>x</p>" + "<!--" * 60000),  # so would a comment regex
        ("\n" * 200_000 + "x", None),  # and a role-header regex spanning blank lines
        ("ignore " + "all " * 50_000, None),
        (None, '<div style="display:none">' * 20000 + "x"),
    ],
)
def test_crafted_mail_is_analysed_in_linear_time(text: str | None, html: str | None) -> None:
    """Hidden text, style sheets and flags never take quadratic time on crafted mail."""
    raw = mail("crafted", text, html)
    started = time.perf_counter()
    parse(raw)
    assert time.perf_counter() - started < 5  # the quadratic versions need minutes
