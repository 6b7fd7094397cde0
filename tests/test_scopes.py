"""sink/scopes.py: which scope may do which operation on which run (pure)."""

from __future__ import annotations

import pytest

from sink import scopes
from sink.scopes import ADMIN, READ, Op, Scope, ScopeSyntax, parse_scope, run_scope, visibility

TEAM_A = parse_scope("runs:team-a-*")
RUN_A1 = run_scope("team-a-1")

RUN_OPS = [
    scopes.CREATE,
    scopes.GET,
    scopes.WAIT,
    scopes.LIST,
    scopes.READ_MESSAGE,
    scopes.CLAIM,
    scopes.REPORT,
    scopes.RELEASE,
]
READ_OPS = [op for op in RUN_OPS if not op.changes]
WRITE_OPS = [op for op in RUN_OPS if op.changes]


@pytest.mark.parametrize("op", [*RUN_OPS, scopes.MINT, scopes.SEARCH, scopes.EVENTS])
@pytest.mark.parametrize("op_kind", [scopes.READ_ALL, scopes.ADMINISTER, scopes.ANY])
def test_admin_may_do_everything(op: Op, op_kind: Op) -> None:
    """admin: every operation, on every run, faults included."""
    assert scopes.decide(ADMIN, op, "anyone") is None
    assert scopes.decide(ADMIN, op_kind) is None


def test_read_may_read_everything_and_change_nothing() -> None:
    """read: every read; a change needs the run's scope when named, else admin."""
    for op in READ_OPS:
        assert scopes.decide(READ, op, "team-b-1") is None
        assert scopes.decide(READ, op, "team-b-1", owner=True) is None
    for op in WRITE_OPS:
        assert scopes.decide(READ, op, "team-b-1") == "runs:team-b-1"
        assert scopes.decide(READ, op, "team-b-1", owner=True) == "admin"
    assert scopes.decide(READ, scopes.READ_ALL) is None
    assert scopes.decide(READ, scopes.SEARCH) is None
    assert scopes.decide(READ, scopes.ADMINISTER) == "admin"


@pytest.mark.parametrize("scope", [TEAM_A, RUN_A1])
def test_runs_scopes_reach_only_their_runs(scope: Scope) -> None:
    """runs:<glob> and a run token: the run operations on covered runs only."""
    for op in RUN_OPS:
        assert scopes.decide(scope, op, "team-a-1") is None
        assert scopes.decide(scope, op, "team-b-1") == "runs:team-b-1"
    assert scopes.decide(scope, scopes.READ_ALL) == "read"
    assert scopes.decide(scope, scopes.ADMINISTER) == "admin"
    for view in (scopes.SEARCH, scopes.EVENTS):
        assert scopes.decide(scope, view) is None  # filtered, see visibility
        assert scopes.decide(scope, view, "team-a-1") is None  # naming a run of its own
        assert scopes.decide(scope, view, "team-b-1") == "runs:team-b-1"


@pytest.mark.parametrize("scope", [TEAM_A, RUN_A1])
def test_a_refusal_by_owner_never_names_the_owners_run(scope: Scope) -> None:
    """An id owned by another run: the refusal names read or admin, not that run."""
    for op in READ_OPS:
        assert scopes.decide(scope, op, "team-b-secret", owner=True) == "read"
    for op in WRITE_OPS:
        assert scopes.decide(scope, op, "team-b-secret", owner=True) == "admin"


def test_globs_are_case_sensitive_fnmatch_over_the_whole_run_id() -> None:
    """runs: globs match the whole run id, case-sensitively; a run token only its run."""
    assert TEAM_A.covers("team-a-")
    assert TEAM_A.covers("team-a-1842:retry.2")
    assert not TEAM_A.covers("TEAM-A-1")
    assert not TEAM_A.covers("x-team-a-1")
    assert parse_scope("runs:ci-[0-9]?").covers("ci-42")
    assert not parse_scope("runs:ci-[!0-9]*").covers("ci-42")
    assert RUN_A1.covers("team-a-1") and not RUN_A1.covers("team-a-10")


def test_only_a_runs_scope_mints_not_a_run_token() -> None:
    """A run token cannot mint another (it would outlive its lease); runs: and admin can."""
    assert scopes.decide(TEAM_A, scopes.MINT, "team-a-1") is None
    assert scopes.decide(RUN_A1, scopes.MINT, "team-a-1") == "runs:team-a-1"
    assert scopes.decide(READ, scopes.MINT, "team-a-1") == "runs:team-a-1"


def test_visibility_limits_views_to_the_scopes_runs_without_caught_mail() -> None:
    """Search and events: runs: scopes see their runs and no caught mail; others see all."""
    seen = visibility(TEAM_A)
    assert seen.sees("team-a-1") and not seen.sees("team-b-1") and not seen.sees(None)
    assert seen.run_glob == "team-a-*" and not seen.caught_mail
    one = visibility(RUN_A1)
    assert one.sees("team-a-1") and not one.sees("team-a-2") and not one.sees(None)
    for scope in (ADMIN, READ):
        everything = visibility(scope)
        assert everything.sees("x") and everything.sees(None) and everything.run_glob is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [("admin", "admin"), ("read", "read"), ("runs:team-a-*", "runs:team-a-*")],
)
def test_scopes_parse_and_print_the_same(text: str, expected: str) -> None:
    """A scope prints as the tokens file spells it."""
    assert str(parse_scope(text)) == expected


@pytest.mark.parametrize(
    "text", ["", "Admin", "write", "runs:", "runs:a b", "runs:a/b", "run:ci-1", "runs:" + "a" * 129]
)
def test_anything_else_is_not_a_scope(text: str) -> None:
    """Unknown scopes, empty or bad globs, and run: (only ever minted) are refused."""
    with pytest.raises(ScopeSyntax):
        parse_scope(text)


@pytest.mark.parametrize(
    ("scope", "may_view", "may_change"),
    [
        (ADMIN, None, None),
        (READ, None, "admin"),
        (TEAM_A, None, None),
        (RUN_A1, None, "runs:team-a-1"),
    ],
    ids=["admin", "read", "runs", "run"],
)
def test_webhook_operations_by_scope(
    scope: Scope, may_view: str | None, may_change: str | None
) -> None:
    """Webhooks: read and run tokens only look; admin and runs: tokens also change."""
    assert scopes.decide(scope, scopes.WEBHOOKS) == may_view
    assert scopes.decide(scope, scopes.WEBHOOK_CHANGE) == may_change


@pytest.mark.parametrize(
    ("scope", "run_id", "run_glob", "covered"),
    [
        (ADMIN, None, None, True),
        (READ, "team-b-1", None, True),
        (TEAM_A, "team-a-1", None, True),
        (TEAM_A, "team-b-1", None, False),
        (TEAM_A, None, "team-a-*", True),
        (TEAM_A, None, "team-a-nightly-*", True),
        (TEAM_A, None, "team-*", False),
        (TEAM_A, None, "*", False),
        (TEAM_A, None, None, False),
        (TEAM_A, "team-a-1", "*", True),  # the run_id alone keeps it within the glob
        (parse_scope("runs:ci"), None, "ci", True),
        (RUN_A1, "team-a-1", None, True),
        (RUN_A1, "team-a-2", None, False),
        (RUN_A1, None, "team-a-1", False),
    ],
)
def test_webhooks_within_a_scope(
    scope: Scope, run_id: str | None, run_glob: str | None, covered: bool
) -> None:
    """runs:<glob>: a run_id the glob matches or a run_glob under its prefix; run: its run."""
    assert scopes.covers_webhook(scope, run_id, run_glob) is covered
