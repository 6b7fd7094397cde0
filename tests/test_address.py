"""From, parsed strictly (issue 10 item 4): the address from its brackets, the name apart."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sink.address import parse_from
from sink.message import parse, summarize
from tests.support import Server, create_inbox, wait

# From value -> (from, from_name, warned)
CASES = {
    "=?utf-8?q?a@app.test?= <victim@x.test>": ("victim@x.test", "a@app.test", False),
    '"Acme" <noreply@acme.example>': ("noreply@acme.example", "Acme", False),
    "Acme <noreply@Acme.Example>": ("noreply@acme.example", "Acme", False),
    "noreply@acme.example": ("noreply@acme.example", None, False),
    "<noreply@acme.example>": ("noreply@acme.example", None, False),
    "=?utf-8?b?QWNtZQ==?= <n@acme.example>": ("n@acme.example", "Acme", False),
    "=?utf-8?q?J=C3=BCrgen?= =?utf-8?q?_M?= <j@x.test>": ("j@x.test", "Jürgen M", False),
    '"Doe, John" <j@x.test>': ("j@x.test", "Doe, John", False),
    '"a@app.test" <victim@x.test>': ("victim@x.test", "a@app.test", False),
    "a@app.test <victim@x.test>": ("victim@x.test", "a@app.test", True),
    "a@x.test (Real Name)": ("a@x.test", "Real Name", False),
    '"john doe"@x.test': ('"john doe"@x.test', None, False),
    "Relay <@hop.test:a@x.test>": ("a@x.test", "Relay", False),
    "ü@exämple.test": ("ü@exämple.test", None, False),
    "first@x.test, second@x.test": ("first@x.test", None, True),
    # Nothing strictly parseable: no address is invented.
    "Bob <a b@x.test>": ("", None, True),
    "<>": ("", None, True),
    "just text": ("", None, True),
    '"unclosed <a@x.test>': ("", None, True),
    "Eve <victim@x.test": ("", None, True),
    "<a@x.test> trailing@y.test": ("", None, True),
}


@pytest.mark.parametrize("value", CASES)
def test_from_is_the_bracketed_address_and_the_name_is_decoded_apart(value: str) -> None:
    """The address comes from its brackets (or a bare addr-spec); the name never leaks in."""
    address, name, warned = CASES[value]
    summary = summarize(f"From: {value}\r\nSubject: s\r\n\r\nbody\r\n".encode())
    assert (summary.from_addr, summary.from_name) == (address, name)
    assert bool(summary.warnings) == warned, summary.warnings
    parsed = parse(f"From: {value}\r\nSubject: s\r\n\r\nbody\r\n".encode())
    assert (parsed.from_addr, parsed.from_name, parsed.parse_warnings) == (
        address,
        name,
        summary.warnings,
    )


def test_a_message_without_from_says_so() -> None:
    """No From header: the address is empty and parse_warnings says there was none."""
    parsed = parse(b"Subject: s\r\n\r\nbody\r\n")
    assert parsed.from_addr == "" and parsed.from_name is None
    assert parsed.parse_warnings == ("From: the message has no From header",)


@given(st.text(max_size=200))
def test_parse_from_never_raises_and_never_takes_an_address_from_a_name(value: str) -> None:
    """Any text: an address, if one is given, is one of the value's own local@domain runs."""
    mailbox = parse_from(value, lambda text: text)
    if mailbox.address:
        local, _, domain = mailbox.address.rpartition("@")
        assert local and domain and "<" not in mailbox.address
    else:
        assert mailbox.warnings


def test_spoofed_from_over_smtp_reads_back_as_the_real_address(
    server: Server, http: httpx.Client
) -> None:
    """A display name made of an encoded address never becomes `from` (issue 10 item 4)."""
    inbox = create_inbox(http)
    raw = (
        "From: =?utf-8?q?a@app.test?= <victim@x.test>\r\n"
        f"To: {inbox['address']}\r\nSubject: spoof\r\n\r\nhello\r\n"
    ).encode()
    with server.smtp() as client:
        client.sendmail("bounce@x.test", [inbox["address"]], raw)
    answer = wait(http, inbox["inbox_id"], timeout_s=5).json()
    assert answer["message"]["from"] == "victim@x.test"
    message = http.get(f"/v1/messages/{answer['message']['message_id']}").json()
    assert message["from"] == "victim@x.test"
    assert message["from_name"] == "a@app.test"
    assert message["parse_warnings"] == []
    listed = http.get(f"/v1/inboxes/{inbox['inbox_id']}/messages").json()["messages"]
    assert [m["from"] for m in listed] == ["victim@x.test"]


def test_unparseable_from_over_smtp_is_a_warning_not_a_guess(
    server: Server, http: httpx.Client
) -> None:
    """A From with no strict address reads back as "" with a parse warning naming From."""
    inbox = create_inbox(http)
    raw = f"From: Bob <bob at x.test>\r\nTo: {inbox['address']}\r\nSubject: odd\r\n\r\nhi\r\n"
    with server.smtp() as client:
        client.sendmail("bounce@x.test", [inbox["address"]], raw.encode())
    answer = wait(http, inbox["inbox_id"], timeout_s=5).json()
    message = http.get(f"/v1/messages/{answer['message']['message_id']}").json()
    assert message["from"] == "" and message["from_name"] is None
    assert len(message["parse_warnings"]) == 1
    assert message["parse_warnings"][0].startswith("From:")


def test_to_and_cc_are_parsed_as_strictly() -> None:
    """An encoded display name in To adds no address; groups give members; junk is a warning."""
    summary = summarize(
        b"From: a@b.test\r\n"
        b"To: =?utf-8?q?a@app.test?= <victim@x.test>, Team: c@x.test, D <d@X.test>;\r\n"
        b"Cc: not-an-address, <>, e@x.test\r\n\r\nbody\r\n"
    )
    assert summary.to == ("victim@x.test", "c@x.test", "d@x.test")
    assert summary.cc == ("e@x.test",)
    assert summary.warnings == ("Cc: 2 entries are not valid addresses; left out",)
