"""The envelope as an HTTP reply: its status, ``Retry-After``, and the request's context.

The domain's envelope says what happened (state, status, reason); which HTTP status that is
is said here: 200, 201 for a new inbox, and 409 for a claim that came after the lease (it
claimed nothing). MCP marks the same answer as a tool error (``sink/mcp/server.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse, Response

from api.context import context_of
from sink.envelope import Envelope
from sink.vocabulary import Reason

_REFUSALS = {Reason.LEASE_EXPIRED: 409}  # by reason: only a refused claim has one


def envelope_response(
    envelope: Envelope,
    scope: Mapping[str, Any],
    extra: dict[str, str] | None = None,
    capped: tuple[str, ...] | None = None,
    *,
    created: bool = False,
) -> Response:
    context_of(scope).note(
        run_id=envelope.run_id, inbox_id=envelope.inbox_id, trace_id=envelope.trace_id
    )
    headers = dict(extra or {})
    if envelope.retry_after is not None:
        headers["Retry-After"] = str(math.ceil(envelope.retry_after))
    from api.views import created_out, envelope_out  # the wire models: not at start-up

    model = envelope_out(envelope) if capped is None else created_out(envelope, capped)
    body = model.model_dump(mode="json")
    if created:
        status = 201
    else:
        status = 200 if envelope.reason is None else _REFUSALS.get(envelope.reason, 200)
    return JSONResponse(body, status_code=status, headers=headers)
