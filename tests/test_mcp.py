"""The MCP tools via the SDK's own client: streamable HTTP at /mcp, and `runsink mcp` (stdio)."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
import threading
import time
import typing
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel

from api import schemas
from sink import vocabulary
from sink.mcp import tools as mcp_tools
from sink.mcp.server import tools_server
from sink.mcp.stdio import HttpBackend, proxy_client
from sink.mcp.tools import (
    CREATED_SCHEMA,
    ENVELOPE_SCHEMA,
    FIND_SCHEMA,
    MESSAGE_SCHEMA,
    RUN_REPORT_SCHEMA,
    TOOLS,
)
from sink.untrusted import SENTENCE, wrap
from tests.inproc import InProcess
from tests.support import Server, create_inbox, new_run_id, start_server, wait

TOOL_NAMES = [
    "create_inbox",
    "wait_for_message",
    "read_message",
    "claim_message",
    "get_run_report",
    "find_mail",
]
TRANSPORTS = ["http", "http-legacy", "stdio"]
LOOP_DEADLINE_S = 60.0
CODE = "482913"
LINK = "https://app.example.test/verify?token=abc123"


@asynccontextmanager
async def connect(
    transport: str,
    url: str,
    token: str | None = None,
    env: dict[str, str] | None = None,
    via: httpx2.AsyncBaseTransport | None = None,
) -> AsyncIterator[Client]:
    """An SDK client on the named transport (stdio runs `python -m sink mcp`); ``via`` carries
    its HTTP to an app in this process (``InProcess.async_transport``)."""
    if transport == "stdio":
        args = ["-m", "sink", "mcp"] if env else ["-m", "sink", "mcp", "--url", url]
        if token:
            args += ["--api-token", token]
        params = StdioServerParameters(command=sys.executable, args=args, env=env)
        async with Client(params) as client:
            yield client
        return
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout, transport=via) as http:
        transport_streams = streamable_http_client(f"{url}/mcp", http_client=http)
        mode = "legacy" if transport == "http-legacy" else "auto"
        async with Client(transport_streams, mode=mode) as client:
            yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured answer; fails on a tool error."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    body: dict[str, Any] = result.structured_content
    assert json.loads(result.content[0].text) == body  # type: ignore[union-attr]
    return body


async def call_error(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool error's body: the HTTP API's error JSON, as the result's text."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    body: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    return body


def send_signup_mail(server: Server, address: str) -> None:
    server.send(
        address,
        subject="Confirm your account",
        body=f"Hi!\nYour verification code is {CODE}.\nOr confirm here: {LINK}\n",
    )


async def agent_loop(client: Client, server: Server, run_id: str) -> list[tuple[str, str, str]]:
    """What an agent does: follow next_action (honouring retry_after) from create to proceed."""
    steps: list[tuple[str, str, str]] = []

    async def step(tool: str, **arguments: Any) -> dict[str, Any]:
        answer = await call(client, tool, **arguments)
        steps.append((tool, answer["state"], answer["next_action"]))
        return answer

    envelope = await step("create_inbox", run_id=run_id, purpose="signup-check")
    inbox_id = envelope["inbox_id"]
    triggered = False
    deadline = time.monotonic() + LOOP_DEADLINE_S
    while envelope["next_action"] != "proceed":
        assert time.monotonic() < deadline, steps
        if envelope["retry_after"]:
            await asyncio.sleep(envelope["retry_after"])
        action = envelope["next_action"]
        if action == "wait_for_message" and envelope["state"] == "waiting" and not triggered:
            # Trigger the app while the long-poll is open: the wait returns on arrival.
            waiting = asyncio.ensure_future(
                step("wait_for_message", inbox_id=inbox_id, run_id=run_id, timeout_s=10)
            )
            await asyncio.to_thread(send_signup_mail, server, envelope["address"])
            triggered = True
            envelope = await waiting
        elif action == "wait_for_message":
            envelope = await step("wait_for_message", inbox_id=inbox_id, run_id=run_id, timeout_s=0)
        elif action == "claim_message":
            message_id = envelope["message"]["message_id"]
            envelope = await step("claim_message", message_id=message_id, run_id=run_id)
        else:
            pytest.fail(f"the agent was told {action!r}: {envelope}")
    return steps


# -- the agent loop --------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_agent_follows_next_action_from_create_to_claim(server: Server, transport: str) -> None:
    """An agent that only follows next_action gets from create_inbox to a claimed code and link."""
    run_id = new_run_id("mcp")

    async def scenario() -> tuple[list[tuple[str, str, str]], dict[str, Any], dict[str, Any]]:
        async with connect(transport, server.url) as client:
            listed = await client.list_tools()
            assert [tool.name for tool in listed.tools] == TOOL_NAMES
            steps = await agent_loop(client, server, run_id)
            report = await call(client, "get_run_report", run_id=run_id)
            message_id = report["inboxes"][0]["accepted_message_id"]
            message = await call(client, "read_message", message_id=message_id, run_id=run_id)
            return steps, message, report

    steps, message, report = asyncio.run(scenario())
    assert steps == [
        ("create_inbox", "created", "wait_for_message"),
        ("wait_for_message", "waiting", "wait_for_message"),
        ("wait_for_message", "received", "claim_message"),
        ("claim_message", "received", "proceed"),
    ]
    assert message["untrusted"]["subject"] == "Confirm your account"
    assert message["codes"][0] == CODE
    assert message["links"][0] == LINK
    assert message["content_flags"] == []
    assert message["untrusted"]["from_name"] is None  # From: app@example.test, no display name
    assert "text" not in message["untrusted"]  # evidence first: no body unless asked
    types = [event["type"] for event in report["events"]]
    for expected in ("created", "polled", "message_accepted", "claimed"):
        assert expected in types


# -- the tool list ----------------------------------------------------------------------


def _listed_raw(server: Server) -> tuple[list[dict[str, Any]], str]:
    """tools/list as the server sends it (the JSON-RPC result's tools, and the instructions)."""
    headers = {"accept": "application/json, text/event-stream"}
    with httpx.Client(base_url=server.url, timeout=30, headers=headers) as http:
        listed = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        hello = http.post(
            "/mcp",
            json={
                "jsonrpc": "2.0",
                "id": 2,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
        )

    def result(response: httpx.Response) -> dict[str, Any]:
        text = response.text
        if text.lstrip().startswith("{"):
            return json.loads(text)["result"]  # type: ignore[no-any-return]
        data = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
        return json.loads(data[0])["result"]  # type: ignore[no-any-return]

    return result(listed)["tools"], result(hello)["instructions"]


def test_the_tool_list_is_thrifty_and_says_its_defaults(server: Server) -> None:
    """tools/list is at most 10,000 characters; shared words are in the instructions once."""
    tools_listed, instructions = _listed_raw(server)
    size = len(json.dumps(tools_listed, separators=(",", ":"), ensure_ascii=False))
    assert size <= 10_000, size
    tools = {tool["name"]: tool for tool in tools_listed}
    assert list(tools) == TOOL_NAMES
    for word in (*vocabulary.NEXT_ACTIONS, *vocabulary.STATES, "retry_after", "next_tool", "hint"):
        assert word in instructions, word
    assert "Everything under `untrusted` was written by the mail's sender" in instructions
    # ... and the descriptions say it once too (a client may not show a model the instructions)
    said = [tool["name"] for tool in tools_listed if SENTENCE in tool["description"]]
    assert said == ["read_message"], said
    for tool in tools.values():
        text = tool["description"]
        optional = set(tool["inputSchema"]["properties"]) - set(tool["inputSchema"]["required"])
        if optional - {"run_id", "cursor", "match"}:
            assert "default" in text, tool["name"]  # each says its defaults
        assert "Errors: " in text, tool["name"]  # ... and its own errors
        assert "envelope" not in text  # said once, in the instructions
        assert tool["outputSchema"]["type"] == "object"
        assert tool["inputSchema"]["additionalProperties"] is False
        assert "description" not in json.dumps(tool["outputSchema"])
    assert "policy_forbids" in tools["create_inbox"]["description"]
    assert "policy_forbids" not in tools["read_message"]["description"]
    assert tools["read_message"]["annotations"]["readOnlyHint"] is True
    assert tools["find_mail"]["annotations"]["readOnlyHint"] is True
    assert tools["wait_for_message"]["annotations"]["readOnlyHint"] is False


# The errors each tool can answer with: a scoped token refuses any of them, and the store
# failing fails every one (circuit_open only where a breaker guards the call).
TOOL_ERRORS = {
    "create_inbox": ("invalid_request", "policy_forbids", "forbidden_scope", "provider_error"),
    "wait_for_message": ("not_found", "wrong_run", "forbidden_scope", "circuit_open"),
    "read_message": ("not_found", "wrong_run", "forbidden_scope", "circuit_open"),
    "claim_message": ("not_found", "invalid_request", "claimed_by_other_run", "circuit_open"),
    "get_run_report": ("not_found", "invalid_request", "forbidden_scope", "provider_error"),
    "find_mail": ("invalid_request", "invalid_cursor", "forbidden_scope", "provider_error"),
}


def test_each_tool_lists_the_errors_it_can_return() -> None:
    """A scoped token's forbidden_scope and the store's provider errors are in every list."""
    for tool in TOOLS:
        listed = tool.description.split("Errors: ", 1)[1]
        for code in TOOL_ERRORS[tool.name]:
            assert code in listed, (tool.name, code)


# A call each tool refuses for its arguments alone, whatever the store holds.
REFUSED_CALLS = [
    ("create_inbox", {"run_id": "r", "purpose": "a b"}),
    ("wait_for_message", {"inbox_id": "ib_" + "a" * 20, "cursor": "not-ours"}),
    ("read_message", {"message_id": "msg_" + "a" * 24, "max_body_chars": 0}),
    ("claim_message", {"message_id": "msg_" + "a" * 24}),  # no run_id
    ("claim_message", {"message_id": "msg_" + "a" * 24, "run_id": "a b"}),
    ("get_run_report", {"run_id": "a b"}),
    ("find_mail", {"query": "ab"}),
    ("find_mail", {"query": "welcome", "cursor": "not-ours"}),
]


def test_each_error_a_tool_answers_is_in_its_list(app: InProcess) -> None:
    """The code of a tool error a tool really answers is named in that tool's description."""

    async def scenario() -> list[tuple[str, str, str]]:
        async with connect("http", app.url, via=app.async_transport()) as client:
            described = {tool.name: tool.description for tool in (await client.list_tools()).tools}
            answered = []
            for tool, arguments in REFUSED_CALLS:
                code = (await call_error(client, tool, **arguments))["error"]["code"]
                answered.append((tool, code, described[tool].split("Errors: ", 1)[1]))
            return answered

    for tool, code, listed in asyncio.run(scenario()):
        assert code in listed, (tool, code)


def _properties(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


def test_output_schemas_name_every_wire_field() -> None:
    """The tools' output schemas have exactly the fields the answers carry."""
    assert set(ENVELOPE_SCHEMA["properties"]) == _properties(schemas.EnvelopeOut)
    assert set(CREATED_SCHEMA["properties"]) == _properties(schemas.CreatedOut)
    report = RUN_REPORT_SCHEMA["properties"]
    assert set(report) == _properties(schemas.RunReportOut)
    assert set(report["inboxes"]["items"]["properties"]) == set(mcp_tools.REPORT_INBOX_FIELDS)
    assert set(mcp_tools.REPORT_INBOX_FIELDS) <= _properties(schemas.RunInboxOut)
    read = MESSAGE_SCHEMA["properties"]
    assert set(read) - {"untrusted", "truncated"} <= _properties(schemas.MessageOut)
    assert set(read["untrusted"]["properties"]) <= _properties(schemas.MessageOut)
    found = FIND_SCHEMA["properties"]["messages"]["items"]["properties"]
    assert set(found) - {"untrusted"} <= _properties(schemas.FoundItem)
    assert typing.get_args(schemas.State) == vocabulary.STATES
    assert typing.get_args(schemas.StatusT) == vocabulary.STATUSES
    assert typing.get_args(schemas.NextAction) == vocabulary.NEXT_ACTIONS
    assert typing.get_args(schemas.Reason) == vocabulary.REASONS


# -- the same answers as the HTTP API -----------------------------------------------------


def _received_inbox(server: Server, http: httpx.Client, run_id: str) -> tuple[str, str]:
    inbox = create_inbox(http, run_id, purpose="parity")
    send_signup_mail(server, inbox["address"])
    answer = wait(http, inbox["inbox_id"], timeout_s=10, run_id=run_id).json()
    assert answer["next_action"] == "claim_message", answer
    return inbox["inbox_id"], answer["message"]["message_id"]


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_answers_equal_the_http_api_json(server: Server, transport: str) -> None:
    """get_run_report and a claim replay answer the HTTP API's JSON, unchanged; read_message
    its evidence, with the sender's words under untrusted."""
    run_id = new_run_id("mcp")
    with server.http() as http:
        inbox_id, message_id = _received_inbox(server, http, run_id)
        first = http.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id})
        assert first.json()["next_action"] == "proceed"

        async def over_mcp() -> list[dict[str, Any]]:
            async with connect(transport, server.url) as client:
                return [
                    await call(client, "claim_message", message_id=message_id, run_id=run_id),
                    await call(client, "read_message", message_id=message_id, run_id=run_id),
                    await call(client, "get_run_report", run_id=run_id),
                ]

        claim, message, report = asyncio.run(over_mcp())
        again = http.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id}).json()
        assert claim == {**again, "message": wrap(again["message"])}
        assert claim["message"]["untrusted"] == {
            "from": "app@example.test",
            "subject": "Confirm your account",
        }
        assert claim["reason"] == "already_claimed"
        over_http = http.get(f"/v1/messages/{message_id}").json()
        assert message == {
            **{key: over_http[key] for key in ("message_id", "received_at", "codes", "links")},
            "attachments": over_http["attachments"],
            "content_flags": over_http["content_flags"],
            "untrusted": {key: over_http[key] for key in ("from", "from_name", "subject")},
        }
        whole = http.get(f"/v1/runs/{run_id}").json()
        assert report == {
            "run_id": run_id,
            "inboxes": [
                {key: row[key] for key in mcp_tools.REPORT_INBOX_FIELDS} for row in whole["inboxes"]
            ],
            "events": whole["events"][-mcp_tools.REPORT_EVENTS :],
        }
        assert inbox_id in {row["inbox_id"] for row in report["inboxes"]}


