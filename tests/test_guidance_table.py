"""Every row of both guidance tables, produced on a real server over HTTP and MCP: each
next_tool the server names is a tool it lists, and calling it with next_arguments as given
is accepted. Also the MCP reach: numeric strings, find_mail, the compact report, the prompt."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from mcp import Client

from tests.support import Server, new_run_id
from tests.test_mcp import connect

# Answers whose calling again cannot be accepted by design: fix_arguments (null arguments).
Answer = dict[str, Any]


async def raw_call(client: Client, tool: str, arguments: dict[str, Any]) -> tuple[bool, Answer]:
    """(is a tool error, the body) of one tool call."""
    result = await client.call_tool(tool, arguments)
    body: Answer = json.loads(result.content[0].text)  # type: ignore[union-attr]
    return bool(result.is_error), body


class Walk:
    """The rows met so far, and the follow-up call of each checked against the tool list."""

    def __init__(self, client: Client, listed: set[str]) -> None:
        self.client = client
        self.listed = listed
        self.rows: set[tuple[str, str]] = set()  # (next_action, reason or error code)

    async def call(self, tool: str, **arguments: Any) -> Answer:
        _, body = await raw_call(self.client, tool, arguments)
        return body

    async def follow(self, answer: Answer) -> Answer | None:
        """Check ``answer``'s guidance, then call next_tool with next_arguments as given."""
        code = answer["error"]["code"] if "error" in answer else answer.get("reason")
        self.rows.add((answer["next_action"], code or "-"))
        assert isinstance(answer["hint"], str) and 0 < len(answer["hint"]) <= 240, answer
        tool, arguments = answer["next_tool"], answer["next_arguments"]
        if tool is None:
            assert arguments is None, answer
            assert answer["next_action"] == "stop", answer
            return None
        assert tool in self.listed, answer
        if answer["next_action"] == "fix_arguments":
            assert arguments is None, answer
            return None
        assert isinstance(arguments, dict), answer
        if answer.get("retry_after"):
            await asyncio.sleep(answer["retry_after"])
        failed, body = await raw_call(self.client, tool, arguments)
        if failed:  # accepted means: not refused for its arguments
            assert body["error"]["code"] not in ("invalid_request", "invalid_cursor"), body
        return body


async def _until_expired(walk: Walk, inbox_id: str, run_id: str) -> Answer:
    deadline = time.monotonic() + 15
    while True:
        answer = await walk.call("wait_for_message", inbox_id=inbox_id, run_id=run_id, timeout_s=0)
        if answer.get("state") == "expired" or time.monotonic() > deadline:
            return answer
        await asyncio.sleep(max(0.2, answer.get("retry_after") or 0))


