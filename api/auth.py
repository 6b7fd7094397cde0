"""Who a request is, and whether its scope allows it: one place for every route and tool.

``bearer_token`` reads the credentials (exactly ``Bearer <token>``: the scheme is
case-insensitive, RFC 9110 section 11.1; the token is taken as given, no padding).
``Authority.grant_for`` turns them into a ``Grant`` (sink/tokens.py), and
``Authority.check_route`` decides from the method and path alone, looking up the run
that owns an inbox or message when the scope depends on it. Every endpoint names its
operation of ``sink/scopes.py`` in the endpoint table (``api/endpoints.py``, read by
``route_op``); a path no endpoint takes is a read (GET, HEAD) or an admin operation
(anything else).

Runs named in a body, ``X-Run-Id`` or ``?run_id=`` are checked by the handlers
(``check_run``, through ``api/inputs.py``'s ``caller_run``), and the MCP tools make the
same calls (``api/mcp.py``). Filtered views (search, live events) ask
``visibility_of(request.scope)`` which runs, and whether caught mail, the request may see.
``Authority.verify`` checks a token however it arrived.

Order against ownership: the scope is checked first. An inbox or message whose owner
the token does not cover is 403 ``forbidden_scope`` naming ``read`` or ``admin`` (never
the owner's run), whatever run the caller names; ``wrong_run`` stays for a caller whose
scope covers the owner but who named another run, as before.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.datastructures import Headers
from starlette.requests import HTTPConnection

from api import endpoints
from api.context import context_of
from api.throttle import FailureThrottle
from sink import run_tokens, scopes
from sink.errors import ForbiddenScope, NotFound, ProviderTimeout
from sink.ids import RUN_ID
from sink.scopes import Kind, Op
from sink.storage.base import Store
from sink.tokens import OPEN, Grant, Keyring, digest

T = TypeVar("T")

# The owner of an inbox or message is looked up for runs: and run tokens; as long at most
# as the default policy's provider deadline.
_LOOKUP_DEADLINE_S = 2.0

_MALFORMED = "malformed bearer token (expected: Authorization: Bearer <token>)"


def bearer_token(headers: Headers) -> str | None:
    """The token of ``Authorization: Bearer <token>``, or None (absent or malformed)."""
    given = headers.get("authorization")
    if given is None:
        return None
    scheme, space, token = given.partition(" ")
    if not space or scheme.lower() != "bearer" or not token:
        return None
    if any(c.isspace() for c in token):
        return None  # padding or a second word: not a token we could have issued
    return token


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a request has no grant (a 401)."""

    message: str


def grant_of(scope: Mapping[str, Any]) -> Grant:
    """The request's grant (the middleware sets it before any route runs)."""
    grant = context_of(scope).grant
    if grant is None:  # never a silent default: that would be a way in
        raise RuntimeError("no grant on this request: is the app behind EdgeMiddleware?")
    return grant


# Sent by ``runsink mcp`` (sink/mcp/stdio.py) on every call: the caller is a model.
AGENT_HEADER = "x-runsink-agent"


def is_agent(request: HTTPConnection) -> bool:
    """Whether the caller is an agent: a minted run token, or an MCP client's proxy. Under
    ``agent_body = "never"`` an agent gets the extracted evidence only."""
    return grant_of(request.scope).scope.kind is Kind.RUN or AGENT_HEADER in request.headers


def implied_run(grant: Grant) -> str | None:
    """The run a view must be limited to when the caller names none (``/v1/events``).

    A run token: its run. A ``runs:`` token: refused (the stream follows one run at a time;
    name it with ``?run_id=``). Other scopes: None, every run.
    """
    if grant.scope.kind is Kind.RUN:
        return grant.scope.glob
    if grant.scope.kind is Kind.RUNS:
        raise ForbiddenScope(
            f"this token's scope ({grant.scope}) streams one of its runs at a time: name it "
            "with ?run_id=; every run needs the scope read",
            "read",
        )
    return None


