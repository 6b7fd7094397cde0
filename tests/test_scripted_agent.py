"""A scripted agent that only follows the answers passes every scenario over stdio and HTTP.

The agent, the staging app and the scenarios are in ``tests/scripted_agent.py``. Every
scenario runs once per transport, all at the same time (the waits are real: the short
policy keeps them short), against one real ``runsink serve``; the tests below check what
each run did.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.scripted_agent import (
    POLICY,
    POLICY_NAME,
    SCENARIOS,
    Outcome,
    StagingApp,
    connect,
    one_letter_off,
    play,
)
from tests.support import Server, start_server

TRANSPORTS = ("stdio", "http")
Result = tuple[Outcome, StagingApp, str]
Played = dict[tuple[str, str], Result | BaseException]


@pytest.fixture(scope="module")
def agent_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("scripted")
    policy = folder / "policies.toml"
    policy.write_text(POLICY)
    running = start_server(
        folder, "--policy-file", str(policy), "--default-policy", POLICY_NAME, "--enable-faults"
    )
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def played(agent_server: Server) -> Played:
    """Every scenario over both transports, concurrently (one MCP session per transport)."""

    async def over(transport: str) -> list[Result | BaseException]:
        async with connect(transport, agent_server.url) as connection:
            return list(
                await asyncio.gather(
                    *(
                        play(s, connection, agent_server.url, agent_server.smtp_port, transport)
                        for s in SCENARIOS
                    ),
                    return_exceptions=True,  # a scenario that fails fails its own test
                )
            )

    async def everything() -> list[list[Result | BaseException]]:
        return list(await asyncio.gather(*(over(transport) for transport in TRANSPORTS)))

    results = asyncio.run(everything())
    return {
        (transport, scenario.name): result
        for transport, per_transport in zip(TRANSPORTS, results, strict=True)
        for scenario, result in zip(SCENARIOS, per_transport, strict=True)
    }


def _get(played: Played, transport: str, name: str) -> Result:
    result = played[(transport, name)]
    if isinstance(result, BaseException):
        raise result
    return result


def _gets_the_valid_code(outcome: Outcome, app: StagingApp) -> dict[str, Any]:
    """The agent read a claimed message and the app accepted its first code."""
    assert outcome.ended_by == "code", _story(outcome)
    assert outcome.accepted, _story(outcome)
    claims = [s for s in outcome.steps if s.tool == "claim_message"]
    [read] = [s for s in outcome.steps if s.tool == "read_message"]
    assert read.arguments["message_id"] == claims[-1].arguments["message_id"]
    assert outcome.code == read.answer.body["codes"][0]
    return read.answer.body


def _polls_until_named(outcome: Outcome) -> int:
    """How many wait answers, from the first empty one on, until the cause was named."""
    waits = outcome.waits()
    first_empty = next(i for i, body in enumerate(waits) if body.get("message") is None)
    return len(waits) - first_empty


def _story(outcome: Outcome) -> str:
    return "\n".join(
        f"{s.at:5.2f} {s.tool} {s.answer.body.get('reason')} -> {s.answer.body.get('next_tool')}"
        f": {s.answer.body.get('hint')}"
        for s in outcome.steps
    )


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_mail_after_one_second_takes_four_calls(played: Played, transport: str) -> None:
    """Mail 1 s after the trigger: create, one long-poll, claim, read; the code is valid."""
    outcome, app, _ = _get(played, transport, "mail after 1 s")
    _gets_the_valid_code(outcome, app)
    assert outcome.tools() == ["create_inbox", "wait_for_message", "claim_message", "read_message"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_mail_after_more_than_one_long_poll(played: Played, transport: str) -> None:
    """Mail after the first long-poll ended empty: the agent waits again as told, gets it."""
    outcome, app, _ = _get(played, transport, "mail after 3 s (two long-polls)")
    _gets_the_valid_code(outcome, app)
    waits = outcome.waits()
    assert waits[0]["reason"] == "evidence_not_found" and waits[-1]["state"] == "received"
    assert len(waits) >= 2


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_never_sent_ends_with_no_mail_named_within_three_polls(
    played: Played, transport: str
) -> None:
    """The app never sends: the hint says no mail reached the address, with the time and
    polls, by the third poll after the first empty answer, and the agent ends there."""
    outcome, app, _ = _get(played, transport, "never sent")
    assert app.sent == []
    assert outcome.ended_by == "cause", _story(outcome)
    address = outcome.steps[0].answer.body["address"]
    hint = outcome.hint or ""
    assert "No mail at all has reached" in hint and address in hint and "polls" in hint
    assert _polls_until_named(outcome) <= 3
    assert outcome.tools().count("create_inbox") == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_resend_claims_the_valid_code_first_time(played: Played, transport: str) -> None:
    """Two mails, the first code stale: the one claim is of the resend, whose code is valid."""
    outcome, app, _ = _get(played, transport, "resend, first code stale")
    evidence = _gets_the_valid_code(outcome, app)
    [(_, stale, _), (_, valid, _)] = app.sent
    assert outcome.tools().count("claim_message") == 1
    assert evidence["codes"][0] == valid != stale
    assert outcome.waits()[0]["newer_matching"] == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_mistyped_address_ends_with_the_near_miss_named(played: Played, transport: str) -> None:
    """The app mistypes one letter: the hint names the caught address within 3 polls."""
    outcome, app, _ = _get(played, transport, "mistyped address")
    assert outcome.ended_by == "cause", _story(outcome)
    address = outcome.steps[0].answer.body["address"]
    typo = one_letter_off(address)
    assert [to for to, _, _ in app.sent] == [typo]
    last = outcome.steps[-1].answer.body
    assert typo in (outcome.hint or "") and last["reason"] == "evidence_misaddressed"
    assert last["near_misses"][0]["address"] == typo
    assert _polls_until_named(outcome) <= 3


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_wrong_match_ends_with_the_mismatch_named(played: Played, transport: str) -> None:
    """Mail arrives that the task's match does not fit: the first wait says so, lists what
    arrived (untrusted) and gives the rescan cursor; the agent ends with that cause."""
    outcome, app, _ = _get(played, transport, "wrong match")
    assert outcome.ended_by == "cause", _story(outcome)
    [last] = outcome.waits()
    assert (last["reason"], last["next_action"]) == ("evidence_mismatch", "verify_trigger")
    assert last["unmatched"][0]["untrusted"]["subject"] == "Confirm your account"
    assert last["rescan_cursor"] and "rescan_cursor" in (outcome.hint or "")
    assert outcome.tools().count("claim_message") == 0 and len(app.sent) == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_mail_after_the_lease_ends_with_the_next_inbox(
    played: Played, transport: str, agent_server: Server
) -> None:
    """The first send comes after the lease: the agent creates the next inbox as told, the
    app is triggered again, and that mail's code is valid; the late one was dropped."""
    outcome, app, run_id = _get(played, transport, "mail after the lease")
    _gets_the_valid_code(outcome, app)
    creates = [s for s in outcome.steps if s.tool == "create_inbox"]
    assert len(creates) == 2 and creates[1].arguments == creates[0].arguments
    first, second = (s.answer.body["address"] for s in creates)
    assert any(b["state"] == "expired" and b["reason"] == "lease" for b in outcome.waits())
    assert sorted(to for to, _, _ in app.sent) == sorted([first, second])
    with httpx.Client(base_url=agent_server.url, timeout=30) as http:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            events = http.get(f"/v1/runs/{run_id}").json()["events"]
            if any(e["type"] == "late_arrival" for e in events):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"no late_arrival event: {events}")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_never_sent_with_short_leases_reaches_stop(played: Played, transport: str) -> None:
    """Both inboxes expire without mail: the agent makes the second as told, then stops on a
    null next_tool whose hint says the app never sent the email."""
    outcome, app, _ = _get(played, transport, "never sent, short leases")
    assert app.sent == [] and app.triggers == 2
    assert outcome.ended_by == "stop", _story(outcome)
    assert outcome.tools().count("create_inbox") == 2
    last = outcome.steps[-1].answer.body
    assert (last["state"], last["next_action"], last["next_arguments"]) == ("expired", "stop", None)
    assert "the app never sent the email" in (outcome.hint or "")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_slow_provider_is_waited_out(played: Played, transport: str) -> None:
    """Injected store timeouts on wait: the agent repeats the same call after retry_after."""
    outcome, app, _ = _get(played, transport, "slow provider")
    _gets_the_valid_code(outcome, app)
    steps = outcome.steps
    timed_out = [
        i for i, s in enumerate(steps) if s.answer.body.get("reason") == "provider_timeout"
    ]
    assert timed_out
    for i in timed_out:
        assert steps[i].answer.body["retry_after"] > 0
        assert (steps[i + 1].tool, steps[i + 1].arguments) == (steps[i].tool, steps[i].arguments)
        assert steps[i + 1].at - steps[i].at >= steps[i].answer.body["retry_after"]


def test_every_call_the_answers_named_was_accepted(played: Played) -> None:
    """Every scenario ran over each transport, and no call made with next_tool and
    next_arguments as given was refused (the agent checks each tool is listed)."""
    assert set(played) == {(t, s.name) for t in TRANSPORTS for s in SCENARIOS}
    for transport, name in played:
        outcome, _, _ = _get(played, transport, name)
        refused = [s for s in outcome.steps if s.answer.is_error]
        assert refused == [], (transport, name, refused)
        assert outcome.ended_by in ("code", "cause", "stop"), (transport, name, _story(outcome))