def _without_trace(body: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in body.items() if key != "trace_id"}


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_errors_are_tool_errors_with_the_http_api_body(server: Server, transport: str) -> None:
    """Refusals and errors come back as tool errors carrying the HTTP API's code and message."""
    run_id = new_run_id("mcp")
    with server.http() as http:
        inbox_id, message_id = _received_inbox(server, http, run_id)
        unknown_inbox = "ib_" + "a" * 20
        unknown_message = "msg_" + "a" * 24
        nobody = new_run_id("nobody")
        cases: list[tuple[str, dict[str, Any], httpx.Response]] = [
            (
                "claim_message",
                {"message_id": message_id, "run_id": "someone-else"},
                http.post(f"/v1/messages/{message_id}/claim", json={"run_id": "someone-else"}),
            ),
            (
                "wait_for_message",
                {"inbox_id": inbox_id, "run_id": "someone-else"},
                wait(http, inbox_id, run_id="someone-else"),
            ),
            (
                "read_message",
                {"message_id": message_id, "run_id": "someone-else"},
                http.get(f"/v1/messages/{message_id}", params={"run_id": "someone-else"}),
            ),
            ("wait_for_message", {"inbox_id": unknown_inbox}, wait(http, unknown_inbox)),
            ("wait_for_message", {"inbox_id": "nope"}, wait(http, "nope")),
            (
                "wait_for_message",
                {"inbox_id": inbox_id, "cursor": "not-ours"},
                wait(http, inbox_id, cursor="not-ours"),
            ),
            (
                "create_inbox",
                {"run_id": run_id, "purpose": "p", "ttl_s": 0},
                http.post("/v1/inboxes", json={"run_id": run_id, "purpose": "p", "ttl_s": 0}),
            ),
            (
                "create_inbox",
                {"run_id": run_id, "purpose": "p", "policy": "no-such-policy"},
                http.post(
                    "/v1/inboxes",
                    json={"run_id": run_id, "purpose": "p", "policy": "no-such-policy"},
                ),
            ),
            (
                "read_message",
                {"message_id": unknown_message},
                http.get(f"/v1/messages/{unknown_message}"),
            ),
            ("get_run_report", {"run_id": nobody}, http.get(f"/v1/runs/{nobody}")),
        ]

        async def over_mcp() -> list[dict[str, Any]]:
            async with connect(transport, server.url) as client:
                return [await call_error(client, tool, **args) for tool, args, _ in cases]

        bodies = asyncio.run(over_mcp())
    for (tool, args, response), body in zip(cases, bodies, strict=True):
        assert response.status_code >= 400, (tool, args)
        assert _without_trace(body) == _without_trace(response.json()), (tool, args)
    refusal = bodies[0]
    assert refusal["reason"] == "wrong_run"
    assert refusal["error"]["code"] == "wrong_run"
    assert (refusal["status"], refusal["next_action"]) == ("blocked", "stop")
    codes = [body["error"]["code"] for body in bodies]
    assert codes == [
        "wrong_run",
        "wrong_run",
        "wrong_run",
        "not_found",
        "not_found",
        "invalid_cursor",
        "invalid_request",
        "unknown_policy",
        "not_found",
        "not_found",
    ]