async def envelope_rows(walk: Walk, server: Server, http: httpx.Client) -> None:
    run = new_run_id("walk")

    def inbox(purpose: str, **given: Any) -> Awaitable[Answer]:
        return walk.call("create_inbox", run_id=run, purpose=purpose, policy="guided", **given)

    created = await inbox("loop", match={"subject_contains": "Code"})
    await walk.follow(created)  # created -> wait_for_message
    waiting = await walk.call(
        "wait_for_message", inbox_id=created["inbox_id"], run_id=run, timeout_s=0
    )
    await walk.follow(waiting)  # waiting -> wait_for_message
    await asyncio.to_thread(server.send, created["address"], subject="Hello")
    mismatch = await walk.call(
        "wait_for_message", inbox_id=created["inbox_id"], run_id=run, timeout_s=2
    )
    await walk.follow(mismatch)  # verify_trigger -> wait_for_message with the match
    await asyncio.to_thread(server.send, created["address"], subject="Code 1")
    received = await walk.call(
        "wait_for_message", inbox_id=created["inbox_id"], run_id=run, timeout_s=5
    )
    claimed = await walk.follow(received)  # claim_message -> claim it
    assert claimed is not None and claimed["next_action"] == "proceed", claimed
    await walk.follow(claimed)  # proceed -> read_message
    again = await walk.call("claim_message", message_id=claimed["claim"]["message_id"], run_id=run)
    await walk.follow(again)  # already_claimed -> read_message
    refused = await walk.call(
        "claim_message", message_id=claimed["claim"]["message_id"], run_id=run + "-other"
    )
    await walk.follow(refused)  # claimed_by_other_run -> stop
    wrong = await walk.call("wait_for_message", inbox_id=created["inbox_id"], run_id=run + "-x")
    await walk.follow(wrong)  # wrong_run -> stop

    # expiry: create_new_inbox, then stop (guided allows 2 inboxes per purpose)
    short = await inbox("expiry", ttl_s=1)
    expired = await _until_expired(walk, short["inbox_id"], run)
    nxt = await walk.follow(expired)  # create_new_inbox -> create_inbox (the run's next inbox)
    assert nxt is not None and nxt["state"] == "created" and nxt["inbox_id"] != short["inbox_id"]
    last = await _until_expired(walk, nxt["inbox_id"], run)
    assert last["next_action"] == "stop", last
    await walk.follow(last)

    # a claim after the lease: lease_expired -> create_inbox
    late = await inbox("late", ttl_s=2)
    await asyncio.to_thread(server.send, late["address"], subject="Code 2")
    got = await walk.call("wait_for_message", inbox_id=late["inbox_id"], run_id=run, timeout_s=5)
    await asyncio.sleep(max(0.0, 2.2 - 0.0))
    failed, lapsed = await raw_call(
        walk.client, "claim_message", {"message_id": got["message"]["message_id"], "run_id": run}
    )
    assert failed and lapsed["reason"] == "lease_expired", lapsed  # a 409 over HTTP
    await walk.follow(lapsed)

    # too early, provider trouble, circuit open: the same call again
    paced = await walk.call("create_inbox", run_id=run, purpose="paced", policy="paced")
    await walk.call("wait_for_message", inbox_id=paced["inbox_id"], run_id=run, timeout_s=0)
    early = await walk.call("wait_for_message", inbox_id=paced["inbox_id"], run_id=run, timeout_s=0)
    assert early["reason"] == "too_early", early
    await walk.follow(early)
    fragile = await walk.call("create_inbox", run_id=run, purpose="fragile", policy="fragile")
    fault = {"target": "wait", "mode": "error", "count": 2, "run_id": run}
    assert (await asyncio.to_thread(http.post, "/v1/faults", json=fault)).status_code == 201
    trouble = await walk.call(
        "wait_for_message", inbox_id=fragile["inbox_id"], run_id=run, timeout_s=0
    )
    assert trouble["reason"] == "provider_error", trouble
    await walk.call("wait_for_message", inbox_id=fragile["inbox_id"], run_id=run, timeout_s=0)
    opened = await walk.call(
        "wait_for_message", inbox_id=fragile["inbox_id"], run_id=run, timeout_s=0
    )
    assert opened["reason"] == "circuit_open", opened
    await walk.follow(opened)
    await asyncio.to_thread(http.delete, "/v1/faults")
    await walk.follow(trouble)


