from __future__ import annotations

import base64
import dataclasses
import hashlib
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sink import message
from sink.message import (
    FILENAME_MAX_CHARS,
    MAX_DEPTH,
    ParsedMessage,
    Summary,
    parse,
    safe_filename,
    searchable_text,
    summarize,
)

MAIL = Path(__file__).parent / "mail"

# file -> (first link, first code or None): what an agent finishing the flow needs.
EXPECTED = {
    "signup_confirm.eml": (
        "https://acme.test/account/confirm?token=eyJ1IjoiN2YzayJ9.Qm9i&utm_source=email",
        None,
    ),
    "magic_link_text.eml": ("https://linear.test/auth/magic-link?token=5f2d9c1e8b7a4d3c", None),
    "otp_plain_digits.eml": ("https://pigeon.test/help", "482913"),
    "otp_spaced_html_only.eml": ("https://shopwise.test/login", "731804"),
    "otp_hyphen_base64.eml": ("https://hotelapp.test/bookings/5561?ref=email", "739204"),
    "otp_alnum_hyphen.eml": ("https://clouddesk.test/settings/security", "A7K-9QX"),
    "otp_alnum_subject.eml": ("https://gameshub.test/news/2024", "K7Q2ZP"),
    "otp_and_magic_link.eml": ("https://slackish.test/z/magic/205118?x=1a2b", "205118"),
    "pin_four_digit.eml": ("https://bank.test/online-banking/login", "4821"),
    "spanish_reset_latin1_qp.eml": (
        "https://tienda.test/cuenta/restablecer?clave=Zk9xT2&lang=es",
        "582031",
    ),
    "german_confirm_related.eml": (
        "https://konto.beispiel.test/registrierung/bestaetigen?t=Q2hhbmdlTWU",
        "904812",
    ),
    "japanese_signup_iso2022jp.eml": (
        "https://example-shop.test/register/verify?key=a9f3c2e1",
        "318274",
    ),
    "wrong_charset_utf8.eml": ("https://app.test/entrar?origem=email", "660155"),
    "tracking_redirect.eml": (
        "https://click.mailer.test/ls/click?upn=u001.abc&u=https%3A%2F%2Fnotes.test%2Fverify%3Ft%3Dabc123",
        None,
    ),
    "invite_view_in_browser.eml": (
        "https://figmo.test/invite/accept?id=inv_7Hq2&sig=d41d8cd98f",
        None,
    ),
    "reset_mixed_attachment.eml": (
        "https://billing.test/password/reset/8d1f2e?email=finance-run%40sink.test",
        None,
    ),
    "outlook_vml_button.eml": ("https://portal.test/activate?code=XJ29&src=html", None),
    "welcome_no_code.eml": ("https://tasky.test/docs/boards", None),
    "receipt_no_code.eml": ("https://market.test/orders/40221957", None),
}


def read(name: str) -> bytes:
    return (MAIL / name).read_bytes()


def crlf(raw: bytes) -> bytes:
    """As the message arrives over SMTP."""
    return raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def test_every_sample_message_has_an_expectation() -> None:
    """Each .eml in tests/mail is covered by the table below, and there are at least 15."""
    assert sorted(p.name for p in MAIL.glob("*.eml")) == sorted(EXPECTED)
    assert len(EXPECTED) >= 15


@pytest.mark.parametrize("line_ending", ["lf", "crlf"])
@pytest.mark.parametrize(("name", "link", "code"), [(k, *v) for k, v in EXPECTED.items()])
def test_sample_message_evidence(name: str, link: str, code: str | None, line_ending: str) -> None:
    """The action link and the one-time code an agent needs come first."""
    raw = read(name)
    message = parse(crlf(raw) if line_ending == "crlf" else raw)
    assert message.links[0] == link
    if code is None:
        assert message.codes == ()
    else:
        assert message.codes[0] == code


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_summary_agrees_with_parse(name: str) -> None:
    """summarize() and parse() report the same header facts."""
    raw = read(name)
    summary, message = summarize(raw), parse(raw)
    assert summary == Summary(
        subject=message.subject,
        from_addr=message.from_addr,
        to=message.to,
        cc=message.cc,
        date=message.date,
        from_name=message.from_name,
        warnings=message.parse_warnings,
    )
    assert summary.subject


