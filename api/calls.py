"""The MCP tool call an HTTP request corresponds to (v3 agent guidance).

Over HTTP an answer's ``next_tool`` names the MCP tool the route corresponds to, and a
"repeat this call" gives that tool's arguments as the request gave them, whether in the
path, the query, ``X-Run-Id`` or the body. A route that has read its body notes the whole
call in the request's context (``RequestContext.call``); otherwise the call is read off the
method, path, query and headers here (``/mcp`` notes its own tool call).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.datastructures import Headers, QueryParams

from api import endpoints
from api.context import context_of
from sink.guidance import Call
from sink.vocabulary import Tool


def call_of(scope: Mapping[str, Any]) -> Call:
    """The call this request is, as an MCP tool call (tool None: no tool corresponds)."""
    noted = context_of(scope).call
    if noted is not None:
        return noted
    return route_call(scope, None)


def route_call(scope: Mapping[str, Any], body: object) -> Call:
    """The tool call of an HTTP request: its endpoint's tool (``api/endpoints.py``), and its
    arguments from the path's id, the query, ``X-Run-Id`` and ``body`` (a JSON object, when
    the route takes one)."""
    method, path = scope.get("method", ""), scope.get("path", "")
    found = endpoints.find(method, path)
    if found is None or found.endpoint.tool is None or found.endpoint.method != method:
        return Call(None)
    tool = found.endpoint.tool
    arguments: dict[str, Any] = {}
    name = next(iter(found.params), None)
    if name is not None:
        arguments[name] = found.params[name]
    query = QueryParams(scope.get("query_string", b""))
    if tool is Tool.FIND_MAIL:
        arguments.update({k: query[k] for k in ("query", "limit", "cursor") if k in query})
    run_id = Headers(raw=scope.get("headers") or []).get("x-run-id") or query.get("run_id")
    if run_id and tool is not Tool.GET_RUN_REPORT and tool is not Tool.CREATE_INBOX:
        arguments["run_id"] = run_id
    if isinstance(body, dict):
        arguments.update(body)
    return Call(tool, arguments)