async def error_rows(walk: Walk, server: Server, http: httpx.Client) -> None:
    run = new_run_id("walk")
    given = {"run_id": run, "purpose": "errors", "policy": "guided"}
    made = await walk.call("create_inbox", **given)
    for tool, arguments in (
        ("create_inbox", {"run_id": run, "purpose": "a b"}),  # invalid_request
        ("wait_for_message", {"inbox_id": made["inbox_id"], "cursor": "not-ours"}),
        ("create_inbox", {"run_id": run, "purpose": "p", "policy": "no-such-policy"}),
        ("create_inbox", {**given, "ttl_s": 30}),  # idempotency_key_conflict
        ("read_message", {"message_id": "msg_" + "a" * 24}),  # not_found
        ("get_run_report", {"run_id": new_run_id("nobody")}),  # not_found
    ):
        failed, body = await raw_call(walk.client, tool, arguments)
        assert failed, body
        await walk.follow(body)
    for _ in range(2):  # guided: 2 inboxes per purpose
        short = await walk.call(
            "create_inbox", run_id=run, purpose="spent", ttl_s=1, policy="guided"
        )
        await _until_expired(walk, short["inbox_id"], run)
    failed, forbids = await raw_call(
        walk.client, "create_inbox", {"run_id": run, "purpose": "spent", "policy": "guided"}
    )
    assert failed and forbids["error"]["code"] == "policy_forbids", forbids
    await walk.follow(forbids)
    await asyncio.to_thread(server.send, made["address"], subject="Code")
    got = await walk.call("wait_for_message", inbox_id=made["inbox_id"], run_id=run, timeout_s=5)
    message_id = got["message"]["message_id"]
    fault = {"target": "read", "mode": "error", "count": 1, "run_id": run}
    assert (await asyncio.to_thread(http.post, "/v1/faults", json=fault)).status_code == 201
    failed, trouble = await raw_call(
        walk.client, "read_message", {"message_id": message_id, "run_id": run, "include_body": True}
    )
    assert failed and trouble["error"]["code"] == "provider_error", trouble
    assert trouble["next_arguments"] == {
        "message_id": message_id,
        "run_id": run,
        "include_body": True,
    }
    followed = await walk.follow(trouble)
    assert followed is not None and "error" not in followed, followed


ENVELOPE_ROWS = {
    ("wait_for_message", "-"),
    ("wait_for_message", "evidence_not_found"),
    ("verify_trigger", "evidence_mismatch"),
    ("claim_message", "-"),
    ("proceed", "-"),
    ("proceed", "already_claimed"),
    ("create_new_inbox", "lease"),
    ("stop", "lease"),
    ("create_new_inbox", "lease_expired"),
    ("wait_then_retry", "too_early"),
    ("wait_then_retry", "provider_error"),
    ("wait_then_retry", "circuit_open"),
    ("stop", "wrong_run"),
    ("stop", "claimed_by_other_run"),
}
ERROR_ROWS = {
    ("fix_arguments", "invalid_request"),
    ("fix_arguments", "invalid_cursor"),
    ("fix_arguments", "unknown_policy"),
    ("fix_arguments", "idempotency_key_conflict"),
    ("stop", "not_found"),
    ("stop", "policy_forbids"),
    ("wait_then_retry", "provider_error"),
}


async def _walk(transport: str, server: Server, rows: Callable[..., Awaitable[None]]) -> set[Any]:
    async with connect(transport, server.url) as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        walk = Walk(client, listed)
        with server.http() as http:
            await rows(walk, server, http)
        return walk.rows


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_every_envelope_row_names_a_listed_tool_that_accepts_its_arguments(
    server: Server, transport: str
) -> None:
    """Each envelope row's next_tool is listed and takes next_arguments as given (MCP)."""
    rows = asyncio.run(_walk(transport, server, envelope_rows))
    assert rows >= ENVELOPE_ROWS, ENVELOPE_ROWS - rows


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_every_error_row_names_a_listed_tool_that_accepts_its_arguments(
    server: Server, transport: str
) -> None:
    """Each error row says status, next_action, tool and arguments; following them works (MCP)."""
    rows = asyncio.run(_walk(transport, server, error_rows))
    assert rows >= ERROR_ROWS, ERROR_ROWS - rows