def visibility_of(scope: Mapping[str, Any]) -> scopes.Visibility:
    """What a filtered view (search, live events) may show this request: its runs, and
    whether caught mail. ``runs:`` and run tokens see their runs only and no caught mail."""
    return scopes.visibility(grant_of(scope).scope)


# -- the operation of a request ------------------------------------------------------------


def route_op(method: str, path: str) -> tuple[Op, str | None, str | None]:
    """(operation, where its run comes from, the id or run in the path) for a request.

    The endpoint table (``api/endpoints.py``) says it. A request no endpoint takes (a
    path or method that will be 404 or 405) is a read (GET, HEAD) or an admin operation
    (anything else): never open to a ``runs:`` token by accident.
    """
    found = endpoints.find(method, path)
    if found is None:
        return (scopes.READ_ALL if method in ("GET", "HEAD") else scopes.ADMINISTER), None, None
    endpoint = found.endpoint
    if endpoint.op is None:
        return scopes.ANY, None, None  # open (endpoints.OPEN_PATHS: the edge asks for no token)
    owner = found.owner
    value = found.first if owner is not None and owner != "body" else None
    return endpoint.op, owner, value


# -- the authority ---------------------------------------------------------------------


API_FAILURES_PER_MINUTE = 300
"""Wrong bearer tokens one client address may present a minute before it waits (429 with
Retry-After): far more than an honest client or a test suite sends (a wrong token is 401 and
its caller stops), and under half a million guesses a day against tokens of 16+ characters.
Signed run tokens never count (they cannot be guessed)."""
_KNOWN_GOOD = 4096  # digests of tokens that worked, remembered at most


@dataclass(frozen=True, slots=True)
class Throttled:
    """Too many wrong tokens from this address (a 429 after ``retry_after_s``)."""

    retry_after_s: float


