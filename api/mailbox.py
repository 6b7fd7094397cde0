"""HTTP for the whole mailbox (v2): caught mail (``/v1/unrouted``) and search (``/v1/messages``).

The same bearer token applies (``api/middleware.py``). A caller that names a run
(``X-Run-Id`` or ``?run_id=``) searches only that run's inboxes, never caught mail.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from api.auth import grant_of, implied_run, is_agent, visibility_of
from api.context import context_of
from api.downloads import attachment_index, attachment_response
from api.inputs import caller_run, int_query
from api.replies import model_response
from api.state import state_of
from sink.errors import ForbiddenScope
from sink.mailbox import Mailbox, Page
from sink.runtime import Runtime
from sink.scopes import Kind
from sink.storage.base import Listed
from sink.tokens import Grant


def _mailbox(request: Request) -> Mailbox:
    return state_of(request).runtime.mailbox


async def list_caught(request: Request) -> Response:
    from api.views import unrouted_out  # the wire models load late (api/warmup.py)

    limit = int_query(request, "limit", 50, 1, 500)
    page = await _mailbox(request).caught_page(request.query_params.get("cursor"), limit)
    return model_response(unrouted_out(page))


def _caught_id(request: Request) -> str:
    caught_id: str = request.path_params["caught_id"]
    context_of(request.scope).note(message_id=caught_id[:64])  # the access log names it
    return caught_id


async def read_caught(request: Request) -> Response:
    from api.views import caught_message_out

    read = await _mailbox(request).caught(_caught_id(request))
    return model_response(caught_message_out(read, withheld_from(request)))


def withheld_from(request: Request) -> bool:
    """Does this caller get caught mail without its bodies? (an agent, under a default policy
    with ``agent_body = "never"``)"""
    return is_agent(request) and state_of(request).runtime.settings.caught_withheld_from_agents


def _refuse_bytes_to_agents(request: Request) -> None:
    if withheld_from(request):
        raise ForbiddenScope(
            "the default policy gives agents the extracted evidence only (agent_body = "
            "never): caught mail's bytes need a read or admin token",
            "read",
        )


async def raw_caught(request: Request) -> Response:
    caught_id = _caught_id(request)
    _refuse_bytes_to_agents(request)
    raw = await _mailbox(request).caught_raw(caught_id)
    return Response(
        raw,
        media_type="message/rfc822",
        headers={"Content-Disposition": f'attachment; filename="{caught_id}.eml"'},
    )


async def caught_attachment(request: Request) -> Response:
    index = attachment_index(request)
    _refuse_bytes_to_agents(request)
    raw = await _mailbox(request).caught_raw(_caught_id(request))
    return await attachment_response(raw, index)


async def search(request: Request) -> Response:
    from api.views import search_out

    limit = int_query(request, "limit", 50, 1, 500)
    query = request.query_params.get("query")
    cursor = request.query_params.get("cursor")
    run_id = caller_run(request)
    page = await search_in_scope(
        request.scope,
        state_of(request).runtime,
        query,
        run_id,
        cursor,
        limit,
        agent=is_agent(request),
    )
    return model_response(search_out(page))


async def search_in_scope(
    scope: Scope,
    runtime: Runtime,
    query: str | None,
    run_id: str | None,
    cursor: str | None,
    limit: int,
    *,
    agent: bool,
) -> Page:
    """The search as the caller may make it (the route and MCP's find_mail): a named run
    (already checked against the token), else what the token sees. An ``agent`` (an MCP
    caller, a run token) matches no body its policy withholds from agents."""
    grant = grant_of(scope)
    mailbox = runtime.mailbox
    if agent:
        run_scope = run_id if run_id is not None else _run_of(grant)
        withheld = _WithheldBodies(runtime)
        visible = visibility_of(scope)
        return await mailbox.search_for_agent(query, run_scope, visible, cursor, limit, withheld.of)
    if run_id is None and grant.scope.kind is Kind.RUNS:
        # A runs: token naming no run searches all of its runs, never caught mail.
        return await mailbox.search_visible(query, visibility_of(scope), cursor, limit)
    if run_id is None:
        run_id = implied_run(grant)  # a run token searches its run
    return await mailbox.search(query, run_id, cursor, limit)


def _run_of(grant: Grant) -> str | None:
    """The one run a grant is limited to (a run token's), else None."""
    return grant.scope.glob if grant.scope.kind is Kind.RUN else None


class _WithheldBodies:
    """Which entries' bodies agents may not have (``agent_body = "never"``): an inbox's
    policy says, caught mail follows the default policy. Inboxes are looked up once a search."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._policies: dict[str, str | None] = {}

    async def of(self, row: Listed) -> bool:
        settings = self._runtime.settings
        if row.inbox_id is None:
            return settings.caught_withheld_from_agents
        if row.inbox_id not in self._policies:
            inbox = await self._runtime.store.load_inbox(row.inbox_id)
            self._policies[row.inbox_id] = None if inbox is None else inbox.policy_name
        name = self._policies[row.inbox_id]
        return name is None or settings.policy(name).agent_body == "never"