def test_http_answers_name_mcp_tools_that_accept_their_arguments(server: Server) -> None:
    """Over HTTP, next_tool is the route's MCP tool and next_arguments its arguments as given."""
    run = new_run_id("walk-http")
    answers: list[Answer] = []
    with server.http() as http:
        created = http.post("/v1/inboxes", json={"run_id": run, "purpose": "h", "policy": "guided"})
        inbox_id = created.json()["inbox_id"]
        answers.append(created.json())
        answers.append(http.get(f"/v1/inboxes/{inbox_id}").json())
        answers.append(
            http.post(
                f"/v1/inboxes/{inbox_id}/wait",
                json={"timeout_s": 0, "match": {"subject_contains": "x"}},
                headers={"X-Run-Id": run},
            ).json()
        )
        server.send(created.json()["address"], subject="x marks")
        received = http.post(f"/v1/inboxes/{inbox_id}/wait", json={"timeout_s": 5}).json()
        answers.append(received)
        message_id = received["message"]["message_id"]
        claimed = http.post(f"/v1/messages/{message_id}/claim", headers={"X-Run-Id": run})
        answers.append(claimed.json())
        fault = {"target": "read", "mode": "error", "count": 1, "run_id": run}
        assert http.post("/v1/faults", json=fault).status_code == 201
        trouble = http.get(f"/v1/messages/{message_id}", params={"run_id": run}).json()
        answers.append(trouble)
        answers.append(http.post("/v1/inboxes", json={"run_id": run, "purpose": "a b"}).json())
        http.delete(f"/v1/runs/{run}")
        answers.append(http.get(f"/v1/messages/{message_id}/raw").json())  # evidence_released
    assert answers[2]["next_arguments"] == {
        "inbox_id": inbox_id,
        "run_id": run,
        "match": {"subject_contains": "x"},
    }
    assert trouble["next_tool"] == "read_message"
    assert trouble["next_arguments"] == {"message_id": message_id, "run_id": run}
    assert answers[-1]["error"]["code"] == "evidence_released"
    assert (answers[-1]["next_action"], answers[-1]["next_tool"]) == ("stop", None)

    async def follow_all() -> set[Any]:
        async with connect("http", server.url) as client:
            listed = {tool.name for tool in (await client.list_tools()).tools}
            walk = Walk(client, listed)
            for answer in answers:
                await walk.follow(answer)
            return walk.rows

    rows = asyncio.run(follow_all())
    assert ("wait_then_retry", "provider_error") in rows and ("stop", "evidence_released") in rows


