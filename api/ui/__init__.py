"""The web UI: server-rendered pages on the API's own port (see ``pages.py``)."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.types import ASGIApp

from api import live
from api.middleware import EdgeMiddleware
from api.ui import access, pages
from sink.runtime import Runtime

ROUTES = pages.ROUTES


def serve(app: Starlette, edge: ASGIApp, runtime: Runtime) -> ASGIApp:
    """Put the UI's state on ``app`` and its sign-in gate in front of ``edge`` (the API)."""
    live.instrument(runtime.metrics.registry, runtime.events)
    tokens = access.Tokens(app.state.authority)
    sessions = access.Sessions()
    throttle = access.SignInThrottle()
    public = Starlette(routes=pages.PUBLIC_ROUTES)
    for state in (app.state, public.state):
        state.ui_sessions = sessions
        state.ui_tokens = tokens
        state.ui_throttle = throttle
        state.ui_csrf = pages.new_csrf()
        state.runtime = runtime
    public_edge = EdgeMiddleware(public, runtime.metrics, None)
    return access.Gate(edge, public_edge, tokens, sessions)