def test_summarize_reads_encoded_headers() -> None:
    """Encoded-word subjects decode; address domains are lower-cased; To and Cc are lists."""
    summary = summarize(read("otp_hyphen_base64.eml"))
    assert summary == Summary(
        subject="Your one-time passcode",
        from_addr="mailer@hotelapp.test",
        to=("run17@sink.test",),
        cc=("audit@sink.test",),
        date="Sat, 18 May 2024 02:03:04 +0000",
        from_name="Bookings \u2013 Hotel App",
    )
    assert summarize(read("japanese_signup_iso2022jp.eml")).subject == (
        "【Example Shop】本登録のお願い"
    )
    assert summarize(read("spanish_reset_latin1_qp.eml")).subject == "Restablece tu contraseña"


def test_summarize_parses_address_lists() -> None:
    """Display names with commas, groups, comments and several headers all give addresses."""
    raw = (
        b'From: "Doe, Jane" <Jane.Doe@Example.TEST>\r\n'
        b"To: a@x.test, B <b@Y.test>, undisclosed-recipients:;\r\n"
        b"To: Team: c@x.test, d@x.test;\r\n"
        b"Cc: e@x.test (Eve), not-an-address, <>\r\n"
        b"\r\nbody"
    )
    summary = summarize(raw)
    assert summary.from_addr == "Jane.Doe@example.test"
    assert summary.to == ("a@x.test", "b@y.test", "c@x.test", "d@x.test")
    assert summary.cc == ("e@x.test",)


def test_summarize_unfolds_headers() -> None:
    """A folded Subject is one line again (RFC 5322 2.2.3)."""
    raw = b"Subject: Your verification\r\n code is\r\n\t482913\r\n\r\nbody"
    assert summarize(raw).subject == "Your verification code is 482913"


def test_summarize_takes_the_first_subject_from_and_date() -> None:
    """Repeated Subject, From and Date headers: the first one counts."""
    raw = b"Subject: one\nFrom: a@x.test\nSubject: two\nFrom: b@x.test\nDate: d1\nDate: d2\n\n"
    assert summarize(raw) == Summary("one", "a@x.test", (), (), "d1")


def test_summarize_sanitises_encoded_line_breaks_in_the_subject() -> None:
    """CR, LF, NUL and other controls smuggled in encoded words become spaces."""
    raw = b"Subject: =?utf-8?q?Hello=0D=0ABcc:_evil@x.test=00?= =?utf-8?b?dGFiCWVuZA==?=\r\n\r\n"
    subject = summarize(raw).subject
    assert subject == "Hello  Bcc: evil@x.test tab end"
    assert not any(ord(c) < 32 or ord(c) == 127 for c in subject)


def test_summarize_caps_the_subject() -> None:
    """A subject is at most 998 characters."""
    raw = b"Subject: " + b"x" * 5000 + b"\r\n\r\n"
    assert len(summarize(raw).subject) == 998


def test_summarize_sanitises_the_date() -> None:
    """The Date header is kept as given, minus control characters; absent is None."""
    assert summarize(b"Date: Mon, 1 Jan 2024\x00 10:00 +0000\r\n\r\n").date == (
        "Mon, 1 Jan 2024  10:00 +0000"
    )
    assert summarize(b"Subject: x\r\n\r\n").date is None
    assert summarize(b"Date:   \r\n\r\n").date is None


def test_summarize_reports_empty_facts_for_missing_headers() -> None:
    """No From, To, Cc, Subject or Date: empty values, not errors."""
    missing = ("From: the message has no From header",)
    assert summarize(b"") == Summary("", "", (), (), None, warnings=missing)
    assert summarize(b"\r\njust a body") == Summary("", "", (), (), None, warnings=missing)
    assert summarize(b"From: nobody\r\nTo: ;\r\n\r\n").from_addr == ""


def test_summarize_decodes_8bit_headers() -> None:
    """Raw UTF-8 (SMTPUTF8) and raw Latin-1 header bytes both decode."""
    assert summarize("Subject: Grüße\r\n\r\n".encode()).subject == "Grüße"
    assert summarize("Subject: Grüße\r\n\r\n".encode("latin-1")).subject == "Grüße"


def test_summarize_survives_unknown_encoded_word_charsets() -> None:
    """An encoded word in an unknown or non-text charset decodes as UTF-8, replacing errors."""
    raw = b"Subject: =?x-klingon?q?caf=C3=A9?= =?base64?b?/w==?=\r\n\r\n"
    assert summarize(raw).subject == "café\ufffd"


