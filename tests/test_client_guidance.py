"""The Python client follows next_tool / next_arguments, and its exceptions carry the hint."""

from __future__ import annotations

import time

import pytest

from sink.client import ApiError, Envelope, ExpectationFailed, Message, Sink
from tests.support import Server, new_run_id


def test_expect_message_claims_the_newest_of_a_resend(server: Server) -> None:
    """Two matching mails (a stale code, then the resend): expect_message takes the newest."""
    with Sink(server.url) as sink:
        inbox = sink.create_inbox(run_id=new_run_id(), purpose="resend", policy="guided")
        server.send(inbox.address, subject="Your code", body="Your code is 111111")
        server.send(inbox.address, subject="Your code", body="Your code is 222222")
        message = inbox.expect_message(subject_contains="code", timeout_s=10)
    assert message.code == "222222"
    assert inbox.envelope.next_tool == "read_message"
    assert inbox.envelope.hint


def test_expectation_failed_carries_the_servers_hint(server: Server) -> None:
    """An inbox that never gets mail ends with the server's hint in the exception and its text."""
    with Sink(server.url) as sink:
        inbox = sink.create_inbox(run_id=new_run_id(), purpose="silent", policy="guided")
        with pytest.raises(ExpectationFailed) as failed:
            inbox.expect_message(timeout_s=3, long_poll_s=0.5)
    assert failed.value.hint is not None and "mail" in failed.value.hint
    assert f"hint: {failed.value.hint}" in str(failed.value)


def test_api_errors_carry_what_to_do(server: Server) -> None:
    """An error answer's next_action, next_tool and hint are on the exception."""
    with Sink(server.url) as sink, pytest.raises(ApiError) as failed:
        sink.read_message("msg_" + "a" * 24)
    error = failed.value
    assert (error.code, error.next_action, error.next_tool) == ("not_found", "stop", None)
    assert error.hint is not None and error.hint in str(error)


def test_every_next_tool_is_a_client_method_taking_next_arguments(server: Server) -> None:
    """Calling getattr(sink, next_tool)(**next_arguments) goes from create to the code."""
    with Sink(server.url) as sink:
        run_id = new_run_id()
        inbox = sink.create_inbox(
            run_id, "mapped", policy="guided", match={"subject_contains": "code"}
        )
        server.send(inbox.address, subject="Your code", body="Your code is 314159")
        answer: object = inbox.envelope
        tools = []
        while isinstance(answer, Envelope) and answer.next_tool is not None:
            assert answer.next_arguments is not None
            tools.append(answer.next_tool)
            answer = getattr(sink, answer.next_tool)(**answer.next_arguments)
        assert tools == ["wait_for_message", "claim_message", "read_message"]
        assert isinstance(answer, Message) and answer.codes[0] == "314159"
        assert sink.get_run_report(run_id).inboxes[0].accepted_message_id == answer.message_id
        found = sink.find_mail("314159", run_id=run_id)
        assert [m.message_id for m in found.messages] == [answer.message_id]
        assert found.next_cursor is None and not found.has_more


def test_create_inbox_takes_an_expired_inboxs_next_arguments(server: Server) -> None:
    """create_new_inbox's next_arguments (a match as a plain dict) make the run's next inbox."""
    with Sink(server.url) as sink:
        run_id = new_run_id()
        first = sink.create_inbox(
            run_id, "again", policy="guided", ttl_s=1, match={"body_contains": "x"}
        )
        deadline = time.monotonic() + 10
        while first.envelope.state != "expired" and time.monotonic() < deadline:
            time.sleep(0.05)
            first.envelope = sink.get_inbox(first.inbox_id)
        assert (first.envelope.next_tool, first.envelope.next_action) == (
            "create_inbox",
            "create_new_inbox",
        )
        assert first.envelope.next_arguments is not None
        second = sink.create_inbox(**first.envelope.next_arguments)
    assert second.inbox_id != first.inbox_id and second.envelope.state == "created"
