"""What the application holds for its endpoints: one typed object, read through ``state_of``.

``create_app`` builds one ``AppState`` and hangs it on the Starlette application once (and
on the UI's public application, which serves the sign-in page beside it); every endpoint
reads it with ``state_of(request)`` (or ``state_of(scope)`` in an ASGI endpoint), never a
loose ``app.state`` attribute.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import HTTPConnection

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from api.auth import Authority
    from api.connections import LongPollGate
    from api.streams import StreamGate
    from api.throttle import FailureThrottle
    from api.ui.access import Sessions, Tokens
    from api.waitpath import WaitEndpoint
    from sink.agent import Agent
    from sink.runtime import Runtime

_KEY = "runsink"


@dataclass(frozen=True, slots=True)
class UiState:
    """The web UI's sign-in: who may, who has, who failed too often, the form's CSRF token."""

    sessions: Sessions
    tokens: Tokens
    throttle: FailureThrottle
    csrf: str


@dataclass(frozen=True, slots=True)
class AppState:
    runtime: Runtime
    authority: Authority
    long_polls: LongPollGate
    streams: StreamGate
    waits: WaitEndpoint
    ui: UiState
    mcp: ASGIApp | None
    """``/mcp`` (api/mcp_route.py), when the composition root serves it."""

    @property
    def agent(self) -> Agent:
        agent = self.runtime.agent
        assert agent is not None, "the runtime is not started"
        return agent


def hang(app: Any, state: AppState) -> None:
    """Put ``state`` on a Starlette application (once)."""
    setattr(app.state, _KEY, state)


def state_of(where: HTTPConnection | Mapping[str, Any]) -> AppState:
    """The state of the application serving a request (or its ASGI scope)."""
    scope = where.scope if isinstance(where, HTTPConnection) else where
    state = getattr(scope["app"].state, _KEY, None)
    assert isinstance(state, AppState), "create_app hangs the AppState on its application"
    return state
