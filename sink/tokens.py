"""Tokens: the tokens file, minted run tokens, and the keyring that knows them all.

Configured tokens (``--api-token``, ``--tokens-file``) are kept only as SHA-256
digests; a presented token is hashed and compared against every one of them with
``hmac.compare_digest`` (constant time, and without stopping at the first match).

A run token is signed, not stored: ``rt2.<run_id, base64url>.<issued_at, ms>.<expires_at,
ms>.<signature>``, the signature an HMAC-SHA256 over the version, run id and both times
under the server's signing key. The key is made once and kept in the store
(``Store.signing_key``), so run tokens survive a restart and hold on every process that
shares the database. Nothing is written per token: a release of the run ends every token
minted before it (``sink/run_tokens.py`` looks the release up on use, by the issue time).
``rt1`` tokens (no issue time: minted by earlier versions) are still read, as issued at the
epoch (any release of their run ends them).

No token, digest or signature ever goes into an exception message or a log line:
errors name the tokens file's entry, never its value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sink.errors import ConfigError
from sink.ids import RUN_ID
from sink.scopes import ADMIN, Scope, ScopeSyntax, parse_scope, run_scope

MIN_TOKEN_CHARS = 16
_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_HEX_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_ENTRY_KEYS = {"token", "token_sha256", "scope"}
_RUN_TOKEN_PREFIXES = ("rt1.", "rt2.")
_RUN_TOKEN = re.compile(
    r"(rt1|rt2)\.([A-Za-z0-9_-]{1,172})\.(?:(\d{1,15})\.)?(\d{1,15})\.([A-Za-z0-9_-]{43})"
)
API_TOKEN_NAME = "api-token"


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One configured token: its name, the SHA-256 of its value, and its scope."""

    name: str
    digest: bytes
    scope: Scope

    def __repr__(self) -> str:  # keep even the digest out of tracebacks and logs
        return f"TokenEntry(name={self.name!r}, scope={str(self.scope)!r})"


@dataclass(frozen=True, slots=True)
class Grant:
    """Who a request is: the token's name (never its value), its scope, when it ends."""

    name: str
    scope: Scope
    expires_at: float | None = None  # run tokens only
    issued_at: float | None = None  # run tokens only: a release of the run after it ends them


# The grant of a request when the server has no token configured (loopback only).
OPEN = Grant("open", ADMIN)


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def check_token_text(token: str) -> str | None:
    """What is wrong with a token value, or None (16+ characters, printable, no spaces)."""
    if len(token) < MIN_TOKEN_CHARS:
        return f"a token needs {MIN_TOKEN_CHARS} or more characters"
    if any(not c.isprintable() or c.isspace() for c in token):
        return "a token takes no spaces or control characters"
    return None


def api_token_entry(token: str) -> TokenEntry:
    """``--api-token``: one token with the admin scope (v1 behaviour)."""
    return TokenEntry(API_TOKEN_NAME, digest(token), ADMIN)


def load_tokens_file(path: Path, flag: str = "--tokens-file") -> tuple[TokenEntry, ...]:
    """The ``[tokens.NAME]`` entries of a TOML file; a bad entry is a ConfigError naming it."""
    where = f"{flag} {path}"
    import tomllib  # only with a tokens file (as sink/policy.py: not at every start-up)

    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it ({exc.strerror})") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        # tomllib's message gives a position, never the value found there.
        raise ConfigError(f"{where}: not valid TOML ({exc})") from None
    unknown = sorted(set(document) - {"tokens"})
    if unknown:
        raise ConfigError(
            f"{where}: unknown table(s) {unknown}; expected only [tokens.NAME] tables"
        )
    tables = document.get("tokens")
    if not isinstance(tables, dict) or not tables:
        raise ConfigError(f"{where}: no tokens; expected [tokens.NAME] tables")
    entries = [_entry(where, name, table) for name, table in tables.items()]
    seen: dict[bytes, str] = {}
    for entry in entries:
        if entry.digest in seen:
            first = seen[entry.digest]
            raise ConfigError(
                f"{where}: [tokens.{entry.name}] has the same token as [tokens.{first}]"
            )
        seen[entry.digest] = entry.name
    return tuple(entries)