def test_parse_keeps_headers_in_order_with_first_seen_names() -> None:
    """Header names keep their first spelling; values are decoded and sanitised, in order."""
    raw = (
        b"Received: one\r\nX-Tag: =?utf-8?q?caf=C3=A9?=\r\nreceived: two\r\n"
        b"X-Evil: a=?utf-8?q?=0D=0A?=b\r\n\r\nbody"
    )
    headers = parse(raw).headers
    assert headers == {"Received": ["one", "two"], "X-Tag": ["café"], "X-Evil": ["a  b"]}


def test_parse_reads_multipart_alternative() -> None:
    """multipart/alternative gives both the text and the HTML body."""
    message = parse(read("otp_plain_digits.eml"))
    assert message.text is not None and "Your verification code is 482913." in message.text
    assert message.html is not None and "<b>482913</b>" in message.html
    assert "© 2024 Pigeon Labs" in message.text  # quoted-printable =C2=A9
    assert message.attachments == ()


def test_parse_reads_html_only_mail() -> None:
    """HTML-only mail has html and no text."""
    message = parse(read("otp_spaced_html_only.eml"))
    assert message.text is None
    assert message.html is not None and "731 804" in message.html


def test_parse_decodes_declared_charsets() -> None:
    """ISO-2022-JP, ISO-8859-1 and windows-1252 bodies decode to the right text."""
    assert "認証コード\uff1a318274" in (parse(read("japanese_signup_iso2022jp.eml")).text or "")
    assert "Recibimos una solicitud" in (parse(read("spanish_reset_latin1_qp.eml")).text or "")
    assert "contraseña" in (parse(read("spanish_reset_latin1_qp.eml")).html or "")
    assert "Hi Chloé," in (parse(read("outlook_vml_button.eml")).html or "")


def test_parse_survives_a_wrongly_declared_charset() -> None:
    """UTF-8 bytes labelled us-ascii decode as UTF-8."""
    assert "Seu código de verificação é 660155" in (
        parse(read("wrong_charset_utf8.eml")).text or ""
    )


def test_parse_falls_back_for_unknown_charsets() -> None:
    """An unknown charset decodes as UTF-8 with replacement characters."""
    raw = b"Content-Type: text/plain; charset=x-made-up\r\n\r\ncaf\xc3\xa9 \xff"
    assert parse(raw).text == "café \ufffd"


def test_parse_refuses_bytes_codecs_as_charsets() -> None:
    """charset=base64 (a codec, not a text encoding) is treated as unknown."""
    raw = b"Content-Type: text/plain; charset=base64\r\n\r\naGVsbG8= caf\xc3\xa9"
    assert parse(raw).text == "aGVsbG8= café"


def test_parse_reads_8bit_bodies_without_a_charset() -> None:
    """8-bit bytes with no charset are read as UTF-8, else as windows-1252."""
    assert parse("\r\nnaïve café".encode()).text == "naïve café"
    assert parse("\r\nnaïve café".encode("cp1252")).text == "naïve café"


def test_parse_lists_attachments_with_their_digest() -> None:
    """An attachment reports its name, type, decoded size and SHA-256."""
    message = parse(read("reset_mixed_attachment.eml"))
    pdf = b"%PDF-1.4\n% fake pdf for tests\n%%EOF\n"
    assert [dataclasses.asdict(a) for a in message.attachments] == [
        {
            "filename": "invoice-2024-0042.pdf",
            "content_type": "application/pdf",
            "size": len(pdf),
            "sha256": hashlib.sha256(pdf).hexdigest(),
            "original_filename": "invoice-2024-0042.pdf",
        }
    ]
    assert message.text is not None and message.html is not None


def test_parse_lists_inline_images_as_attachments() -> None:
    """A multipart/related inline image is an attachment; its HTML is the body."""
    message = parse(read("german_confirm_related.eml"))
    assert [(a.filename, a.content_type) for a in message.attachments] == [
        ("logo.png", "image/png")
    ]
    assert message.html is not None and "bestätige" in message.html