# -- MCP reach ---------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_numbers_may_come_as_numeric_strings(server: Server, transport: str) -> None:
    """timeout_s "0", ttl_s "60" and limit "5" are taken as numbers; "soon" is still refused."""
    run = new_run_id("numbers")

    async def scenario() -> tuple[Answer, Answer, Answer, tuple[bool, Answer]]:
        async with connect(transport, server.url) as client:
            created = await raw_call(
                client, "create_inbox", {"run_id": run, "purpose": "n", "ttl_s": "60"}
            )
            waited = await raw_call(
                client,
                "wait_for_message",
                {"inbox_id": created[1]["inbox_id"], "timeout_s": "0", "run_id": run},
            )
            found = await raw_call(client, "find_mail", {"query": f"run:{run}", "limit": "5"})
            refused = await raw_call(
                client,
                "wait_for_message",
                {"inbox_id": created[1]["inbox_id"], "timeout_s": "soon"},
            )
            return created[1], waited[1], found[1], refused

    created, waited, found, (failed, refused) = asyncio.run(scenario())
    assert created["state"] == "created" and created["capped"] == []
    assert waited["state"] == "waiting" and waited["attempt"] == 1
    assert found["messages"] == []
    assert failed and refused["error"]["code"] == "invalid_request"


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_booleans_may_come_as_strings(server: Server, transport: str) -> None:
    """full "true" (any case) is taken as true, as read_message's include_body "true" is, and
    "false" as false (full: false was refused: a bool is an int, 0 out of limit's range);
    "yes" is still refused, naming the field."""
    run = new_run_id("booleans")
    with server.http() as http:
        http.post("/v1/inboxes", json={"run_id": run, "purpose": "b"})

    async def scenario() -> tuple[Answer, Answer, Answer, tuple[bool, Answer]]:
        async with connect(transport, server.url) as client:
            full = await raw_call(client, "get_run_report", {"run_id": run, "full": "TRUE"})
            plain = await raw_call(client, "get_run_report", {"run_id": run, "full": "false"})
            real = await raw_call(client, "get_run_report", {"run_id": run, "full": True})
            off = await raw_call(client, "get_run_report", {"run_id": run, "full": False})
            assert off[1] == plain[1], off
            refused = await raw_call(client, "get_run_report", {"run_id": run, "full": "yes"})
            return full[1], plain[1], real[1], refused

    full, plain, real, (failed, refused) = asyncio.run(scenario())
    assert full == real, (full, real)
    assert "inboxes" in plain, plain
    assert set(plain["inboxes"][0]) < set(full["inboxes"][0])
    assert failed and refused["error"]["code"] == "invalid_request"
    assert refused["error"]["details"] == {"field": "full"}


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_find_mail_answers_summaries_in_the_callers_scope(server: Server, transport: str) -> None:
    """find_mail: newest first, {message_id, received_at, inbox_id, run_id, caught, untrusted}."""
    run, other_run = new_run_id("find"), new_run_id("find")
    with server.http() as http:
        inbox = http.post("/v1/inboxes", json={"run_id": run, "purpose": "f"}).json()
        elsewhere = http.post("/v1/inboxes", json={"run_id": other_run, "purpose": "f"}).json()
        token = http.post(f"/v1/runs/{run}/token", json={}).json()["token"]
    server.send(inbox["address"], subject="First \u202e note")
    server.send(inbox["address"], subject="Second note")
    server.send(elsewhere["address"], subject="Third note")
    with server.http() as http:
        deadline = time.monotonic() + 10
        while len(http.get("/v1/messages", params={"query": f"run:{run}"}).json()["messages"]) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        while not http.get("/v1/messages", params={"query": f"run:{other_run}"}).json()["messages"]:
            assert time.monotonic() < deadline
            time.sleep(0.1)

    async def scenario() -> tuple[Answer, Answer, Answer]:
        async with connect(transport, server.url) as client:
            _, page = await raw_call(client, "find_mail", {"query": "note", "run_id": run})
            _, other = await raw_call(
                client, "find_mail", {"query": "note", "run_id": new_run_id("else")}
            )
        async with connect(transport, server.url, token=token) as scoped:
            _, mine = await raw_call(scoped, "find_mail", {"query": "note"})
        return page, other, mine

    page, other, mine = asyncio.run(scenario())
    assert [m["message_id"] for m in mine["messages"]] == [
        m["message_id"] for m in page["messages"]
    ]  # a run token finds its run's mail only
    assert [m["untrusted"]["subject"] for m in page["messages"]] == [
        "Second note",
        "First ⟨U+202E⟩ note",
    ]
    first = page["messages"][0]
    assert set(first) == {"message_id", "received_at", "inbox_id", "run_id", "caught", "untrusted"}
    assert (first["inbox_id"], first["run_id"], first["caught"]) == (inbox["inbox_id"], run, False)
    assert set(first["untrusted"]) == {"from", "subject"}
    assert page["has_more"] is False
    assert other["messages"] == []


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_caught_mail_that_find_mail_lists_is_read_by_read_message(
    server: Server, transport: str
) -> None:
    """A cm_ id from find_mail reads with read_message (the evidence, the sender's words under
    untrusted); naming a run is fix_arguments; a run token, which never sees caught mail, is
    refused."""
    address = f"{new_run_id('caught')}@elsewhere.test"
    server.send(address, subject="Caught note", body="Your code is 604213.")
    with server.http() as http:
        token = http.post(f"/v1/runs/{new_run_id('caught')}/token", json={}).json()["token"]
        deadline = time.monotonic() + 10
        while not http.get("/v1/messages", params={"query": f"to:{address}"}).json()["messages"]:
            assert time.monotonic() < deadline
            time.sleep(0.1)

    async def scenario() -> tuple[Answer, tuple[bool, Answer], tuple[bool, Answer], Answer]:
        async with connect(transport, server.url) as client:
            _, found = await raw_call(client, "find_mail", {"query": f"to:{address}"})
            caught_id = found["messages"][0]["message_id"]
            read = await raw_call(client, "read_message", {"message_id": caught_id})
            named = await raw_call(
                client, "read_message", {"message_id": caught_id, "run_id": new_run_id("x")}
            )
        async with connect(transport, server.url, token=token) as scoped:
            _, refused = await raw_call(scoped, "read_message", {"message_id": caught_id})
        return found, read, named, refused

    found, (failed, read), (named_failed, named), refused = asyncio.run(scenario())
    assert found["messages"][0]["caught"] is True
    assert not failed, read
    assert read["message_id"] == found["messages"][0]["message_id"]
    assert read["codes"] == ["604213"] and read["untrusted"]["subject"] == "Caught note"
    assert named_failed and named["error"]["code"] == "invalid_request"
    assert (named["next_action"], named["next_tool"]) == ("fix_arguments", "read_message")
    assert "without run_id" in named["error"]["message"]
    assert refused["error"]["code"] == "forbidden_scope"


