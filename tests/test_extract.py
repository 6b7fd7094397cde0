from __future__ import annotations

import time

import pytest

from sink.extract import extract_evidence, find_codes, find_links, html_to_text

# --- html_to_text ----------------------------------------------------------------------------


def test_html_to_text_drops_script_style_and_title() -> None:
    """Script, style and title content never reaches the text."""
    html = (
        "<html><head><title>Subject line</title><style>p{color:red}</style></head>"
        "<body><script>var code = 999999;</script><p>Hello</p></body></html>"
    )
    assert html_to_text(html) == "Hello"


def test_html_to_text_puts_block_elements_on_their_own_lines() -> None:
    """Paragraphs, divs, rows and line breaks become line breaks; inline tags do not."""
    html = "<p>Your code is</p><div><b>48</b><i>29</i>13</div>line one<br>line two"
    assert html_to_text(html) == "Your code is\n\n482913\nline one\nline two"


def test_html_to_text_decodes_entities_and_collapses_whitespace() -> None:
    """Entities are decoded and runs of whitespace (nbsp included) become one space."""
    html = "<p>Fish &amp;   chips&nbsp;&nbsp;&mdash;\n\t&#8364;5 &eacute;t&eacute;</p>"
    assert html_to_text(html) == "Fish & chips — €5 été"


def test_html_to_text_keeps_preformatted_lines() -> None:
    """Inside <pre>, source line breaks are kept."""
    assert html_to_text("<p>a\nb</p><pre>x\ny</pre>") == "a b\n\nx\ny"


def test_html_to_text_removes_invisible_preheader_padding() -> None:
    """Zero-width joiners and soft hyphens used as preheader padding are removed."""
    assert html_to_text("<p>Hi&#8204;&zwnj;&shy;&#65279;</p><p>there</p>") == "Hi\n\nthere"


def test_html_to_text_keeps_stray_angle_brackets_as_text() -> None:
    """A "<" that opens no tag is text, and unfinished constructs do not swallow the rest."""
    assert html_to_text("<p>1 < 2 and 3 > 2</p><p>ok") == "1 < 2 and 3 > 2\n\nok"
    assert html_to_text("before <!-- never closed <p>after") == "before <!-- never closed\nafter"


def test_html_to_text_drops_comments_and_conditional_blocks() -> None:
    """Comments (Outlook conditional blocks included) are not text."""
    html = "<!--[if mso]><p>Outlook copy</p><![endif]--><p>Body</p><!-- note -->"
    assert html_to_text(html) == "Body"


@pytest.mark.parametrize(
    "html",
    [
        "<!--" * 20000,
        "</a" * 20000,
        '<a x="' * 20000,
        "<" * 50000,
        "<![CDATA[" * 20000,
        "<!DOCTYPE" * 20000,
        "<?xml" * 20000,
        "<script>" + "</x" * 20000,
        "&#" * 20000 + "&#x110000;&#0;&#xd800;",
        "<a href='x' title=\"it's\">" * 5000,
        "<table>" * 5000 + "</td>" * 5000,
        "<![if !mso]>hello<![endif]>",
        "<!>",
        "<a href=>x</a><img src>",
    ],
)
def test_html_to_text_survives_malformed_markup(html: str) -> None:
    """Crafted or broken HTML neither raises nor takes quadratic time."""
    html_to_text(html)
    find_links(None, html)


def test_html_to_text_is_linear_on_unfinished_comments() -> None:
    """200 000 unclosed comment openers (quadratic in bare html.parser) render quickly."""
    started = time.perf_counter()
    html_to_text("<!--" * 200_000)
    assert time.perf_counter() - started < 5  # bare html.parser needs minutes


# --- find_links ------------------------------------------------------------------------------


def test_find_links_returns_absolute_http_urls_only() -> None:
    """Relative, mailto:, javascript: and data: links are left out."""
    html = (
        '<a href="/relative">a</a><a href="mailto:x@y.test">b</a>'
        '<a href="javascript:alert(1)">c</a>'
        '<a href="data:text/html,hi">d</a><a href="ftp://files.test/x">e</a>'
        '<a href="https://app.test/ok">f</a><a href="http://[::1">g</a>'
    )
    assert find_links(None, html) == ("https://app.test/ok",)


