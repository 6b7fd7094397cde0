"""Scopes: what a token may do. Pure: the one place that decides, per operation and run.

A scope is one of

    admin           everything, fault injection included
    read            every read (GET), nothing that changes state
    runs:<glob>     the run operations, only for runs whose id matches the glob
                    (fnmatch-style, case-sensitive: ``team-a-*``); search and events
                    limited to those runs and without caught mail
    run:<run_id>    a minted run token (``POST /v1/runs/{run_id}/token``): as
                    ``runs:`` for exactly that run, and it cannot mint

``decide`` answers one question: may this scope do this operation (on this run)? It
returns ``None`` (yes) or the scope that would be needed, which the refusal names
(403 ``forbidden_scope``). ``visibility`` is what the filtered views (search, events)
may show. Nothing here knows HTTP, tokens or the store: the API finds the run (from
the path, the body, or the owner of an inbox or message) and asks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from fnmatch import fnmatchcase

# A glob over run ids: the run id characters plus fnmatch's * ? [ ] !.
_RUN_GLOB = re.compile(r"[A-Za-z0-9._:\-*?\[\]!]{1,128}")


class Kind(Enum):
    ADMIN = "admin"
    READ = "read"
    RUNS = "runs"
    RUN = "run"


@dataclass(frozen=True, slots=True)
class Scope:
    kind: Kind
    glob: str | None = None  # RUNS: the glob; RUN: the run id

    def __str__(self) -> str:
        if self.glob is None:
            return self.kind.value
        return f"{self.kind.value}:{self.glob}"

    def covers(self, run_id: str) -> bool:
        """Is this run within the scope's runs? (admin and read: every run)."""
        if self.kind is Kind.RUN:
            return run_id == self.glob
        if self.kind is Kind.RUNS:
            assert self.glob is not None
            return fnmatchcase(run_id, self.glob)
        return True


ADMIN = Scope(Kind.ADMIN)
READ = Scope(Kind.READ)


def run_scope(run_id: str) -> Scope:
    """The scope of a token minted for one run."""
    return Scope(Kind.RUN, run_id)


class ScopeSyntax(ValueError):
    """Not a scope a tokens file may give."""


def parse_scope(text: str) -> Scope:
    """``admin``, ``read`` or ``runs:<glob>`` (``run:`` is only ever minted, never configured)."""
    if text == "admin":
        return ADMIN
    if text == "read":
        return READ
    if text.startswith("runs:"):
        glob = text[len("runs:") :]
        if not _RUN_GLOB.fullmatch(glob):
            raise ScopeSyntax(
                "runs:<glob>: the glob is 1-128 characters of A-Za-z0-9._:- and * ? [ ] !"
            )
        return Scope(Kind.RUNS, glob)
    raise ScopeSyntax(f"expected admin, read or runs:<glob>, got {text[:64]!r}")


class Access(Enum):
    """How an operation is governed."""

    RUN = "run"  # on one run's inboxes or mail; the run is named or looked up
    VIEW = "view"  # across runs, filtered to the scope's runs (search, events)
    READ_ALL = "read_all"  # reads across every run and caught mail (unrouted, Mailpit, metrics)
    ADMIN = "admin"  # changes beyond one run (faults, Mailpit deletes)
    ANY = "any"  # any valid token (the OpenAPI document, the MCP transport)
    WEBHOOK = "webhook"  # webhooks: by the runs a webhook's filter reaches (covers_webhook)


@dataclass(frozen=True, slots=True)
class Op:
    name: str
    access: Access
    changes: bool  # does it change state? (``read`` tokens never may)


