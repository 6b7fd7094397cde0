"""Policies: built-ins, the TOML file (every key), caps, errors naming file, policy and key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sink.errors import ConfigError
from sink.policy import BUILTIN, CI, load_policies

FULL = """
[policy.staging]
ttl_default_s = 120
ttl_max_s = 240
poll_budget = 5
poll_interval_s = [0.5, 1]
long_poll_max_s = 10
provider_deadline_s = 0.5
breaker_failure_threshold = 4
breaker_cooldown_s = 2.0
breaker_cooldown_max_s = 8.0
inboxes_per_purpose = 1
late_arrival = "reject"
retention_s = 60
max_message_bytes = 1048576
agent_body = "never"
hint_after_s = 15
"""


def _load(tmp_path: Path, text: str) -> dict[str, Any]:
    path = tmp_path / "p.toml"
    path.write_text(text)
    return load_policies(path)


def test_builtins_exist_and_production_is_conservative() -> None:
    """ci, preview and production are built in; production allows no faults and keeps less."""
    assert set(BUILTIN) == {"ci", "preview", "production"}
    production = BUILTIN["production"]
    assert not production.allow_faults
    assert production.retention_s < CI.retention_s
    assert production.ttl_max_s <= CI.ttl_max_s and production.poll_budget <= CI.poll_budget
    assert production.agent_body == "never" and CI.agent_body == "on_request"


def test_every_key_is_honoured(tmp_path: Path) -> None:
    """A file policy sets each of the contract's keys."""
    policy = _load(tmp_path, FULL)["staging"]
    assert (policy.ttl_default_s, policy.ttl_max_s, policy.poll_budget) == (120, 240, 5)
    assert policy.poll_interval_s == (0.5, 1.0) and policy.long_poll_max_s == 10
    assert policy.provider_deadline_s == 0.5 and policy.breaker_failure_threshold == 4
    assert (policy.breaker_cooldown_s, policy.breaker_cooldown_max_s) == (2.0, 8.0)
    assert policy.inboxes_per_purpose == 1 and policy.late_arrival == "reject"
    assert policy.retention_s == 60 and policy.max_message_bytes == 1048576
    assert policy.agent_body == "never"
    assert policy.hint_after_s == 15.0 and CI.hint_after_s == 60.0


def test_missing_keys_take_the_ci_values(tmp_path: Path) -> None:
    """Keys a file policy leaves out take the built-in ci values."""
    policy = _load(tmp_path, "[policy.lean]\npoll_budget = 3\n")["lean"]
    assert policy.poll_budget == 3 and policy.ttl_default_s == CI.ttl_default_s
    assert policy.poll_interval_s == CI.poll_interval_s


def test_a_file_policy_replaces_a_builtin_but_production_never_allows_faults(
    tmp_path: Path,
) -> None:
    """A file may redefine a built-in; production still refuses fault injection."""
    policies = _load(
        tmp_path, "[policy.ci]\npoll_budget = 2\n[policy.production]\npoll_budget = 4\n"
    )
    assert policies["ci"].poll_budget == 2
    assert policies["production"].poll_budget == 4 and not policies["production"].allow_faults


def test_caller_values_are_capped_never_raised() -> None:
    """ttl and budget requests are capped by the policy; none given takes the default."""
    assert CI.ttl(None) == 600 and CI.ttl(10) == 10 and CI.ttl(10**6) == 3600
    assert CI.budget(None) == 12 and CI.budget(3) == 3 and CI.budget(100) == 12


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[policy.x]\npoll_budget = 0\n", "poll_budget"),
        ("[policy.x]\npoll_budget = 'many'\n", "poll_budget"),
        ("[policy.x]\npoll_interval_s = []\n", "poll_interval_s"),
        ("[policy.x]\npoll_interval_s = [1, -2]\n", "poll_interval_s"),
        ("[policy.x]\nlate_arrival = 'bounce'\n", "late_arrival"),
        ("[policy.x]\nagent_body = 'sometimes'\n", "agent_body"),
        ("[policy.x]\nagent_body = false\n", "agent_body"),
        ("[policy.x]\nprovider_deadline_s = 0\n", "provider_deadline_s"),
        ("[policy.x]\nhint_after_s = 0\n", "hint_after_s"),
        ("[policy.x]\nhint_after_s = 'soon'\n", "hint_after_s"),
        ("[policy.x]\nhint_after_s = 1e300\n", "hint_after_s"),
        ("[policy.x]\nttl_default_s = 100\nttl_max_s = 50\n", "ttl_default_s"),
        (
            "[policy.x]\nbreaker_cooldown_s = 9.0\nbreaker_cooldown_max_s = 3.0\n",
            "breaker_cooldown_s",
        ),
        ("[policy.x]\nretention = 5\n", "retention"),
        ("[policy.x]\nttl_max_s = true\n", "ttl_max_s"),
        # Past what a time can hold: refused here, never a 500 at the first inbox.
        ("[policy.x]\nttl_max_s = 99999999999999999\n", "ttl_max_s"),
        ("[policy.x]\nretention_s = 9223372036854775807\n", "retention_s"),
        ("[policy.x]\npoll_interval_s = [1, 1e12]\n", "poll_interval_s"),
        ("[policy.x]\nbreaker_cooldown_max_s = 1e300\n", "breaker_cooldown_max_s"),
        ("[policy.x]\npoll_budget = 10000001\n", "poll_budget"),
    ],
)
def test_bad_values_name_file_policy_and_key(tmp_path: Path, text: str, named: str) -> None:
    """Each bad value is refused with the file, the policy and the key in the message."""
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    message = caught.value.message
    assert "p.toml" in message and "'x'" in message and named in message


def test_not_toml_is_refused(tmp_path: Path) -> None:
    """A file that is not TOML is refused, naming the file."""
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, "[policy.x\n")
    assert "p.toml" in caught.value.message


def test_unknown_tables_are_refused(tmp_path: Path) -> None:
    """Only [policy.NAME] tables are allowed."""
    with pytest.raises(ConfigError):
        _load(tmp_path, "[policies.x]\npoll_budget = 2\n")