def test_find_links_decodes_entities_in_hrefs_and_deduplicates() -> None:
    """ "&amp;" in an href is "&", and a URL found twice is listed once."""
    html = '<a href="https://app.test/v?a=1&amp;b=2">Verify</a>'
    text = "Verify: https://app.test/v?a=1&b=2"
    assert find_links(text, html) == ("https://app.test/v?a=1&b=2",)


def test_find_links_strips_trailing_punctuation_from_text_urls() -> None:
    """Sentence punctuation and brackets after a text URL are not part of it."""
    text = (
        "Go to https://app.test/a). Or (https://app.test/b), or <https://app.test/c>;"
        " or https://app.test/d?x=1. See https://wiki.test/Foo_(bar) too."
    )
    assert set(find_links(text, None)) == {
        "https://app.test/a",
        "https://app.test/b",
        "https://app.test/c",
        "https://app.test/d?x=1",
        "https://wiki.test/Foo_(bar)",
    }


def test_find_links_joins_hrefs_wrapped_over_lines() -> None:
    """Newlines and tabs inside an href are dropped, as browsers do."""
    html = '<a href="  https://app.test/verify?\n\ttoken=abc  ">Verify</a>'
    assert find_links(None, html) == ("https://app.test/verify?token=abc",)


def test_find_links_ranks_action_links_first() -> None:
    """Action links come before ordinary links, which come before fine print."""
    html = (
        '<a href="https://app.test/privacy">Privacy</a>'
        '<a href="https://app.test/">Home</a>'
        '<a href="https://app.test/email/confirm?t=1">Confirm</a>'
        '<a href="https://app.test/unsubscribe">Unsubscribe</a>'
    )
    assert find_links(None, html) == (
        "https://app.test/email/confirm?t=1",
        "https://app.test/",
        "https://app.test/privacy",
        "https://app.test/unsubscribe",
    )


def test_find_links_reads_the_anchor_text() -> None:
    """An opaque URL is an action link when its anchor says so."""
    html = (
        '<a href="https://app.test/l/8f2a">Read the docs</a>'
        '<a href="https://app.test/l/9c1b">Reset my password</a>'
    )
    assert find_links(None, html)[0] == "https://app.test/l/9c1b"


@pytest.mark.parametrize(
    "label",
    ["Confirmar mi cuenta", "E-Mail bestätigen", "Vérifier mon adresse", "Restablecer contraseña"],
)
def test_find_links_knows_action_words_in_other_languages(label: str) -> None:
    """Spanish, German and French action words make an action link."""
    html = f'<a href="https://app.test/docs">Docs</a><a href="https://app.test/x/1">{label}</a>'
    assert find_links(None, html)[0] == "https://app.test/x/1"


def test_find_links_ranks_tracking_redirects_by_their_target() -> None:
    """A redirect is kept as given but ranked by the URL it leads to."""
    verify = "https://click.mailer.test/r?u=https%3A%2F%2Fapp.test%2Fverify%3Ft%3Dabc"
    home = "https://click.mailer.test/r?u=https%3A%2F%2Fapp.test%2F"
    html = f'<a href="{home}">App</a><a href="{verify}">Continue</a>'
    assert find_links(None, html) == (verify, home)


def test_find_links_reads_base64_redirect_targets() -> None:
    """A redirect carrying its target in base64 ("aHR0c..." is "http") is ranked by it."""
    target = (
        "aHR0cHM6Ly9hcHAudGVzdC9wYXNzd29yZC9yZXNldD90PTE"  # https://app.test/password/reset?t=1
    )
    html = (
        '<a href="https://t.test/c/eJx1">Our blog</a>'
        f'<a href="https://t.test/c/{target}">Continue</a>'
    )
    assert find_links(None, html)[0] == f"https://t.test/c/{target}"


