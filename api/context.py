"""What one request carries from the middleware to the endpoint and back: one typed object.

``EdgeMiddleware`` puts a ``RequestContext`` in the ASGI scope under ``KEY``; the routes and
the ``/mcp`` backend note the run, inbox and trace they answer about; the middleware reads
them back for the ``X-Trace-Id`` header and the access log line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sink.guidance import Call
from sink.tokens import Grant

KEY = "runsink.context"


@dataclass(slots=True)
class RequestContext:
    explicit_trace: str | None
    """The caller's own trace (traceparent / X-Trace-Id), if it sent one."""
    fallback_trace: str
    """The trace this request answers with when it names no inbox."""
    trace_id: str | None = None
    run_id: str | None = None
    inbox_id: str | None = None
    message_id: str | None = None
    grant: Grant | None = None
    """Who the request is (its token's name and scope: api/auth.py); None on open paths."""
    call: Call | None = None
    """The MCP tool call this request is, once known whole (api/calls.py): error bodies
    name it as the call to repeat or fix."""

    @property
    def trace(self) -> str:
        return self.trace_id or self.fallback_trace

    def note(
        self,
        *,
        run_id: str | None = None,
        inbox_id: str | None = None,
        message_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        """What the answer is about (each given value replaces the one noted before)."""
        if run_id is not None:
            self.run_id = run_id
        if inbox_id is not None:
            self.inbox_id = inbox_id
        if message_id is not None:
            self.message_id = message_id
        if trace_id is not None:
            self.trace_id = trace_id


def context_of(scope: Mapping[str, Any]) -> RequestContext:
    """The request's context (the middleware put it there)."""
    context = scope[KEY]
    assert isinstance(context, RequestContext), "EdgeMiddleware sets the request context"
    return context


def continue_trace(
    scope: Mapping[str, Any],
    inbox_trace: str,
    run_id: str | None = None,
    inbox_id: str | None = None,
) -> None:
    """A request on an inbox (or its mail) that sent no trace continues the inbox's; the run
    and inbox it answers about, when given, are noted for the access log line."""
    context = context_of(scope)
    context.note(run_id=run_id, inbox_id=inbox_id)
    if context.explicit_trace is None:
        context.note(trace_id=inbox_trace)
