"""One contract suite, run against the deterministic fake and a real server: they must agree.

Each test scripts what happens during its waits (``sink.fake`` steps). The fake plays the
script; against the server the same steps are acted out for real just before the wait that
uses them: mail sent over SMTP, a run-scoped ``POST /v1/faults``, or the lease left to run
out. A step is used up only by a wait that reaches the provider (not one refused as
circuit_open or too_early), as injected faults are on the server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any, Protocol

import pytest

from sink.client import (
    ApiError,
    AsyncSink,
    AsyncSinkApi,
    Envelope,
    ExpectationFailed,
    Match,
    Message,
    OwnershipRefused,
    Sink,
    SinkApi,
)
from sink.fake import (
    AsyncFakeSink,
    Expired,
    FakeSink,
    ProviderError,
    ProviderTimeout,
    Received,
    Step,
    Waiting,
)
from tests.support import Server, new_run_id

RESET = Received(
    subject="Reset your password",
    text="Your code is 123456.\nOr open https://app.example.test/reset?token=abc",
)


class World(Protocol):
    sink: SinkApi

    def script(self, *steps: Step) -> None: ...


class FakeWorld:
    def __init__(self, policy_file: str) -> None:
        self.fake = FakeSink(policy_file=policy_file)
        self.sink: SinkApi = self.fake

    def script(self, *steps: Step) -> None:
        self.fake.script(*steps)


class ScriptedServerSink(Sink):
    """A real server's client that acts out the script's next step before each wait."""

    def __init__(self, server: Server) -> None:
        super().__init__(server.url)
        self.server = server
        self.steps: list[Step] = []
        self.armed = False

    def wait_for_message(self, inbox_id: str, **options: Any) -> Envelope:
        if self.steps and not self.armed:
            self._act(self.steps[0], inbox_id)
            self.armed = True
        answer = super().wait_for_message(inbox_id, **options)
        if self.steps and answer.reason not in ("circuit_open", "too_early"):
            self.steps.pop(0)
            self.armed = False
        return answer

    def _act(self, step: Step, inbox_id: str) -> None:
        envelope = self.get_inbox(inbox_id)
        if isinstance(step, Received):
            self.server.send(
                envelope.address,
                subject=step.subject,
                body=step.text,
                sender=step.sender,
                html=step.html,
            )
        elif isinstance(step, ProviderTimeout | ProviderError):
            mode = "timeout" if isinstance(step, ProviderTimeout) else "error"
            fault = {"target": "wait", "mode": mode, "count": 1, "run_id": envelope.run_id}
            with self.server.http() as http:
                assert http.post("/v1/faults", json=fault).status_code == 201
        elif isinstance(step, Expired):
            assert step.reason == "lease", "the server world acts out lease expiry only"
            self._until_expired(inbox_id)
        else:
            assert isinstance(step, Waiting), f"no real counterpart for {step!r}"

    def _until_expired(self, inbox_id: str) -> None:
        deadline = time.monotonic() + 15
        while self.get_inbox(inbox_id).state != "expired":
            assert time.monotonic() < deadline, "the lease did not end"
            time.sleep(0.05)


class ServerWorld:
    def __init__(self, server: Server) -> None:
        self.client = ScriptedServerSink(server)
        self.sink: SinkApi = self.client

    def script(self, *steps: Step) -> None:
        self.client.steps.extend(steps)


@pytest.fixture(params=["fake", "server"])
def world(request: pytest.FixtureRequest, policy_file: str) -> Iterator[World]:
    if request.param == "fake":
        yield FakeWorld(policy_file)
        return
    server_world = ServerWorld(request.getfixturevalue("server"))
    try:
        yield server_world
    finally:
        server_world.client.close()


def _shape(envelope: Envelope) -> tuple[Any, ...]:
    return (envelope.state, envelope.status, envelope.next_action, envelope.reason)


def test_created_inbox_says_wait_for_message(world: World) -> None:
    """A new inbox is created/completed/wait_for_message with the whole budget and no message."""
    run_id = new_run_id()
    inbox = world.sink.create_inbox(run_id, "signup-check")
    created = inbox.envelope
    assert _shape(created) == ("created", "completed", "wait_for_message", None)
    assert (created.run_id, created.purpose, created.attempt) == (run_id, "signup-check", 0)
    assert created.remaining_attempts == 12
    assert created.address.endswith("@sink.test")
    assert created.address == created.address.lower()
    assert inbox.inbox_id.startswith("ib_")
    assert created.message is None and created.claim is None and created.retry_after is None
    assert not inbox.replayed


def test_waiting_twice_then_received_then_claimed(world: World) -> None:
    """waiting, waiting, received: each answer names its next action; the claim says proceed."""
    world.script(Waiting(), Waiting(), RESET)
    run_id = new_run_id()
    inbox = world.sink.create_inbox(run_id, "password-reset")
    for attempt in (1, 2):
        waiting = inbox.wait()
        assert _shape(waiting) == ("waiting", "retryable", "wait_for_message", "evidence_not_found")
        assert (waiting.attempt, waiting.remaining_attempts) == (attempt, 12 - attempt)
        assert waiting.message is None
    received = inbox.wait(timeout_s=5)
    assert _shape(received) == ("received", "completed", "claim_message", None)
    assert received.message is not None
    assert received.message.subject == "Reset your password"
    assert received.message.from_ == "app@example.test"
    claimed = inbox.claim()
    assert _shape(claimed) == ("received", "completed", "proceed", None)
    assert claimed.claim is not None
    assert (claimed.claim.run_id, claimed.claim.message_id) == (run_id, received.message.message_id)
    again = inbox.claim()
    assert _shape(again) == ("received", "completed", "proceed", "already_claimed")
    assert again.claim is not None and again.claim.claim_id == claimed.claim.claim_id


def test_read_message_decodes_text_links_and_codes(world: World) -> None:
    """read_message gives the decoded text, the likeliest code and link, and the SMTP envelope."""
    world.script(RESET)
    inbox = world.sink.create_inbox(new_run_id(), "password-reset")
    inbox.wait(timeout_s=5)
    message = inbox.read()
    assert message.subject == "Reset your password"
    assert message.text is not None and "Your code is 123456." in message.text
    assert message.code == "123456"
    assert message.link == "https://app.example.test/reset?token=abc"
    assert message.envelope.rcpt_to == (inbox.address,)
    assert message.to == (inbox.address,)
    assert not message.claimed and message.released_at is None


def test_run_report_lists_what_happened_in_order(world: World) -> None:
    """The run report shows created, the polls, the accepted message and the claim, in order."""
    world.script(Waiting(), RESET)
    run_id = new_run_id()
    inbox = world.sink.create_inbox(run_id, "password-reset")
    inbox.wait()
    received = inbox.wait(timeout_s=5)
    inbox.claim()
    report = world.sink.run_report(run_id)
    assert [e.type for e in report.events] == [
        "created",
        "polled",
        "message_accepted",
        "polled",
        "claimed",
    ]
    (row,) = report.inboxes
    assert received.message is not None
    assert (row.inbox_id, row.state, row.attempt) == (inbox.inbox_id, "received", 2)
    assert row.accepted_message_id == received.message.message_id


def test_expect_message_follows_waiting_to_the_message(world: World) -> None:
    """expect_message rides through two empty waits, claims the match and returns it read."""
    world.script(Waiting(), Waiting(), RESET)
    inbox = world.sink.create_inbox(new_run_id(), "password-reset")
    message = inbox.expect_message(subject_contains="reset", timeout_s=20, long_poll_s=0.2)
    assert message.code == "123456"
    assert _shape(inbox.envelope) == ("received", "completed", "proceed", None)
    assert inbox.envelope.attempt == 3


def test_mismatch_says_verify_trigger(world: World) -> None:
    """Mail that does not match gives verify_trigger/evidence_mismatch, and the cursor moves on."""
    world.script(Received(subject="Welcome aboard"), Waiting())
    inbox = world.sink.create_inbox(new_run_id(), "password-reset")
    first = inbox.wait(subject_contains="Reset")
    assert _shape(first) == ("waiting", "retryable", "verify_trigger", "evidence_mismatch")
    assert [u.subject for u in first.unmatched] == ["Welcome aboard"]
    assert first.rescan_cursor == inbox.created.cursor
    second = inbox.wait(subject_contains="Reset")
    assert second.unmatched == () and second.rescan_cursor is None
    assert _shape(second) == ("waiting", "retryable", "wait_for_message", "evidence_not_found")
    assert second.cursor != inbox.created.cursor


def test_expect_message_reports_a_mismatch_when_time_runs_out(world: World) -> None:
    """expect_message keeps waiting after a mismatch and, out of time, says mail did not match."""
    world.script(Received(subject="Welcome aboard"))
    inbox = world.sink.create_inbox(new_run_id(), "password-reset")
    with pytest.raises(ExpectationFailed) as failed:
        inbox.expect_message(subject_contains="Reset", timeout_s=0.6, long_poll_s=0.2)
    assert failed.value.deadline_exceeded and failed.value.mismatch
    assert failed.value.next_action == "wait_for_message"
    assert "none matched" in str(failed.value)


def test_spent_budget_expires_with_timeout(world: World) -> None:
    """The last poll without evidence expires the inbox: timeout, create_new_inbox, for good."""
    world.script(Waiting(), Waiting())
    inbox = world.sink.create_inbox(new_run_id(), "signup-check", poll_budget=2)
    assert inbox.wait().remaining_attempts == 1
    expired = inbox.wait()
    assert _shape(expired) == ("expired", "blocked", "create_new_inbox", "timeout")
    assert expired.remaining_attempts == 0
    assert _shape(inbox.wait()) == _shape(expired)
    assert _shape(inbox.refresh()) == _shape(expired)
    with pytest.raises(ExpectationFailed) as failed:
        inbox.expect_message(timeout_s=5)
    assert (failed.value.reason, failed.value.next_action) == ("timeout", "create_new_inbox")
    assert not failed.value.deadline_exceeded
    assert "create one and trigger the mail again" in str(failed.value)


def test_expired_inbox_is_replaced_until_the_policy_says_stop(world: World) -> None:
    """After expiry the same create makes the run's next inbox; at the limit the answer is stop."""
    run_id = new_run_id()
    world.script(Waiting(), Waiting(), Waiting(), Waiting())
    first = world.sink.create_inbox(run_id, "signup-check", policy="tiny")
    first.wait()
    assert first.wait().next_action == "create_new_inbox"
    second = world.sink.create_inbox(run_id, "signup-check", policy="tiny")
    assert second.inbox_id != first.inbox_id and not second.replayed
    second.wait()
    assert _shape(second.wait()) == ("expired", "blocked", "stop", "timeout")
    with pytest.raises(ExpectationFailed) as failed:
        second.expect_message()
    assert failed.value.next_action == "stop"
    with pytest.raises(ApiError) as refused:
        world.sink.create_inbox(run_id, "signup-check", policy="tiny")
    assert (refused.value.status, refused.value.code) == (409, "policy_forbids")


