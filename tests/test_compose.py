"""docker-compose.yml: the PostgreSQL profile is a database and two replicas that share it."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sink.config import settings_from
from sink.storage.postgres import is_postgres_url
from tests.podman import IMAGE, Podman, free_port
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


@pytest.fixture(scope="module")
def podman_socket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Podman, str]]:
    """podman's Docker-compatible API on a socket of our own, for Debian's docker-compose."""
    folder = tmp_path_factory.mktemp("podman-api")
    podman = Podman.here(folder)
    socket = folder / "podman.sock"
    service = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{socket}"],
        env=podman.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            assert service.poll() is None and time.monotonic() < deadline, "no podman API"
            time.sleep(0.05)
        yield podman, f"unix://{socket}"
    finally:
        service.terminate()
        service.wait(timeout=30)


def test_compose_up_delivers_the_example_apps_mail_once_the_sink_is_healthy(
    podman_socket: tuple[Podman, str], tmp_path: Path
) -> None:
    """`docker-compose up` (Debian's, on podman's API): the example app starts only once the
    sink's health check passes, and its mail arrives as caught mail. The file as written, but
    for its host ports (free ones) and the example app's image (python:3.11-slim-bookworm
    cannot be pulled here: a Debian-made Python 3.11 stands in)."""
    need(
        "docker-compose", shutil.which("docker-compose") is not None, "bash .ci/install/compose.sh"
    )
    podman, host = podman_socket
    base = podman.base()
    podman.run("build", *podman.build_args(base), "--tag", IMAGE, str(COMPOSE.parent), timeout=900)
    stand_in = tmp_path / "python"
    stand_in.mkdir()
    (stand_in / "Dockerfile").write_text(f"FROM {base}\nRUN ln -s python3 /usr/bin/python\n")
    podman.run("build", "--tag", "localhost/runsink-test-python:3.11", str(stand_in))

    compose = _compose()
    services = compose["services"]
    smtp_port, http_port = free_port(), free_port()
    services["runsink"]["ports"] = [f"127.0.0.1:{smtp_port}:1025", f"127.0.0.1:{http_port}:8025"]
    services["runsink"]["build"] = str(COMPOSE.parent)
    services["example-app"]["image"] = "localhost/runsink-test-python:3.11"
    project = tmp_path / "docker-compose.yml"
    project.write_text(yaml.safe_dump(compose))
    command = ["docker-compose", "-f", str(project), "-p", f"runsink-test-{uuid.uuid4().hex[:6]}"]
    env = {**podman.env, "DOCKER_HOST": host}

    def compose_run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, *args], capture_output=True, text=True, env=env, timeout=timeout
        )

    up = compose_run("up", "--detach", "--no-build", "runsink")
    assert up.returncode == 0, up.stderr
    try:
        sink = compose_run("ps", "-q", "runsink").stdout.strip()
        # No systemd here to run the health check on its interval: run it as the timer would,
        # while the example app's `up` waits for service_healthy.
        app = threading.Thread(target=lambda: results.append(compose_run("up", "example-app")))
        results: list[subprocess.CompletedProcess[str]] = []
        app.start()
        podman.healthy(sink)
        app.join(timeout=120)
        assert results and results[0].returncode == 0, results and results[0].stderr
        assert "sent to welcome@sink.test" in results[0].stdout
        caught = httpx.get(f"http://127.0.0.1:{http_port}/v1/unrouted", timeout=10).json()
        assert "welcome@sink.test" in str(caught), caught
        # Another container on the project's network reads the API by the service's name.
        probe = (
            "import urllib.request as u; print(u.urlopen('http://runsink:8025/v1/unrouted').status)"
        )
        by_name = compose_run("run", "--rm", "--no-deps", "example-app", "python", "-c", probe)
        assert by_name.stdout.strip().endswith("200"), by_name.stdout + by_name.stderr
    finally:
        compose_run("down", "--volumes", "--timeout", "5")
