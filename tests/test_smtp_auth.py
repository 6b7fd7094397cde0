"""SMTP AUTH (contract v3, issue 22): any login by default, ``--smtp-auth`` checks, none with
``--no-smtp-auth``; the user name kept as the message's ``envelope.auth_user``.

Real servers over real sockets: raw bytes where the exchange itself is under test, smtplib
where a mailer's view is (its CRAM-MD5 computes the real HMAC).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import smtplib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sink.config import Settings, settings_from
from sink.errors import ConfigError
from tests.support import Server, create_inbox, make_certificate, start_server
from tests.test_smtp_hardening import Raw, greeted

SENDER = "app@example.test"
USER, PASSWORD = "ci-app@example.test", "s3cret:with-colon"
OTHER_USER, OTHER_PASSWORD = "second", "pa55word"


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def plain(user: str, password: str) -> str:
    return b64(f"\0{user}\0{password}")


def cram_response(client: Client, user: str, password: str) -> str:
    """Answer the server's CRAM-MD5 challenge (RFC 2195) from its 334 line."""
    challenge = base64.b64decode(client.last[4:])
    digest = hmac.new(password.encode(), challenge, hashlib.md5).hexdigest()
    return b64(f"{user} {digest}")


class Client(Raw):
    """Raw, keeping the last reply's text (a 334 challenge)."""

    last = ""

    def code(self) -> int:
        self.last = self.reply().splitlines()[-1]
        return int(self.last[:3])


def login(client: Client, mechanism: str, user: str, password: str) -> int:
    """One AUTH exchange by mechanism; the final reply's code."""
    if mechanism == "PLAIN":
        return client.cmd(f"AUTH PLAIN {plain(user, password)}")
    if mechanism == "PLAIN-challenge":
        assert client.cmd("AUTH PLAIN") == 334
        return client.cmd(plain(user, password))
    if mechanism == "LOGIN":
        assert client.cmd("AUTH LOGIN") == 334
        assert client.cmd(b64(user)) == 334
        return client.cmd(b64(password))
    if mechanism == "LOGIN-initial":
        assert client.cmd(f"AUTH LOGIN {b64(user)}") == 334
        return client.cmd(b64(password))
    assert mechanism == "CRAM-MD5"
    assert client.cmd("AUTH CRAM-MD5") == 334
    return client.cmd(cram_response(client, user, password))


MECHANISMS = ["PLAIN", "PLAIN-challenge", "LOGIN", "LOGIN-initial", "CRAM-MD5"]


def send_one(client: Client, to: str, subject: str) -> None:
    assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250
    assert client.cmd(f"RCPT TO:<{to}>") == 250
    assert client.cmd("DATA") == 354
    assert client.cmd(f"Subject: {subject}\r\n\r\nbody\r\n.") == 250


def only_message(http: httpx.Client, inbox_id: str) -> dict[str, Any]:
    listed = http.get(f"/v1/inboxes/{inbox_id}/messages").json()["messages"]
    assert len(listed) == 1, listed
    response = http.get(f"/v1/messages/{listed[0]['message_id']}")
    assert response.status_code == 200, response.text
    message: dict[str, Any] = response.json()
    return message


@pytest.fixture(scope="module")
def checking(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(
        tmp_path_factory.mktemp("checking"),
        "--smtp-auth",
        f"{USER}:{PASSWORD}",
        "--smtp-auth",
        f"{OTHER_USER}:{OTHER_PASSWORD}",
    )
    yield running
    running.stop()


@pytest.fixture(scope="module")
def no_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("no-auth"), "--no-smtp-auth")
    yield running
    running.stop()


# -- the default: any login ---------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_any_login_is_accepted_and_its_user_kept(server: Server, mechanism: str) -> None:
    """By default every credential gets 235 over plaintext, and the message's envelope keeps
    the user name (never the password)."""
    with server.http() as http:
        inbox = create_inbox(http)
        with Client(server.smtp_port) as client:
            greeted(client)
            assert login(client, mechanism, "whoever", "any-password") == 235
            send_one(client, inbox["address"], f"authed by {mechanism}")
        message = only_message(http, inbox["inbox_id"])
    assert message["envelope"]["auth_user"] == "whoever"
    assert "any-password" not in str(message)