def test_arguments_no_route_could_take_are_refused(server: Server) -> None:
    """An unknown argument, a missing or non-string id are invalid_request before any call."""

    async def over_mcp() -> list[dict[str, Any]]:
        async with connect("http", server.url) as client:
            return [
                await call_error(client, "get_run_report", run_id="r1", verbose=True),
                await call_error(client, "wait_for_message", timeout_s=0),
                await call_error(client, "read_message", message_id=42),
                await call_error(client, "get_run_report", run_id="a/../b"),
            ]

    unknown, missing, not_text, bad_run = asyncio.run(over_mcp())
    assert unknown["error"]["code"] == "invalid_request"
    assert unknown["error"]["details"] == {"field": "verbose"}
    assert missing["error"]["details"] == {"field": "inbox_id"}
    assert not_text["error"]["details"] == {"field": "message_id"}
    with server.http() as http:
        # The route's own check and words, for a run_id no URL could carry.
        by_route = http.get("/v1/runs/a%20b").json()
    assert bad_run == by_route


# -- auth and reachability ---------------------------------------------------------------


def test_mcp_is_under_the_api_token(tmp_path: Path, policy_file: str) -> None:
    """With --api-token, /mcp needs the bearer token; `runsink mcp` sends it (flag or env)."""
    token = "mcp-test-token-0123456789"
    guarded = start_server(tmp_path / "guarded", "--policy-file", policy_file, "--api-token", token)
    try:
        with httpx.Client(base_url=guarded.url, timeout=30) as http:
            refused = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthorized"

        async def listed(transport: str, env: dict[str, str] | None = None) -> list[str]:
            async with connect(transport, guarded.url, token=None if env else token, env=env) as c:
                return [tool.name for tool in (await c.list_tools()).tools]

        assert asyncio.run(listed("http")) == TOOL_NAMES
        env = {"RUNSINK_URL": guarded.url, "RUNSINK_API_TOKEN": token}
        assert asyncio.run(listed("stdio", env)) == TOOL_NAMES

        async def proxied(given: str | None) -> dict[str, Any]:
            async with proxy_client(guarded.url, given) as http_client:
                server = tools_server(lambda _request: HttpBackend(http_client))
                async with Client(server) as client:
                    return await call_error(client, "get_run_report", run_id="r1")

        assert asyncio.run(proxied(None))["error"]["code"] == "unauthorized"
        assert asyncio.run(proxied(token))["error"]["code"] == "not_found"
    finally:
        guarded.stop()