def test_parse_treats_named_and_non_text_parts_as_attachments() -> None:
    """A text part with a file name, a forwarded message and a nameless image are attachments."""
    raw = (
        b"Content-Type: multipart/mixed; boundary=b\r\n\r\n"
        b"--b\r\nContent-Type: text/plain\r\n\r\nthe body\r\n"
        b'--b\r\nContent-Type: text/plain; name="notes.txt"\r\n\r\nnotes\r\n'
        b"--b\r\nContent-Type: message/rfc822\r\n\r\nSubject: fwd\r\n\r\nold\r\n"
        b"--b\r\nContent-Type: image/gif\r\nContent-Transfer-Encoding: base64\r\n\r\nR0lGODlh\r\n"
        b"--b--\r\n"
    )
    message = parse(raw)
    assert message.text == "the body"
    assert [(a.filename, a.content_type, a.size) for a in message.attachments] == [
        ("notes.txt", "text/plain", 5),
        ("attachment", "message/rfc822", 19),
        ("attachment", "image/gif", 6),
    ]


def test_parse_decodes_rfc2231_and_rfc2047_filenames() -> None:
    """Filenames in RFC 2231 parameters and in encoded words are decoded."""
    raw = (
        b"Content-Type: multipart/mixed; boundary=b\r\n\r\n"
        b"--b\r\nContent-Disposition: attachment;\r\n"
        b" filename*=UTF-8''r%C3%A9sum%C3%A9.pdf\r\n\r\nx\r\n"
        b'--b\r\nContent-Type: application/pdf; name="=?UTF-8?B?0YHRh9C10YIucGRm?="\r\n\r\ny\r\n'
        b"--b--\r\n"
    )
    assert [a.filename for a in parse(raw).attachments] == ["résumé.pdf", "счет.pdf"]


@pytest.mark.parametrize(
    ("given", "safe"),
    [
        ("../../etc/passwd", "passwd"),
        ("..\\..\\Windows\\System32\\evil.dll", "evil.dll"),
        ("/etc/shadow", "shadow"),
        ("C:\\Users\\me\\report.pdf", "report.pdf"),
        ("C:report.pdf", "report.pdf"),
        ("inv\x00oice.pdf\x00.exe", "invoice.pdf.exe"),
        ("invoice\u202efdp.exe", "invoicefdp.exe"),
        ("\u2066photo\u2069\u200e.jpg\u200f", "photo.jpg"),
        ("line\r\nbreak.txt", "linebreak.txt"),
        ("..", "attachment"),
        ("dir/", "attachment"),
        ("  \t ", "attachment"),
        ("", "attachment"),
        ("résumé.pdf", "résumé.pdf"),
    ],
)
def test_safe_filename(given: str, safe: str) -> None:
    """Attachment names become plain basenames without controls or bidi overrides."""
    assert safe_filename(given) == safe


def test_safe_filename_caps_the_length_and_keeps_the_extension() -> None:
    """A name longer than 255 characters is cut, keeping its extension."""
    name = safe_filename("a" * 1000 + ".pdf")
    assert len(name) == FILENAME_MAX_CHARS
    assert name.endswith("a.pdf")
    assert len(safe_filename("b" * 1000)) == FILENAME_MAX_CHARS


def test_parse_makes_hostile_attachment_names_safe() -> None:
    """Names with "../", absolute paths, NUL and RTL overrides come out safe."""
    names = [
        b'filename="../../../../etc/cron.d/x"',
        b'filename="/root/.ssh/authorized_keys"',
        b'filename="C:\\\\Windows\\\\evil.exe"',
        b'filename="doc\x00.pdf"',
        'filename="invoice\u202egpj.exe"'.encode(),
        b"filename*=utf-8''%E2%80%AEcod.exe",
    ]
    raw = b"Content-Type: multipart/mixed; boundary=b\r\n\r\n"
    for name in names:
        raw += b"--b\r\nContent-Disposition: attachment; " + name + b"\r\n\r\nx\r\n"
    raw += b"--b--\r\n"
    filenames = [a.filename for a in parse(raw).attachments]
    assert filenames == ["x", "authorized_keys", "evil.exe", "doc.pdf", "invoicegpj.exe", "cod.exe"]


