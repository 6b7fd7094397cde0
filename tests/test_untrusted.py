"""Sender-written text for agents: visible escapes and the ``untrusted`` object."""

from __future__ import annotations

from api.ui.render import visible, visible_plain
from sink.mcp.answers import for_agent
from sink.untrusted import untrusted, untrusted_body, visible_body, wrap
from sink.untrusted import visible as shown


def test_bidi_and_zero_width_become_visible_escapes() -> None:
    """A right-to-left override and a zero-width space are shown as ⟨U+XXXX⟩."""
    assert shown("invoice\u202efdp.exe") == "invoice⟨U+202E⟩fdp.exe"
    assert shown("co\u200bde 4829\u200d13") == "co⟨U+200B⟩de 4829⟨U+200D⟩13"
    assert shown("plain, ünïcode ✓") == "plain, ünïcode ✓"


def test_the_ui_and_agents_show_the_same_escapes() -> None:
    """The web UI's plain and marked-up escapes come from the same implementation."""
    name = "report\u2066\u202egpj.exe\u2069"
    assert visible_plain(name) == shown(name)
    assert "⟨U+202E⟩" in str(visible(name)) and "title=" in str(visible(name))


def test_bodies_keep_their_line_breaks_and_tabs() -> None:
    """In a body, newlines and tabs stay; CRLF becomes LF; a lone CR is escaped."""
    assert visible_body("a\r\nb\tc\rd\u2067") == "a\nb\tc⟨U+000D⟩d⟨U+2067⟩"


def test_wrap_moves_the_sender_fields_under_untrusted() -> None:
    """A summary keeps its server fields; from, from_name and subject go under untrusted."""
    entry = {"message_id": "m_1", "subject": "Hi\u202e", "from": "a@b.test", "received_at": "t"}
    assert wrap(entry) == {
        "message_id": "m_1",
        "received_at": "t",
        "untrusted": {"from": "a@b.test", "subject": "Hi⟨U+202E⟩"},
    }


def test_untrusted_escapes_each_string_and_keeps_nulls() -> None:
    """Every string is escaped, text keeps its lines, null stays null."""
    got = untrusted({"from_name": None, "text": "line 1\nline\u200b2", "subject": "\x1b[31m"})
    assert got == {"from_name": None, "text": "line 1\nline⟨U+200B⟩2", "subject": "⟨U+001B⟩[31m"}


def test_a_cut_body_never_ends_inside_an_escape() -> None:
    """Truncation says so, and never leaves half of an ⟨U+XXXX⟩ escape."""
    assert untrusted_body("abcdef", 10) == ("abcdef", False)
    assert untrusted_body("abcdef", 3) == ("abc", True)
    assert untrusted_body("ab\u202ecd", 5) == ("ab", True)
    assert untrusted_body(None, 5) == (None, False)


def test_mcp_answers_wrap_every_summary_of_mail() -> None:
    """The wait's message, unmatched entries and find_mail summaries carry the sender's words
    under untrusted; the server's own fields and error bodies stay as they are."""
    summary = {"message_id": "m_1", "received_at": "t", "from": "a@b.test", "subject": "x\u202e"}
    wrapped = {
        "message_id": "m_1",
        "received_at": "t",
        "untrusted": {"from": "a@b.test", "subject": "x⟨U+202E⟩"},
    }
    envelope = {"state": "received", "hint": "claim it", "message": summary, "unmatched": [summary]}
    assert for_agent("wait_for_message", {}, envelope) == {
        "state": "received",
        "hint": "claim it",
        "message": wrapped,
        "unmatched": [wrapped],
    }
    found = {"messages": [{**summary, "caught": False}], "next_cursor": None, "has_more": False}
    assert for_agent("find_mail", {}, found)["messages"] == [{**wrapped, "caught": False}]
    error = {"error": {"code": "not_found", "message": "no message 'x'", "details": {}}}
    assert for_agent("read_message", {}, error) == error