def test_unreachable_server_is_a_tool_error() -> None:
    """`runsink mcp` pointed at nothing answers a server_unreachable tool error, not a crash."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    async def scenario() -> dict[str, Any]:
        async with proxy_client(f"http://127.0.0.1:{port}", None) as http_client:
            server = tools_server(lambda _request: HttpBackend(http_client))
            async with Client(server) as client:
                return await call_error(client, "create_inbox", run_id="r1", purpose="p")

    body = asyncio.run(scenario())
    assert body["error"]["code"] == "server_unreachable"


def test_mcp_command_refuses_a_url_that_is_not_http() -> None:
    """`runsink mcp --url` takes only http(s) URLs; anything else exits 2 naming the flag."""
    from api.cli import main

    assert main(["mcp", "--url", "ftp://example.test"]) == 2


def test_mcp_waits_share_the_long_poll_cap(tmp_path: Path, policy_file: str) -> None:
    """A long-poll over /mcp counts against the HTTP long-poll cap and is refused past it
    (tool error over_capacity, wait_then_retry), so MCP waits cannot take every connection."""
    server = start_server(tmp_path, "--policy-file", policy_file, "--http-max-connections", "12")
    limit = next(e for e in server.log_lines() if e.get("event") == "connection_caps")[
        "max_long_polls"
    ]
    with server.http() as client:
        held = [create_inbox(client, new_run_id("cap")) for _ in range(limit + 1)]

    def hold(inbox_id: str) -> None:
        with server.http() as own:
            own.post(f"/v1/inboxes/{inbox_id}/wait", json={"timeout_s": 10})

    threads = [threading.Thread(target=hold, args=(i["inbox_id"],)) for i in held[1:limit]]

    async def scenario() -> tuple[int, dict[str, Any]]:
        async with connect("http", server.url) as client:
            over_mcp = asyncio.ensure_future(
                call(client, "wait_for_message", inbox_id=held[0]["inbox_id"], timeout_s=10)
            )
            for thread in threads:
                thread.start()
            await asyncio.to_thread(_until_long_polls, server, limit)
            with server.http() as http:
                refused_http = http.post(
                    f"/v1/inboxes/{held[-1]['inbox_id']}/wait", json={"timeout_s": 10}
                ).status_code
            refused_mcp = await call_error(
                client, "wait_for_message", inbox_id=held[-1]["inbox_id"], timeout_s=10
            )
            over_mcp.cancel()
            return refused_http, refused_mcp

    try:
        refused_http, refused_mcp = asyncio.run(scenario())
    finally:
        server.stop()  # answers the waits in progress
    for thread in threads:
        thread.join(LOOP_DEADLINE_S)
    assert refused_http == 503  # the MCP wait took its place under the cap
    assert refused_mcp["error"]["code"] == "over_capacity"
    assert (refused_mcp["next_action"], refused_mcp["next_tool"]) == (
        "wait_then_retry",
        "wait_for_message",
    )
    assert refused_mcp["next_arguments"] == {"inbox_id": held[-1]["inbox_id"], "timeout_s": 10}


@pytest.mark.parametrize(
    "body", ["[" * 100_000 + "]" * 100_000, '{"jsonrpc": "2.0", "id": ' + "9" * 5000 + "}"]
)
def test_an_unparseable_mcp_body_is_a_json_rpc_parse_error(server: Server, body: str) -> None:
    """JSON nested too deep or a number too long at /mcp is 400 with a JSON-RPC parse error
    (the MCP transport's answer; the README's choice), never a 5xx."""
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    with server.http() as client:
        answer = client.post("/mcp", content=body, headers=headers)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == -32700


def test_abandoned_long_poll_is_cancelled(server: Server) -> None:
    """A client that gives up on a wait over /mcp ends the long-poll: no poll is recorded."""
    run_id = new_run_id("mcp")

    async def scenario() -> list[str]:
        async with connect("http", server.url) as client:
            created = await call(client, "create_inbox", run_id=run_id, purpose="abandon")
            waiting = asyncio.ensure_future(
                call(client, "wait_for_message", inbox_id=created["inbox_id"], timeout_s=10)
            )
            await asyncio.to_thread(_until_long_polls, server, 1)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await asyncio.to_thread(_until_long_polls, server, 0)
            report = await call(client, "get_run_report", run_id=run_id)
            return [event["type"] for event in report["events"]]

    # A wait that ran to its end would have recorded a "polled" event.
    assert asyncio.run(scenario()) == ["created"]


def test_shutdown_answers_an_mcp_wait_in_progress(tmp_path: Path, policy_file: str) -> None:
    """SIGTERM during an MCP long-poll: the wait answers its envelope and the server exits 0."""
    stopping = start_server(tmp_path / "stopping", "--policy-file", policy_file)

    async def scenario() -> dict[str, Any]:
        async with connect("http", stopping.url) as client:
            run_id = new_run_id("mcp")
            created = await call(client, "create_inbox", run_id=run_id, purpose="shutdown")
            waiting = asyncio.ensure_future(
                call(client, "wait_for_message", inbox_id=created["inbox_id"], timeout_s=10)
            )
            await asyncio.to_thread(_until_long_polls, stopping, 1)
            stopping.process.send_signal(signal.SIGTERM)
            return await waiting

    try:
        answer = asyncio.run(scenario())
        assert stopping.process.wait(30) == 0
    finally:
        stopping.stop()
    assert (answer["state"], answer["next_action"]) == ("created", "wait_for_message")
    assert answer["attempt"] == 0
    troubles = [
        line
        for line in stopping.log_lines()
        if line["level"] not in ("debug", "info") and not _asyncio_debug_note(line)
    ]
    assert troubles == []


def _asyncio_debug_note(line: dict[str, Any]) -> bool:
    """asyncio's debug mode (PYTHONASYNCIODEBUG=1, as CI runs) reports slow callbacks."""
    return line.get("logger") == "asyncio" and str(line.get("message", "")).startswith("Executing")


def _until_long_polls(server: Server, count: int) -> None:
    deadline = time.monotonic() + LOOP_DEADLINE_S
    with server.http() as http:
        while time.monotonic() < deadline:
            if f"runsink_active_long_polls {float(count)}" in http.get("/metrics").text:
                return
            time.sleep(0.02)
    raise AssertionError("the long-poll never started")
