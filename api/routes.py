"""The HTTP endpoints of the inbox API (routes, scopes, documentation: api/endpoints.py)."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api import live
from api.auth import Authority, grant_of, is_agent, route_op
from api.calls import route_call
from api.context import context_of, continue_trace
from api.inputs import model, named_run, parse_json, run_id_param
from api.middleware import BODY_TOO_LARGE, BodyTooLarge
from api.replies import envelope_response
from api.state import state_of
from sink import clock, ids, run_tokens
from sink.agent import Agent
from sink.envelope import Envelope
from sink.errors import FaultsDisabled, InvalidRequest, NotFound, RequestTooLarge
from sink.faults import FaultSpec
from sink.runtime import Runtime

if TYPE_CHECKING:
    from pydantic import BaseModel

# The wire models (pydantic, api/schemas.py, api/views.py: ~90 ms of imports) load in the
# handlers, not at start-up; api/warmup.py loads them right after the first answer.


_INBOX_ID = ids.INBOX_ID
_MESSAGE_ID = ids.MESSAGE_ID
_IDEMPOTENCY_KEY = ids.IDEMPOTENCY_KEY


# -- helpers ---------------------------------------------------------------------


def _runtime(request: Request) -> Runtime:
    return state_of(request).runtime


def _agent(request: Request) -> Agent:
    return state_of(request).agent


async def _json_body(request: Request, required: bool = True) -> Any:
    return parse_json(await _raw(request), required)


def _inbox_id(request: Request) -> str:
    inbox_id: str = request.path_params["inbox_id"]
    if not _INBOX_ID.fullmatch(inbox_id):
        raise NotFound(f"no inbox {inbox_id[:64]!r}")
    context_of(request.scope).note(inbox_id=inbox_id)
    return inbox_id


def _message_id(request: Request) -> str:
    message_id: str = request.path_params["message_id"]
    if not _MESSAGE_ID.fullmatch(message_id):
        raise NotFound(f"no message {message_id[:64]!r}")
    context_of(request.scope).note(message_id=message_id)
    return message_id


def _caller_run(request: Request, body_run: str | None = None) -> str | None:
    run = named_run(body_run, request.headers.get("x-run-id"), request.query_params.get("run_id"))
    context_of(request.scope).note(run_id=run)
    if run is not None:
        _check_named_run(request, run)
    return run


def _authority(request: Request) -> Authority:
    return state_of(request).authority


def _check_named_run(request: Request, run_id: str) -> None:
    """A run the caller names must be within its token's scope (api/auth.py decides)."""
    op, _, _ = route_op(request.method, request.scope["path"])
    _authority(request).check_run(grant_of(request.scope), op, run_id)


