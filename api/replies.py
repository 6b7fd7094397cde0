"""The envelope as an HTTP reply: its status, ``Retry-After``, and the request's context (and
any other wire model as a JSON reply, ``model_response``).

The domain's envelope says what happened (state, status, reason); which HTTP status that is
is said here: 200, 201 for a new inbox, and 409 for an answer that refuses what was asked
(``sink.envelope.REFUSALS``: a claim that came after the lease claimed nothing).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse, Response

from api.context import context_of
from sink.envelope import REFUSALS, Envelope

if TYPE_CHECKING:
    from pydantic import BaseModel


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
    status = 201 if created else 409 if envelope.reason in REFUSALS else 200
    return JSONResponse(body, status_code=status, headers=headers)


def model_response(model: BaseModel, status: int = 200) -> JSONResponse:
    return JSONResponse(model.model_dump(mode="json"), status_code=status)