def test_find_links_puts_unsubscribe_last_even_with_a_token() -> None:
    """An unsubscribe link is the least useful link, even though it carries a token."""
    html = (
        '<a href="https://app.test/unsubscribe?token=abc">Unsubscribe</a>'
        '<a href="https://app.test/blog">Blog</a>'
        '<a href="https://app.test/verify?token=xyz">Verify</a>'
    )
    links = find_links(None, html)
    assert links[0] == "https://app.test/verify?token=xyz"
    assert links[-1] == "https://app.test/unsubscribe?token=abc"


def test_find_links_puts_images_and_pixels_last() -> None:
    """Image sources, image files and social profiles rank below every other link."""
    html = (
        '<img src="https://open.mailer.test/o/abc" width="1" height="1">'
        '<a href="https://cdn.app.test/banner.PNG">banner</a>'
        '<a href="https://twitter.com/app">Twitter</a>'
        '<a href="https://app.test/pricing">Pricing</a>'
    )
    links = find_links(None, html)
    assert links[0] == "https://app.test/pricing"
    assert set(links[1:]) == {
        "https://open.mailer.test/o/abc",
        "https://cdn.app.test/banner.PNG",
        "https://twitter.com/app",
    }


def test_find_links_reads_the_line_above_a_bare_text_url() -> None:
    """In text mail, the sentence introducing a URL says what it is."""
    text = (
        "Read our guide:\nhttps://app.test/l/1\n\n"
        "To reset your password, open this link:\nhttps://app.test/l/2\n"
    )
    assert find_links(text, None) == ("https://app.test/l/2", "https://app.test/l/1")


def test_find_links_survives_broken_urls() -> None:
    """Odd URLs (bad IPv6 hosts, control characters, huge lengths) are dropped, not raised."""
    text = "https://[oops/ https://\x7fx.test https://" + "a" * 20000 + ".test https:// http://"
    html = '<a href="https://[::1">x</a><a href="https://ok.test/\x00">y</a>'
    assert find_links(text, html) == ()


def test_find_links_handles_nothing() -> None:
    """No bodies, no links."""
    assert find_links(None, None) == ()
    assert find_links("", "") == ()


# --- find_codes ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("Your verification code is 482913.", "482913"),
        ("Your verification code is 482 913.", "482913"),
        ("Your verification code is 482-913.", "482913"),
        ("Your code: 4 8 2 9 1 3", "482913"),
        ("Use code A7K-9QX to sign in.", "A7K-9QX"),
        ("Your login code:\n\nK7Q2ZP\n", "K7Q2ZP"),
        ("Your PIN is 4821", "4821"),
        ("OTP: 0071", "0071"),
        ("Enter 93018274 to continue", "93018274"),
        ("482913 is your one-time passcode", "482913"),
    ],
)
def test_find_codes_reads_common_formats(text: str, code: str) -> None:
    """Digits, grouped digits (normalised) and upper-case alphanumerics are found."""
    assert find_codes(text, None)[0] == code


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("Tu código de verificación es 582031", "582031"),
        ("Ihr Bestätigungscode lautet: 904812", "904812"),
        ("認証コード\uff1a318274", "318274"),  # a full-width colon, as Japanese mail writes it
        ("コードは318274です", "318274"),
        ("Ваш код: 775310", "775310"),
        ("Votre code de vérification : 661204", "661204"),
    ],
)
def test_find_codes_knows_keywords_in_other_languages(text: str, code: str) -> None:
    """Spanish, German, Japanese, Russian and French code keywords are understood."""
    assert find_codes(text, None) == (code,)


def test_find_codes_ranks_by_closeness_to_a_keyword() -> None:
    """The number right after "code" wins over numbers further away."""
    text = "Request 55812 received. Your security code is 771204. Reference 66190."
    assert find_codes(text, None)[0] == "771204"


def test_find_codes_prefers_codes_seen_in_the_subject() -> None:
    """Of two plausible codes, the one the subject repeats comes first."""
    text = "Code for the web: 111222. Code for the app: 333444."
    assert find_codes(text, None, subject="333444 is your code")[0] == "333444"