def test_the_run_report_is_compact_unless_full(server: Server) -> None:
    """get_run_report: one short object per inbox and the last 20 events; full: every event."""
    run = new_run_id("report")
    with server.http() as http:
        for purpose in ("r1", "r2", "r3"):
            inbox = http.post("/v1/inboxes", json={"run_id": run, "purpose": purpose}).json()
            for _ in range(8):
                http.post(f"/v1/inboxes/{inbox['inbox_id']}/wait", json={"timeout_s": 0})
        whole = http.get(f"/v1/runs/{run}").json()

    async def scenario() -> tuple[Answer, Answer]:
        async with connect("http", server.url) as client:
            _, compact = await raw_call(client, "get_run_report", {"run_id": run})
            _, full = await raw_call(client, "get_run_report", {"run_id": run, "full": True})
            return compact, full

    compact, full = asyncio.run(scenario())
    assert len(whole["events"]) > 20
    assert compact["events"] == whole["events"][-20:]
    assert set(compact["inboxes"][0]) < set(whole["inboxes"][0])
    assert full == whole


def test_the_prompt_states_the_loop(server: Server) -> None:
    """check_email_flow(run_id, purpose, what_to_expect) is listed and states the loop."""

    async def scenario() -> tuple[list[str], str]:
        async with connect("http", server.url) as client:
            prompts = [p.name for p in (await client.list_prompts()).prompts]
            got = await client.get_prompt(
                "check_email_flow",
                {"run_id": "ci-1", "purpose": "signup", "what_to_expect": "a 6-digit code"},
            )
            return prompts, got.messages[0].content.text  # type: ignore[union-attr]

    prompts, text = asyncio.run(scenario())
    assert prompts == ["check_email_flow"]
    for words in ("create_inbox", "'ci-1'", "'signup'", "a 6-digit code", "next_tool", "untrusted"):
        assert words in text, words


def test_a_next_action_called_as_a_tool_is_told_the_tool(server: Server) -> None:
    """Calling create_new_inbox (a next_action) is a tool error naming create_inbox."""

    async def scenario() -> tuple[bool, Answer, bool, Answer]:
        async with connect("http", server.url) as client:
            action = await raw_call(client, "create_new_inbox", {"run_id": "r", "purpose": "p"})
            unknown = await raw_call(client, "send_mail", {})
            return (*action, *unknown)

    failed, action, unknown_failed, unknown = asyncio.run(scenario())
    assert failed and action["error"]["code"] == "invalid_request"
    assert (action["next_action"], action["next_tool"]) == ("fix_arguments", "create_inbox")
    assert "create_new_inbox is a next_action, not a tool" in action["hint"]
    assert unknown_failed and unknown["next_tool"] is None and "send_mail" in unknown["hint"]
