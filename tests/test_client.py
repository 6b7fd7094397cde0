"""The Python client: expect_message's decisions, the HTTP clients, errors, and the fake."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sink.client import (
    ApiError,
    AsyncSink,
    Envelope,
    ExpectationFailed,
    Match,
    OwnershipRefused,
    ProtocolError,
    Sink,
    TransportFailed,
    Unavailable,
)
from sink.client.expect import Expectation, Found, Pause
from sink.fake import (
    EPOCH,
    AsyncFakeSink,
    CircuitOpen,
    Expired,
    FakeSink,
    ProviderTimeout,
    Received,
    Waiting,
)
from tests.support import Server, new_run_id, start_server

# -- expect_message's decisions (pure) ---------------------------------------------------

BASE: dict[str, Any] = {
    "state": "waiting",
    "status": "retryable",
    "next_action": "wait_for_message",
    "reason": "evidence_not_found",
    "inbox_id": "ib_aaaaaaaaaaaaaaaaaaaa",
    "run_id": "run-1",
    "purpose": "signup-check",
    "address": "raaa@sink.test",
    "expires_at": "2030-01-01T00:10:00.000Z",
    "attempt": 1,
    "remaining_attempts": 11,
    "retry_after": 0.0,
    "next_poll_at": "2030-01-01T00:00:01.000Z",
    "cursor": "c1_x",
    "message": None,
    "claim": None,
    "last_error": None,
    "trace_id": "t",
}
MESSAGE = {
    "message_id": "msg_1",
    "subject": "Reset",
    "from": "app@example.test",
    "received_at": "2030-01-01T00:00:00.500Z",
}
CLAIM = {
    "claim_id": "clm_1",
    "message_id": "msg_1",
    "run_id": "run-1",
    "claimed_at": "2030-01-01T00:00:01.000Z",
}


def envelope(**fields: Any) -> Envelope:
    return Envelope.from_json({**BASE, **fields})


def plan(timeout_s: float = 30.0, long_poll_s: float = 10.0) -> Expectation:
    return Expectation(
        inbox_id="ib_aaaaaaaaaaaaaaaaaaaa",
        run_id="run-1",
        address="raaa@sink.test",
        match=Match(subject_contains="Reset"),
        timeout_s=timeout_s,
        long_poll_s=long_poll_s,
        started=100.0,
    )


def test_envelope_parses_times_and_nested_objects() -> None:
    """Envelope.from_json gives aware UTC times, a MessageRef and a Claim."""
    parsed = envelope(state="received", message=MESSAGE, claim=CLAIM, retry_after=None)
    assert parsed.expires_at.isoformat() == "2030-01-01T00:10:00+00:00"
    assert parsed.message is not None and parsed.message.from_ == "app@example.test"
    assert parsed.claim is not None and parsed.claim.claim_id == "clm_1"
    assert parsed.retry_after is None


def test_envelope_missing_field_is_a_protocol_error() -> None:
    """An answer without a contract field raises ProtocolError naming the field."""
    data = dict(BASE)
    del data["next_action"]
    with pytest.raises(ProtocolError, match="next_action"):
        Envelope.from_json(data)


def test_wait_timeout_is_the_long_poll_within_the_deadline() -> None:
    """Each wait long-polls up to long_poll_s, never past the caller's deadline."""
    expectation = plan(timeout_s=25, long_poll_s=10)
    assert expectation.wait_timeout(100.0) == 10
    assert expectation.wait_timeout(120.0) == 5
    assert expectation.wait_timeout(130.0) == 0


def test_a_match_is_found_and_nothing_yet_pauses_for_retry_after() -> None:
    """claim_message with a message is Found; wait_for_message pauses for retry_after."""
    expectation = plan()
    found = envelope(
        state="received",
        status="completed",
        next_action="claim_message",
        reason=None,
        message=MESSAGE,
    )
    assert expectation.after_wait(found, 101.0) == Found("msg_1")
    assert expectation.after_wait(envelope(retry_after=2.0), 101.0) == Pause(2.0)


def test_circuit_open_pauses_then_gives_up_when_the_pause_passes_the_deadline() -> None:
    """wait_then_retry pauses for retry_after, unless that would pass timeout_s: then it fails."""
    expectation = plan(timeout_s=10)
    open_circuit = envelope(
        status="blocked", next_action="wait_then_retry", reason="circuit_open", retry_after=5.0
    )
    assert expectation.after_wait(open_circuit, 101.0) == Pause(5.0)
    with pytest.raises(ExpectationFailed) as failed:
        expectation.after_wait(open_circuit, 106.0)
    assert failed.value.deadline_exceeded
    assert (failed.value.reason, failed.value.next_action) == ("circuit_open", "wait_then_retry")
    assert "retry_after=5s" in str(failed.value)


