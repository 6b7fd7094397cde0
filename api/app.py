"""create_app: the Starlette application over a started runtime."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp

from api import endpoints, ui
from api.auth import Authority
from api.connections import LongPollGate
from api.errors import error_response, internal_error, runsink_error, validation_error
from api.local_safety import LocalSafety
from api.middleware import EdgeMiddleware
from api.state import AppState, hang
from api.streams import StreamGate
from api.ui.pages import static_routes
from api.waitpath import WaitEndpoint, WaitPath
from sink.errors import RunsinkError
from sink.runtime import Runtime


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        # RFC 9110 15.5.6: a 405 names the methods the resource takes (Starlette's Allow).
        return error_response(
            405,
            "method_not_allowed",
            "this endpoint does not take that method",
            headers=dict(exc.headers or {}),
        )
    if exc.status_code == 404:
        return error_response(404, "not_found", "no such endpoint")
    return error_response(exc.status_code, "invalid_request", str(exc.detail))


async def _runsink_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RunsinkError)
    return runsink_error(request, exc)


async def _validation_error(request: Request, exc: Exception) -> Response:
    # Registered for ValueError, pydantic's ValidationError's base: pydantic is not imported at
    # start-up (issue 22), and is loaded by the time a wire model raises one.
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        raise exc  # any other ValueError is unexpected (_unexpected, as before)
    return validation_error(request, exc)


async def _client_gone(request: Request, exc: Exception) -> Response:
    # The client left (or api/connections.py closed it at its deadline) while its body was
    # being read: nobody will read an answer, and it is not the server's failure.
    return Response(status_code=499)


async def _unexpected(request: Request, exc: Exception) -> Response:
    return internal_error(request, exc)


def app_routes() -> list[BaseRoute]:
    """Every route the application serves: the endpoint table's, and the UI's static files."""
    return [*endpoints.routes(), *static_routes()]


def create_app(runtime: Runtime, mcp: ASGIApp | None = None) -> ASGIApp:
    """The HTTP application over a started ``runtime``: the endpoint table's routes, the
    edge (tokens, scopes, traces, limits) and the UI's gate in front; ``mcp`` (the
    composition root's ``LazyMcp``) answers ``/mcp`` when given."""
    assert runtime.keyring is not None, "the runtime is not started"
    assert runtime.agent is not None, "the runtime is not started"
    app = Starlette(
        routes=app_routes(),
        exception_handlers={
            HTTPException: _http_error,
            RunsinkError: _runsink_error,
            ValueError: _validation_error,
            ClientDisconnect: _client_gone,
            Exception: _unexpected,
        },
    )
    caps = runtime.capacity
    long_polls = LongPollGate(caps.long_polls if caps else 1 << 30)
    authority = Authority(runtime.keyring, runtime.store)
    state = AppState(
        runtime=runtime,
        authority=authority,
        long_polls=long_polls,
        streams=StreamGate(caps.streams if caps else 1 << 30, long_polls),
        waits=WaitEndpoint(runtime.agent, runtime.metrics, authority, long_polls),
        ui=ui.ui_state(authority),
        mcp=mcp,
    )
    hang(app, state)
    edge = EdgeMiddleware(app, runtime.metrics, authority)
    served = WaitPath(ui.serve(edge, state), state.waits, runtime.metrics, authority)
    return LocalSafety(served, runtime.settings, runtime.metrics)
