"""The web UI: server-rendered pages on the API's own port (see ``pages.py``)."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.types import ASGIApp

from api import endpoints, live
from api.auth import Authority
from api.middleware import EdgeMiddleware
from api.state import AppState, UiState, hang
from api.ui import access, pages


def ui_state(authority: Authority) -> UiState:
    """The UI's sign-in: sessions, the token check, the throttle, the form's CSRF token."""
    return UiState(
        sessions=access.Sessions(),
        tokens=access.Tokens(authority),
        throttle=access.sign_in_throttle(),
        csrf=pages.new_csrf(),
    )


def serve(edge: ASGIApp, state: AppState) -> ASGIApp:
    """The UI's sign-in gate in front of ``edge`` (the API): a signed-in browser's session
    becomes its token; the sign-in page and the static files are served to anyone."""
    runtime = state.runtime
    live.instrument(runtime.metrics.registry, runtime.events)
    public = Starlette(
        routes=[*endpoints.routes(frozenset({access.SIGNIN})), *pages.static_routes()]
    )
    hang(public, state)
    public_edge = EdgeMiddleware(public, runtime.metrics, None)
    return access.Gate(edge, public_edge, state.ui.tokens, state.ui.sessions)