def test_find_codes_reads_the_subject_alone() -> None:
    """A code only in the subject is still found."""
    assert find_codes("Thanks for signing up.", None, subject="Your Acme code: 550123") == (
        "550123",
    )


def test_find_codes_reads_html_bodies() -> None:
    """Codes in HTML-only mail are found in the rendered text."""
    html = '<p>Your verification code</p><td style="color:#112233;font-size:30px">903 114</td>'
    assert find_codes(None, html) == ("903114",)


def test_find_codes_deduplicates() -> None:
    """A code in the subject, text and HTML is reported once."""
    body = "Your code is 482913"
    assert find_codes(body, f"<p>{body}</p>", subject=body) == ("482913",)


def test_find_codes_needs_some_sign_of_a_code() -> None:
    """Numbers with no code keyword nearby are not codes."""
    text = "Welcome! Over 25000 teams use us. Visit us at 100 Main St, Springfield 62701."
    assert find_codes(text, None) == ()


@pytest.mark.parametrize(
    "text",
    [
        "Your code expires on May 14, 2024.",
        "Security code sent. © 2024 Acme",
        "Verification code link: https://app.test/v/482913?c=771204",
        "Your code was sent to 482913@users.test",
        "Questions about your code? Call +1 415 555 0100 or +44 20 7946 0958",
        "Your code purchase: $1299.00, 1299,00 €, USD 1299",
        "Your code was created 2024-05-14 at 10:30:45, or 14.05.2024, or 05/14/2024",
        "Code colours: #ffffff #1A2B3C",
        "Your code account 123456789012 (12 digits)",
        "ZIP code 94105, promo code SAVE20, error code 5003, QR code",
        "Your order 48291311 code",
        "Code valid for 1440 minutes, 2500 points",
        "Sort code 12-34-56, card ending in 7712, code",
    ],
)
def test_find_codes_excludes_obvious_non_codes(text: str) -> None:
    """Years, URLs, addresses, phones, prices, dates, colours and long numbers are not codes."""
    assert find_codes(text, None) == ()


def test_find_codes_ignores_plain_words_and_lower_case() -> None:
    """Alphanumeric codes need a digit and upper case: words and hex hashes are not codes."""
    text = "Your code: PASSWORD. Code abc123. Code deadbeef. Code HELLO."
    assert find_codes(text, None) == ()


def test_find_codes_ignores_numbers_in_footers() -> None:
    """A keyword belongs to the number next to it, not to an address further down."""
    text = "Your code:\n\n482 913\n\nValid for 10 minutes.\nAcme, 548 Market St, CA 94104"
    assert find_codes(text, None) == ("482913",)


def test_find_codes_handles_nothing() -> None:
    """No bodies, no codes."""
    assert find_codes(None, None) == ()
    assert find_codes("", "", "") == ()


def test_find_codes_is_bounded_on_number_soup() -> None:
    """A body full of numbers and keywords still answers (and at most 20 codes)."""
    text = "code 123456 PIN 9876 OTP 555-123 " * 50_000
    assert len(find_codes(text, text, text)) <= 20


def test_extract_evidence_matches_the_separate_functions() -> None:
    """extract_evidence is find_links and find_codes in one pass."""
    text = "Your code is 482913. Verify: https://app.test/verify?t=1"
    html = '<a href="https://app.test/verify?t=1">Verify</a><p>Code 482913</p>'
    evidence = extract_evidence(text, html, "Your code")
    assert evidence.links == find_links(text, html)
    assert tuple(code.value for code in evidence.codes) == find_codes(text, html, "Your code")


# --- what a person sees (issue 21) -------------------------------------------------------------


def test_codes_rank_subject_and_body_then_body_then_subject() -> None:
    """A code in both the subject and the body beats one in the body only, which beats one
    only in the subject, whatever their scores."""
    evidence = extract_evidence(
        "Your code is 111222. Backup code: 333444.", None, "Code 555666 / code 333444"
    )
    assert [(c.value, c.sources) for c in evidence.codes] == [
        ("333444", ("subject", "text")),
        ("111222", ("text",)),
        ("555666", ("subject",)),
    ]


