"""api/endpoints.py: every route the app serves is a row with its scope and its documentation."""

from __future__ import annotations

import inspect

import pytest
from starlette.routing import Mount, Route, compile_path

from api import endpoints, schemas
from api.apidoc import Doc, Unlisted
from api.app import app_routes
from api.auth import route_op
from api.calls import route_call
from api.endpoints import OPEN_PATHS, TABLE, Endpoint
from api.openapi import openapi_document, paths, schema_names
from sink import scopes

ROWS = [pytest.param(e, id=f"{e.method} {e.path}") for e in TABLE]


def _example(path: str) -> str:
    """A request path for a template: each ``{name}`` becomes a value of its own."""
    _, template, names = compile_path(path)
    return template.format(**{name: f"x-{name}" for name in names})


def test_every_route_the_app_serves_is_a_row() -> None:
    """Each route and method of the app (but the UI's static files) is exactly one row."""
    rows = {(e.method, e.path) for e in TABLE}
    assert len(rows) == len(TABLE), "two rows for one method and path"
    served = set()
    for route in app_routes():
        if isinstance(route, Mount):
            assert route.path == "/static", route.path  # files, served to anyone
            continue
        assert isinstance(route, Route)
        for method in route.methods or {"*"}:
            if method != "HEAD":
                served.add((method, route.path))
    assert served == rows


@pytest.mark.parametrize("endpoint", ROWS)
def test_every_row_names_its_scope_and_the_check_finds_it(endpoint: Endpoint) -> None:
    """The scope check reaches each row (no row is hidden behind another or the default)."""
    op, source, value = route_op(endpoint.method, _example(endpoint.path))
    if endpoint.op is None:
        assert endpoint.path in OPEN_PATHS and op is scopes.ANY
        return
    assert op is endpoint.op
    assert source == endpoint.owner
    if source in ("inbox", "message", "run"):
        assert value is not None and value.startswith("x-")


def test_only_liveness_and_readiness_are_open() -> None:
    """A row without a scope operation (op=None: no token at all) is a new open endpoint."""
    assert {(e.method, e.path) for e in TABLE if e.op is None} == {
        ("GET", "/healthz"),
        ("GET", "/readyz"),
    }


@pytest.mark.parametrize("endpoint", ROWS)
def test_every_row_is_in_the_openapi_document_or_says_why_not(endpoint: Endpoint) -> None:
    """A documented row is its path and method in /openapi.json; an unlisted one says why."""
    document = openapi_document()["paths"]
    if isinstance(endpoint.doc, Unlisted):
        assert endpoint.doc.why
        assert endpoint.method.lower() not in document.get(endpoint.path, {})
        return
    operation = document[endpoint.path][endpoint.method.lower()]
    assert operation["operationId"] == endpoint.doc.operation_id
    in_path = {p["name"] for p in endpoint.doc.parameters if p["in"] == "path"}
    assert in_path == set(compile_path(endpoint.path)[2]), "the path's ids are its parameters"


def test_the_document_has_no_operation_without_a_row() -> None:
    """Every operation of /openapi.json comes from a row, and operationIds are unique."""
    documented = {(e.method.lower(), e.path) for e in TABLE if isinstance(e.doc, Doc)}
    operations = {(m, p) for p, ops in paths().items() for m in ops}
    assert operations == documented
    ids = [e.doc.operation_id for e in TABLE if isinstance(e.doc, Doc)]
    assert len(ids) == len(set(ids))


def test_every_wire_model_a_row_names_exists() -> None:
    """The schema names of the rows are models of api/schemas.py."""
    for name in schema_names(paths()):
        assert isinstance(getattr(schemas, name, None), type), name


@pytest.mark.parametrize("endpoint", ROWS)
def test_every_handler_resolves(endpoint: Endpoint) -> None:
    """A row's handler is a request function or an ASGI app."""
    handler = endpoints.resolve(endpoint)
    assert inspect.iscoroutinefunction(handler) or callable(handler)


def test_the_mcp_tool_of_a_request_comes_from_its_row() -> None:
    """An HTTP request's MCP call is its row's tool with the path's id as the argument."""
    scope = {"method": "GET", "path": "/v1/messages/msg_x/raw", "headers": [], "query_string": b""}
    call = route_call(scope, None)
    assert call.tool is not None and call.tool.value == "read_message"
    assert call.arguments == {"message_id": "msg_x"}
    listing = {"method": "GET", "path": "/v1/inboxes/ib_x/messages", "query_string": b""}
    assert route_call(listing, None).tool is None


def test_the_ui_pages_and_forms_are_its_rows() -> None:
    """The sign-in gate's pages and the form posts local safety lets through are PAGE rows."""
    assert endpoints.FORM_PATHS == ("/signin", "/signout")
    assert endpoints.is_page("GET", "/runs/ci-1")
    assert endpoints.is_page("GET", "/messages/msg_x/body.html")
    assert not endpoints.is_page("GET", "/v1/runs/ci-1")
    assert not endpoints.is_page("GET", "/runs/ci-1/nothing")


@pytest.mark.parametrize("endpoint", [r for r in ROWS if isinstance(r.values[0].doc, Doc)])
def test_the_document_states_the_refusals_of_each_scope(endpoint: Endpoint) -> None:
    """An endpoint that needs a token documents 401; one a token's scope can refuse, 403."""
    responses = paths()[endpoint.path][endpoint.method.lower()]["responses"]
    assert ("401" in responses) is (endpoint.op is not None)
    refusable = endpoint.op is not None and endpoint.op.access is not scopes.Access.ANY
    assert ("403" in responses) is refusable