def test_blocked_without_retry_after_is_not_repeated() -> None:
    """blocked with a null retry_after means do not repeat the call: expect_message fails."""
    refusal = envelope(
        status="blocked", next_action="wait_then_retry", reason="too_early", retry_after=None
    )
    with pytest.raises(ExpectationFailed) as failed:
        plan().after_wait(refusal, 101.0)
    assert not failed.value.deadline_exceeded


@pytest.mark.parametrize(
    ("next_action", "reason", "says"),
    [
        ("create_new_inbox", "lease", "create one and trigger the mail again"),
        ("stop", "timeout", "nothing more is allowed"),
    ],
)
def test_expired_answers_are_terminal(next_action: str, reason: str, says: str) -> None:
    """expired/create_new_inbox and expired/stop raise at once, naming reason and next action."""
    expired = envelope(state="expired", status="blocked", next_action=next_action, reason=reason)
    with pytest.raises(ExpectationFailed) as failed:
        plan().after_wait(expired, 101.0)
    assert (failed.value.reason, failed.value.next_action) == (reason, next_action)
    assert f"reason={reason}, next_action={next_action}" in str(failed.value)
    assert says in str(failed.value)
    assert failed.value.envelope == expired


def test_expired_with_an_earlier_claim_is_not_new_evidence() -> None:
    """An expired inbox still showing its old claim (proceed) is a failure, not the message."""
    done = envelope(
        state="expired",
        status="completed",
        next_action="proceed",
        reason="timeout",
        message=MESSAGE,
        claim=CLAIM,
    )
    with pytest.raises(ExpectationFailed, match="no new message can arrive"):
        plan().after_wait(done, 101.0)


def test_claim_retries_provider_trouble_and_stops_on_lease_expired() -> None:
    """A claim hit by provider trouble is retried; lease_expired ends the expectation."""
    expectation = plan()
    trouble = envelope(
        state="received", next_action="wait_then_retry", reason="provider_error", retry_after=1.0
    )
    assert expectation.after_claim(trouble, 101.0) == Pause(1.0)
    late = envelope(
        state="expired",
        status="blocked",
        next_action="create_new_inbox",
        reason="lease_expired",
        retry_after=None,
    )
    with pytest.raises(ExpectationFailed) as failed:
        expectation.after_claim(late, 101.0)
    assert failed.value.reason == "lease_expired"


# -- the HTTP clients against a real server ---------------------------------------------------


def test_expect_message_without_claim_leaves_the_message_unclaimed(server: Server) -> None:
    """claim=False returns the message read but unclaimed; expecting again returns it again."""
    with Sink(server.url) as sink:
        inbox = sink.create_inbox(new_run_id(), "signup-check")
        server.send(inbox.address, subject="Confirm your email", body="Code: 482913")
        first = inbox.expect_message(subject_contains="confirm", claim=False, timeout_s=10)
        assert inbox.envelope.next_action == "claim_message"
        assert not first.claimed
        again = inbox.expect_message(subject_contains="confirm", timeout_s=10)
        assert again.message_id == first.message_id and again.code == "482913"
        assert inbox.envelope.next_action == "proceed"


def test_expect_message_twice_gets_the_next_message(server: Server) -> None:
    """After a claimed message, expect_message returns the next one, not the same again."""
    with Sink(server.url) as sink:
        inbox = sink.create_inbox(new_run_id(), "signup-check")
        server.send(inbox.address, subject="First")
        assert inbox.expect_message(timeout_s=10).subject == "First"
        server.send(inbox.address, subject="Second")
        assert inbox.expect_message(timeout_s=10).subject == "Second"


def test_expect_message_retries_a_failed_claim_and_read(server: Server) -> None:
    """Provider errors on claim and read are retried after retry_after, within timeout_s."""
    with Sink(server.url) as sink, server.http() as http:
        run_id = new_run_id()
        inbox = sink.create_inbox(run_id, "signup-check")
        for target in ("claim", "read"):
            fault = {"target": target, "mode": "error", "count": 1, "run_id": run_id}
            assert http.post("/v1/faults", json=fault).status_code == 201
        server.send(inbox.address, subject="Reset", body="Your code is 551203")
        message = inbox.expect_message(timeout_s=15)
        assert message.code == "551203"
        assert inbox.envelope.claim is not None
        left = [f for f in http.get("/v1/faults").json()["faults"] if f["run_id"] == run_id]
        assert left == []


