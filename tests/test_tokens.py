"""sink/tokens.py: the tokens file, the keyring, and stateless run tokens."""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import pytest

from sink.config import add_serve_arguments, settings_from
from sink.errors import ConfigError
from sink.policy import BUILTIN
from sink.run_tokens import run_token_expiry
from sink.scopes import ADMIN, READ, Kind, parse_scope
from sink.tokens import Keyring, api_token_entry, load_tokens_file

KEY = b"k" * 32
ADMIN_TOKEN = "admin-token-0123456789abcdef"
TEAM_TOKEN = "team-a-token-0123456789abcdef"
READ_TOKEN = "read-token-0123456789abcdef"

GOOD_FILE = f"""
[tokens.ci-team-a]
token = "{TEAM_TOKEN}"
scope = "runs:team-a-*"

[tokens.auditor]
token_sha256 = "{hashlib.sha256(READ_TOKEN.encode()).hexdigest()}"
scope = "read"
"""


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tokens.toml"
    path.write_text(text)
    return path


def _keyring(tmp_path: Path) -> Keyring:
    entries = (api_token_entry(ADMIN_TOKEN), *load_tokens_file(_file(tmp_path, GOOD_FILE)))
    return Keyring(entries, KEY)


def test_configured_tokens_authenticate_with_their_names_and_scopes(tmp_path: Path) -> None:
    """Plain and sha256 entries and --api-token each give their own grant."""
    keyring = _keyring(tmp_path)
    admin = keyring.authenticate(ADMIN_TOKEN, 0)
    team = keyring.authenticate(TEAM_TOKEN, 0)
    auditor = keyring.authenticate(READ_TOKEN, 0)
    assert admin is not None and (admin.name, admin.scope) == ("api-token", ADMIN)
    assert team is not None and (team.name, team.scope) == (
        "ci-team-a",
        parse_scope("runs:team-a-*"),
    )
    assert auditor is not None and (auditor.name, auditor.scope) == ("auditor", READ)
    for wrong in ("", ADMIN_TOKEN[:-1], ADMIN_TOKEN + "x", ADMIN_TOKEN.upper()):
        assert keyring.authenticate(wrong, 0) is None


def test_a_run_token_names_its_run_and_expiry_and_holds_nothing_else(tmp_path: Path) -> None:
    """A minted token is a run:<id> grant until its expiry; the signature covers both."""
    keyring = _keyring(tmp_path)
    token = keyring.mint("team-a-7:retry.1", 900.25, 1_000.5)
    grant = keyring.authenticate(token, 999.0)
    assert grant is not None
    assert grant.scope.kind is Kind.RUN and grant.scope.covers("team-a-7:retry.1")
    assert not grant.scope.covers("team-a-8")
    assert (grant.issued_at, grant.expires_at) == (900.25, 1_000.5)
    assert grant.name == "run:team-a-7:retry.1"


def test_a_run_token_cannot_be_altered_or_moved_to_another_key(tmp_path: Path) -> None:
    """Changing the run, either time, the version or the signature, or another server's key:
    no grant."""
    keyring = _keyring(tmp_path)
    token = keyring.mint("team-a-7", 1_000.0, 2_000.0)
    prefix, run, issued, expires, signature = token.split(".")
    other_run = keyring.mint("team-b-1", 1_000.0, 2_000.0).split(".")[1]
    forged = [
        ".".join((prefix, other_run, issued, expires, signature)),
        ".".join((prefix, run, issued, "9999999999999", signature)),
        ".".join((prefix, run, "1999999", expires, signature)),  # issued later: survives releases
        ".".join((prefix, run, expires, signature)),
        ".".join(("rt1", run, issued, expires, signature)),
        ".".join(
            (prefix, run, issued, expires, signature[:-1] + ("A" if signature[-1] != "A" else "B"))
        ),
        token + "x",
        token[:-1],
    ]
    for bad in forged:
        assert keyring.authenticate(bad, 0) is None, bad
    assert Keyring((), b"another key " * 3).authenticate(token, 0) is None
    # The same key (another process on the same database) accepts it.
    assert Keyring((), KEY).authenticate(token, 0) is not None