def test_parse_finds_parts_when_the_boundary_is_wrong() -> None:
    """A declared boundary that never occurs: the first "--" line is trusted instead."""
    raw = (
        b'Content-Type: multipart/alternative; boundary="declared"\r\n\r\n'
        b"--actual\r\nContent-Type: text/plain\r\n\r\nYour code is 482913\r\n"
        b"--actual\r\nContent-Type: text/html\r\n\r\n<p>Your code is 482913</p>\r\n"
        b"--actual--\r\n"
    )
    message = parse(raw)
    assert message.text == "Your code is 482913"
    assert message.html == "<p>Your code is 482913</p>"
    assert message.codes == ("482913",)


def test_parse_reads_the_last_part_without_a_closing_delimiter() -> None:
    """A multipart cut short (no closing delimiter) still yields its last part."""
    raw = b"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\nfirst\r\n--b\r\n\r\nsecond"
    assert parse(raw).text == "first\nsecond"


def test_parse_treats_a_multipart_without_delimiters_as_text() -> None:
    """A multipart with no boundary parameter and no delimiter lines is read as text."""
    raw = b"Content-Type: multipart/mixed\r\n\r\nYour code is 482913"
    message = parse(raw)
    assert message.text == "Your code is 482913"
    assert message.codes == ("482913",)


def test_parse_ignores_boundary_lookalikes() -> None:
    """ "--b-more" and "--b" inside a line are not delimiters of boundary "b"."""
    raw = (
        b"Content-Type: multipart/mixed; boundary=b\r\n\r\n"
        b"--b\r\n\r\none\r\n--b-more\r\ntwo --b\r\n--b  \r\n\r\nthree\r\n--b--  \r\nepilogue"
    )
    assert parse(raw).text == "one\r\n--b-more\r\ntwo --b\nthree"


def test_parse_repairs_broken_base64() -> None:
    """Base64 with junk characters and bad padding decodes what it can."""
    raw = b"Content-Transfer-Encoding: base64\r\n\r\naGVs*bG8g!d29y\r\nbGQ"
    assert parse(raw).text == "hello world"


def test_parse_stops_descending_at_the_depth_limit() -> None:
    """Parts nested deeper than MAX_DEPTH are ignored; shallower ones are read."""

    def nest(depth: int, leaf: bytes) -> bytes:
        raw = leaf
        for level in reversed(range(depth)):
            raw = (
                b"Content-Type: multipart/mixed; boundary=b%d\r\n\r\n--b%d\r\n%s\r\n--b%d--\r\n"
                % (level, level, raw, level)
            )
        return raw

    leaf = b"Content-Type: text/plain\r\n\r\nYour code is 482913"
    assert parse(nest(10, leaf)).text == "Your code is 482913"
    assert parse(nest(MAX_DEPTH + 5, leaf)).text is None
    assert parse(nest(1000, leaf)).text is None


def test_searchable_text_joins_text_and_rendered_html() -> None:
    """searchable_text holds the text body and the HTML body as text, not markup."""
    raw = read("otp_plain_digits.eml")
    text = searchable_text(raw)
    assert "Your verification code is 482913." in text
    assert "our help center" in text
    assert "<b>" not in text and "style=" not in text


def test_searchable_text_of_html_only_mail() -> None:
    """HTML-only mail is searchable by its rendered text."""
    text = searchable_text(read("otp_spaced_html_only.eml"))
    assert "Enter this code to finish signing in:" in text
    assert ".code" not in text  # the stylesheet is not text


def test_parsed_message_is_frozen() -> None:
    """ParsedMessage is a frozen dataclass."""
    message = parse(read("welcome_no_code.eml"))
    assert isinstance(message, ParsedMessage)
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.subject = "changed"  # type: ignore[misc]


