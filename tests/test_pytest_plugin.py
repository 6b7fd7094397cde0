"""The pytest plugin: run_ids from node ids, and the fixtures as a user's test session sees them."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from sink.client import Sink
from sink.pytest_plugin import RUN_ID_MAX, run_id_for
from tests.support import Server

pytest_plugins = ("pytester",)

RUN_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# The inner sessions need neither of these heavy plugins; leaving them out saves seconds a run.
INNER = ("-p", "no:cacheprovider", "-p", "no:schemathesis", "-p", "no:hypothesispytest")

USER_TESTS = """
import json
import pathlib

import pytest

from sink.client import ExpectationFailed

SEEN = pathlib.Path("seen.jsonl")


def note(runsink, inbox):
    with SEEN.open("a") as out:
        out.write(json.dumps({"run_id": inbox.run_id, "inbox_id": inbox.inbox_id,
                              "url": runsink.url, "embedded": runsink.embedded}) + "\\n")


def test_gets_the_mail(runsink, runsink_inbox):
    note(runsink, runsink_inbox)
    runsink.send(runsink_inbox.address, subject="Reset your password", text="Your code is 123456")
    message = runsink_inbox.expect_message(subject_contains="reset", timeout_s=10)
    assert message.code == "123456"


@pytest.mark.parametrize("case", ["a b", "a/b", "a-b"])
def test_each_test_has_its_own_inbox(runsink, runsink_inbox, case):
    note(runsink, runsink_inbox)
    assert runsink_inbox.purpose == "pytest"


@pytest.mark.runsink(purpose="password-reset", poll_budget=3)
def test_marker_sets_the_inbox_options(runsink, runsink_inbox):
    note(runsink, runsink_inbox)
    assert runsink_inbox.purpose == "password-reset"
    assert runsink_inbox.envelope.remaining_attempts == 3


def test_failure_shows_the_run(runsink, runsink_inbox):
    note(runsink, runsink_inbox)
    runsink_inbox.expect_message(subject_contains="never sent", timeout_s=0.3, long_poll_s=0.1)


@pytest.mark.runsink(colour="blue")
def test_unknown_marker_option(runsink_inbox):
    pass
"""


def _seen(pytester: pytest.Pytester) -> list[dict[str, object]]:
    lines = (pytester.path / "seen.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_run_id_is_the_node_id_in_the_run_id_alphabet() -> None:
    """Characters outside A-Za-z0-9._:- become '-', and a hash keeps the id unique."""
    run_id = run_id_for("tests/test_signup.py::test_reset[user 1/é]", "salt")
    assert RUN_ID.fullmatch(run_id)
    assert run_id.startswith("tests-test_signup.py::test_reset-user-1.")


def test_run_ids_stay_unique_where_sanitising_collides() -> None:
    """Node ids that sanitise alike, other sessions and reruns all get different run_ids."""
    ids = {
        run_id_for("t.py::test[a b]", "s1"),
        run_id_for("t.py::test[a/b]", "s1"),
        run_id_for("t.py::test[a b]", "s2"),
        run_id_for("t.py::test[a b]", "s1", use=2),
    }
    assert len(ids) == 4


def test_long_node_ids_keep_their_end_within_128_chars() -> None:
    """A long node id is cut from the start, so the test's name and parameters remain."""
    nodeid = "tests/" + "deep/" * 40 + "test_x.py::test_the_name[param]"
    run_id = run_id_for(nodeid, "salt")
    assert len(run_id) <= RUN_ID_MAX and RUN_ID.fullmatch(run_id)
    assert "test_the_name-param" in run_id


def test_embedded_server_serves_a_session(pytester: pytest.Pytester) -> None:
    """Without RUNSINK_URL the session gets an embedded server, an inbox per test, then SIGTERM."""
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-W", "error", *INNER)
    result.assert_outcomes(passed=5, failed=1, errors=1)
    result.stdout.re_match_lines([re.escape("@pytest.mark.runsink: unknown option(s) ['colour']")])
    # The failed test's report carries its run: the inbox, then the events in order.
    result.stdout.re_match_lines(
        [
            r".*reason=evidence_not_found, next_action=wait_for_message",
            r"-+ runsink -+",
            r"inbox ib_\w+ <\w+@sink\.test> run_id=test_user\.py::test_failure_shows_the_run\.\w+$",
            r"run test_user\.py::test_failure_shows_the_run\.\w+:",
            r".* created ib_\w+ purpose=pytest policy=ci ttl_s=600",
            r".* polled ib_\w+ attempt=1 outcome=evidence_not_found .*",
        ]
    )
    seen = _seen(pytester)
    run_ids = [str(s["run_id"]) for s in seen]
    assert len(set(run_ids)) == len(run_ids) == 6
    assert all(RUN_ID.fullmatch(r) for r in run_ids)
    assert all(s["embedded"] for s in seen)
    assert len({s["url"] for s in seen}) == 1
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{seen[0]['url']}/healthz", timeout=5)


def test_runsink_url_uses_that_server(
    pytester: pytest.Pytester, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With RUNSINK_URL and RUNSINK_SMTP_* set, the fixtures use that server; none is started."""
    monkeypatch.setenv("RUNSINK_URL", server.url)
    monkeypatch.setenv("RUNSINK_SMTP_HOST", "127.0.0.1")
    monkeypatch.setenv("RUNSINK_SMTP_PORT", str(server.smtp_port))
    pytester.makepyfile(
        test_user="""
        import pathlib

        def test_uses_the_given_server(runsink, runsink_inbox):
            assert not runsink.embedded
            runsink.send(runsink_inbox.address, subject="Welcome", text="Confirm: 246810")
            assert runsink_inbox.expect_message(timeout_s=10).code == "246810"
            pathlib.Path("run_id.txt").write_text(runsink_inbox.run_id)
        """
    )
    result = pytester.runpytest_subprocess("-W", "error", *INNER)
    result.assert_outcomes(passed=1)
    run_id = (pytester.path / "run_id.txt").read_text()
    with Sink(server.url) as sink:
        report = sink.run_report(run_id)
    assert [e.type for e in report.events][-1] == "claimed"


def test_bad_smtp_port_names_the_variable(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A RUNSINK_SMTP_PORT that is not a port fails the tests with a message naming it."""
    monkeypatch.setenv("RUNSINK_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("RUNSINK_SMTP_PORT", "smtp")
    pytester.makepyfile(test_user="def test_x(runsink):\n    pass\n")
    result = pytester.runpytest_inprocess(*INNER)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*RUNSINK_SMTP_PORT: expected a port number, got 'smtp'*"])


def test_plugin_is_registered_by_entry_point(pytester: pytest.Pytester) -> None:
    """The fixtures are there without any conftest: pytest finds the plugin by its entry point."""
    result = pytester.runpytest_inprocess("--fixtures", *INNER)
    result.stdout.re_match_lines([r"runsink \[session scope\] -- .*", r"runsink_inbox -- .*"])
