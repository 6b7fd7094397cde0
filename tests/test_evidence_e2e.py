"""Resends and mistyped addresses end to end: real SMTP in, real HTTP out, on SQLite and
PostgreSQL (contract v3, Agent guidance: Resends, Near misses)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.support import Server, create_inbox, new_run_id, on_each_backend, wait
from tests.test_ui_http import Reader


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest, server: Server) -> Server:
    """Every test here runs against a server on each persistent backend."""
    return on_each_backend(request, server)


def _one_letter_off(address: str) -> str:
    """The address with the 6th letter of its local part replaced (one substitution)."""
    local, _, domain = address.partition("@")
    other = "x" if local[5] != "x" else "y"
    return f"{local[:5]}{other}{local[6:]}@{domain}"


def test_mail_sent_to_a_mistyped_address_is_told_to_the_agent(
    server: Server, http: httpx.Client
) -> None:
    """The app mistypes one letter: the mail is caught, and the inbox's GET, its wait, its
    run report and the live events all name the near miss (never the mail's content)."""
    run_id = new_run_id()
    reader = Reader(f"{server.url}/v1/events?run_id={run_id}")
    try:
        inbox = create_inbox(http, run_id)
        typo = _one_letter_off(inbox["address"])
        server.send(typo, subject="Your code is 482913", body="482913")
        got = http.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
        assert (got["state"], got["reason"]) == ("created", None)  # a GET keeps its reason
        [near] = got["near_misses"]
        assert (near["address"], near["distance"]) == (typo, 1)
        assert near["received_at"].endswith("Z")
        assert typo in got["hint"]

        waited = wait(http, inbox["inbox_id"], timeout_s=0, run_id=run_id).json()
        assert (waited["state"], waited["status"]) == ("waiting", "retryable")
        assert (waited["reason"], waited["next_action"]) == (
            "evidence_misaddressed",
            "verify_trigger",
        )
        assert waited["next_tool"] == "wait_for_message"
        assert waited["near_misses"] == got["near_misses"]
        assert waited["unmatched"] == [] and waited["rescan_cursor"] is None
        assert "482913" not in waited["hint"]

        events = http.get(f"/v1/runs/{run_id}").json()["events"]
        reported = [e for e in events if e["type"] == "near_miss"]
        assert [(e["inbox_id"], e["detail"]) for e in reported] == [
            (inbox["inbox_id"], {"address": typo, "distance": 1})
        ]

        def told(seen: list[tuple[str, str, dict[str, Any]]]) -> bool:
            return any(
                kind == "run_event" and data["type"] == "near_miss" for _, kind, data in seen
            )

        live = [data for _, kind, data in reader.until(told, 10) if kind == "run_event"]
        assert [d["detail"] for d in live if d["type"] == "near_miss"] == [
            {"address": typo, "distance": 1}
        ]
    finally:
        reader.close()
    caught = http.get("/v1/unrouted", params={"limit": 500}).json()["messages"]
    assert any(typo in item["rcpt_to"] for item in caught)  # it stays caught mail


def test_a_resend_is_told_and_order_newest_takes_its_code(
    server: Server, http: httpx.Client
) -> None:
    """Two codes arrive: the oldest-first answer says a newer matching mail is stored, and a
    wait with order newest returns the resend, whose claim leaves nothing newer."""
    run_id = new_run_id()
    inbox = create_inbox(http, run_id)
    server.send(inbox["address"], subject="Your code 111111")
    server.send(inbox["address"], subject="Your code 222222")
    match = {"subject_contains": "code"}
    first = wait(http, inbox["inbox_id"], timeout_s=0, match=match, run_id=run_id).json()
    assert first["message"]["subject"] == "Your code 111111"
    assert first["newer_matching"] == 1 and "resend" in first["hint"]
    got = http.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
    assert got["newer_matching"] == 1

    newest = wait(
        http, inbox["inbox_id"], timeout_s=0, match=match, run_id=run_id, order="newest"
    ).json()
    assert newest["message"]["subject"] == "Your code 222222"
    assert newest["newer_matching"] == 0
    assert newest["next_arguments"] == {
        "message_id": newest["message"]["message_id"],
        "run_id": run_id,
    }
    message_id = newest["message"]["message_id"]
    claimed = http.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id}).json()
    assert (claimed["next_action"], claimed["newer_matching"]) == ("proceed", 0)
    after = wait(http, inbox["inbox_id"], timeout_s=0, match=match, run_id=run_id).json()
    assert after["state"] == "waiting"  # the stale first code was passed over


def test_a_wait_order_other_than_oldest_or_newest_is_refused(http: httpx.Client) -> None:
    """order is one of two words: anything else is 422 invalid_request naming the field."""
    inbox = create_inbox(http)
    response = wait(http, inbox["inbox_id"], timeout_s=0, order="latest")
    assert response.status_code == 422
    body = response.json()
    assert body["error"]["code"] == "invalid_request" and "order" in response.text


def test_over_mcp_a_wait_takes_order_and_tells_near_misses(server: Server) -> None:
    """The MCP tool takes order newest, and its answers carry near_misses like HTTP's."""
    from tests.test_mcp import call, connect

    run_id = new_run_id("mcp")

    async def over_mcp() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with connect("http", server.url) as client:
            made = await call(client, "create_inbox", run_id=run_id, purpose="typo")
            typo = _one_letter_off(made["address"])
            await asyncio.to_thread(server.send, typo, "Your code 1")
            missed = await call(
                client, "wait_for_message", inbox_id=made["inbox_id"], run_id=run_id, timeout_s=0
            )
            for subject in ("Your code 2", "Your code 3"):
                await asyncio.to_thread(server.send, made["address"], subject)
            newest = await call(
                client,
                "wait_for_message",
                inbox_id=made["inbox_id"],
                run_id=run_id,
                timeout_s=0,
                order="newest",
            )
            return made, missed, newest

    made, missed, newest = asyncio.run(over_mcp())
    assert missed["reason"] == "evidence_misaddressed"
    assert [n["address"] for n in missed["near_misses"]] == [_one_letter_off(made["address"])]
    assert newest["message"]["untrusted"]["subject"] == "Your code 3"
    assert newest["near_misses"] == [] and newest["newer_matching"] == 0