def _hostile_messages() -> list[bytes]:
    rng = random.Random(20240514)
    header = b"From: a@x.test\r\nSubject: hostile\r\n"
    return [
        b"",
        b"\r\n",
        b"\x00" * 1000,
        bytes(rng.randrange(256) for _ in range(20_000)),
        b":" * 1000 + b"\r\n\r\n",
        header,
        header + b"Content-Type: multipart/mixed\r\n\r\n--\r\n--\r\n",
        header + b'Content-Type: multipart/mixed; boundary=""\r\n\r\n--\r\n\r\nx',
        header + b"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b--\r\n",
        header + b"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n",
        header + b"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n--b\r\n--b\r\n",
        header + b"Content-Type: multipart/mixed; boundary=\xff\xfe\r\n\r\n--\xff\xfe\r\n\r\nx",
        header + b"Content-Type: multipart/mixed; boundary*0*=utf-8''%FF; b*1=x\r\n\r\nx",
        header + b"Content-Type: ;;;==;\r\nContent-Disposition: ;filename*=x''%\r\n\r\nx",
        header + b"Content-Type: text/plain; charset=\x00\r\n\r\ncaf\xe9",
        header + b"Content-Type: text/plain; charset=utf-16\r\n\r\n\xff",
        header + b"Content-Type: text/plain; charset=idna\r\n\r\n" + b"a" * 100 + b"\xe9",
        header + b"Content-Type: text/plain; charset=rot13\r\n\r\nhello\xe9",
        header + b"Content-Type: text/html; charset=utf-7\r\n\r\n+AGEAYgBj-\xff",
        header + b"Content-Transfer-Encoding: base64\r\n\r\n" + b"=" * 1000 + b"!!!!",
        header + b"Content-Transfer-Encoding: base64\r\n\r\n" + base64.b64encode(b"\xff\xfe" * 50),
        header + b"Content-Transfer-Encoding: quoted-printable\r\n\r\n=\r\n=Z=9=\xff=",
        header + b"Content-Transfer-Encoding: x-uuencode\r\n\r\nbegin 644 x\r\n",
        header + b"Subject: =?utf-8?b?====?= =?utf-8?q?=ZZ?= =??q?x?= =?utf-8?x?y?=\r\n\r\n",
        header + b"To: " + b"(" * 5000 + b"a@b.test\r\n\r\n",
        header + b"To: " + b'"' * 5001 + b"\r\nCc: <<<<>>>>@@@,,,;;;\r\n\r\n",
        header + b"X-Long: " + b"x" * 200_000 + b"\r\n\r\n",
        header + b"".join(b"X-%d: v\r\n" % i for i in range(5000)) + b"\r\n",
        header + b"Content-Type: text/html\r\n\r\n" + b"<a href='https://x.test/" + b"a" * 100_000,
        header
        + b'Content-Type: text/html\r\n\r\n<a href="https://[::1]:99999/">x</a><img src=//x>',
    ]


@pytest.mark.parametrize("raw", _hostile_messages())
def test_hostile_mail_never_raises(raw: bytes) -> None:
    """Broken, truncated and crafted messages parse without raising."""
    summary = summarize(raw)
    message = parse(raw)
    searchable_text(raw)
    assert message.subject == summary.subject
    for attachment in message.attachments:
        assert "/" not in attachment.filename and "\\" not in attachment.filename
        assert all(ord(c) >= 32 for c in attachment.filename)
    for values in message.headers.values():
        assert all("\r" not in v and "\n" not in v and "\x00" not in v for v in values)


def test_a_25_mb_message_parses() -> None:
    """A 25 MB message (big attachment, big HTML, deep nesting) parses to completion."""
    blob = bytes(range(256)) * (31 * 1024 * 1024 // 2 // 256)  # 15.5 MiB, 20.7 MiB in base64
    html = b"<tr><td><a href='https://app.test/x?a=1&amp;b=2'>Item</a> code 4821</td></tr>\n"
    raw = (
        b"From: big@x.test\r\nSubject: big\r\n"
        b"Content-Type: multipart/mixed; boundary=outer\r\n\r\n"
        b"--outer\r\nContent-Type: text/html\r\n\r\n" + html * 60_000 + b"\r\n"
        b"--outer\r\nContent-Type: application/octet-stream; name=blob.bin\r\n"
        b"Content-Transfer-Encoding: base64\r\n\r\n" + base64.encodebytes(blob) + b"\r\n"
        b"--outer\r\nContent-Type: multipart/mixed; boundary=n0\r\n\r\n"
        + b"".join(
            b"--n%d\r\nContent-Type: multipart/mixed; boundary=n%d\r\n\r\n" % (i, i + 1)
            for i in range(200)
        )
        + b"--outer--\r\n"
    )
    assert len(raw) > 25 * 1024 * 1024
    message = parse(raw)
    assert message.attachments[0].filename == "blob.bin"
    assert message.attachments[0].sha256 == hashlib.sha256(blob).hexdigest()
    assert message.links == ("https://app.test/x?a=1&b=2",)
    assert searchable_text(raw).startswith("Item code 4821")


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "TEXT/HTML",
        "text/plain; charset=utf-8",
        'text/plain; charset="ISO-8859-1"',
        "text/html;charset=UTF-8;",
        " text/plain ; charset = us-ascii ",
        "text/plain; charset*=utf-8''x",
        "text/plain; name=a.txt",
        'text/plain; charset="utf-8',
        "text/plain (comment)",
        "multipart/mixed; boundary=x",
        "textplain",
        "application/octet-stream",
    ],
)
def test_the_simple_text_reading_agrees_with_the_email_package(content_type: str | None) -> None:
    """Content-Types read without ``email.message.Message`` read as it reads them."""
    from email.message import Message

    from sink.message import _simple_text

    simple = _simple_text(content_type)
    if simple is None:
        return  # left to Message
    info = Message()
    if content_type is not None:
        info["content-type"] = content_type
    assert simple == (info.get_content_type(), info.get_content_charset())
    assert info.get_filename() is None