def test_cram_md5_takes_any_response_by_default(server: Server) -> None:
    """Accepting any login, CRAM-MD5 takes any digest; the user is the response's first part."""
    with server.http() as http:
        inbox = create_inbox(http)
        with Client(server.smtp_port) as client:
            greeted(client)
            assert client.cmd("AUTH CRAM-MD5") == 334
            assert client.cmd(b64("someone not-a-real-digest")) == 235
            send_one(client, inbox["address"], "cram")
        assert only_message(http, inbox["inbox_id"])["envelope"]["auth_user"] == "someone"


def test_mail_without_auth_has_a_null_auth_user(server: Server) -> None:
    """A client that does not authenticate is served as before; auth_user is null."""
    with server.http() as http:
        inbox = create_inbox(http)
        server.send(inbox["address"])
        assert only_message(http, inbox["inbox_id"])["envelope"]["auth_user"] is None


def test_caught_mail_keeps_its_auth_user(server: Server) -> None:
    """Caught mail (GET /v1/unrouted/{id}) carries the AUTH user name too."""
    with server.http() as http:
        with Client(server.smtp_port) as client:
            greeted(client)
            assert login(client, "PLAIN", "caught-user", "pw") == 235
            send_one(client, "nobody@elsewhere.test", "caught with a login")
        listed = http.get("/v1/unrouted", params={"limit": 20}).json()["messages"]
        (item,) = [m for m in listed if m["subject"] == "caught with a login"][:1]
        caught = http.get(f"/v1/unrouted/{item['id']}").json()
    assert caught["envelope"]["auth_user"] == "caught-user"


def test_smtplib_logs_in_with_any_credentials(server: Server) -> None:
    """A mailer's own login (smtplib picks CRAM-MD5 first) passes with any pair."""
    with server.http() as http:
        inbox = create_inbox(http)
        with smtplib.SMTP("127.0.0.1", server.smtp_port, timeout=30) as client:
            assert client.login("django-app", "from-the-config")[0] == 235
            client.sendmail(SENDER, [inbox["address"]], b"Subject: smtplib\r\n\r\nbody\r\n")
        assert only_message(http, inbox["inbox_id"])["envelope"]["auth_user"] == "django-app"


# -- a malformed exchange: 501, 504, 503; the connection keeps working ---------------------


@pytest.mark.parametrize(
    ("exchange", "code"),
    [
        (["AUTH"], 501),  # a bare AUTH
        (["AUTH PLAIN not*base64"], 501),
        (["AUTH PLAIN", "not*base64"], 501),
        ([f"AUTH PLAIN {b64('no-separators')}"], 501),
        ([f"AUTH PLAIN {b64(b'one' + bytes(1) + b'separator')}"], 501),
        (["AUTH PLAIN", "*"], 501),  # the client cancels
        (["AUTH LOGIN", "*"], 501),
        (["AUTH LOGIN", b64("user"), "*"], 501),
        (["AUTH LOGIN", "%%%"], 501),
        (["AUTH CRAM-MD5", "*"], 501),
        (["AUTH CRAM-MD5", b64("no-space")], 501),
        (["AUTH CRAM-MD5 aW5pdGlhbA=="], 501),  # CRAM-MD5 has no initial response
        ([f"AUTH PLAIN {plain('u' * 257, 'pw')}"], 501),  # a user name over 256 bytes
        (["AUTH LOGIN", b64("u" * 300), b64("pw")], 501),
        (["AUTH GSSAPI"], 504),
        (["AUTH XOAUTH2 dG9rZW4="], 504),
    ],
)
def test_a_malformed_exchange_is_refused_and_the_session_goes_on(
    server: Server, exchange: list[str], code: int
) -> None:
    """Bad base64, PLAIN without its separators, a cancel, a bare AUTH: 501; an unknown
    mechanism 504; then AUTH and mail still work on the same connection."""
    with Client(server.smtp_port) as client:
        greeted(client)
        *steps, last = exchange
        for step in steps:
            assert client.cmd(step) == 334
        assert client.cmd(last) == code
        assert client.cmd("NOOP") == 250
        assert login(client, "PLAIN", "after", "trouble") == 235
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250


def test_a_second_auth_is_503(server: Server) -> None:
    """After a successful AUTH another is 503 (RFC 4954 4), and mail goes on."""
    with Client(server.smtp_port) as client:
        greeted(client)
        assert login(client, "LOGIN", "first", "pw") == 235
        assert login(client, "PLAIN", "second", "pw") == 503
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250


def test_auth_inside_a_mail_transaction_is_503(server: Server) -> None:
    """AUTH between MAIL and the end of the message is 503 (RFC 4954 4)."""
    with Client(server.smtp_port) as client:
        greeted(client)
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250
        assert client.cmd(f"AUTH PLAIN {plain('late', 'pw')}") == 503
        assert client.cmd("RSET") == 250
        assert login(client, "PLAIN", "late", "pw") == 235


