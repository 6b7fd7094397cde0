"""SMTP AUTH (RFC 4954): any login by default, or only the configured pairs.

A sink takes the login a staging app was configured with, whatever it is (contract v3,
"SMTP AUTH"): PLAIN, LOGIN and CRAM-MD5 all answer 235, over plaintext too, and the user
name given is kept with each message (``envelope.auth_user``). With ``--smtp-auth
USER:PASSWORD`` only those pairs pass (535 otherwise), as in production.

The mechanisms are aiosmtpd's documented hooks: its built-in PLAIN and LOGIN call the
``authenticator`` (``Logins.authenticator``); CRAM-MD5 (RFC 2195), which aiosmtpd does not
have, is a handler's ``auth_CRAM__MD5`` method calling ``Logins.cram_md5``. aiosmtpd
itself answers the malformed exchanges (bad base64, a PLAIN response without its NULs, a
``*`` cancel: 501). Passwords are compared in constant time and never kept or logged;
the session keeps only the user name.
"""

from __future__ import annotations

import hmac
import secrets
import time
from typing import Any

from aiosmtpd.smtp import MISSING, SMTP, AuthResult, Envelope, LoginPassword, Session

from sink.logs import warn

MAX_USER_BYTES = 256
"""A longer user name is refused (501): it is stored with every message of the session."""

_TOO_LONG = "501 5.5.4 User name too long"
_CRAM_SYNTAX = "501 5.5.2 Can't split auth value"  # aiosmtpd's words for PLAIN's
_NO_INITIAL = "501 5.5.4 CRAM-MD5 takes no initial response"


class Logins:
    """Who may log in: anyone (no pairs), or one of the configured USER:PASSWORD pairs."""

    def __init__(self, pairs: tuple[tuple[str, str], ...] = ()) -> None:
        self._pairs = tuple((user.encode(), password.encode()) for user, password in pairs)

    @property
    def checking(self) -> bool:
        """Whether credentials are checked (and MAIL needs AUTH first)."""
        return bool(self._pairs)

    def password_ok(self, user: bytes, password: bytes) -> bool:
        if not self._pairs:
            return True
        ok = False
        for known_user, known_password in self._pairs:  # every pair: the same time for any
            ok |= hmac.compare_digest(user, known_user) & hmac.compare_digest(
                password, known_password
            )
        return ok

    def digest_ok(self, user: bytes, challenge: bytes, digest: bytes) -> bool:
        """CRAM-MD5: the HMAC-MD5 of the challenge keyed by the user's password, in hex."""
        if not self._pairs:
            return True
        ok = False
        for known_user, known_password in self._pairs:
            expected = hmac.new(known_password, challenge, "md5").hexdigest().encode()
            ok |= hmac.compare_digest(user, known_user) & hmac.compare_digest(
                digest.lower(), expected
            )
        return ok

    def authenticator(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        """aiosmtpd's ``authenticator`` for its PLAIN and LOGIN: the user name on success."""
        if not isinstance(data, LoginPassword):
            return AuthResult(success=False, handled=False)
        return self._result(mechanism, data.login, self.password_ok(data.login, data.password))

    async def cram_md5(self, server: SMTP, args: list[str]) -> AuthResult:
        """RFC 2195: a challenge, then ``user SP hex-digest`` (any digest when not checking)."""
        if len(args) > 1:
            await server.push(_NO_INITIAL)
            return AuthResult(success=False, handled=True)
        challenge = f"<{secrets.randbits(64)}.{int(time.time())}@{server.hostname}>".encode()
        response = await server.challenge_auth(challenge)
        if response is MISSING:
            return AuthResult(success=False, handled=True)  # aiosmtpd said 501
        assert isinstance(response, bytes)
        user, space, digest = response.rpartition(b" ")
        if not space or not user or not digest:
            await server.push(_CRAM_SYNTAX)
            return AuthResult(success=False, handled=True)
        return self._result("CRAM-MD5", user, self.digest_ok(user, challenge, digest))

    @staticmethod
    def _result(mechanism: str, user: bytes, ok: bool) -> AuthResult:
        if len(user) > MAX_USER_BYTES:
            return AuthResult(success=False, handled=False, message=_TOO_LONG)
        if not ok:
            # Why an app's mail is refused, said once: the mechanism, never the credentials.
            warn("smtp_auth_refused", mechanism=mechanism)
            return AuthResult(success=False, handled=False)  # aiosmtpd: 535 5.7.8
        # Only the user name is kept (as session.auth_data): never the password.
        return AuthResult(success=True, auth_data=user.decode("utf-8", "replace"))
