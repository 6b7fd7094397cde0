"""The MCP tool call an HTTP request corresponds to (v3 agent guidance).

Over HTTP an answer's ``next_tool`` names the MCP tool the route corresponds to, and a
"repeat this call" gives that tool's arguments as the request gave them, whether in the
path, the query, ``X-Run-Id`` or the body. A route that has read its body notes the whole
call in the request's context (``RequestContext.call``); otherwise the call is read off the
method, path, query and headers here (``/mcp`` notes its own tool call).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from starlette.datastructures import Headers, QueryParams

from api.context import context_of
from sink.guidance import Call
from sink.vocabulary import Tool

_ROUTES: tuple[tuple[str, re.Pattern[str], Tool, str | None], ...] = (
    ("POST", re.compile(r"/v1/inboxes"), Tool.CREATE_INBOX, None),
    # GET of an inbox has no tool of its own: a wait is how an agent looks at the inbox.
    ("GET", re.compile(r"/v1/inboxes/([^/]+)"), Tool.WAIT_FOR_MESSAGE, "inbox_id"),
    ("POST", re.compile(r"/v1/inboxes/([^/]+)/wait"), Tool.WAIT_FOR_MESSAGE, "inbox_id"),
    ("GET", re.compile(r"/v1/messages/([^/]+)"), Tool.READ_MESSAGE, "message_id"),
    ("GET", re.compile(r"/v1/messages/([^/]+)/raw"), Tool.READ_MESSAGE, "message_id"),
    (
        "GET",
        re.compile(r"/v1/messages/([^/]+)/attachments/[^/]+"),
        Tool.READ_MESSAGE,
        "message_id",
    ),
    ("POST", re.compile(r"/v1/messages/([^/]+)/claim"), Tool.CLAIM_MESSAGE, "message_id"),
    ("GET", re.compile(r"/v1/runs/([^/]+)"), Tool.GET_RUN_REPORT, "run_id"),
    ("GET", re.compile(r"/v1/messages"), Tool.FIND_MAIL, None),
)


def call_of(scope: Mapping[str, Any]) -> Call:
    """The call this request is, as an MCP tool call (tool None: no tool corresponds)."""
    noted = context_of(scope).call
    if noted is not None:
        return noted
    return route_call(scope, None)


def route_call(scope: Mapping[str, Any], body: object) -> Call:
    """The tool call of an HTTP request: its route's tool, and its arguments from the path,
    the query, ``X-Run-Id`` and ``body`` (a JSON object, when the route takes one)."""
    method, path = scope.get("method", ""), scope.get("path", "")
    for route_method, pattern, tool, path_name in _ROUTES:
        found = pattern.fullmatch(path)
        if found is None or route_method != method:
            continue
        arguments: dict[str, Any] = {}
        if path_name is not None:
            arguments[path_name] = found.group(1)
        query = QueryParams(scope.get("query_string", b""))
        if tool is Tool.FIND_MAIL:
            arguments.update({k: query[k] for k in ("query", "limit", "cursor") if k in query})
        run_id = Headers(raw=scope.get("headers") or []).get("x-run-id") or query.get("run_id")
        if run_id and tool is not Tool.GET_RUN_REPORT and tool is not Tool.CREATE_INBOX:
            arguments["run_id"] = run_id
        if isinstance(body, dict):
            arguments.update(body)
        return Call(tool, arguments)
    return Call(None)
