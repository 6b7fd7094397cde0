"""Start-up settings: flags beat the environment, bad values stop with exit code 2 and a name."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sink.config import add_serve_arguments, settings_from
from sink.errors import ConfigError


def _settings(argv: list[str], env: dict[str, str] | None = None) -> object:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return settings_from(parser.parse_args(argv), env or {})


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RUNSINK_")}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "sink", "serve", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=environment,
    )


def test_flag_beats_environment_beats_default(tmp_path: Path) -> None:
    """--smtp-port wins over RUNSINK_SMTP_PORT, which wins over 1025."""
    db = str(tmp_path / "x.db")
    env_only = _settings(["--db", db], {"RUNSINK_SMTP_PORT": "2600"})
    both = _settings(["--db", db, "--smtp-port", "2700"], {"RUNSINK_SMTP_PORT": "2600"})
    default = _settings(["--db", db])
    assert env_only.smtp_port == 2600  # type: ignore[attr-defined]
    assert both.smtp_port == 2700  # type: ignore[attr-defined]
    assert default.smtp_port == 1025  # type: ignore[attr-defined]
    assert default.http_port == 8025 and default.domain == "sink.test"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (["--smtp-port", "70000"], {}, "--smtp-port"),
        ([], {"RUNSINK_HTTP_PORT": "eighty"}, "RUNSINK_HTTP_PORT"),
        (["--domain", "not a domain"], {}, "--domain"),
        (["--default-policy", "nope"], {}, "--default-policy"),
        (["--log-level", "loud"], {}, "--log-level"),
        (["--tls-cert", "/nonexistent.pem"], {}, "--tls-cert"),
        (["--http-host", "0.0.0.0"], {}, "--api-token"),
        (["--api-token", "short"], {}, "--api-token"),
        (["--db", "/nonexistent-folder/x.db"], {}, "--db"),
        (["--smtp-require-tls"], {}, "--smtp-require-tls"),
        (["--smtps-port", "0"], {}, "--smtps-port"),
        ([], {"RUNSINK_SMTPS_PORT": "465"}, "--smtps-port"),
        (["--http-header-timeout", "0"], {}, "--http-header-timeout"),
        (["--http-header-timeout", "nan"], {}, "--http-header-timeout"),
        ([], {"RUNSINK_HTTP_KEEPALIVE_TIMEOUT": "soon"}, "RUNSINK_HTTP_KEEPALIVE_TIMEOUT"),
        (["--http-max-connections", "0"], {}, "--http-max-connections"),
    ],
)
def test_bad_values_name_the_flag(
    argv: list[str], env: dict[str, str], named: str, tmp_path: Path
) -> None:
    """Each bad setting is a ConfigError whose message names the flag (or its variable)."""
    if "--db" not in argv:
        argv = [*argv, "--db", str(tmp_path / "x.db")]
    with pytest.raises(ConfigError) as caught:
        _settings(argv, env)
    assert named in caught.value.message


def test_bad_policy_file_names_file_policy_and_key(tmp_path: Path) -> None:
    """A bad key in the policy file stops start-up with exit 2, naming file, policy and key."""
    policies = tmp_path / "p.toml"
    policies.write_text("[policy.staging]\npoll_budget = 0\n")
    result = _run("--db", str(tmp_path / "x.db"), "--policy-file", str(policies))
    assert result.returncode == 2
    assert (
        str(policies) in result.stderr
        and "staging" in result.stderr
        and "poll_budget" in result.stderr
    )


def test_unknown_policy_key_is_refused(tmp_path: Path) -> None:
    """An unknown key (a typo) in the policy file is refused, not ignored."""
    policies = tmp_path / "p.toml"
    policies.write_text("[policy.ci]\npoll_budgte = 3\n")
    result = _run("--db", str(tmp_path / "x.db"), "--policy-file", str(policies))
    assert result.returncode == 2 and "poll_budgte" in result.stderr


def test_bad_environment_value_exits_2(tmp_path: Path) -> None:
    """A bad RUNSINK_* value stops start-up with exit 2 and names the variable."""
    result = _run("--db", str(tmp_path / "x.db"), env={"RUNSINK_SMTP_PORT": "-1"})
    assert result.returncode == 2 and "RUNSINK_SMTP_PORT" in result.stderr


def test_non_loopback_without_token_refuses_unless_opted_out(tmp_path: Path) -> None:
    """Binding the API beyond loopback needs a token or --insecure-no-auth."""
    db = str(tmp_path / "x.db")
    with pytest.raises(ConfigError):
        _settings(["--db", db, "--http-host", "0.0.0.0"])
    opted_out = _settings(["--db", db, "--http-host", "0.0.0.0", "--insecure-no-auth"])
    with_token = _settings(["--db", db, "--http-host", "0.0.0.0", "--api-token", "x" * 24])
    assert opted_out.insecure_no_auth  # type: ignore[attr-defined]
    assert with_token.api_token == "x" * 24  # type: ignore[attr-defined]


@pytest.mark.parametrize("flag", ["--smtp-port", "--http-port"])
def test_busy_port_exits_2_naming_the_flag_and_port_0(flag: str, tmp_path: Path) -> None:
    """A port in use stops start-up with exit 2, naming the flag to change and suggesting 0."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = str(busy.getsockname()[1])
        ports = {"--smtp-port": "0", "--http-port": "0", flag: port}
        result = _run("--db", str(tmp_path / "x.db"), *(x for kv in ports.items() for x in kv))
    assert result.returncode == 2
    assert "address already in use" in result.stderr
    assert f"{flag} {port}" in result.stderr and f"{flag} 0 for any free port" in result.stderr