def test_claim_after_the_lease_is_lease_expired(world: World) -> None:
    """A message found before the lease ended cannot be claimed after it: lease_expired."""
    world.script(RESET, Expired("lease"))
    inbox = world.sink.create_inbox(new_run_id(), "password-reset", ttl_s=1)
    received = inbox.wait(timeout_s=0)
    assert received.next_action == "claim_message"
    assert _shape(inbox.wait()) == ("expired", "blocked", "create_new_inbox", "lease")
    late = inbox.claim(received.message.message_id if received.message else None)
    assert _shape(late) == ("expired", "blocked", "create_new_inbox", "lease_expired")
    assert late.claim is None and late.message is None


def test_provider_timeouts_open_the_circuit(world: World) -> None:
    """Provider timeouts spend nothing; at the threshold the breaker opens: circuit_open."""
    world.script(ProviderTimeout(), ProviderTimeout())
    inbox = world.sink.create_inbox(new_run_id(), "signup-check", policy="fragile")
    first = inbox.wait()
    assert _shape(first) == ("created", "retryable", "wait_then_retry", "provider_timeout")
    assert (first.attempt, first.last_error, first.retry_after) == (0, "provider_timeout", 1.0)
    second = inbox.wait()
    assert second.reason == "provider_timeout"
    assert second.retry_after is not None and 0 < second.retry_after <= 0.6
    refused = inbox.wait()
    assert _shape(refused) == ("created", "blocked", "wait_then_retry", "circuit_open")
    assert refused.retry_after is not None and 0 < refused.retry_after <= 0.6
    assert refused.attempt == 0