def test_mechanism_names_are_case_insensitive(server: Server) -> None:
    """``auth plain`` is AUTH PLAIN (RFC 4954 4)."""
    with Client(server.smtp_port) as client:
        greeted(client)
        assert client.cmd(f"auth plain {plain('lower', 'case')}") == 235


def test_auth_before_ehlo_is_refused(server: Server) -> None:
    """AUTH needs EHLO first (503), then works."""
    with Client(server.smtp_port) as client:
        assert client.code() == 220
        assert client.cmd(f"AUTH PLAIN {plain('early', 'pw')}") == 503
        assert client.cmd("EHLO client.example.test") == 250
        assert client.cmd(f"AUTH PLAIN {plain('early', 'pw')}") == 235


def test_auth_after_helo_is_503_send_ehlo_first(server: Server) -> None:
    """AUTH after HELO (a session without extensions) is 503 5.5.1 asking for EHLO, not a
    500; after EHLO it works."""
    with Client(server.smtp_port) as client:
        assert client.code() == 220
        assert client.cmd("HELO client.example.test") == 250
        assert client.cmd(f"AUTH PLAIN {plain('old', 'pw')}") == 503
        assert client.last.startswith("503 5.5.1 ") and "EHLO" in client.last
        assert client.cmd("EHLO client.example.test") == 250
        assert client.cmd(f"AUTH PLAIN {plain('old', 'pw')}") == 235


# -- --smtp-auth: checking --------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_configured_pair_passes_with_every_mechanism(checking: Server, mechanism: str) -> None:
    """With --smtp-auth (repeatable; the password split at the first colon), each configured
    pair authenticates with PLAIN, LOGIN and CRAM-MD5 (the real HMAC) and mail is stored."""
    with checking.http() as http:
        inbox = create_inbox(http)
        with Client(checking.smtp_port) as client:
            greeted(client)
            assert login(client, mechanism, USER, PASSWORD) == 235
            send_one(client, inbox["address"], "checked")
        assert only_message(http, inbox["inbox_id"])["envelope"]["auth_user"] == USER
        with Client(checking.smtp_port) as client:
            greeted(client)
            assert login(client, mechanism, OTHER_USER, OTHER_PASSWORD) == 235


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize(
    ("user", "password"),
    [
        (USER, "wrong"),
        (USER, OTHER_PASSWORD),  # another pair's password
        ("nobody", PASSWORD),
        (USER, PASSWORD.split(":")[0]),  # the password cut at its colon
    ],
)
def test_a_wrong_pair_is_535_and_mail_stays_refused(
    checking: Server, mechanism: str, user: str, password: str
) -> None:
    """Checking, a wrong pair is 535 with every mechanism, MAIL stays 530, and a right pair
    still passes on the same connection."""
    with Client(checking.smtp_port) as client:
        greeted(client)
        assert login(client, mechanism, user, password) == 535
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 530
        assert login(client, mechanism, USER, PASSWORD) == 235
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250


def test_checking_offers_the_same_mechanisms_and_needs_auth(checking: Server) -> None:
    """Checking, EHLO still says AUTH PLAIN LOGIN CRAM-MD5, and MAIL before AUTH is 530."""
    with Client(checking.smtp_port) as client:
        assert client.code() == 220
        client.send("EHLO client.example.test\r\n")
        assert "250-AUTH PLAIN LOGIN CRAM-MD5" in client.reply()
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 530


def test_smtplib_logs_in_against_a_configured_pair(checking: Server) -> None:
    """smtplib's login (CRAM-MD5 first) passes with the right pair and fails with a wrong one."""
    with (
        smtplib.SMTP("127.0.0.1", checking.smtp_port, timeout=30) as client,
        pytest.raises(smtplib.SMTPAuthenticationError),
    ):
        client.login(USER, "wrong")
    with smtplib.SMTP("127.0.0.1", checking.smtp_port, timeout=30) as client:
        assert client.login(USER, PASSWORD)[0] == 235


