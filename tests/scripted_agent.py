"""A scripted agent, a staging app and the scenarios they play (issue 20, item 9).

The agent knows only what an MCP client is given (the tool list and the server's
instructions) and its task (a run_id and a purpose). It calls ``create_inbox`` with them,
triggers the staging app once after each ``create_inbox`` (as the create answer's hint
says), and otherwise only follows the answers: it sleeps ``retry_after`` when it is set and
calls ``next_tool`` with ``next_arguments`` as they are. It ends when:

- it has read a claimed message: it submits the first of ``codes`` to the app (``code``);
- ``next_tool`` is null (``stop``);
- an answer names a cause outside runsink that waiting cannot fix (``cause``): the answer
  sends it to ``wait_for_message`` again, for an inbox past ``created``, with a hint that
  speaks of the app (no mail at all reached the address; mail went to a near-miss address;
  none of the mail matched). The agent cannot fix the app, so it reports the hint and ends.

The staging app sends a signup mail with a fresh code over real SMTP, in a
scenario-controlled way (after a delay, never, twice, to a mistyped address). It knows
which code is valid for an address, so a scenario passes only if the code the agent
submits is the one a real signup would accept.

``tests/test_scripted_agent.py`` runs every scenario over stdio and streamable HTTP;
``bench/agent.py`` runs them next to a naive wait-and-poll loop and prints the figures.
"""

from __future__ import annotations

import asyncio
import json
import re
import smtplib
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

import httpx
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

Json = dict[str, Any]

# The short policy every scenario runs under (the server's default policy): waits are
# real, never scaled down, so they are kept short by the policy itself.
POLICY_NAME = "scripted"
POLICY = f"""\
[policy.{POLICY_NAME}]
ttl_default_s = 60
poll_budget = 12
poll_interval_s = [0.2, 0.5, 1]
long_poll_max_s = 2
hint_after_s = 5
provider_deadline_s = 0.5
breaker_failure_threshold = 3
breaker_cooldown_s = 0.5
breaker_cooldown_max_s = 2
inboxes_per_purpose = 2
"""

MAX_CALLS = 30  # an agent that needs more than this is lost: the scenario fails
SCENARIO_DEADLINE_S = 45.0
SUBJECT = "Confirm your account"


# -- the staging app -------------------------------------------------------------------


@dataclass(frozen=True)
class Behaviour:
    """How the staging app sends, per trigger (the first trigger, then every later one)."""

    first_delay_s: float | None = 0.0  # None: this trigger sends nothing
    later_delay_s: float | None = 0.0
    resend: bool = False  # a first mail, then a resend with a new code (the first goes stale)
    typo: bool = False  # the app mistypes one letter of the address


def one_letter_off(address: str) -> str:
    """The address with the 6th letter of its local part replaced (one substitution)."""
    local, _, domain = address.partition("@")
    other = "x" if local[5] != "x" else "y"
    return f"{local[:5]}{other}{local[6:]}@{domain}"


@dataclass
class StagingApp:
    """A signup service: ``trigger(address)`` issues a code and mails it; ``verify`` says
    whether a code is the one the address's signup accepts (the latest issued)."""

    smtp_port: int
    behaviour: Behaviour
    triggers: int = 0
    sent: list[tuple[str, str, float]] = field(default_factory=list)  # (to, code, at)
    _valid: dict[str, str] = field(default_factory=dict)
    _codes: int = 0
    _pending: list[asyncio.Task[None]] = field(default_factory=list)

    async def trigger(self, address: str) -> None:
        """What the app does when a user signs up with ``address``. A delay of 0 sends
        before answering (the mail is stored when the trigger returns); a longer one sends
        in the background, like an app with a mail queue."""
        self.triggers += 1
        delay = self.behaviour.first_delay_s if self.triggers == 1 else self.behaviour.later_delay_s
        if delay is None:
            return
        if delay == 0:
            await self._send_all(address)
        else:
            self._pending.append(asyncio.ensure_future(self._later(delay, address)))

    def verify(self, address: str, code: str) -> bool:
        return self._valid.get(address) == code

    async def drain(self) -> None:
        """Let every queued send finish (a late mail is still sent, after the lease)."""
        await asyncio.gather(*self._pending)

    async def _later(self, delay: float, address: str) -> None:
        await asyncio.sleep(delay)
        await self._send_all(address)

    async def _send_all(self, address: str) -> None:
        await self._send_one(address)
        if self.behaviour.resend:
            await self._send_one(address)  # "Resend code": the first one is stale now

    async def _send_one(self, address: str) -> None:
        self._codes += 1
        code = f"{(271828 + 104729 * self._codes) % 900000 + 100000}"
        self._valid[address] = code
        to = one_letter_off(address) if self.behaviour.typo else address
        await asyncio.to_thread(self._smtp, to, code)
        self.sent.append((to, code, time.monotonic()))

    def _smtp(self, to: str, code: str) -> None:
        message = EmailMessage()
        message["From"] = "Staging <noreply@staging.example.test>"
        message["To"] = to
        message["Subject"] = SUBJECT
        message.set_content(f"Welcome!\nYour verification code is {code}.\n")
        with smtplib.SMTP("127.0.0.1", self.smtp_port, timeout=30) as client:
            client.send_message(message)