def test_serve_help_describes_every_flag_with_its_default() -> None:
    """`runsink serve --help` explains each flag, its default and its environment variable."""
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    flags = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert flags
    for action in flags:
        text = action.help or ""
        assert "default:" in text and "env RUNSINK_" in text, action.option_strings
    assert "does nothing" in next(
        a.help or "" for a in flags if "--smtp-no-starttls" in a.option_strings
    )
    result = subprocess.run(
        [sys.executable, "-m", "sink", "serve", "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0 and "--smtps-port" in result.stdout


def test_unusable_certificate_exits_2(tmp_path: Path) -> None:
    """A --tls-cert/--tls-key pair that is not PEM stops start-up with exit 2, naming both."""
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("not a certificate")
    key.write_text("not a key")
    result = _run(
        "--db", str(tmp_path / "x.db"), "--smtp-port", "0", "--http-port", "0",
        "--tls-cert", str(cert), "--tls-key", str(key),
    )  # fmt: skip
    assert result.returncode == 2 and "--tls-cert" in result.stderr


def test_domain_is_repeatable_with_wildcards() -> None:
    """--domain may be given several times, *.x wildcards included; the first plain one
    makes addresses; RUNSINK_DOMAIN takes a comma-separated list."""
    settings = _settings(["--domain", "Mail.test", "--domain", "*.example.test"])
    assert settings.domain == "mail.test"  # type: ignore[attr-defined]
    assert settings.accepted_domains == ("mail.test", "*.example.test")  # type: ignore[attr-defined]
    ours = settings.is_our_domain  # type: ignore[attr-defined]
    assert ours("MAIL.test") and ours("a.example.test") and ours("b.a.example.test")
    assert not ours("example.test") and not ours("badexample.test") and not ours("gmail.com")
    from_env = _settings([], {"RUNSINK_DOMAIN": "*.x.test, sink.test"})
    assert from_env.domain == "sink.test"  # type: ignore[attr-defined]
    assert from_env.is_our_domain("a.x.test")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "domains", [["*.example.test"], ["*.*.test"], ["exa mple.test"], ["*example.test"]]
)
def test_bad_domains_stop_start_up_naming_the_flag(domains: list[str]) -> None:
    """Only wildcards (no domain for addresses), or a malformed one: a ConfigError on --domain."""
    argv = [arg for d in domains for arg in ("--domain", d)]
    with pytest.raises(ConfigError, match="--domain"):
        _settings(argv)
