"""Policies: the per-environment limits every inbox lives under.

Three are built in (``ci``, ``preview``, ``production``). A TOML file may add
policies or replace a built-in; keys a file policy leaves out take the built-in
``ci`` values. Validation names the file, the policy and the key, so a typo
stops start-up with a message a person can act on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from sink.errors import ConfigError

LATE_ARRIVAL_MODES = ("drop", "reject")
# Whether agents (MCP callers, minted run tokens) may be given bodies, headers and raw bytes:
# when they ask for them, or never (then only the extracted evidence).
AGENT_BODY_MODES = ("on_request", "never")


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    ttl_default_s: int = 600
    ttl_max_s: int = 3600
    poll_budget: int = 12
    poll_interval_s: tuple[float, ...] = (1, 2, 4, 8, 15, 30)
    long_poll_max_s: float = 30
    provider_deadline_s: float = 2.0
    breaker_failure_threshold: int = 3
    breaker_cooldown_s: float = 5.0
    breaker_cooldown_max_s: float = 60.0
    inboxes_per_purpose: int = 3
    late_arrival: str = "drop"
    retention_s: int = 86400
    max_message_bytes: int = 26214400
    catch_all_retention_s: int = 86400  # caught mail is kept this long (the default policy's)
    agent_body: str = "on_request"  # or "never": agents get the evidence only
    hint_after_s: float = 60.0  # v3: when a hint says that no mail has arrived at all
    allow_faults: bool = True

    def poll_interval(self, polls_spent: int) -> float:
        """The pause after a poll, given the polls spent before it (the last value repeats)."""
        intervals = self.poll_interval_s
        return float(intervals[min(polls_spent, len(intervals) - 1)])

    def ttl(self, requested: int | None) -> int:
        """The lease length: the caller's wish capped by the policy, never raised past it."""
        if requested is None:
            return min(self.ttl_default_s, self.ttl_max_s)
        return min(requested, self.ttl_max_s)

    def budget(self, requested: int | None) -> int:
        return self.poll_budget if requested is None else min(requested, self.poll_budget)

    def capped(self, ttl_s: int | None, poll_budget: int | None) -> tuple[str, ...]:
        """The caller's values this policy lowered (the create answer's ``capped``)."""
        lowered = []
        if ttl_s is not None and ttl_s > self.ttl_max_s:
            lowered.append("ttl_s")
        if poll_budget is not None and poll_budget > self.poll_budget:
            lowered.append("poll_budget")
        return tuple(lowered)


CI = Policy(name="ci")
PREVIEW = replace(CI, name="preview", ttl_default_s=900, ttl_max_s=7200, poll_budget=20)
# The conservative one: no fault injection, short retention, fewer inboxes and polls.
PRODUCTION = replace(
    CI,
    name="production",
    ttl_default_s=300,
    ttl_max_s=900,
    poll_budget=8,
    inboxes_per_purpose=2,
    late_arrival="reject",
    retention_s=3600,
    max_message_bytes=10 * 1024 * 1024,
    allow_faults=False,
    agent_body="never",
)
BUILTIN: dict[str, Policy] = {p.name: p for p in (CI, PREVIEW, PRODUCTION)}

_INT_KEYS = {
    "ttl_default_s",
    "ttl_max_s",
    "poll_budget",
    "breaker_failure_threshold",
    "inboxes_per_purpose",
    "retention_s",
    "max_message_bytes",
    "catch_all_retention_s",
}
_FLOAT_KEYS = {
    "long_poll_max_s",
    "provider_deadline_s",
    "breaker_cooldown_s",
    "breaker_cooldown_max_s",
    "hint_after_s",
}
_KEYS = {f.name for f in fields(Policy)} - {"name", "allow_faults"}

# Past these the arithmetic leaves what the store and the clock can hold (a lease or a
# retention past the year 9999 is no time at all): refused at start-up, not a 500 later.
_TEN_YEARS_S = 10 * 365 * 86400
_MILLION = 1_000_000
_MAXIMUM: dict[str, int] = {
    "ttl_default_s": _TEN_YEARS_S,
    "ttl_max_s": _TEN_YEARS_S,
    "retention_s": _TEN_YEARS_S,
    "catch_all_retention_s": _TEN_YEARS_S,
    "long_poll_max_s": _TEN_YEARS_S,
    "provider_deadline_s": _TEN_YEARS_S,
    "breaker_cooldown_s": _TEN_YEARS_S,
    "breaker_cooldown_max_s": _TEN_YEARS_S,
    "hint_after_s": _TEN_YEARS_S,
    "poll_interval_s": _TEN_YEARS_S,
    "poll_budget": _MILLION,
    "breaker_failure_threshold": _MILLION,
    "inboxes_per_purpose": _MILLION,
    "max_message_bytes": 1_000_000_000,  # SQLite's largest value (SQLITE_MAX_LENGTH)
}