def test_expect_message_rides_through_provider_trouble(world: World) -> None:
    """expect_message honours retry_after through provider trouble and an open circuit."""
    world.script(ProviderError(), ProviderTimeout(), RESET)
    inbox = world.sink.create_inbox(new_run_id(), "password-reset", policy="fragile")
    message = inbox.expect_message(subject_contains="Reset", timeout_s=15, long_poll_s=1)
    assert message.code == "123456"
    assert inbox.envelope.next_action == "proceed"
    # v3: the calls the provider answered after the trouble cleared last_error.
    assert inbox.envelope.last_error is None


def test_other_runs_are_refused(world: World) -> None:
    """A run that does not own the inbox or message gets wrong_run / claimed_by_other_run."""
    world.script(RESET)
    run_id = new_run_id()
    inbox = world.sink.create_inbox(run_id, "password-reset")
    with pytest.raises(OwnershipRefused) as wrong:
        world.sink.wait_for_message(inbox.inbox_id, run_id="someone-else")
    assert (wrong.value.status, wrong.value.reason, wrong.value.next_action) == (
        403,
        "wrong_run",
        "stop",
    )
    received = inbox.wait(timeout_s=5)
    assert received.message is not None
    message_id = received.message.message_id
    with pytest.raises(OwnershipRefused) as reader:
        world.sink.read_message(message_id, run_id="someone-else")
    assert reader.value.reason == "wrong_run"
    inbox.claim()
    with pytest.raises(OwnershipRefused) as taken:
        world.sink.claim_message(message_id, "someone-else")
    assert (taken.value.status, taken.value.reason) == (409, "claimed_by_other_run")


