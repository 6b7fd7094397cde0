"""Who may use the web UI: sign in once with the API token, then a session cookie.

Without a token configured the UI is open, as the API is. With one, a browser signs in by
pasting the token once; it gets an HttpOnly, SameSite=Strict cookie naming a random session
(the token itself never leaves the server again: not in a cookie, URL or page). The
``Gate`` in front of the whole application turns a valid session into the bearer token the
API already checks, so the API's own authorisation (and whatever scopes it learns later)
applies unchanged to the UI. A state-changing request made with a session must also carry
the session's CSRF token in ``X-Runsink-CSRF`` (or a form field): SameSite alone does not
cover a hostile page on another port of the same host, which is the same site.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import Counter
from dataclasses import dataclass
from urllib.parse import quote

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from api import endpoints
from api.auth import Authority
from api.errors import error_response
from api.throttle import FailureThrottle
from sink.scopes import Kind
from sink.tokens import Grant

COOKIE = "runsink_session"
CSRF_HEADER = "x-runsink-csrf"
SESSION_S = 12 * 3600
MAX_SESSIONS_PER_TOKEN = 1000
"""Live sessions one token may hold; past it a sign-in is refused (429), never another
session evicted. With the configured tokens this bounds memory: sessions end at their
expiry or sign-out, and expired ones are swept."""
SWEEP_S = 60.0
FAILED_SIGNINS_PER_MINUTE = 10
_SAFE_METHODS = ("GET", "HEAD")
SIGNIN = "/signin"  # the sign-in page: served to anyone (with the static files)


class Tokens:
    """The one place the UI asks about tokens: is one needed, and is this one good?

    Any configured token (``--api-token``, ``--tokens-file``) may sign in if its scope is
    ``admin`` or ``read``: the pages show every run and caught mail, so a ``runs:`` or run
    token is refused here rather than let in to a UI it could not use. The session carries
    the token that signed in, and the API applies that token's scope to everything the
    browser does (a ``read`` session cannot claim or release).
    """

    def __init__(self, authority: Authority) -> None:
        self._authority = authority

    @property
    def required(self) -> bool:
        return self._authority.keyring.configured

    def verify(self, given: str) -> str | None:
        """The name of the token's entry (whose sessions it counts against), if it may sign in."""
        grant = self._authority.verify(given.strip(), time.time())
        if isinstance(grant, Grant) and grant.scope.kind in (Kind.ADMIN, Kind.READ):
            return grant.name
        return None


@dataclass(frozen=True, slots=True)
class Session:
    session_id: str
    token: str
    csrf: str
    expires: float
    holder: str  # the token's entry name (never the token)


class Sessions:
    """Signed-in browsers, in memory (a restart asks them to sign in again). A session lasts
    until it expires or signs out: no other sign-in ever evicts it."""

    def __init__(self) -> None:
        self._by_id: dict[str, Session] = {}
        self._per_holder: Counter[str] = Counter()
        self._swept = 0.0

    def open(self, token: str, holder: str) -> Session | None:
        """A new session, or None when ``holder`` already has its most (the caller says 429)."""
        now = time.time()
        self._sweep(now)
        if self._per_holder[holder] >= MAX_SESSIONS_PER_TOKEN:
            return None
        session = Session(
            secrets.token_urlsafe(32), token, secrets.token_urlsafe(24), now + SESSION_S, holder
        )
        self._by_id[session.session_id] = session
        self._per_holder[holder] += 1
        return session

    def find(self, headers: Headers) -> Session | None:
        session_id = _cookie(headers, COOKIE)
        if not session_id:
            return None
        session = self._by_id.get(session_id)
        if session is None:
            return None
        if session.expires <= time.time():
            self.close(session_id)
            return None
        return session

    def close(self, session_id: str) -> None:
        session = self._by_id.pop(session_id, None)
        if session is not None:
            self._per_holder[session.holder] -= 1
            if not self._per_holder[session.holder]:
                del self._per_holder[session.holder]

    def _sweep(self, now: float) -> None:
        """Forget expired sessions, at most once a ``SWEEP_S`` (their browsers never came back)."""
        if now - self._swept < SWEEP_S:
            return
        self._swept = now
        for session in [s for s in self._by_id.values() if s.expires <= now]:
            self.close(session.session_id)


def sign_in_throttle() -> FailureThrottle:
    """Failed sign-ins per client address: past ``FAILED_SIGNINS_PER_MINUTE`` in a minute,
    every sign-in from it is refused until the oldest failure is a minute old."""
    return FailureThrottle(FAILED_SIGNINS_PER_MINUTE)


def cookie_header(session: Session | None, secure: bool) -> str:
    value = session.session_id if session else ""
    max_age = SESSION_S if session else 0
    flags = "; Secure" if secure else ""
    return f"{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{flags}"


def same_origin(headers: Headers) -> bool:
    """A form post from our own page (not another site, nor another port of this host)."""
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = headers.get("origin")
    if origin is None or origin == "null":
        return site is not None or origin is None
    host = headers.get("host", "")
    return origin.split("://", 1)[-1] == host


class Gate:
    """In front of the whole app: sessions become bearer tokens; pages ask to sign in."""

    def __init__(
        self,
        app: ASGIApp,
        public: ASGIApp,
        tokens: Tokens,
        sessions: Sessions,
    ) -> None:
        self.app = app
        self.public = public  # the sign-in page and static files: served to anyone
        self.tokens = tokens
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.tokens.required:
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path == SIGNIN or path.startswith("/static/"):
            await self.public(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if "authorization" in headers:
            await self.app(scope, receive, send)
            return
        session = self.sessions.find(headers)
        if session is not None:
            if scope["method"] not in _SAFE_METHODS and not hmac.compare_digest(
                headers.get(CSRF_HEADER, "").encode(), session.csrf.encode()
            ):
                response = error_response(
                    403, "forbidden", "a signed-in browser's change needs its X-Runsink-CSRF"
                )
                await response(scope, receive, send)
                return
            inner = dict(scope)
            inner["headers"] = [
                *scope["headers"],
                (b"authorization", f"Bearer {session.token}".encode()),
            ]
            inner["runsink.session"] = session
            await self.app(inner, receive, send)
            return
        if scope["method"] in _SAFE_METHODS and endpoints.is_page(scope["method"], path):
            query = scope.get("query_string") or b""
            target = path + ("?" + query.decode("latin-1") if query else "")
            location = "/signin?next=" + quote(target, safe="/")
            await _redirect(location)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _redirect(location: str) -> ASGIApp:
    from starlette.responses import RedirectResponse

    return RedirectResponse(location, status_code=303, headers={"Cache-Control": "no-store"})


def _cookie(headers: Headers, name: str) -> str | None:
    for header in headers.getlist("cookie"):
        for item in header.split(";"):
            key, _, value = item.strip().partition("=")
            if key == name:
                return value
    return None
