"""``runsink mcp``: the MCP tools over stdio, answered by a running server's HTTP API.

A thin proxy: each tool is one HTTP call, and its answer is the API's JSON, unchanged
(an error body becomes a tool error). The server keeps every rule; this process keeps
no state. stdout carries the protocol, so logs go to stderr.
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import quote

import httpx
from mcp.server.stdio import stdio_server

from sink import __version__, logs
from sink.guidance import Call
from sink.mcp.server import Backend, Json, error_body, tools_server
from sink.vocabulary import Tool

_TIMEOUT_S = 30.0
# A long-poll holds its request open for up to timeout_s (server-capped): read beyond it.
_LONG_POLL_MARGIN_S = 30.0
_MAX_WAIT_S = 86400.0


class HttpBackend:
    """The five calls as HTTP requests to one runsink server."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def create_inbox(self, body: Json) -> Json:
        call = Call(Tool.CREATE_INBOX, body)
        return await self._call(call, "POST", "/v1/inboxes", json=body)

    async def wait_for_message(self, inbox_id: str, body: Json) -> Json:
        call = Call(Tool.WAIT_FOR_MESSAGE, {"inbox_id": inbox_id, **body})
        seconds = _TIMEOUT_S + _LONG_POLL_MARGIN_S + _wait_seconds(body.get("timeout_s"))
        path = f"/v1/inboxes/{_segment(inbox_id)}/wait"
        return await self._call(call, "POST", path, json=body, seconds=seconds)

    async def read_message(self, message_id: str, run_id: str | None) -> Json:
        params = {} if run_id is None else {"run_id": run_id}
        call = Call(Tool.READ_MESSAGE, {"message_id": message_id, **params})
        path = f"/v1/messages/{_segment(message_id)}"
        return await self._call(call, "GET", path, params=params)

    async def read_caught(self, caught_id: str) -> Json:
        call = Call(Tool.READ_MESSAGE, {"message_id": caught_id})
        return await self._call(call, "GET", f"/v1/unrouted/{_segment(caught_id)}")

    async def claim_message(self, message_id: str, body: Json) -> Json:
        call = Call(Tool.CLAIM_MESSAGE, {"message_id": message_id, **body})
        path = f"/v1/messages/{_segment(message_id)}/claim"
        return await self._call(call, "POST", path, json=body)

    async def get_run_report(self, run_id: str) -> Json:
        call = Call(Tool.GET_RUN_REPORT, {"run_id": run_id})
        return await self._call(call, "GET", f"/v1/runs/{_segment(run_id)}")

    async def find_mail(
        self, query: str, run_id: str | None, limit: int, cursor: str | None
    ) -> Json:
        params = {"query": query, "limit": str(limit)}
        if cursor is not None:
            params["cursor"] = cursor
        if run_id is not None:
            params["run_id"] = run_id
        call = Call(Tool.FIND_MAIL, {**params, "limit": limit})
        return await self._call(call, "GET", "/v1/messages", params=params)

    async def _call(
        self,
        call: Call,
        method: str,
        path: str,
        json: Json | None = None,
        params: dict[str, str] | None = None,
        seconds: float = _TIMEOUT_S,
    ) -> Json:
        try:
            response = await self._client.request(
                method, path, json=json, params=params, timeout=seconds
            )
        except httpx.TimeoutException:
            return error_body(
                "server_unreachable",
                f"runsink at {self._client.base_url} did not answer in time",
                call=call,
                http_status=504,
            )
        except httpx.TransportError as exc:
            return error_body(
                "server_unreachable",
                f"cannot reach runsink at {self._client.base_url} ({type(exc).__name__})",
                call=call,
                http_status=502,
            )
        try:
            body: Any = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return error_body(
                "unexpected_response",
                f"{method} {path}: HTTP {response.status_code} without a JSON object",
                {"status": response.status_code},
                call,
                502,
            )
        return body


def _segment(value: str) -> str:
    # The shared checks let only id characters through; quote anyway, as a URL must.
    return quote(value, safe="")


def _wait_seconds(given: object) -> float:
    if given is None:  # the server's long_poll_max_s, which this side does not know
        return _MAX_WAIT_S
    if isinstance(given, bool) or not isinstance(given, int | float) or not math.isfinite(given):
        return 0.0
    return min(max(float(given), 0.0), _MAX_WAIT_S)


def proxy_client(url: str, api_token: str | None) -> httpx.AsyncClient:
    # X-Runsink-Agent: the caller is a model, so a policy's agent_body applies to it.
    headers = {"User-Agent": f"runsink-mcp/{__version__}", "X-Runsink-Agent": "mcp"}
    if api_token:
        headers["Authorization"] = f"Bearer {api_token}"
    return httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, timeout=_TIMEOUT_S)


async def run(url: str, api_token: str | None) -> None:
    """Serve MCP on stdin/stdout until the client closes it."""
    logs.setup("warning")
    async with proxy_client(url, api_token) as client:
        backend: Backend = HttpBackend(client)
        server = tools_server(lambda _request: backend)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