def test_every_tool_has_its_method_fed_by_next_arguments(world: World) -> None:
    """Following next_tool with next_arguments (match as a dict) reaches the code; the run
    report and find_mail are there under the tools' names, on the fake as on the server."""
    run_id = new_run_id()
    inbox = world.sink.create_inbox(run_id, "mapped", match={"subject_contains": "reset"})
    world.script(Received(subject="Reset your password", text="Your code is 271828."))
    answer: object = inbox.envelope
    called = []
    while isinstance(answer, Envelope) and answer.next_tool is not None:
        assert answer.next_arguments is not None
        called.append(answer.next_tool)
        answer = getattr(world.sink, answer.next_tool)(**answer.next_arguments)
    assert called == ["wait_for_message", "claim_message", "read_message"]
    assert isinstance(answer, Message) and answer.code == "271828"
    assert world.sink.get_run_report(run_id).run_id == run_id
    found = world.sink.find_mail("subject:reset", run_id=run_id)
    assert [m.message_id for m in found.messages] == [answer.message_id]
    assert found.messages[0].run_id == run_id and not found.has_more


def test_errors_say_what_to_do_next(world: World) -> None:
    """An error's next_action and hint are on the exception, on the fake as on the server."""
    with pytest.raises(ApiError) as missing:
        world.sink.read_message("msg_" + "a" * 24)
    assert (missing.value.next_action, missing.value.next_tool) == ("stop", None)
    assert missing.value.hint
    inbox = world.sink.create_inbox(new_run_id(), "guided")
    with pytest.raises(OwnershipRefused) as refused:
        world.sink.wait_for_message(inbox.inbox_id, run_id="someone-else", timeout_s=0)
    assert refused.value.next_action == "stop" and refused.value.hint


def test_create_replays_and_conflicts(world: World) -> None:
    """The same create replays the live inbox; the same key with another body is a conflict."""
    run_id = new_run_id()
    first = world.sink.create_inbox(run_id, "signup-check", match=Match(subject_contains="Hi"))
    again = world.sink.create_inbox(run_id, "signup-check", match=Match(subject_contains="Hi"))
    assert again.replayed and again.inbox_id == first.inbox_id
    with pytest.raises(ApiError) as conflict:
        world.sink.create_inbox(run_id, "signup-check", ttl_s=60)
    assert (conflict.value.status, conflict.value.code) == (409, "idempotency_key_conflict")


@pytest.mark.parametrize(
    ("call", "status", "code"),
    [
        (lambda s: s.create_inbox("bad run id", "p"), 422, "invalid_request"),
        (lambda s: s.create_inbox("r-1", "p", policy="no-such"), 400, "unknown_policy"),
        (lambda s: s.get_inbox("ib_aaaaaaaaaaaaaaaaaaaa"), 404, "not_found"),
        (lambda s: s.read_message("msg_aaaaaaaaaaaaaaaaaaaaaaaa"), 404, "not_found"),
    ],
    ids=["invalid-run-id", "unknown-policy", "no-inbox", "no-message"],
)
def test_errors_carry_status_and_code(world: World, call: Any, status: int, code: str) -> None:
    """Errors that are not envelope states raise ApiError with the contract's status and code."""
    with pytest.raises(ApiError) as error:
        call(world.sink)
    assert (error.value.status, error.value.code) == (status, code)