class Authority:
    """Authentication (the keyring) and authorisation (scopes, and the store for owners)."""

    def __init__(self, keyring: Keyring, store: Store) -> None:
        self.keyring = keyring
        self._store = store
        self.throttle = FailureThrottle(API_FAILURES_PER_MINUTE)
        self._worked: OrderedDict[bytes, None] = OrderedDict()

    def grant_for(self, headers: Headers, now: float, address: str) -> Grant | Refused | Throttled:
        """The request's grant; without any token configured, a request without one is admin.

        A token, when one is given, is always checked (also on a server without configured
        tokens, where only run tokens it minted can pass): an expired or unknown token never
        falls back to the open grant. A wrong token counts against the client's ``address``;
        past ``API_FAILURES_PER_MINUTE`` it is ``Throttled``, and so is any token from there
        but one that has worked before (so a guess is never confirmed while it waits)."""
        given = headers.get("authorization")
        if given is None:
            if not self.keyring.configured:
                return OPEN
            return Refused("missing bearer token (expected: Authorization: Bearer <token>)")
        token = bearer_token(headers)
        if token is not None and self.keyring.signed(token):
            return self.verify(token, now)  # a run token we signed: never a guess
        wait_s = self.throttle.retry_after(address, now)
        grant = Refused(_MALFORMED) if token is None else self.verify(token, now)
        if wait_s is not None and not (isinstance(grant, Grant) and self._has_worked(token)):
            return Throttled(wait_s)
        if isinstance(grant, Refused):
            self.throttle.failed(address, now)
        else:
            self._note_worked(token)
        return grant

    def _has_worked(self, token: str | None) -> bool:
        return token is not None and digest(token) in self._worked

    def _note_worked(self, token: str | None) -> None:
        if token is None:
            return
        key = digest(token)
        self._worked[key] = None
        self._worked.move_to_end(key)
        while len(self._worked) > _KNOWN_GOOD:
            self._worked.popitem(last=False)

    def verify(self, token: str, now: float) -> Grant | Refused:
        """The grant of a token however it came (a Bearer header, a sign-in form, a cookie)."""
        grant = self.keyring.authenticate(token, now)
        if grant is not None:
            return grant
        if self.keyring.expired(token, now):
            return Refused("the run token has expired; ask whoever gave it for a new one")
        return Refused("wrong bearer token")

    async def released(self, grant: Grant) -> Refused | None:
        """The refusal of a run token whose run was released after it was issued, else None.

        Looked up in the store on every use (not kept in memory), so a release on one
        process ends the token on every process that shares the database."""
        run_id = grant.scope.glob
        if grant.scope.kind is not Kind.RUN or run_id is None or grant.issued_at is None:
            return None
        if not await _bounded(run_tokens.released_since(self._store, run_id, grant.issued_at)):
            return None
        return Refused(
            f"run {run_id!r} was released after this token was minted, which ended the "
            "token; ask whoever gave it for a new one"
        )

    async def check_route(
        self, grant: Grant, method: str, path: str, query_run: str | None
    ) -> None:
        """Raise ForbiddenScope (or NotFound) unless the grant may make this request."""
        if grant.scope.kind is Kind.ADMIN:
            return
        op, source, value = route_op(method, path)
        if source == "run" and value is not None:
            if RUN_ID.fullmatch(value):  # else the route answers 422 for it
                self.check_run(grant, op, value)
        elif source == "inbox" and value is not None:
            await self.check_inbox(grant, op, value)
        elif source == "message" and value is not None:
            await self.check_message(grant, op, value)
        elif source is None:
            # A view limited to one named run (/v1/events?run_id=): that run must be ours
            # (scopes.decide); the routes check X-Run-Id the same way (check_run).
            viewing = op.access is scopes.Access.VIEW
            _refuse_unless(grant, op, query_run if viewing else None, owner=False)
        # source "body" (create): the route checks the run it reads from the body.

    def check_run(self, grant: Grant, op: Op, run_id: str) -> None:
        """A run the caller names (path, body, X-Run-Id, ?run_id=)."""
        _refuse_unless(grant, op, run_id, owner=False)

    async def check_inbox(self, grant: Grant, op: Op, inbox_id: str) -> None:
        if not _depends_on_run(grant):
            _refuse_unless(grant, op, None, owner=True)
            return
        inbox = await _bounded(self._store.load_inbox(inbox_id))
        if inbox is None:
            raise NotFound(f"no inbox {inbox_id[:64]!r}")
        _refuse_unless(grant, op, inbox.run_id, owner=True)

    async def check_message(self, grant: Grant, op: Op, message_id: str) -> None:
        if not _depends_on_run(grant):
            _refuse_unless(grant, op, None, owner=True)
            return
        delivery = await _bounded(self._store.delivery(message_id))
        inbox = (
            None if delivery is None else await _bounded(self._store.load_inbox(delivery.inbox_id))
        )
        if inbox is None:
            # Unknown (or caught mail, which has no run): a runs: token sees neither.
            raise NotFound(f"no message {message_id[:64]!r}")
        _refuse_unless(grant, op, inbox.run_id, owner=True)


async def _bounded(lookup: Awaitable[T]) -> T:
    """An owner lookup, bounded like any provider call: a store that hangs is a 503."""
    try:
        return await asyncio.wait_for(lookup, _LOOKUP_DEADLINE_S)
    except TimeoutError:
        raise ProviderTimeout("the store did not answer the owner lookup in time") from None


def _depends_on_run(grant: Grant) -> bool:
    return grant.scope.kind in (Kind.RUNS, Kind.RUN)


def _refuse_unless(grant: Grant, op: Op, run_id: str | None, *, owner: bool) -> None:
    needed = scopes.decide(grant.scope, op, run_id, owner=owner)
    if needed is not None:
        _refuse(grant, op, needed)


def _refuse(grant: Grant, op: Op, needed: str) -> None:
    raise ForbiddenScope(
        f"this token's scope ({_described(grant)}) does not allow {op.name}; "
        f"it needs the scope {needed}",
        needed,
    )


def _described(grant: Grant) -> str:
    return str(grant.scope)
