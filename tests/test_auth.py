"""api/auth.py: reading the Bearer credentials, and the operation a request needs."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers

from api.auth import bearer_token, route_op
from sink import scopes

TOKEN = "0123456789abcdefXYZ"


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (f"Bearer {TOKEN}", TOKEN),
        (f"bearer {TOKEN}", TOKEN),
        (f"BeArEr {TOKEN}", TOKEN),
        (None, None),
        ("", None),
        ("Bearer", None),
        ("Bearer ", None),
        (f"Bearer  {TOKEN}", None),
        (f"Bearer {TOKEN} ", None),
        (f"Bearer {TOKEN}\t", None),
        (f"Bearer {TOKEN} second", None),
        (f"Basic {TOKEN}", None),
        (TOKEN, None),
    ],
)
def test_only_exactly_bearer_space_token_is_a_token(header: str | None, token: str | None) -> None:
    """The scheme is case-insensitive (RFC 9110 11.1); the token is taken exactly, no padding."""
    headers = Headers({} if header is None else {"authorization": header})
    assert bearer_token(headers) == token


@pytest.mark.parametrize(
    ("method", "path", "op", "source", "value"),
    [
        ("POST", "/v1/inboxes", scopes.CREATE, "body", None),
        ("POST", "/v1/inboxes/ib_x/wait", scopes.WAIT, "inbox", "ib_x"),
        ("GET", "/v1/messages/msg_x/attachments/0", scopes.READ_MESSAGE, "message", "msg_x"),
        ("POST", "/v1/messages/msg_x/claim", scopes.CLAIM, "message", "msg_x"),
        ("POST", "/v1/runs/ci-1/token", scopes.MINT, "run", "ci-1"),
        ("GET", "/v1/messages", scopes.SEARCH, None, None),
        ("GET", "/v1/events", scopes.EVENTS, None, None),
        ("GET", "/v1/unrouted/msg_x/raw", scopes.READ_ALL, None, None),
        ("GET", "/api/v1/message/latest", scopes.READ_ALL, None, None),
        ("DELETE", "/api/v1/messages", scopes.ADMINISTER, None, None),
        ("POST", "/mcp", scopes.ANY, None, None),
        ("PATCH", "/v1/inboxes/ib_x", scopes.ADMINISTER, None, None),
        ("GET", "/v1/nowhere", scopes.READ_ALL, None, None),
        ("GET", "/mcp/", scopes.ANY, None, None),
        ("GET", "/healthz", scopes.ANY, None, None),
    ],
)
def test_paths_map_to_operations(
    method: str, path: str, op: scopes.Op, source: str | None, value: str | None
) -> None:
    """Each request maps to its endpoint's operation; one no endpoint takes is read or admin."""
    assert route_op(method, path) == (op, source, value)