# -- MCP connections -------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    body: Json
    is_error: bool
    chars: int  # the characters of the answer's text, as a model reads it


@dataclass
class Connection:
    """One MCP client session: the tool list, the instructions, and calls."""

    client: Client
    tool_names: frozenset[str]
    instructions: str

    async def call(self, tool: str, arguments: Json) -> Answer:
        result = await self.client.call_tool(tool, arguments)
        text = result.content[0].text  # type: ignore[union-attr]
        if result.is_error:
            return Answer(json.loads(text), True, len(text))
        body: Json = result.structured_content or json.loads(text)
        return Answer(body, False, len(text))


@asynccontextmanager
async def connect(transport: str, url: str) -> AsyncIterator[Connection]:
    """An SDK client over stdio (``runsink mcp --url``) or streamable HTTP (``/mcp``)."""
    if transport == "stdio":
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "sink", "mcp", "--url", url]
        )
        async with Client(params) as client:
            yield await _connection(client)
        return
    timeout = httpx2.Timeout(30.0, read=120.0)
    async with (
        httpx2.AsyncClient(timeout=timeout) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        yield await _connection(client)


async def _connection(client: Client) -> Connection:
    listed = await client.list_tools()
    return Connection(
        client, frozenset(tool.name for tool in listed.tools), client.instructions or ""
    )


def tools_list_chars(url: str) -> tuple[int, int]:
    """Characters of the ``tools`` array as the server sends it (compact JSON), and of the
    server instructions: what a model reads before its first call."""
    headers = {"accept": "application/json, text/event-stream"}
    hello = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    }
    with httpx.Client(base_url=url, timeout=30, headers=headers) as http:
        listed = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        started = http.post(
            "/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": hello}
        )
    tools = _rpc_result(listed)["tools"]
    instructions = _rpc_result(started)["instructions"]
    return len(json.dumps(tools, separators=(",", ":"), ensure_ascii=False)), len(instructions)


def _rpc_result(response: httpx.Response) -> Json:
    text = response.text
    if not text.lstrip().startswith("{"):
        text = next(line[6:] for line in text.splitlines() if line.startswith("data: "))
    result: Json = json.loads(text)["result"]
    return result


# -- the scripted agent ----------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    tool: str
    arguments: Json
    answer: Answer
    at: float  # seconds since the agent started


@dataclass
class Outcome:
    ended_by: str  # "code", "stop", "cause", "lost" (too many calls, or arguments to fix)
    steps: list[Step]
    wall_s: float
    code: str | None = None
    accepted: bool = False
    hint: str | None = None  # the last answer's hint

    @property
    def calls(self) -> int:
        return len(self.steps)

    @property
    def answer_chars(self) -> int:
        return sum(step.answer.chars for step in self.steps)

    def tools(self) -> list[str]:
        return [step.tool for step in self.steps]

    def waits(self) -> list[Json]:
        return [s.answer.body for s in self.steps if s.tool == "wait_for_message"]


def names_a_cause(body: Json) -> bool:
    """Whether an answer names a cause outside runsink that waiting cannot fix: it sends
    the agent to wait_for_message again, for an inbox past ``created``, and its hint speaks
    of the app (the create answer's hint, "make the app send", is the trigger itself)."""
    return (
        body.get("next_tool") == "wait_for_message"
        and body.get("state") not in (None, "created")
        and re.search(r"\bapp\b", str(body.get("hint")), re.IGNORECASE) is not None
    )


