"""api/auth.py: reading the Bearer credentials, and the route table the scopes decide over."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers

from api.auth import bearer_token, route_op
from api.routes import ROUTES
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


# Routes deliberately left to the default (read for GET, admin otherwise).
DEFAULTED = {
    ("GET", "/v1/unrouted"),
    ("GET", "/v1/faults"),
    ("POST", "/v1/faults"),
    ("DELETE", "/v1/faults"),
    ("GET", "/metrics"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
}


def test_every_route_has_its_operation_in_the_table() -> None:
    """Each route of api/routes.py maps to a named operation, or deliberately to the default."""
    for route in ROUTES:
        example = route.path.replace("{inbox_id}", "ib_x").replace("{message_id}", "msg_x")
        example = example.replace("{run_id}", "ci-1")
        for method in route.methods or ():
            if method == "HEAD":
                continue
            op, _, _ = route_op(method, example)
            if (method, route.path) in DEFAULTED:
                assert op in (scopes.READ_ALL, scopes.ADMINISTER), (method, route.path)
            else:
                assert op.access is not scopes.Access.READ_ALL, (method, route.path)
                assert op is not scopes.ADMINISTER, (method, route.path)


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
    ],
)
def test_paths_map_to_operations(
    method: str, path: str, op: scopes.Op, source: str | None, value: str | None
) -> None:
    """Routes being built elsewhere (attachments, caught mail, Mailpit) are decided already."""
    assert route_op(method, path) == (op, source, value)
