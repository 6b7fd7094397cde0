"""HTTP for the Agent's operations (``sink/agent.py``): inboxes, their messages, runs.

Create, look, wait, list, read, download, claim; a run's report, release and run token. The
routes, scopes and documentation are these handlers' rows in ``api/endpoints.py``.
"""

from __future__ import annotations

from functools import partial

from starlette.requests import Request
from starlette.responses import Response

from api.auth import grant_of, is_agent
from api.calls import route_call
from api.context import context_of, continue_trace
from api.downloads import attachment_index, attachment_response
from api.inputs import (
    caller_run,
    check_named_run,
    int_query,
    json_body,
    model,
    request_body,
    run_id_param,
)
from api.replies import envelope_response, model_response
from api.state import state_of
from sink import clock, ids, run_tokens
from sink.agent import Agent
from sink.errors import InvalidRequest, NotFound

# The wire models (pydantic, api/schemas.py, api/views.py: ~90 ms of imports) load in the
# handlers, not at start-up; api/warmup.py loads them right after the first answer.

# -- helpers ---------------------------------------------------------------------


def _agent(request: Request) -> Agent:
    return state_of(request).agent


def _inbox_id(request: Request) -> str:
    inbox_id: str = request.path_params["inbox_id"]
    if not ids.INBOX_ID.fullmatch(inbox_id):
        raise NotFound(f"no inbox {inbox_id[:64]!r}")
    context_of(request.scope).note(inbox_id=inbox_id)
    return inbox_id


def _message_id(request: Request) -> str:
    message_id: str = request.path_params["message_id"]
    if not ids.MESSAGE_ID.fullmatch(message_id):
        raise NotFound(f"no message {message_id[:64]!r}")
    context_of(request.scope).note(message_id=message_id)
    return message_id


def _explicit_trace(request: Request) -> str | None:
    return context_of(request.scope).explicit_trace


# -- inboxes -----------------------------------------------------------------------


async def create_inbox(request: Request) -> Response:
    from api.schemas import CreateInboxIn
    from api.views import create_request

    body = await json_body(request)
    context_of(request.scope).call = route_call(request.scope, body)
    given = model(CreateInboxIn, body)
    key = request.headers.get("idempotency-key")
    if key is not None and not ids.IDEMPOTENCY_KEY.fullmatch(key):
        raise InvalidRequest("Idempotency-Key: 1-255 printable ASCII characters, no spaces")
    context_of(request.scope).note(run_id=given.run_id)
    check_named_run(request, given.run_id)
    created = await _agent(request).create(
        create_request(given), body, key, _explicit_trace(request)
    )
    envelope, capped = created.envelope, created.capped
    if created.replayed:
        return envelope_response(envelope, request.scope, {"Idempotent-Replayed": "true"}, capped)
    return envelope_response(envelope, request.scope, None, capped, created=True)


async def get_inbox(request: Request) -> Response:
    inbox_id = _inbox_id(request)
    envelope = await _agent(request).get(inbox_id, _explicit_trace(request), caller_run(request))
    return envelope_response(envelope, request.scope)


async def wait_for_message(request: Request) -> Response:
    # The lean path in front of the app (api/waitpath.py) answers most waits; this route
    # answers the rest (a UI session, a chunked body) with the same endpoint.
    inbox_id: str = request.path_params["inbox_id"]
    return await state_of(request).waits.answer(
        request.scope, request.receive, inbox_id, partial(request_body, request)
    )


async def list_messages(request: Request) -> Response:
    from api.views import message_list_out

    inbox_id = _inbox_id(request)
    limit = int_query(request, "limit", 50, 1, 500)
    run_id = caller_run(request)
    page = await _agent(request).messages(
        inbox_id, request.query_params.get("after"), limit, run_id
    )
    continue_trace(request.scope, page.trace_id)
    return model_response(message_list_out(page))


# -- messages ------------------------------------------------------------------------


async def read_message(request: Request) -> Response:
    from api.views import message_out

    message_id = _message_id(request)
    result = await _agent(request).read(
        message_id, caller_run(request), _explicit_trace(request), is_agent(request)
    )
    stored = result.stored
    continue_trace(request.scope, result.trace_id, stored.run_id, stored.delivery.inbox_id)
    return model_response(message_out(result))


async def raw_message(request: Request) -> Response:
    message_id = _message_id(request)
    got = await _agent(request).raw(message_id, caller_run(request), is_agent(request))
    continue_trace(request.scope, got.trace_id, got.run_id, got.inbox_id)
    return Response(
        got.raw,
        media_type="message/rfc822",
        headers={"Content-Disposition": f'attachment; filename="{message_id}.eml"'},
    )


async def attachment(request: Request) -> Response:
    message_id = _message_id(request)
    index = attachment_index(request)
    got = await _agent(request).raw(message_id, caller_run(request), is_agent(request))
    continue_trace(request.scope, got.trace_id, got.run_id, got.inbox_id)
    return await attachment_response(got.raw, index)


async def claim_message(request: Request) -> Response:
    from api.schemas import ClaimIn

    message_id = _message_id(request)
    body = await json_body(request, required=False)
    context_of(request.scope).call = route_call(request.scope, body)
    given = model(ClaimIn, body)
    run_id = caller_run(request, given.run_id)
    if run_id is None:
        raise InvalidRequest(
            "run_id: the claiming run is required (body run_id, or X-Run-Id)", {"field": "run_id"}
        )
    envelope = await _agent(request).claim(message_id, run_id, _explicit_trace(request))
    return envelope_response(envelope, request.scope)


# -- runs ----------------------------------------------------------------------------


def _run_path(request: Request) -> str:
    run_id: str = request.path_params["run_id"]
    run_id_param(run_id, "run_id")
    context_of(request.scope).note(run_id=run_id)
    return run_id


async def run_report(request: Request) -> Response:
    from api.views import run_report_out

    report = await _agent(request).run_report(_run_path(request))
    return model_response(run_report_out(report))


async def release_run(request: Request) -> Response:
    # The release's log line carries this request's trace (no inbox's trace to continue).
    await _agent(request).release(_run_path(request), context_of(request.scope).trace)
    return Response(status_code=204)


async def mint_run_token(request: Request) -> Response:
    from api.schemas import RunTokenIn, RunTokenOut

    run_id = _run_path(request)
    given = model(RunTokenIn, await json_body(request, required=False))
    runtime = state_of(request).runtime
    minted = await run_tokens.mint(
        runtime.store,
        state_of(request).authority.keyring,
        runtime.settings.policy(runtime.settings.default_policy),
        run_id,
        given.ttl_s,
        grant_of(request.scope),
        _explicit_trace(request),
    )
    out = RunTokenOut(
        token=minted.token, run_id=minted.run_id, expires_at=clock.rfc3339(minted.expires_at)
    )
    return model_response(out, 201)
