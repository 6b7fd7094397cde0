"""A ttl_s or poll_budget above the policy's maximum is capped, and the create answer says so."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from sink.client import Sink
from tests.support import Server, create_inbox, new_run_id
from tests.test_mcp import TRANSPORTS, call, connect

CI_TTL_MAX_S, CI_POLL_BUDGET = 3600, 12


@pytest.mark.parametrize(
    ("given", "capped"),
    [
        ({}, []),
        ({"ttl_s": 60, "poll_budget": 3}, []),
        ({"ttl_s": CI_TTL_MAX_S, "poll_budget": CI_POLL_BUDGET}, []),
        ({"ttl_s": CI_TTL_MAX_S + 1}, ["ttl_s"]),
        ({"poll_budget": 1000}, ["poll_budget"]),
        ({"ttl_s": 10**6, "poll_budget": 1000}, ["ttl_s", "poll_budget"]),
        # Capped, never refused for being large (the JSON parser's digit limit aside).
        ({"ttl_s": 10**30, "poll_budget": 10**30}, ["ttl_s", "poll_budget"]),
    ],
)
def test_create_answer_names_the_capped_fields(
    http: httpx.Client, given: dict[str, int], capped: list[str]
) -> None:
    """`capped` lists exactly the fields the policy lowered, on the answer and on its replay."""
    run_id = new_run_id()
    created = create_inbox(http, run_id, **given)
    assert created["capped"] == capped
    assert created["remaining_attempts"] == min(given.get("poll_budget", 12), CI_POLL_BUDGET)
    replay = http.post("/v1/inboxes", json={"run_id": run_id, "purpose": "signup-check", **given})
    assert replay.status_code == 200 and replay.json()["capped"] == capped
    # Only the create answer carries it: a GET is the plain envelope.
    assert "capped" not in http.get(f"/v1/inboxes/{created['inbox_id']}").json()


def test_a_huge_wait_timeout_is_capped_not_refused(http: httpx.Client, server: Server) -> None:
    """A wait's timeout_s past any cap is taken and capped (by long_poll_max_s and the lease):
    the long-poll answers the moment the mail is stored, as any other wait."""
    inbox = create_inbox(http, new_run_id(), ttl_s=60)
    server.send(inbox["address"], subject="Capped wait")
    for timeout_s in (10**5, 10**30, 1e300):
        answer = http.post(f"/v1/inboxes/{inbox['inbox_id']}/wait", json={"timeout_s": timeout_s})
        assert answer.status_code == 200, answer.text
        assert answer.json()["state"] == "received"
    huge_age = {"timeout_s": 0, "match": {"max_age_s": 10**30}}
    answer = http.post(f"/v1/inboxes/{inbox['inbox_id']}/wait", json=huge_age)
    assert answer.status_code == 200 and answer.json()["state"] == "received"


def test_client_inbox_exposes_capped(server: Server) -> None:
    """The Python client's inbox handle carries the create answer's `capped`."""
    with Sink(server.url) as sink:
        assert sink.create_inbox(new_run_id(), "signup-check", ttl_s=10**6).capped == ("ttl_s",)
        assert sink.create_inbox(new_run_id(), "signup-check", ttl_s=60).capped == ()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_mcp_create_inbox_returns_capped(server: Server, transport: str) -> None:
    """The MCP create_inbox tool answers `capped` too (its output schema requires it)."""

    async def scenario() -> dict[str, object]:
        async with connect(transport, server.url) as client:
            return await call(
                client, "create_inbox", run_id=new_run_id("mcp"), purpose="p", poll_budget=999
            )

    assert asyncio.run(scenario())["capped"] == ["poll_budget"]