def test_foreign_cursor_is_invalid(world: World) -> None:
    """A cursor issued for another inbox is 400 invalid_cursor."""
    one = world.sink.create_inbox(new_run_id(), "signup-check")
    other = world.sink.create_inbox(new_run_id(), "signup-check")
    with pytest.raises(ApiError) as error:
        one.wait(cursor=other.envelope.cursor)
    assert (error.value.status, error.value.code) == (400, "invalid_cursor")


def test_released_run_keeps_metadata_only(world: World) -> None:
    """After release the inbox is expired (lease) and the message has no bodies left."""
    world.script(RESET)
    run_id = new_run_id()
    inbox = world.sink.create_inbox(run_id, "password-reset")
    received = inbox.wait(timeout_s=5)
    assert received.message is not None
    world.sink.release_run(run_id)
    assert _shape(inbox.refresh())[::3] == ("expired", "lease")
    message = world.sink.read_message(received.message.message_id)
    assert message.text is None and message.html is None and message.released_at is not None
    assert message.subject == "Reset your password"
    with pytest.raises(ApiError) as gone:
        world.sink.raw_message(received.message.message_id)
    assert (gone.value.status, gone.value.code) == (410, "evidence_released")


def test_message_list_pages_with_a_cursor(world: World) -> None:
    """list_messages pages oldest first; next_cursor reads on from the last item."""
    world.script(Received(subject="one"), Waiting(), Received(subject="two"))
    inbox = world.sink.create_inbox(new_run_id(), "signup-check")
    inbox.wait()
    inbox.claim()
    inbox.wait()
    inbox.wait()
    page = inbox.messages(limit=1)
    assert [m.subject for m in page.messages] == ["one"] and page.has_more
    assert page.messages[0].claimed
    rest = inbox.messages(after=page.next_cursor)
    assert [m.subject for m in rest.messages] == ["two"] and not rest.has_more


def test_a_resend_is_counted_and_order_newest_takes_it(world: World) -> None:
    """A second matching mail: the oldest-first wait counts it as newer_matching, and a wait
    with order newest returns it (the fake and the server alike)."""
    world.script(Received(subject="Your code 111"), Received(subject="Your code 222"))
    inbox = world.sink.create_inbox(new_run_id(), "password-reset")
    first = inbox.wait(subject_contains="code")
    assert first.message is not None and first.newer_matching == 0
    again = inbox.wait(subject_contains="code")
    assert again.message is not None and again.message.message_id == first.message.message_id
    assert again.newer_matching == 1
    newest = inbox.wait(subject_contains="code", order="newest")
    assert newest.message is not None and newest.message.subject == "Your code 222"
    assert newest.newer_matching == 0 and newest.near_misses == ()


# -- webhooks: the fake keeps them in the memory store and never sends; the server sends
# (to a closed port here), so the cases read what both agree on: ids, types, shapes, errors.

RECEIVER = "http://127.0.0.1:9/hooks"  # nothing listens: the server's attempts fail


def test_a_webhook_url_password_is_shown_only_at_create(world: World) -> None:
    """The URL's password, like the secret, is in the create's answer only: a read or a list
    shows ``user:***@`` (the fake as the server)."""
    made = world.sink.create_webhook("http://ci:hunter2@127.0.0.1:9/hooks", run_id=new_run_id())
    try:
        assert made.url == "http://ci:hunter2@127.0.0.1:9/hooks"
        listed = [h.url for h in world.sink.list_webhooks() if h.webhook_id == made.webhook_id]
        got = world.sink.get_webhook(made.webhook_id).url
        assert [*listed, got] == ["http://ci:***@127.0.0.1:9/hooks"] * 2
    finally:
        world.sink.delete_webhook(made.webhook_id)


def test_webhook_create_list_get_delete(world: World) -> None:
    """A webhook is shown with its secret once, listed and read without it, then deleted."""
    run_id = new_run_id()
    made = world.sink.create_webhook(
        RECEIVER, events=["message"], run_id=run_id, description="signup mail"
    )
    try:
        assert made.secret is not None and made.secret.startswith("whsec_")
        assert (made.url, made.events, made.run_id, made.run_glob) == (
            RECEIVER,
            ("message",),
            run_id,
            None,
        )
        assert made.description == "signup mail" and made.disabled_at is None
        listed = [h for h in world.sink.list_webhooks() if h.webhook_id == made.webhook_id]
        got = world.sink.get_webhook(made.webhook_id)
        for seen in (*listed, got):
            assert seen.secret is None
            assert (seen.url, seen.events, seen.run_id, seen.created_at) == (
                made.url,
                made.events,
                made.run_id,
                made.created_at,
            )
        assert len(listed) == 1
    finally:
        world.sink.delete_webhook(made.webhook_id)
    for gone in (world.sink.get_webhook, world.sink.delete_webhook, world.sink.test_webhook):
        with pytest.raises(ApiError) as error:
            gone(made.webhook_id)
        assert (error.value.status, error.value.code) == (404, "not_found")