def test_hidden_html_is_no_source_of_codes_or_links() -> None:
    """display:none text and its links are left out, and given apart as hidden text."""
    html = (
        '<p>Code 482913</p><div style="DISPLAY: none"><p>code 999999</p>'
        '<a href="https://evil.example/x">go</a></div><p>after</p>'
    )
    evidence = extract_evidence(None, html)
    assert [c.value for c in evidence.codes] == ["482913"] and evidence.links == ()
    assert evidence.hidden_text == "code 999999\ngo"
    assert evidence.visible_html == "Code 482913\n\nafter"


def test_media_rules_and_painted_buttons_hide_nothing() -> None:
    """A class hidden only by an @media rule, and white text on a painted button, are seen."""
    html = (
        "<style>@media (max-width:600px) { .desktop { display:none } }</style>"
        '<p class="desktop">Your code is 482913</p>'
        '<a href="https://app.test/verify" style="background:#1a73e8;color:#fff">Verify</a>'
    )
    evidence = extract_evidence(None, html)
    assert evidence.hidden_text is None
    assert [c.value for c in evidence.codes] == ["482913"]
    assert evidence.links == ("https://app.test/verify",)


def test_text_sized_or_shown_again_inside_a_zeroed_wrapper_is_seen() -> None:
    """A template's font-size:0 column (MJML, Foundation) with sized text inside, and
    visibility or colour set again by a child, show their text, codes and links: a child
    sets what CSS inherits; only what hides all it holds (display:none...) stays hidden."""
    column = (
        '<td style="font-size:0px;padding:20px 0"><div style="font-size:0px;display:inline-block">'
        '<div style="font-size:13px;color:#000000">Your verification code is 482913</div>'
        '<a href="https://app.test/verify" style="font-size:13px;color:#fff;background:#414141">'
        "Verify</a></div></td>"
    )
    evidence = extract_evidence(None, column)
    assert evidence.hidden_text is None and [c.value for c in evidence.codes] == ["482913"]
    assert evidence.links == ("https://app.test/verify",)
    for html in (
        '<div style="visibility:hidden"><span style="visibility:visible">Code 551177</span></div>',
        '<div style="color:#fff"><span style="color:#333">Code 551177</span></div>',
    ):
        evidence = extract_evidence(None, html)
        assert [c.value for c in evidence.codes] == ["551177"] and evidence.hidden_text is None


def test_a_link_shows_in_the_link_colour_whatever_the_text_colour_around_it() -> None:
    """A link takes the reader's link colour, not the colour of the text around it: white
    text around a blue link on white hides the text, not the link."""
    html = (
        '<div style="color:#ffffff">Your code is 999999 '
        '<a href="https://app.test/verify">Verify</a></div><p>Your code is 482913</p>'
    )
    evidence = extract_evidence(None, html)
    assert evidence.links == ("https://app.test/verify",)
    assert [c.value for c in evidence.codes] == ["482913"]


def test_text_nearly_the_colour_of_its_background_is_hidden() -> None:
    """#fefefe on the white page, and a link whose only text is sized away, are unseen."""
    html = (
        '<p style="color:#fefefe">Your code is 999999</p><p>Your code is 482913</p>'
        '<div style="font-size:0"><a href="https://evil.example/x">go</a></div>'
    )
    evidence = extract_evidence(None, html)
    assert [c.value for c in evidence.codes] == ["482913"] and evidence.links == ()
    assert evidence.hidden_text == "Your code is 999999\n\ngo"


def test_a_right_to_left_override_is_read_as_shown() -> None:
    """ "\u202e319284\u202c" shows as 482913, and zero-width characters are not there."""
    assert find_codes("Your code is \u202e319284\u202c", None) == ("482913",)
    assert find_codes("Your code is 48\u200b29\u200d13", None) == ("482913",)