def test_async_sink_expects_a_message(server: Server) -> None:
    """AsyncSink creates an inbox and expect_message returns the claimed message."""

    async def scenario() -> tuple[str | None, str]:
        async with AsyncSink(server.url) as sink:
            inbox = await sink.create_inbox(new_run_id(), "password-reset")
            await asyncio.to_thread(
                server.send, inbox.address, subject="Reset your password", body="Code 731904"
            )
            message = await inbox.expect_message(subject_contains="reset", timeout_s=10)
            return message.code, (await inbox.refresh()).next_action

    assert asyncio.run(scenario()) == ("731904", "proceed")


def test_async_sink_raises_expectation_failed(server: Server) -> None:
    """AsyncSink's expect_message raises ExpectationFailed when the budget is spent."""

    async def scenario() -> ExpectationFailed:
        async with AsyncSink(server.url) as sink:
            inbox = await sink.create_inbox(new_run_id(), "signup-check", poll_budget=1)
            try:
                await inbox.expect_message(timeout_s=5, long_poll_s=0.1)
            except ExpectationFailed as exc:
                return exc
            raise AssertionError("expect_message returned without a message")

    failed = asyncio.run(scenario())
    assert (failed.reason, failed.next_action) == ("timeout", "create_new_inbox")


def test_unreachable_server_is_transport_failed() -> None:
    """A server that is not listening raises TransportFailed naming the URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with Sink(f"http://127.0.0.1:{port}") as sink, pytest.raises(TransportFailed, match=str(port)):
        sink.get_inbox("ib_aaaaaaaaaaaaaaaaaaaa")


def test_non_json_answer_is_a_protocol_error() -> None:
    """A 200 whose body is not JSON (a proxy page, say) raises ProtocolError."""
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text="<html>proxy</html>"))
    with Sink("http://runsink.test", transport=transport) as sink, pytest.raises(ProtocolError):
        sink.get_inbox("ib_aaaaaaaaaaaaaaaaaaaa")


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(
        tmp_path_factory.mktemp("token"), "--api-token", "s3cret-token-for-tests"
    )
    yield running
    running.stop()


def test_api_token_is_sent_as_bearer(token_server: Server) -> None:
    """With api_token the client is let in; without it the server answers 401 unauthorized."""
    with Sink(token_server.url, api_token="s3cret-token-for-tests") as sink:
        assert sink.create_inbox(new_run_id(), "signup-check").envelope.state == "created"
    with Sink(token_server.url) as anonymous, pytest.raises(ApiError) as refused:
        anonymous.create_inbox(new_run_id(), "signup-check")
    assert (refused.value.status, refused.value.code) == (401, "unauthorized")


# -- the fake's script and clock ------------------------------------------------------------


def test_fake_plays_provider_timeout_then_circuit_open() -> None:
    """A scripted CircuitOpen refuses waits for its retry_after; expect_message waits it out."""
    fake = FakeSink([ProviderTimeout(), CircuitOpen(retry_after=5), Received(subject="Reset")])
    inbox = fake.create_inbox("run-1", "password-reset")
    assert inbox.wait().reason == "provider_timeout"
    refused = inbox.wait()
    assert (refused.reason, refused.retry_after) == ("circuit_open", 5.0)
    message = inbox.expect_message(subject_contains="reset")
    assert message.subject == "Reset"
    assert fake.pending == ()
    assert fake.clock.now() - EPOCH == pytest.approx(2.0 + 5.0)


def test_fake_time_moves_only_by_long_polls_and_pauses() -> None:
    """A Waiting step holds its long-poll on the fake clock; too_early is honoured, not slept."""
    fake = FakeSink([Waiting(), Waiting(), Received(subject="Welcome")])
    inbox = fake.create_inbox("run-1", "signup-check")
    assert inbox.wait().retry_after == 1.0
    too_early = inbox.wait()
    assert (too_early.reason, too_early.retry_after) == ("too_early", 1.0)
    message = inbox.expect_message(long_poll_s=4)
    assert message.subject == "Welcome"
    assert fake.clock.now() - EPOCH == pytest.approx(1.0 + 4.0)


def test_fake_scripted_timeout_expiry_spends_the_budget() -> None:
    """Expired("timeout") ends the inbox as a spent budget does."""
    inbox = FakeSink([Expired("timeout")]).create_inbox("run-1", "signup-check")
    expired = inbox.wait()
    assert (expired.state, expired.reason, expired.remaining_attempts) == ("expired", "timeout", 0)


def test_fake_is_repeatable_for_a_seed() -> None:
    """Two fakes with the same seed and script give identical ids, addresses and times."""

    def play(seed: int) -> list[Any]:
        fake = FakeSink([Waiting(), Received(subject="Hi")], seed=seed)
        inbox = fake.create_inbox("run-1", "signup-check")
        answers = [inbox.wait()]
        fake.clock.advance(1)
        return [*answers, inbox.wait(), inbox.claim(), fake.run_report("run-1")]

    assert play(7) == play(7)
    assert play(7)[0].inbox_id != play(8)[0].inbox_id


def test_fake_deliver_routes_like_smtp() -> None:
    """deliver reaches local+tag addresses; unknown and expired inboxes drop the mail."""
    fake = FakeSink()
    inbox = fake.create_inbox("run-1", "signup-check", ttl_s=60)
    local, domain = inbox.address.split("@")
    assert fake.deliver(f"{local}+tag@{domain}", subject="Tagged") is not None
    assert fake.deliver(f"nobody@{domain}") is None
    fake.clock.advance(60)
    assert fake.deliver(inbox.address) is None
    assert [e.type for e in fake.run_report("run-1").events][-1] == "late_arrival"


def test_fake_reads_the_policy_file(tmp_path: Path) -> None:
    """FakeSink(policy_file=...) applies the same TOML policies as the server."""
    policies = tmp_path / "policies.toml"
    policies.write_text("[policy.quick]\npoll_budget = 2\nlong_poll_max_s = 3\n")
    inbox = FakeSink(policy_file=policies).create_inbox("run-1", "p", policy="quick")
    assert inbox.envelope.remaining_attempts == 2


def test_the_fake_leaves_no_thread_behind() -> None:
    """Every call runs on a loop of its own that is closed (with its threads) before it returns."""
    before = threading.active_count()
    fake = FakeSink([Received(subject="Reset", text="Your code is 424242")])
    inbox = fake.create_inbox("run-1", "password-reset")
    message = inbox.expect_message(subject_contains="reset")
    assert message.code == "424242"
    assert threading.active_count() == before


def test_the_sync_fake_works_inside_a_running_loop() -> None:
    """A FakeSink called from async code runs each call on a thread that is joined at once."""

    async def scenario() -> str:
        fake = FakeSink([Received(subject="Hi")])
        return fake.create_inbox("run-1", "signup-check").wait().state

    assert asyncio.run(scenario()) == "received"


def test_async_fake_follows_the_same_script() -> None:
    """AsyncFakeSink gives the async interface over the same scripted fake."""

    async def scenario() -> tuple[str | None, Any]:
        fake = AsyncFakeSink([Waiting(), Received(subject="Code", text="Your code is 918273")])
        inbox = await fake.create_inbox("run-1", "login")
        message = await inbox.expect_message(subject_contains="code")
        return message.code, json.dumps([e.type for e in (await inbox.report()).events])

    code, events = asyncio.run(scenario())
    assert code == "918273"
    assert json.loads(events)[-1] == "claimed"


def test_a_read_that_stays_unavailable_fails_within_the_deadline() -> None:
    """A 503 on read is retried after Retry-After, unless that passes timeout_s: then it fails."""
    expectation = plan(timeout_s=3)
    busy = Unavailable(503, "provider_timeout", "slow store", retry_after=1.0)
    assert expectation.after_unavailable(busy, 101.0, "msg_1") == Pause(1.0)
    with pytest.raises(ExpectationFailed, match=r"msg_1 .* was found but could not be read"):
        expectation.after_unavailable(busy, 102.5, "msg_1")
    full = Unavailable(503, "over_capacity", "4 waits are already in progress", retry_after=1.0)
    assert expectation.after_unavailable(full, 101.0) == Pause(1.0)
    with pytest.raises(ExpectationFailed, match=r"could not be waited on") as failed:
        expectation.after_unavailable(full, 102.5)
    assert failed.value.next_action == "wait_then_retry"


def test_a_refused_run_fails_naming_the_reason_and_stop() -> None:
    """wrong_run or claimed_by_other_run inside expect_message: ExpectationFailed, stop."""
    refused = OwnershipRefused(403, "wrong_run", "run 'x' does not own this inbox")
    failure = plan(timeout_s=3).refused(refused)
    assert (failure.reason, failure.next_action) == ("wrong_run", "stop")
    assert "next_action=stop" in str(failure) and "does not own" in str(failure)