async def scripted_agent(
    connection: Connection, app: StagingApp, run_id: str, purpose: str, **create: Any
) -> Outcome:
    """Follow the answers from create_inbox to a submitted code, a stop or a named cause."""
    assert "next_tool" in connection.instructions  # the only manual it has
    started = time.monotonic()
    steps: list[Step] = []
    tool, arguments = "create_inbox", {"run_id": run_id, "purpose": purpose, **create}
    address = ""

    def end(how: str, body: Json, **more: Any) -> Outcome:
        wall = time.monotonic() - started
        return Outcome(how, steps, wall, hint=body.get("hint"), **more)

    while len(steps) < MAX_CALLS:
        assert tool in connection.tool_names, f"told to call {tool!r}, which is not listed"
        answer = await connection.call(tool, arguments)
        steps.append(Step(tool, arguments, answer, time.monotonic() - started))
        body = answer.body
        if tool == "create_inbox" and not answer.is_error:
            address = body["address"]
            await app.trigger(address)  # as the hint says: make the app send, then wait
        if tool == "read_message" and not answer.is_error:
            code = body["codes"][0]
            return end("code", body, code=code, accepted=app.verify(address, code))
        if names_a_cause(body):
            return end("cause", body)
        if body.get("next_tool") is None:
            return end("stop", body)
        if body.get("next_arguments") is None:
            return end("lost", body)  # fix_arguments: the agent has nothing else to go on
        if body.get("retry_after"):
            await asyncio.sleep(body["retry_after"])
        tool, arguments = body["next_tool"], body["next_arguments"]
    return end("lost", steps[-1].answer.body if steps else {})


# -- scenarios -------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    behaviour: Behaviour
    has_code: bool = True
    create: Json = field(default_factory=dict)  # more create_inbox arguments from the task
    fault: Json | None = None  # POST /v1/faults before the agent starts (run_id added)


SCENARIOS = (
    Scenario("mail after 1 s", Behaviour(first_delay_s=1.0)),
    # Over one long-poll (2 s) and under hint_after_s (5 s): the second wait gets it.
    Scenario("mail after 3 s (two long-polls)", Behaviour(first_delay_s=3.0)),
    Scenario("never sent", Behaviour(first_delay_s=None, later_delay_s=None), has_code=False),
    Scenario("resend, first code stale", Behaviour(resend=True)),
    Scenario("mistyped address", Behaviour(typo=True), has_code=False),
    # The task expects another subject than the app sends: the mismatch is named.
    Scenario(
        "wrong match",
        Behaviour(),
        has_code=False,
        create={"match": {"subject_contains": "Reset your password"}},
    ),
    # The first send comes after the 2 s lease (a late arrival); the re-triggered one in time.
    Scenario(
        "mail after the lease",
        Behaviour(first_delay_s=3.5, later_delay_s=0.5),
        create={"ttl_s": 2},
    ),
    # Never sent, with 2 s leases: both inboxes the policy allows expire, and the last
    # answer is stop (no tool), its hint naming the cause.
    Scenario(
        "never sent, short leases",
        Behaviour(first_delay_s=None, later_delay_s=None),
        has_code=False,
        create={"ttl_s": 2},
    ),
    Scenario(
        "slow provider",
        Behaviour(first_delay_s=1.0),
        fault={"target": "wait", "mode": "timeout", "count": 2},
    ),
)


def scenario_run_id(scenario: Scenario, label: str) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in scenario.name.lower()).strip("-")
    return f"{label}-{slug[:40]}-{time.time_ns() % 10**9:09d}"  # one length: fair counts


Agent = Callable[..., Awaitable[Outcome]]


async def play(
    scenario: Scenario,
    connection: Connection,
    url: str,
    smtp_port: int,
    label: str,
    agent: Agent = scripted_agent,
    deadline_s: float = SCENARIO_DEADLINE_S,
) -> tuple[Outcome, StagingApp, str]:
    """One scenario: its fault (if any), then the agent against a fresh staging app."""
    run_id = scenario_run_id(scenario, label)
    if scenario.fault is not None:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            made = await http.post("/v1/faults", json={**scenario.fault, "run_id": run_id})
            assert made.status_code == 201, made.text
    app = StagingApp(smtp_port, scenario.behaviour)
    outcome = await asyncio.wait_for(
        agent(connection, app, run_id, "signup-check", **scenario.create), deadline_s
    )
    await app.drain()
    return outcome, app, run_id
