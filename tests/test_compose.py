"""docker-compose.yml: the PostgreSQL profile is a database and two replicas that share it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from sink.config import settings_from
from sink.storage.postgres import is_postgres_url
from tests.support import need

COMPOSE = Path(__file__).resolve().parent.parent / "docker-compose.yml"


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def test_the_postgres_profile_runs_two_replicas_on_one_database() -> None:
    """Profile postgres: one PostgreSQL, two runsink services with the same RUNSINK_DB URL."""
    services = _compose()["services"]
    profiled = {name for name, s in services.items() if "postgres" in s.get("profiles", [])}
    assert profiled == {"postgres", "runsink-a", "runsink-b"}
    urls = {services[name]["environment"]["RUNSINK_DB"] for name in ("runsink-a", "runsink-b")}
    assert len(urls) == 1 and is_postgres_url(urls.pop())
    ports = services["runsink-a"]["ports"] + services["runsink-b"]["ports"]
    assert len(set(ports)) == 4 and all(p.startswith("127.0.0.1:") for p in ports)
    assert "profiles" not in services["runsink"]  # plain `docker compose up` is unchanged


def test_the_replicas_database_url_is_a_valid_setting() -> None:
    """The URL the replicas get passes runsink's own --db check."""
    import argparse

    url = _compose()["services"]["runsink-a"]["environment"]["RUNSINK_DB"]
    settings = settings_from(argparse.Namespace(), {"RUNSINK_DB": url})
    assert settings.db_url == url


def _compose_command() -> list[str] | None:
    """``docker compose`` (Docker's plugin), else Debian's ``docker-compose``, else None."""
    for command in (["docker", "compose"], ["docker-compose"]):
        try:
            probe = subprocess.run([*command, "version"], capture_output=True, check=False)
        except FileNotFoundError:
            continue
        if probe.returncode == 0:
            return command
    return None


def test_docker_compose_validates_the_file() -> None:
    """`docker compose --profile postgres config` accepts it (no Docker engine needed)."""
    command = _compose_command()
    need("docker compose", command is not None, "bash .ci/install/compose.sh")
    assert command is not None
    result = subprocess.run(
        [*command, "-f", str(COMPOSE), "--profile", "postgres", "config", "-q"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_the_three_runsink_services_share_one_image() -> None:
    """runsink, runsink-a and runsink-b build the Dockerfile once, as the image `runsink`."""
    services = _compose()["services"]
    sinks = {name: s for name, s in services.items() if name.startswith("runsink")}
    assert set(sinks) == {"runsink", "runsink-a", "runsink-b"}
    assert {(s["image"], s["build"], s["pull_policy"]) for s in sinks.values()} == {
        ("runsink", ".", "build")
    }


def test_the_database_and_the_example_app_run_the_versions_the_suite_tests() -> None:
    """PostgreSQL 15 (the suite's, and the README's "tested on 15"); Python 3.11."""
    services = _compose()["services"]
    assert services["postgres"]["image"] == "postgres:15"
    assert services["example-app"]["image"] == "python:3.11-slim-bookworm"