def test_webhook_deliveries_list_its_runs_events_and_pings(world: World) -> None:
    """Mail for the webhook's run queues a message delivery; test_webhook queues a ping."""
    world.script(RESET)
    run_id = new_run_id()
    hook = world.sink.create_webhook(RECEIVER, events=["message"], run_id=run_id)
    try:
        world.sink.create_inbox(run_id, "password-reset").wait(timeout_s=5)
        ping = world.sink.test_webhook(hook.webhook_id)
        page = world.sink.list_deliveries(hook.webhook_id, limit=500)
        types = {d.delivery_id: d.type for d in page.deliveries}
        assert types[ping] == "ping"
        assert sorted(set(types.values())) == ["message", "ping"]
        assert all(d.attempt >= 1 and d.event_id for d in page.deliveries)
        assert not page.has_more and page.next_cursor is None
    finally:
        world.sink.delete_webhook(hook.webhook_id)


@pytest.mark.parametrize(
    ("call", "status", "code"),
    [
        (lambda s: s.create_webhook("ftp://example.test/x"), 422, "invalid_request"),
        (lambda s: s.create_webhook(RECEIVER, events=["nope"]), 422, "invalid_request"),
        (lambda s: s.create_webhook(RECEIVER, run_id="bad run"), 422, "invalid_request"),
        (lambda s: s.get_webhook("wh_aaaaaaaaaaaaaaaaaaaaaaaa"), 404, "not_found"),
        (lambda s: s.list_deliveries("wh_aaaaaaaaaaaaaaaaaaaaaaaa"), 404, "not_found"),
    ],
    ids=["bad-url", "bad-event", "bad-run-id", "no-webhook", "no-webhook-deliveries"],
)
def test_webhook_errors_carry_status_and_code(
    world: World, call: Any, status: int, code: str
) -> None:
    """The webhook calls refuse bad input and unknown ids with the contract's status and code."""
    with pytest.raises(ApiError) as error:
        call(world.sink)
    assert (error.value.status, error.value.code) == (status, code)


def test_webhook_deliveries_refuse_a_bad_cursor_or_limit(world: World) -> None:
    """A cursor the server never gave is 400 invalid_cursor; a limit of 0 is 422."""
    hook = world.sink.create_webhook(RECEIVER, run_id=new_run_id())
    try:
        with pytest.raises(ApiError) as cursor:
            world.sink.list_deliveries(hook.webhook_id, cursor="not-a-cursor")
        assert (cursor.value.status, cursor.value.code) == (400, "invalid_cursor")
        with pytest.raises(ApiError) as limit:
            world.sink.list_deliveries(hook.webhook_id, limit=0)
        assert (limit.value.status, limit.value.code) == (422, "invalid_request")
    finally:
        world.sink.delete_webhook(hook.webhook_id)


@pytest.mark.parametrize("kind", ["fake", "server"])
def test_async_webhook_calls_agree(kind: str, request: pytest.FixtureRequest) -> None:
    """AsyncFakeSink and AsyncSink answer the webhook calls alike."""

    async def scenario(sink: AsyncSinkApi) -> tuple[Any, ...]:
        hook = await sink.create_webhook(RECEIVER, run_glob="loose-*", events=["inbox"])
        ping = await sink.test_webhook(hook.webhook_id)
        got = await sink.get_webhook(hook.webhook_id)
        listed = [h.webhook_id for h in await sink.list_webhooks()]
        page = await sink.list_deliveries(hook.webhook_id)
        await sink.delete_webhook(hook.webhook_id)
        return (
            hook.secret is not None,
            got.run_glob,
            got.events,
            hook.webhook_id in listed,
            [d.type for d in page.deliveries if d.delivery_id == ping][:1],
            hook.webhook_id in [h.webhook_id for h in await sink.list_webhooks()],
        )

    async def run() -> tuple[Any, ...]:
        if kind == "fake":
            return await scenario(AsyncFakeSink())
        async with AsyncSink(request.getfixturevalue("server").url) as sink:
            return await scenario(sink)

    assert asyncio.run(run()) == (True, "loose-*", ("inbox",), True, ["ping"], False)
