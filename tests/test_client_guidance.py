"""The Python client follows next_tool / next_arguments, and its exceptions carry the hint."""

from __future__ import annotations

import pytest

from sink.client import ApiError, ExpectationFailed, Sink
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