def test_run_token_expiry_is_the_last_live_lease_or_ttl_if_sooner() -> None:
    """Expiry: the latest live lease, capped by ttl_s; without a live lease, a new lease's."""
    ci = BUILTIN["ci"]
    assert run_token_expiry(100.0, [150.0, 400.0, 50.0], None, ci) == 400.0
    assert run_token_expiry(100.0, [150.0, 400.0], 60, ci) == 160.0
    assert run_token_expiry(100.0, [150.0], 600, ci) == 150.0
    assert run_token_expiry(100.0, [], None, ci) == 100.0 + ci.ttl_default_s
    assert run_token_expiry(100.0, [90.0], 10**6, ci) == 100.0 + ci.ttl_max_s


@pytest.mark.parametrize(
    ("text", "named", "says"),
    [
        ('[tokens.a]\ntoken = "short"\nscope = "admin"\n', "[tokens.a]", "16 or more"),
        ('[tokens.a]\ntoken = "with space 0123456789"\nscope = "admin"\n', "[tokens.a]", "spaces"),
        (
            '[tokens.b]\ntoken = "0123456789abcdefgh"\nscope = "write"\n',
            "[tokens.b] scope",
            "write",
        ),
        ('[tokens.b]\ntoken = "0123456789abcdefgh"\n', "[tokens.b] scope", "expected"),
        ('[tokens.c]\nscope = "admin"\n', "[tokens.c]", "exactly one of"),
        (
            '[tokens.c]\ntoken = "0123456789abcdefgh"\ntoken_sha256 = "' + "a" * 64 + '"\n'
            'scope = "admin"\n',
            "[tokens.c]",
            "exactly one of",
        ),
        ('[tokens.d]\ntoken_sha256 = "abc"\nscope = "read"\n', "[tokens.d] token_sha256", "64"),
        ('[tokens.e]\ntoken = "0123456789abcdefgh"\nscope = "runs:"\n', "[tokens.e] scope", "glob"),
        (
            '[tokens.f]\ntoken = "0123456789abcdefgh"\nscope = "read"\nexpires = 1\n',
            "[tokens.f]",
            "unknown key",
        ),
        (
            '[tokens.g]\ntoken = "0123456789abcdefgh"\nscope = "read"\n'
            '[tokens.h]\ntoken = "0123456789abcdefgh"\nscope = "admin"\n',
            "[tokens.h]",
            "same token as [tokens.g]",
        ),
        ('[tokens."bad name"]\ntoken = "0123456789abcdefgh"\nscope = "read"\n', "bad name", "name"),
        ("[policy.ci]\nttl_max_s = 5\n", "--tokens-file", "unknown table"),
        ("", "--tokens-file", "no tokens"),
        ("[tokens\n", "--tokens-file", "not valid TOML"),
    ],
)
def test_a_bad_entry_is_refused_naming_it_and_never_its_token(
    tmp_path: Path, text: str, named: str, says: str
) -> None:
    """Each bad tokens file is a ConfigError that names the entry; the token is never echoed."""
    with pytest.raises(ConfigError) as refused:
        load_tokens_file(_file(tmp_path, text))
    message = refused.value.message
    assert named in message and says in message, message
    for secret in ("0123456789abcdefgh", "with space 0123456789", "short"):
        assert secret not in message


def _settings(*argv: str, environ: dict[str, str] | None = None) -> object:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return settings_from(parser.parse_args(list(argv)), environ or {})


def test_a_tokens_file_counts_as_a_token_for_binding_beyond_loopback(tmp_path: Path) -> None:
    """Beyond loopback, a tokens file alone is enough; with neither token, start-up stops."""
    tokens = _file(tmp_path, GOOD_FILE)
    db = str(tmp_path / "x.db")
    with pytest.raises(ConfigError, match="--tokens-file"):
        _settings("--http-host", "0.0.0.0", "--db", db)
    _settings("--http-host", "0.0.0.0", "--db", db, "--tokens-file", str(tokens))
    _settings("--http-host", "0.0.0.0", "--db", db, environ={"RUNSINK_TOKENS_FILE": str(tokens)})


def test_the_api_token_may_not_also_be_a_scoped_token(tmp_path: Path) -> None:
    """--api-token is admin; the same value in the file with another scope is refused."""
    tokens = _file(tmp_path, GOOD_FILE)
    db = str(tmp_path / "x.db")
    with pytest.raises(ConfigError, match=r"\[tokens.ci-team-a\].*--api-token") as refused:
        _settings("--db", db, "--tokens-file", str(tokens), "--api-token", TEAM_TOKEN)
    assert TEAM_TOKEN not in refused.value.message
    both = _settings("--db", db, "--tokens-file", str(tokens), "--api-token", ADMIN_TOKEN)
    assert ADMIN_TOKEN not in repr(both)