CREATE = Op("create", Access.RUN, changes=True)
GET = Op("get", Access.RUN, changes=False)
WAIT = Op("wait", Access.RUN, changes=True)  # spends a poll
LIST = Op("list", Access.RUN, changes=False)
READ_MESSAGE = Op("read", Access.RUN, changes=False)
CLAIM = Op("claim", Access.RUN, changes=True)
REPORT = Op("report", Access.RUN, changes=False)
RELEASE = Op("release", Access.RUN, changes=True)
MINT = Op("mint", Access.RUN, changes=True)
SEARCH = Op("search", Access.VIEW, changes=False)
EVENTS = Op("events", Access.VIEW, changes=False)
READ_ALL = Op("read_all", Access.READ_ALL, changes=False)
ADMINISTER = Op("administer", Access.ADMIN, changes=True)
ANY = Op("any", Access.ANY, changes=False)
WEBHOOKS = Op("webhooks", Access.WEBHOOK, changes=False)  # list, get, deliveries
WEBHOOK_CHANGE = Op("webhook_change", Access.WEBHOOK, changes=True)  # create, delete, test


def decide(scope: Scope, op: Op, run_id: str | None = None, *, owner: bool = False) -> str | None:
    """``None`` when the scope allows the operation, else the scope needed for it.

    ``run_id`` is the run a RUN operation is on (None when it is not known: the inbox or
    message does not exist, and the call will say so). ``owner`` says the run was looked
    up from an inbox or message id rather than named by the caller: a refusal then names
    ``read`` or ``admin``, never the owner's run id, so that a caller learns nothing of a
    run it may not see.
    """
    if scope.kind is Kind.ADMIN:
        return None
    if op.access is Access.ANY:
        return None
    if op.access is Access.ADMIN:
        return "admin"
    if scope.kind is Kind.READ:
        if not op.changes:
            return None
        if op.access is Access.RUN and run_id is not None and not owner:
            return f"runs:{run_id}"
        return "admin"
    # runs:<glob> and run:<run_id>
    if op.access is Access.VIEW:
        # A filtered view (search, events) shows only the scope's runs; one that names a run
        # (?run_id=, X-Run-Id) may name only one of them.
        if run_id is not None and not scope.covers(run_id):
            return f"runs:{run_id}"
        return None
    if op.access is Access.READ_ALL:
        return "read"
    if op.access is Access.WEBHOOK:
        # Which webhooks is the webhook's own filter's business (covers_webhook); a run
        # token (an agent's) sees its run's and changes none.
        return f"runs:{scope.glob}" if op.changes and scope.kind is Kind.RUN else None
    if run_id is None or scope.covers(run_id):
        if op is MINT and scope.kind is Kind.RUN:
            # A run token cannot hand out (or outlive itself through) another one.
            return f"runs:{run_id}" if run_id is not None else "admin"
        return None
    if owner:
        return "admin" if op.changes else "read"
    return f"runs:{run_id}"


@dataclass(frozen=True, slots=True)
class Visibility:
    """What a filtered view (search, live events) may show to a scope."""

    run_glob: str | None  # None: every run; else fnmatch-style over run_id (exact for run:)
    caught_mail: bool  # may it see mail that routed to no inbox?

    def sees(self, run_id: str | None) -> bool:
        """May it see this item? ``run_id`` None is caught mail."""
        if run_id is None:
            return self.caught_mail
        return self.run_glob is None or fnmatchcase(run_id, self.run_glob)


def visibility(scope: Scope) -> Visibility:
    if scope.kind in (Kind.RUNS, Kind.RUN):
        return Visibility(scope.glob, caught_mail=False)
    return Visibility(None, caught_mail=True)


def covers_webhook(scope: Scope, run_id: str | None, run_glob: str | None) -> bool:
    """Is a webhook with this filter within the scope (to create, see, delete, test)?

    admin and read: every webhook. ``runs:<glob>``: one whose ``run_id`` the glob matches,
    or whose ``run_glob`` starts with the glob's text before its first ``*`` (so it can
    reach no run outside the glob's prefix); never one without either. A run token: one
    for exactly its run.
    """
    if scope.kind in (Kind.ADMIN, Kind.READ):
        return True
    assert scope.glob is not None
    if scope.kind is Kind.RUN:
        return run_id == scope.glob
    if run_id is not None and scope.covers(run_id):
        return True
    prefix = scope.glob.split("*", 1)[0]
    return run_glob is not None and run_glob.startswith(prefix)
