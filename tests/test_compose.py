"""docker-compose.yml: the PostgreSQL profile is a database and two replicas that share it."""

from __future__ import annotations

import shutil
import smtplib
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sink.config import settings_from
from sink.storage.postgres.driver import is_postgres_url
from tests.podman import IMAGE, Podman, free_port, wait_ready
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


STAND_INS = Path(__file__).resolve().parent / "compose_postgres"


@dataclass(frozen=True)
class Images:
    """What the compose file names, built here: runsink from the Dockerfile, and stand-ins for
    the two images no registry serves here (python:3.11-slim-bookworm, postgres:15) made from
    Debian's packages on the Debian-made base."""

    python: str = "localhost/runsink-test-python:3.11"
    postgres: str = "localhost/runsink-test-postgres:15"


@pytest.fixture(scope="module")
def images(podman_socket: tuple[Podman, str], tmp_path_factory: pytest.TempPathFactory) -> Images:
    need(
        "docker-compose", shutil.which("docker-compose") is not None, "bash .ci/install/compose.sh"
    )
    dnsname = Path("/usr/lib/cni/dnsname").exists()
    need("CNI's dnsname plugin (service names in DNS)", dnsname, "bash .ci/install/podman.sh")
    podman, _ = podman_socket
    base = podman.base()
    built = Images()
    podman.run("build", *podman.build_args(base), "--tag", IMAGE, str(COMPOSE.parent), timeout=900)
    python = tmp_path_factory.mktemp("python")
    (python / "Dockerfile").write_text(f"FROM {base}\nRUN ln -s python3 /usr/bin/python\n")
    podman.run("build", "--tag", built.python, str(python))
    args = ["--network", "host", "--build-arg", f"BASE={base}"]  # apt-get from Debian
    podman.run("build", *args, "--tag", built.postgres, str(STAND_INS), timeout=900)
    return built


class Project:
    """docker-compose.yml as written, but for its host ports (free ones) and the stand-in
    images, run by Debian's docker-compose on podman's API."""

    def __init__(self, podman: Podman, host: str, images: Images, folder: Path) -> None:
        self.podman = podman
        self.compose = _compose()
        self.ports: dict[str, tuple[int, int]] = {}
        for name, service in self.compose["services"].items():
            if name.startswith("runsink"):
                smtp, http = free_port(), free_port()
                service["ports"] = [f"127.0.0.1:{smtp}:1025", f"127.0.0.1:{http}:8025"]
                service["build"] = str(COMPOSE.parent)
                self.ports[name] = (smtp, http)
        self.compose["services"]["example-app"]["image"] = images.python
        self.compose["services"]["postgres"]["image"] = images.postgres
        path = folder / "docker-compose.yml"
        path.write_text(yaml.safe_dump(self.compose))
        name = f"runsink-test-{uuid.uuid4().hex[:6]}"
        self.command = ["docker-compose", "-f", str(path), "-p", name]
        self.env = {**podman.env, "DOCKER_HOST": host}

    def __call__(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.command, *args], capture_output=True, text=True, env=self.env, timeout=timeout
        )

    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.ports[service][1]}"

    def up_when_healthy(self, dependency: str, *args: str) -> subprocess.CompletedProcess[str]:
        """``up ARGS``, which waits for ``dependency`` to be healthy: with no systemd here to
        run health checks on their interval, run the dependency's check as the timer would."""
        results: list[subprocess.CompletedProcess[str]] = []
        up = threading.Thread(target=lambda: results.append(self("up", *args)))
        up.start()
        deadline = time.monotonic() + 120
        while not (container := self("ps", "-q", dependency).stdout.strip()):
            assert time.monotonic() < deadline, f"{dependency} was never created"
            time.sleep(0.2)
        self.podman.healthy(container, deadline_s=120)
        up.join(timeout=180)
        assert results, f"`up {' '.join(args)}` did not finish"
        return results[0]


@pytest.fixture
def project(podman_socket: tuple[Podman, str], images: Images, tmp_path: Path) -> Iterator[Project]:
    podman, host = podman_socket
    running = Project(podman, host, images, tmp_path)
    try:
        yield running
    finally:
        running("--profile", "postgres", "down", "--volumes", "--timeout", "5")


def test_compose_up_delivers_the_example_apps_mail_once_the_sink_is_healthy(
    project: Project,
) -> None:
    """`docker-compose up`: the example app starts only once the sink's health check passes,
    its mail arrives as caught mail, and another container reads the API by service name."""
    up = project("up", "--detach", "--no-build", "runsink")
    assert up.returncode == 0, up.stderr
    app = project.up_when_healthy("runsink", "example-app")
    assert app.returncode == 0, app.stderr
    assert "sent to welcome@sink.test" in app.stdout
    caught = httpx.get(f"{project.url('runsink')}/v1/unrouted", timeout=10).json()
    assert "welcome@sink.test" in str(caught), caught
    probe = "import urllib.request as u; print(u.urlopen('http://runsink:8025/v1/unrouted').status)"
    by_name = project("run", "--rm", "--no-deps", "example-app", "python", "-c", probe)
    assert by_name.stdout.strip().endswith("200"), by_name.stdout + by_name.stderr


def test_compose_postgres_profile_serves_an_inbox_from_either_replica(project: Project) -> None:
    """`--profile postgres up postgres runsink-a runsink-b`: the replicas start once PostgreSQL
    is healthy; an inbox made on runsink-a gets mail sent to runsink-b's SMTP and is claimed
    through runsink-b."""
    up = project.up_when_healthy(
        "postgres", "--detach", "--no-build", "postgres", "runsink-a", "runsink-b"
    )
    assert up.returncode == 0, up.stderr
    a, b = project.url("runsink-a"), project.url("runsink-b")
    try:
        wait_ready(a)
        wait_ready(b)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{project('logs').stdout[-4000:]}") from None
    run_id = f"compose-{uuid.uuid4().hex[:8]}"
    created = httpx.post(f"{a}/v1/inboxes", json={"run_id": run_id, "purpose": "replicas"})
    assert created.status_code == 201, created.text
    inbox = created.json()
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "app@app.test", inbox["address"], "Hi"
    message.set_content("Your code is 551177")
    with smtplib.SMTP("127.0.0.1", project.ports["runsink-b"][0], timeout=30) as smtp:
        smtp.send_message(message)
    answer = httpx.post(
        f"{a}/v1/inboxes/{inbox['inbox_id']}/wait", json={"timeout_s": 20}, timeout=40
    ).json()
    assert answer["next_action"] == "claim_message", answer
    message_id = answer["message"]["message_id"]
    claim = httpx.post(f"{b}/v1/messages/{message_id}/claim", json={"run_id": run_id})
    assert claim.json()["next_action"] == "proceed", claim.text
    listening = project("logs", "runsink-a").stdout
    assert "postgresql://runsink@postgres:5432/runsink" in listening  # no password, no runsink.db