def _int_query(request: Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise InvalidRequest(
            f"{name}: expected a whole number from {low} to {high}", {"field": name}
        )
    return int(text)


def _envelope_response(
    envelope: Envelope,
    request: Request,
    extra: dict[str, str] | None = None,
    capped: tuple[str, ...] | None = None,
    *,
    created: bool = False,
) -> Response:
    return envelope_response(envelope, request.scope, extra, capped, created=created)


def _model_response(model: BaseModel, status: int = 200) -> JSONResponse:
    return JSONResponse(model.model_dump(mode="json"), status_code=status)


def _explicit_trace(request: Request) -> str | None:
    return context_of(request.scope).explicit_trace


# -- inboxes -----------------------------------------------------------------------


async def create_inbox(request: Request) -> Response:
    from api.schemas import CreateInboxIn
    from api.views import create_request

    body = await _json_body(request)
    context_of(request.scope).call = route_call(request.scope, body)
    given = model(CreateInboxIn, body)
    key = request.headers.get("idempotency-key")
    if key is not None and not _IDEMPOTENCY_KEY.fullmatch(key):
        raise InvalidRequest("Idempotency-Key: 1-255 printable ASCII characters, no spaces")
    context_of(request.scope).note(run_id=given.run_id)
    _check_named_run(request, given.run_id)
    created = await _agent(request).create(
        create_request(given), body, key, _explicit_trace(request)
    )
    envelope, capped = created.envelope, created.capped
    if created.replayed:
        return _envelope_response(envelope, request, {"Idempotent-Replayed": "true"}, capped)
    return _envelope_response(envelope, request, None, capped, created=True)


async def get_inbox(request: Request) -> Response:
    inbox_id = _inbox_id(request)
    envelope = await _agent(request).get(inbox_id, _explicit_trace(request), _caller_run(request))
    return _envelope_response(envelope, request)


async def wait_for_message(request: Request) -> Response:
    # The lean path in front of the app (api/waitpath.py) answers most waits; this route
    # answers the rest (a UI session, a chunked body) with the same endpoint.
    inbox_id: str = request.path_params["inbox_id"]
    return await state_of(request).waits.answer(
        request.scope, request.receive, inbox_id, partial(_raw, request)
    )


async def _raw(request: Request) -> bytes:
    try:
        return await request.body()
    except BodyTooLarge as exc:
        raise RequestTooLarge(BODY_TOO_LARGE) from exc


async def list_messages(request: Request) -> Response:
    from api.views import message_list_out

    inbox_id = _inbox_id(request)
    limit = _int_query(request, "limit", 50, 1, 500)
    run_id = _caller_run(request)
    page = await _agent(request).messages(
        inbox_id, request.query_params.get("after"), limit, run_id
    )
    continue_trace(request.scope, page.trace_id)
    return _model_response(message_list_out(page))


# -- messages ------------------------------------------------------------------------


async def read_message(request: Request) -> Response:
    from api.views import message_out

    message_id = _message_id(request)
    result = await _agent(request).read(
        message_id, _caller_run(request), _explicit_trace(request), is_agent(request)
    )
    continue_trace(request.scope, result.trace_id)
    return _model_response(message_out(result))


async def raw_message(request: Request) -> Response:
    message_id = _message_id(request)
    got = await _agent(request).raw(message_id, _caller_run(request), is_agent(request))
    continue_trace(request.scope, got.trace_id)
    return Response(
        got.raw,
        media_type="message/rfc822",
        headers={"Content-Disposition": f'attachment; filename="{message_id}.eml"'},
    )


async def attachment(request: Request) -> Response:
    message_id = _message_id(request)
    index = _attachment_index(request)
    got = await _agent(request).raw(message_id, _caller_run(request), is_agent(request))
    continue_trace(request.scope, got.trace_id)
    return await attachment_response(got.raw, index)


def _attachment_index(request: Request) -> int:
    index: str = request.path_params["index"]
    if not index.isdigit() or len(index) > 6:
        raise NotFound(f"no attachment {index[:16]!r}")
    return int(index)


async def attachment_response(raw: bytes, index: int) -> Response:
    """Attachment ``index`` of ``raw`` as a download that no browser runs or renders."""
    part = await asyncio.to_thread(live.part_at, raw, index)
    return Response(
        part.payload,
        media_type=live.download_type(part.attachment.content_type),
        headers={
            "Content-Disposition": live.content_disposition(part.attachment.filename),
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "sandbox; default-src 'none'",
        },
    )


async def claim_message(request: Request) -> Response:
    from api.schemas import ClaimIn

    message_id = _message_id(request)
    body = await _json_body(request, required=False)
    context_of(request.scope).call = route_call(request.scope, body)
    given = model(ClaimIn, body)
    run_id = _caller_run(request, given.run_id)
    if run_id is None:
        raise InvalidRequest(
            "run_id: the claiming run is required (body run_id, or X-Run-Id)", {"field": "run_id"}
        )
    envelope = await _agent(request).claim(message_id, run_id, _explicit_trace(request))
    return _envelope_response(envelope, request)


# -- runs ----------------------------------------------------------------------------


def _run_path(request: Request) -> str:
    run_id: str = request.path_params["run_id"]
    run_id_param(run_id, "run_id")
    context_of(request.scope).note(run_id=run_id)
    return run_id


async def run_report(request: Request) -> Response:
    from api.views import run_report_out

    report = await _agent(request).run_report(_run_path(request))
    return _model_response(run_report_out(report))


async def release_run(request: Request) -> Response:
    await _agent(request).release(_run_path(request), _explicit_trace(request))
    return Response(status_code=204)


async def mint_run_token(request: Request) -> Response:
    from api.schemas import RunTokenIn, RunTokenOut

    run_id = _run_path(request)
    given = model(RunTokenIn, await _json_body(request, required=False))
    runtime = _runtime(request)
    minted = await run_tokens.mint(
        runtime.store,
        _authority(request).keyring,
        runtime.settings.policy(runtime.settings.default_policy),
        run_id,
        given.ttl_s,
        grant_of(request.scope),
        _explicit_trace(request),
    )
    out = RunTokenOut(
        token=minted.token, run_id=minted.run_id, expires_at=clock.rfc3339(minted.expires_at)
    )
    return _model_response(out, 201)


# -- faults ----------------------------------------------------------------------------


def _faults(request: Request) -> Any:
    registry = _runtime(request).faults
    if registry is None:
        raise FaultsDisabled("fault injection is off (start with --enable-faults)")
    return registry


async def add_fault(request: Request) -> Response:
    from api.schemas import FaultIn
    from api.views import fault_out

    registry = _faults(request)
    given = model(FaultIn, await _json_body(request))
    spec = FaultSpec(
        target=given.target,
        mode=given.mode,
        count=given.count,
        probability=given.probability,
        delay_s=given.delay_s,
        run_id=given.run_id,
    )
    from sink.faults import FaultSpecError

    try:
        fault = registry.add(spec, clock.now())
    except FaultSpecError as exc:
        raise InvalidRequest(f"{exc.field}: {exc.message}", {"field": exc.field}) from exc
    return _model_response(fault_out(fault), 201)


async def list_faults(request: Request) -> Response:
    from api.schemas import FaultListOut
    from api.views import fault_out

    registry = _faults(request)
    return _model_response(FaultListOut(faults=[fault_out(f) for f in registry.list()]))


async def clear_faults(request: Request) -> Response:
    _faults(request).clear()
    return Response(status_code=204)


# -- service -------------------------------------------------------------------------------


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    if not await _runtime(request).store_answers(within_s=2.0):
        return JSONResponse({"status": "unavailable", "store": "unavailable"}, status_code=503)
    if _runtime(request).stopping.is_set():
        return JSONResponse({"status": "unavailable", "store": "ok"}, status_code=503)
    return JSONResponse({"status": "ready", "store": "ok"})


async def metrics(request: Request) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    return Response(_runtime(request).metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


async def openapi(request: Request) -> Response:
    from api.openapi import openapi_document

    return JSONResponse(openapi_document())