def _entry(where: str, name: str, table: Any) -> TokenEntry:
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: [tokens.{name[:64]}]: a token's name is 1-64 characters of A-Za-z0-9._-"
        )
    here = f"{where}: [tokens.{name}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{here}: expected a table with token (or token_sha256) and scope")
    unknown = sorted(set(table) - _ENTRY_KEYS)
    if unknown:
        raise ConfigError(
            f"{here}: unknown key(s) {unknown}; expected token or token_sha256, scope"
        )
    if ("token" in table) == ("token_sha256" in table):
        raise ConfigError(f"{here}: give exactly one of token and token_sha256")
    if "token" in table:
        token = table["token"]
        problem = "expected a string" if not isinstance(token, str) else check_token_text(token)
        if problem is not None:
            raise ConfigError(f"{here} token: {problem}")
        value = digest(token)
    else:
        hexed = table["token_sha256"]
        if not isinstance(hexed, str) or not _HEX_SHA256.fullmatch(hexed):
            raise ConfigError(f"{here} token_sha256: expected 64 hexadecimal characters")
        value = bytes.fromhex(hexed)
    scope_text = table.get("scope")
    if not isinstance(scope_text, str):
        raise ConfigError(f"{here} scope: expected admin, read or runs:<glob>")
    try:
        scope = parse_scope(scope_text)
    except ScopeSyntax as exc:
        raise ConfigError(f"{here} scope: {exc}") from None
    return TokenEntry(name, value, scope)


class Keyring:
    """Every token this server accepts: the configured ones, and run tokens it signs."""

    def __init__(self, entries: tuple[TokenEntry, ...], signing_key: bytes) -> None:
        self._entries = entries
        # One key per use, derived from the stored one (so the stored key signs nothing directly).
        self._key = hmac.new(signing_key, b"runsink run tokens v1", hashlib.sha256).digest()

    @property
    def configured(self) -> bool:
        """Is any token configured? (Without one, the API is open: loopback only.)"""
        return bool(self._entries)

    def authenticate(self, token: str, now: float) -> Grant | None:
        """The grant of a presented token, or None when it is not (or no longer) one of ours."""
        presented = digest(token)
        found: TokenEntry | None = None
        for entry in self._entries:  # every entry, always: the time says nothing
            if hmac.compare_digest(presented, entry.digest) and found is None:
                found = entry
        if found is not None:
            return Grant(found.name, found.scope)
        if token.startswith(_RUN_TOKEN_PREFIXES):
            return self._run_grant(token, now)
        return None

    def mint(self, run_id: str, issued_at: float, expires_at: float) -> str:
        """A token for one run, issued at ``issued_at``, valid until ``expires_at`` (epoch
        seconds) or a release of the run after it was issued."""
        if not RUN_ID.fullmatch(run_id):
            raise ValueError("not a run id")
        # The issue time rounds down: a release in the same millisecond ends the token.
        issued_ms, expires_ms = int(issued_at * 1000), int(expires_at * 1000)
        encoded = base64.urlsafe_b64encode(run_id.encode()).decode().rstrip("=")
        signature = self._sign("rt2", run_id, issued_ms, expires_ms)
        return f"rt2.{encoded}.{issued_ms}.{expires_ms}.{signature}"

    def signed(self, token: str) -> bool:
        """Is this a run token we signed (valid, expired or released alike)?"""
        return self._run_token(token) is not None

    def expired(self, token: str, now: float) -> bool:
        """Is this one of our run tokens whose time is over? (to say so, rather than "wrong")"""
        grant = self._run_token(token)
        return grant is not None and grant.expires_at is not None and now >= grant.expires_at

    def _run_grant(self, token: str, now: float) -> Grant | None:
        grant = self._run_token(token)
        if grant is None or grant.expires_at is None or now >= grant.expires_at:
            return None
        return grant

    def _run_token(self, token: str) -> Grant | None:
        """The grant a run token was signed for, whether or not it is still valid."""
        found = _RUN_TOKEN.fullmatch(token)
        if found is None:
            return None
        version, encoded, issued_text, expires_text, signature = found.groups()
        if (version == "rt2") != (issued_text is not None):
            return None
        try:
            run_id = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        issued_ms, expires_ms = int(issued_text or 0), int(expires_text)
        expected = self._sign(version, run_id, issued_ms, expires_ms)
        if not hmac.compare_digest(signature.encode(), expected.encode()):
            return None
        if not RUN_ID.fullmatch(run_id):
            return None
        return Grant(f"run:{run_id}", run_scope(run_id), expires_ms / 1000, issued_ms / 1000)

    def _sign(self, version: str, run_id: str, issued_ms: int, expires_ms: int) -> str:
        if version == "rt1":
            message = f"rt1\n{run_id}\n{expires_ms}".encode()
        else:
            message = f"rt2\n{run_id}\n{issued_ms}\n{expires_ms}".encode()
        mac = hmac.new(self._key, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")