def load_policies(path: Path | None) -> dict[str, Policy]:
    """The built-ins, overlaid with the policies of ``path`` (when given)."""
    policies = dict(BUILTIN)
    if path is None:
        return policies
    import tomllib  # only with a policy file: ~4 ms of imports and patterns at start-up

    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--policy-file {path}: cannot read it ({exc.strerror})") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--policy-file {path}: not valid TOML ({exc})") from exc
    unknown_tables = set(document) - {"policy"}
    if unknown_tables:
        raise ConfigError(
            f"--policy-file {path}: unknown table(s) {sorted(unknown_tables)}; "
            "expected only [policy.NAME] tables"
        )
    tables = document.get("policy", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"--policy-file {path}: 'policy' must be a table of [policy.NAME]")
    for name, table in tables.items():
        policies[name] = _policy_from_table(path, name, table)
    return policies


def _policy_from_table(path: Path, name: str, table: Any) -> Policy:
    where = f"--policy-file {path}: policy '{name}'"
    if not name or len(name) > 64 or not all(c.isalnum() or c in "._-" for c in name):
        raise ConfigError(f"{where}: the name must be 1-64 chars of A-Za-z0-9._-")
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a table of keys")
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in _KEYS:
            raise ConfigError(f"{where}: unknown key '{key}' (known: {', '.join(sorted(_KEYS))})")
        values[key] = _checked(where, key, value)
    # Keys left out take the built-in ci values, as the contract says.
    policy = replace(CI, name=name, **values)
    if name == "production":
        policy = replace(policy, allow_faults=False)
    _check_relations(where, policy)
    return policy


def _checked(where: str, key: str, value: Any) -> Any:
    checked = _typed(where, key, value)
    limit = _MAXIMUM.get(key)
    largest = max(checked) if isinstance(checked, tuple) else checked
    if limit is not None and largest > limit:
        raise ConfigError(f"{where}: key '{key}' must be at most {limit:,}, got {value!r}")
    return checked


def _typed(where: str, key: str, value: Any) -> Any:
    if key in _INT_KEYS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{where}: key '{key}' must be an integer >= 1, got {value!r}")
        return value
    if key in _FLOAT_KEYS:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: key '{key}' must be a number, got {value!r}")
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{where}: key '{key}' must be a number > 0, got {value!r}")
        return float(value)
    if key == "poll_interval_s":
        ok = isinstance(value, list) and value and all(_non_negative(v) for v in value)
        if not ok:
            raise ConfigError(
                f"{where}: key 'poll_interval_s' must be a non-empty list of numbers >= 0, "
                f"got {value!r}"
            )
        return tuple(float(v) for v in value)
    if key == "late_arrival":
        if value not in LATE_ARRIVAL_MODES:
            raise ConfigError(
                f"{where}: key 'late_arrival' must be 'drop' or 'reject', got {value!r}"
            )
        return value
    if key == "agent_body":
        if value not in AGENT_BODY_MODES:
            raise ConfigError(
                f"{where}: key 'agent_body' must be 'on_request' or 'never', got {value!r}"
            )
        return value
    raise AssertionError(key)  # pragma: no cover - _KEYS and the branches above agree


def _non_negative(value: Any) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and value >= 0
    )


def _check_relations(where: str, policy: Policy) -> None:
    if policy.ttl_default_s > policy.ttl_max_s:
        raise ConfigError(
            f"{where}: key 'ttl_default_s' ({policy.ttl_default_s}) must not exceed "
            f"'ttl_max_s' ({policy.ttl_max_s})"
        )
    if policy.breaker_cooldown_s > policy.breaker_cooldown_max_s:
        raise ConfigError(
            f"{where}: key 'breaker_cooldown_s' ({policy.breaker_cooldown_s}) must not exceed "
            f"'breaker_cooldown_max_s' ({policy.breaker_cooldown_max_s})"
        )
