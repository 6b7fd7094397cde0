"""The MCP server over a backend: the same tools, checks and answers on every transport.

A backend performs the six calls the HTTP API way and returns the API's JSON: the
in-process one (``api/mcp.py``) calls the Agent, the stdio one (``sink/mcp/stdio.py``)
calls a running server over HTTP. This module checks the arguments both share,
dispatches, and turns the JSON into a tool result: an answer is structured content;
a body with an ``error`` member (what the HTTP API sends for a 4xx/5xx that is not an
envelope) is a tool error whose text is that body. Two answers are made thriftier here
than the HTTP API's (a model pays for every character): the run report (compact unless
``full``) and the search (``find_mail``: summaries).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Protocol

import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from sink import __version__, ids
from sink.envelope import REFUSALS
from sink.guidance import Call, for_error
from sink.mcp.answers import for_agent, read_options_refused
from sink.mcp.tools import (
    FIND_MAIL_LIMIT,
    FIND_MAIL_MAX,
    INSTRUCTIONS,
    PROMPT_ARGUMENTS,
    PROMPT_DESCRIPTION,
    PROMPT_NAME,
    REPORT_EVENTS,
    REPORT_INBOX_FIELDS,
    TOOLS,
    ToolSpec,
    prompt_text,
)
from sink.vocabulary import Tool

Json = dict[str, Any]

# The HTTP handlers' own checks on what they take in a URL (api/agent.py), so a value
# that could never reach a route fails the same way on every transport.
_IDS = {
    "inbox_id": (ids.INBOX_ID, "inbox"),
    "message_id": (ids.MESSAGE_ID, "message"),
}
_RUN_ID = ids.RUN_ID


# A number written as a string ("30", "2.5"): models often send them so.
_NUMERIC = re.compile(r"-?\d{1,15}(\.\d{1,15})?")


class Backend(Protocol):
    """The six calls, with the HTTP API's semantics; each returns the API's JSON body."""

    async def create_inbox(self, body: Json) -> Json: ...

    async def wait_for_message(self, inbox_id: str, body: Json) -> Json: ...

    async def read_message(self, message_id: str, run_id: str | None) -> Json: ...

    async def read_caught(self, caught_id: str) -> Json:
        """Caught mail (a ``cm_`` id that ``find_mail`` found), as ``GET /v1/unrouted/{id}``."""
        ...

    async def claim_message(self, message_id: str, body: Json) -> Json: ...

    async def get_run_report(self, run_id: str) -> Json: ...

    async def find_mail(
        self, query: str, run_id: str | None, limit: int, cursor: str | None
    ) -> Json: ...


# Given the transport's HTTP request (a Starlette request on streamable HTTP, None on stdio).
BackendFor = Callable[[Any], Backend]


def error_body(
    code: str,
    message: str,
    details: Json | None = None,
    call: Call | None = None,
    http_status: int = 400,
) -> Json:
    """The HTTP API's error shape: ``{"error": {"code", "message", "details"}}`` and what to
    do next (``sink/guidance.py``), for an error this side finds before any server answers."""
    guided = for_error(code, http_status, call, message=message, details=details or {})
    return {
        "error": {"code": code, "message": message, "details": details or {}},
        **guided.fields(),
    }


def tools_server(backend_for: BackendFor) -> Server[Any]:
    """The runsink MCP server: six tools and one prompt, answered by ``backend_for(request)``."""
    specs = {spec.name: spec for spec in TOOLS}
    listed = [_tool(spec) for spec in TOOLS]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        spec = specs.get(params.name)
        if spec is None:
            return tool_result(unknown_tool(params.name))
        given = {k: v for k, v in (params.arguments or {}).items() if v is not None}
        arguments = scalars_taken(spec.input_schema, given)
        refused = check_arguments(spec, arguments, Call(Tool(spec.name)))
        if refused is not None:
            return tool_result(refused)
        answer = await _dispatch(backend_for(ctx.request), spec.name, arguments)
        return tool_result(
            for_agent(spec.name, arguments, _repeat_as_given(spec, arguments, answer))
        )

    prompt = types.Prompt(
        name=PROMPT_NAME,
        description=PROMPT_DESCRIPTION,
        arguments=[
            types.PromptArgument(name=name, description=text, required=True)
            for name, text in PROMPT_ARGUMENTS
        ],
    )

    async def list_prompts(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[prompt])

    async def get_prompt(
        ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        if params.name != PROMPT_NAME:
            raise MCPError(types.INVALID_PARAMS, f"unknown prompt {params.name!r}")
        given = params.arguments or {}
        missing = [name for name, _ in PROMPT_ARGUMENTS if not given.get(name)]
        if missing:
            raise MCPError(types.INVALID_PARAMS, f"{PROMPT_NAME} needs {', '.join(missing)}")
        text = prompt_text(given["run_id"], given["purpose"], given["what_to_expect"])
        return types.GetPromptResult(
            description=PROMPT_DESCRIPTION,
            messages=[
                types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))
            ],
        )

    return Server(
        "runsink",
        version=__version__,
        title="runsink",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )


# next_action words a model may call as if they were tools: the tool each one means.
_ACTION_TOOLS = {
    "create_new_inbox": Tool.CREATE_INBOX,
    "verify_trigger": Tool.WAIT_FOR_MESSAGE,
    "proceed": Tool.READ_MESSAGE,
}


def unknown_tool(name: str) -> Json:
    """A tool error for a name that is no tool (not a bare protocol error: the model reads
    it), naming the tool it most likely meant."""
    shown = name[:64]
    meant = _ACTION_TOOLS.get(name)
    tools = ", ".join(spec.name for spec in TOOLS)
    body = error_body(
        "invalid_request",
        f"unknown tool {shown!r}; the tools are {tools}",
        {"field": "name"},
        Call(meant),
    )
    if meant is not None:
        body["hint"] = (
            f"{shown} is a next_action, not a tool: call next_tool ({meant.value}) with the "
            "answer's next_arguments."
        )
    else:
        body["hint"] = f"There is no tool {shown!r}: call the answer's next_tool, one of {tools}."
    return body


def scalars_taken(schema: Json, arguments: Json) -> Json:
    """``arguments`` with numbers and booleans written as strings ("30", "true") read as the
    numbers and booleans the schema asks for, nested objects included; anything else is
    left for the checks to judge."""
    properties = schema.get("properties", {})
    taken = dict(arguments)
    for name, value in arguments.items():
        wanted = properties.get(name, {})
        kind = wanted.get("type")
        if isinstance(value, str) and kind in ("integer", "number"):
            text = value.strip()
            if _NUMERIC.fullmatch(text):
                number = float(text)
                if kind == "number":
                    taken[name] = int(number) if number.is_integer() else number
                elif number.is_integer():
                    taken[name] = int(number)
        elif isinstance(value, str) and kind == "boolean":
            text = value.strip().lower()
            if text in ("true", "false"):
                taken[name] = text == "true"
        elif isinstance(value, dict) and kind == "object":
            taken[name] = scalars_taken(wanted, value)
    return taken


def _repeat_as_given(spec: ToolSpec, arguments: Json, answer: Json) -> Json:
    """An answer that says to repeat this call names it with the arguments the tool was
    given (the backend saw only what it sends over HTTP: read_message's options, say)."""
    if answer.get("next_action") == "wait_then_retry" and answer.get("next_tool") == spec.name:
        return {**answer, "next_arguments": dict(arguments)}
    return answer


def check_arguments(spec: ToolSpec, arguments: Json, call: Call | None = None) -> Json | None:
    """The error body for arguments no transport could send, else None.

    Unknown arguments are refused (a typo must not be ignored), and every argument the
    HTTP API takes in the URL gets the route's own check: an id that cannot be one of
    ours is ``not_found``, a bad run_id is ``invalid_request``.
    """
    known = spec.input_schema["properties"]
    for name in arguments:
        if name not in known:
            return error_body(
                "invalid_request",
                f"{name}: unknown argument; {spec.name} takes {', '.join(known)}",
                {"field": name},
                call,
            )
    problem_of_option = _option_refused(spec, arguments)
    if problem_of_option is not None:
        field, message = problem_of_option
        return error_body("invalid_request", f"{field}: {message}", {"field": field}, call)
    if spec.name == "read_message":
        problem = read_options_refused(arguments)
        if problem is not None:
            field, message = problem
            return error_body("invalid_request", f"{field}: {message}", {"field": field}, call)
    required = spec.input_schema["required"]
    for name in spec.url_args:
        if name in arguments:
            refused = _check_url_arg(name, arguments[name], call)
            if refused is not None:
                return refused
        elif name in required:
            return error_body(
                "invalid_request", f"{name}: a value is required", {"field": name}, call
            )
    return None


# Arguments the HTTP API takes in a query string, checked here as its routes do.
_OPTIONS: dict[str, tuple[type, str]] = {
    "full": (bool, "expected true or false"),
    "query": (str, "expected a search query (a string)"),
    "cursor": (str, "expected a cursor from an earlier answer"),
    "limit": (int, f"expected a whole number from 1 to {FIND_MAIL_MAX}"),
}


def _option_refused(spec: ToolSpec, arguments: Json) -> tuple[str, str] | None:
    if spec.name not in ("get_run_report", "find_mail"):
        return None
    for name, (kind, message) in _OPTIONS.items():
        if name not in arguments:
            continue
        value = arguments[name]
        if isinstance(value, bool) is not (kind is bool) or not isinstance(value, kind):
            return name, message
        if type(value) is int and not 1 <= value <= FIND_MAIL_MAX:  # (not full: false, a 0)
            return name, message
        if isinstance(value, str) and len(value) > 2048:
            return name, "at most 2048 characters"
    return None


def _check_url_arg(name: str, value: object, call: Call | None) -> Json | None:
    if not isinstance(value, str):
        return error_body("invalid_request", f"{name}: expected a string", {"field": name}, call)
    if name == "run_id":
        if _RUN_ID.fullmatch(value):
            return None
        return error_body(
            "invalid_request",
            "run_id: a run_id is 1-128 chars of A-Za-z0-9._:-",
            {"field": name},
            call,
        )
    pattern, noun = _IDS[name]
    if pattern.fullmatch(value):
        return None
    if call is not None and call.tool is Tool.READ_MESSAGE and ids.CAUGHT_ID.fullmatch(value):
        return None  # caught mail, which find_mail lists: read_message reads it too
    return error_body("not_found", f"no {noun} {value[:64]!r}", None, call, 404)


def tool_result(body: Json) -> types.CallToolResult:
    """An answer as structured content (and its JSON text); an error body, or an envelope
    that refuses what was asked (``sink.envelope.REFUSALS``: HTTP's 409), as a tool error."""
    text = types.TextContent(type="text", text=json.dumps(body, ensure_ascii=False))
    if "error" in body or body.get("reason") in REFUSALS:
        return types.CallToolResult(content=[text], is_error=True)
    return types.CallToolResult(content=[text], structured_content=body)


async def _dispatch(backend: Backend, tool: str, arguments: Json) -> Json:
    args = dict(arguments)
    if tool == "create_inbox":
        return await backend.create_inbox(args)
    if tool == "wait_for_message":
        inbox_id = args.pop("inbox_id")
        return await backend.wait_for_message(inbox_id, args)
    if tool == "read_message":
        if ids.CAUGHT_ID.fullmatch(args["message_id"]):
            return await _read_caught(backend, args)
        return await backend.read_message(args["message_id"], args.get("run_id"))
    if tool == "claim_message":
        message_id = args.pop("message_id")
        return await backend.claim_message(message_id, args)
    if tool == "get_run_report":
        report = await backend.get_run_report(args["run_id"])
        return report if args.get("full") is True else compact_report(report)
    if tool == "find_mail":
        limit = args.get("limit", FIND_MAIL_LIMIT)
        found = await backend.find_mail(
            args["query"], args.get("run_id"), limit, args.get("cursor")
        )
        return summaries(found)
    raise AssertionError(f"no dispatch for tool {tool!r}")  # TOOLS and this list disagree


async def _read_caught(backend: Backend, args: Json) -> Json:
    """Caught mail belongs to no run: naming one is a mistake the caller can fix."""
    if "run_id" in args:
        return error_body(
            "invalid_request",
            "run_id: caught mail (a cm_ id) belongs to no run; read it without run_id",
            {"field": "run_id"},
            Call(Tool.READ_MESSAGE, args),
            422,
        )
    return await backend.read_caught(args["message_id"])


def compact_report(report: Json) -> Json:
    """The run report for a model: one short object per inbox, the last events, oldest first."""
    if "error" in report:
        return report
    inboxes = [
        {name: inbox.get(name) for name in REPORT_INBOX_FIELDS}
        for inbox in report.get("inboxes") or []
    ]
    events = list(report.get("events") or [])[-REPORT_EVENTS:]
    return {"run_id": report.get("run_id"), "inboxes": inboxes, "events": events}


def summaries(found: Json) -> Json:
    """Search results as summaries (``for_agent`` puts from and subject under untrusted)."""
    if "error" in found:
        return found
    fields = ("message_id", "received_at", "inbox_id", "run_id", "caught", "from", "subject")
    return {
        "messages": [
            {name: item.get(name) for name in fields} for item in found.get("messages") or []
        ],
        "next_cursor": found.get("next_cursor"),
        "has_more": bool(found.get("has_more")),
    }


def _tool(spec: ToolSpec) -> types.Tool:
    return types.Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description,
        input_schema=spec.input_schema,
        output_schema=spec.output_schema,
        annotations=types.ToolAnnotations(
            read_only_hint=spec.read_only,
            destructive_hint=False,
            idempotent_hint=spec.idempotent,
            open_world_hint=False,
        ),
    )