# --- summarize's one-regex header scan against the line-by-line one -------------------------

_HEAD_SAMPLES = [
    b"",
    b"Subject: plain\r\n",
    b"Subject: no line end",
    b"From: App <app@example.test>\r\nTo: <a@b.test>\r\nSubject: hi\r\nDate: x\r\n",
    b"subject: lower\nFROM: UPPER <A@B.TEST>\ntO: mixed@Case.Test\ncC: c@d.test\n",
    b"Subject : spaced name\r\nSubject\t: tabbed name\r\nSubject \t :both\r\n",
    b"Subject: one\r\nSubject: two\r\nFrom: a@x.test\r\nFrom: b@x.test\r\n",
    b"To: a@x.test\r\nTo: b@x.test\r\nCc: c@x.test, d@x.test\r\nCc: e@x.test\r\n",
    b"Subject: folded\r\n  over\r\n\tthree lines\r\nTo: x@y.test\r\n",
    b"DKIM-Signature: v=1;\r\n subject: not a field\r\n\tFrom: nor this\r\nFrom: a@x.test\r\n",
    b" leading continuation\r\nSubject: after it\r\n",
    b"From sender@x.test Tue Oct 20 02:30:00 2026\nSubject: mbox\n",
    b"Subject\r: cr in name\r\n\rSubject: cr first\r\nSubject:cr\r\r\n more\r\r\n",
    b"Subject: =?utf-8?q?caf=C3=A9?= =?utf-8?b?w6k=?=\r\n",
    b"Subject: =?iso-8859-1?q?Gr=FC=DFe?=\r\n =?utf-8?q?_folded?=\r\n",
    "Subject: Grüße 😀\r\nFrom: Ünïcode <ü@x.test>\r\n".encode(),
    "Subject: Grüße\r\nFrom: latin <a@x.test>\r\n".encode("latin-1"),
    b"Subject: \xff\xfe broken utf-8\r\n",
    "\u017fubject: long s\r\n\u212ao: kelvin\r\n\u0130Subject: dotted\r\n".encode(),
    b"Subject: nul\x00 and \x1b escape\r\nDate: Mon,\x7f 1 Jan\r\n",
    "Subject: a\u2028b\u2029c\u0085d\u00a0e\r\n".encode(),
    b"Subject:\r\nDate:   \r\nTo:\r\nCc: ;\r\nFrom:\r\n",
    b"X-Subject: no\r\nSubjects: no\r\nDate-Sent: no\r\nToo: no\r\nccc: no\r\n",
    b"Subject x: not wanted\r\nnocolon\r\n: empty name\r\n",
    b"To: " + b"a@x.test, " * 2000 + b"\r\n",
    b"".join(b"To: a%d@x.test\r\n" % i for i in range(1100)),
    b"".join(b"Cc: c%d@x.test\r\n x\r\n" % i for i in range(1001)) + b"Subject: late\r\n",
    b"Subject: " + b"s" * 70_000 + b"\r\n",
    b"Subject: " + b"s" * 65_530 + b"\r\n   \r\n",
]


def _slow_fields(head: bytes) -> list[tuple[str, str]]:
    return message._fields(head, message._SUMMARY_FIELDS)