def test_passwords_never_reach_the_log(checking: Server, server: Server) -> None:
    """Neither the configured password nor any given one (nor their base64) is logged; a
    refused login is logged with its mechanism only."""
    before = len(checking.log_lines())
    with Client(checking.smtp_port) as client:
        greeted(client)
        assert login(client, "LOGIN", USER, "typed-wrong-secret") == 535
        assert login(client, "PLAIN", USER, PASSWORD) == 235
    refused = [
        line for line in checking.log_lines()[before:] if line["event"] == "smtp_auth_refused"
    ]
    assert refused == [{**refused[0], "mechanism": "LOGIN"}] and USER not in str(refused)
    for running in (checking, server):
        text = running.log_path.read_text()
        for secret in (PASSWORD, "typed-wrong-secret", "any-password", OTHER_PASSWORD):
            assert secret not in text
            assert b64(secret) not in text
        assert plain(USER, PASSWORD) not in text


# -- --no-smtp-auth ----------------------------------------------------------------------------


def test_no_smtp_auth_offers_none(no_auth: Server) -> None:
    """--no-smtp-auth: no AUTH in EHLO, the command is 502, a MAIL AUTH= parameter 555, and
    mail is served as before."""
    with Client(no_auth.smtp_port) as client:
        assert client.code() == 220
        client.send("EHLO client.example.test\r\n")
        assert "AUTH" not in client.reply()
        assert client.cmd(f"AUTH PLAIN {plain(USER, PASSWORD)}") == 502
        assert client.cmd(f"MAIL FROM:<{SENDER}> AUTH=<>") == 555
        assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250


# -- --smtp-require-tls: AUTH only after STARTTLS ----------------------------------------------


def test_require_tls_offers_auth_only_after_starttls(tmp_path: Path) -> None:
    """With --smtp-require-tls, EHLO offers AUTH only once STARTTLS is done; before, AUTH is
    530; after, any login passes."""
    cert, key = make_certificate(tmp_path, "sink.test")
    running = start_server(
        tmp_path, "--tls-cert", str(cert), "--tls-key", str(key), "--smtp-require-tls"
    )
    try:
        with Client(running.smtp_port) as client:
            assert client.code() == 220
            client.send("EHLO client.example.test\r\n")
            assert "AUTH" not in client.reply()
            assert client.cmd(f"AUTH PLAIN {plain('u', 'p')}") == 530
            assert client.cmd("STARTTLS") == 220
            client.starttls()
            client.send("EHLO client.example.test\r\n")
            assert "250-AUTH PLAIN LOGIN CRAM-MD5" in client.reply()
            assert login(client, "CRAM-MD5", "u", "p") == 235
            assert client.cmd(f"MAIL FROM:<{SENDER}>") == 250
    finally:
        running.stop()


# -- configuration -----------------------------------------------------------------------------


def _settings(argv: list[str], environ: dict[str, str] | None = None) -> Settings:
    from api.cli import _parser

    return settings_from(_parser().parse_args(["serve", *argv]), environ or {})


def test_smtp_auth_pairs_split_at_the_first_colon() -> None:
    """--smtp-auth is repeatable and split at the first colon; the environment holds one pair;
    the flag beats the environment."""
    given = _settings(["--smtp-auth", "a:b:c", "--smtp-auth", "d:e"], {"RUNSINK_SMTP_AUTH": "x:y"})
    assert given.smtp_auth == (("a", "b:c"), ("d", "e"))
    assert _settings([], {"RUNSINK_SMTP_AUTH": "x:y:z"}).smtp_auth == (("x", "y:z"),)
    assert _settings([]).smtp_auth == () and not _settings([]).no_smtp_auth
    assert _settings([], {"RUNSINK_NO_SMTP_AUTH": "1"}).no_smtp_auth
    assert "b:c" not in repr(given)


@pytest.mark.parametrize("bad", ["nocolon", ":password", "user:", "us\ter:pw"])
def test_a_malformed_pair_is_refused_without_echoing_it(bad: str) -> None:
    """A pair without a user, a colon or a password stops start-up; the message never
    repeats the value (it holds a password)."""
    with pytest.raises(ConfigError) as raised:
        _settings(["--smtp-auth", bad])
    assert "--smtp-auth" in raised.value.message
    assert bad not in raised.value.message


BOTH = ("--smtp-auth", "u:secret-pw", "--no-smtp-auth")


def test_smtp_auth_with_no_smtp_auth_is_exit_2(tmp_path: Path) -> None:
    """Giving both --smtp-auth and --no-smtp-auth stops start-up with exit code 2."""
    done = subprocess.run(
        [sys.executable, "-m", "sink", "serve", "--db", str(tmp_path / "x.db"), *BOTH],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--no-smtp-auth" in done.stderr and "secret-pw" not in done.stderr
