"""The envelope as an HTTP reply: its status, ``Retry-After``, and the request's context."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse, Response

from api.context import context_of
from sink.envelope import Envelope


def envelope_response(
    envelope: Envelope,
    scope: Mapping[str, Any],
    extra: dict[str, str] | None = None,
    capped: tuple[str, ...] | None = None,
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
    return JSONResponse(body, status_code=envelope.http_status, headers=headers)