@pytest.mark.parametrize("head", _HEAD_SAMPLES)
def test_summary_fields_match_the_line_by_line_scan(head: bytes) -> None:
    """The regex scan finds the same fields and values as the line-by-line one."""
    assert message._summary_fields(head) == _slow_fields(head)
    for raw in (head, head + b"\r\nbody\r\n", head.replace(b"\r\n", b"\n") + b"\n\nbody"):
        head_end, _ = message._head_span(raw, 0, len(raw))
        block = raw[: min(head_end, message.MAX_HEAD_BYTES)]
        assert summarize(raw) == message._summary(_slow_fields(block))


_NAMES = ["Subject", "SUBJECT", "subject", "From", "from", "FROM", "To", "tO", "Cc", "CC"]
_NAMES += ["Date", "X-Mailer", "Received", "Toe", "\u017fubject", "\u212ao", "From x", ""]
_VALUES = ["", " ", "plain text", "App <app@example.test>", "<a@b.test>", "a@B.Test, c@d.test"]
_VALUES += ['"Doe, J" <j@x.test>', "=?utf-8?q?caf=C3=A9?=", "=?utf-8?b?w6k=?= =?latin1?q?=E9?="]
_VALUES += ["Grüße", "\x00\x1b\x7f", "tab\there", "a\u2028b", "Mon, 1 Jan 2024 10:00 +0000"]


@st.composite
def _header_blocks(draw: st.DrawFn) -> bytes:
    lines = []
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.integers(0, 4)) == 0:  # a folded line, or a stray one
            line = draw(st.sampled_from([" ", "\t", "  x", "\tmore", "\r", "junk"]))
        else:
            name = draw(st.sampled_from(_NAMES))
            colon = draw(st.sampled_from([":", ": ", " :", "\t: ", ":  "]))
            line = name + colon + draw(st.sampled_from(_VALUES) | st.text(max_size=20))
        encoding = draw(st.sampled_from(["utf-8", "utf-8", "latin-1"]))
        ending = draw(st.sampled_from(["\r\n", "\r\n", "\n", "\r\r\n", "\r"]))
        lines.append(line.encode(encoding, "replace") + ending.encode())
    return b"".join(lines)


@given(_header_blocks())
@settings(max_examples=500, deadline=None)
def test_summary_fields_match_on_generated_blocks(head: bytes) -> None:
    """On generated header blocks the regex scan and the line-by-line one agree."""
    assert message._summary_fields(head) == _slow_fields(head)
    raw = head + b"\r\n\r\nbody"
    head_end, _ = message._head_span(raw, 0, len(raw))
    assert summarize(raw) == message._summary(_slow_fields(raw[:head_end]))


def test_no_controls_spares_only_strings_without_controls() -> None:
    """Every character the control table replaces is unprintable, so skipping it is exact."""
    assert not any(chr(c).isprintable() for c in message._CONTROLS)


@given(st.text())
def test_no_controls_is_the_control_table(value: str) -> None:
    """_no_controls gives what translating with the control table gives."""
    assert message._no_controls(value) == value.translate(message._CONTROLS)


def test_a_display_name_in_an_unknown_charset_is_kept_with_a_warning() -> None:
    """From: =?x-klingon?Q?...?= keeps a name read as UTF-8 and says so in parse_warnings;
    a known charset adds no warning."""
    unknown = message.parse(
        b"From: =?x-klingon?Q?Kapla=E9?= <a@b.test>\r\nTo: c@d.test\r\n\r\nbody\r\n"
    )
    assert unknown.from_name == "Kapla\ufffd" and unknown.from_addr == "a@b.test"
    assert any("x-klingon" in w and "unknown charset" in w for w in unknown.parse_warnings)
    known = message.parse(b"From: =?utf-8?Q?Kapla=C3=A9?= <a@b.test>\r\n\r\nbody\r\n")
    assert known.from_name == "Kaplaé" and known.parse_warnings == ()


def test_a_kept_analysis_reads_back_or_is_worked_out_anew() -> None:
    """An analysis kept as JSON gives the same parse; one of another version, or unreadable,
    is None (the read then works it out again)."""
    from sink.message import Analysis

    raw = b"From: a@b.test\r\nSubject: Code 482913\r\n\r\nYour code is 482913\r\n"
    parsed = parse(raw)
    kept = Analysis.from_json(Analysis.of(parsed).to_json())
    assert kept == Analysis.of(parsed) and parse(raw, kept) == parsed
    assert Analysis.from_json('{"v": 0, "links": []}') is None
    assert Analysis.from_json("not json") is None and Analysis.from_json('{"v": 1}') is None
