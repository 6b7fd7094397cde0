"""Errors become HTTP replies here, and only here: one table, class -> (status, code)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.calls import call_of
from api.context import context_of
from sink import errors
from sink.agent import UNREADABLE_RETRY_S
from sink.clock import seconds_up
from sink.guidance import Call, for_error
from sink.logs import error as log_error

if TYPE_CHECKING:
    from pydantic import ValidationError

# The error bodies are wire models (api/schemas.py), imported where a body is built: pydantic
# is not loaded at start-up (issue 22).


def error_response(
    status: int,
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    call: Call | None = None,
) -> JSONResponse:
    """An error body: ``error``, and what to do next (``sink/guidance.py``'s error table; the
    call to repeat or fix is ``call``, when the request got far enough to say)."""
    from api.schemas import ErrorBody, ErrorOut

    retry_header = (headers or {}).get("Retry-After")
    guided = for_error(
        code,
        status,
        call,
        message=message,
        details=details or {},
        retry_after=float(retry_header) if retry_header and retry_header.isdigit() else None,
    )
    body = ErrorOut(
        error=ErrorBody(code=code, message=message, details=details or {}), **guided.fields()
    )
    if guided.retry_after is not None and not retry_header:
        # Whenever retry_after is set, Retry-After carries it (whole seconds, rounded up).
        headers = {**(headers or {}), "Retry-After": str(math.ceil(guided.retry_after))}
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


def trace_of(request: Request) -> str:
    return context_of(request.scope).trace


def runsink_error(request: Request, exc: errors.RunsinkError) -> Response:
    call = call_of(request.scope)
    if isinstance(exc, errors.OwnershipRefused):
        from api.schemas import ErrorBody, RefusalOut

        guided = for_error(exc.reason, errors.REFUSAL_STATUS[exc.reason], call, message=exc.message)
        refusal = RefusalOut(
            reason=exc.reason,
            trace_id=trace_of(request),
            error=ErrorBody(code=exc.reason, message=exc.message, details={}),
            **guided.fields(),
        )
        return JSONResponse(
            refusal.model_dump(mode="json"), status_code=errors.REFUSAL_STATUS[exc.reason]
        )
    if isinstance(exc, errors.ProviderTrouble):
        return trouble_response(request, exc)
    for cls, status, code in errors.STATUS_AND_CODE:
        if isinstance(exc, cls):
            headers = None
            if isinstance(exc, errors.ForbiddenScope):
                # RFC 6750 section 3.1: the token is fine, its scope is not enough.
                headers = {
                    "WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{exc.needed}"'
                }
            return error_response(status, code, exc.message, exc.details, headers, call)
    return internal_error(request, exc)


def trouble_response(request: Request, exc: errors.ProviderTrouble) -> Response:
    """503 with Retry-After, and (as an envelope would) what to do: wait, then retry."""
    from api.schemas import ErrorBody, TroubleOut

    wait_s = exc.retry_after if isinstance(exc, errors.CircuitOpen) else UNREADABLE_RETRY_S
    retry_after = max(0.1, seconds_up(wait_s))
    guided = for_error(
        exc.reason.value, 503, call_of(request.scope), message=exc.message, retry_after=retry_after
    )
    body = TroubleOut(
        reason=exc.reason,
        trace_id=trace_of(request),
        error=ErrorBody(code=exc.reason.value, message=exc.message, details=exc.details),
        **guided.fields(),
    )
    return JSONResponse(
        body.model_dump(mode="json"),
        status_code=503,
        headers={"Retry-After": str(max(1, math.ceil(retry_after)))},
    )


def validation_error(request: Request, exc: ValidationError) -> Response:
    problems = [
        {"field": ".".join(str(p) for p in e["loc"]) or "(body)", "problem": e["msg"]}
        for e in exc.errors(include_url=False, include_input=False)
    ]
    first = problems[0] if problems else {"field": "(body)", "problem": "invalid"}
    return error_response(
        422,
        "invalid_request",
        f"{first['field']}: {first['problem']}",
        {"errors": problems},
        call=call_of(request.scope),
    )


def unexpected_error(request: Request, exc: Exception) -> Response:
    """A wire model's ValidationError (a ``ValueError``) is a 422; anything else a 500."""
    from pydantic import ValidationError  # loaded already when a wire model raised it

    if isinstance(exc, ValidationError):
        return validation_error(request, exc)
    return internal_error(request, exc)


def internal_error(request: Request, exc: BaseException) -> Response:
    # Never a stack trace on the wire; the log keeps the class name only (no content).
    log_error("internal_error", error=type(exc).__name__, trace_id=trace_of(request))
    return error_response(
        500,
        "internal_error",
        "the server failed; the request can be retried",
        call=call_of(request.scope),
    )
