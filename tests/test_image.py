"""The container image: the Dockerfile built with podman on a Debian-made base and run for real,
as the README's `docker run` line and its GitHub Actions example run it (issue 22 item 2)."""

from __future__ import annotations

import os
import re
import shlex
import smtplib
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.podman import IMAGE, ROOT, Container, Podman, free_port, wait_ready
from tests.support import make_certificate, new_run_id

DOCKERFILE = ROOT / "Dockerfile"
README = ROOT / "README.md"
UID = GID = 10001

pytest_plugins = ("pytester",)


def readme_section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def readme_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", readme_section("Container image"), re.DOTALL)


def instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions (continuations joined), in order."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text(encoding="utf-8"))
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


# -- the Dockerfile as written (no podman needed) -------------------------------------------


def test_the_base_is_an_argument_defaulting_to_python_3_11() -> None:
    """ARG BASE=python:3.11-slim-bookworm, FROM ${BASE}: the suite's Python, and swappable."""
    steps = instructions()
    assert steps[0] == ("ARG", "BASE=python:3.11-slim-bookworm")
    assert steps[1] == ("FROM", "${BASE}")


def test_the_pinned_dependencies_are_installed_before_the_sources_are_copied() -> None:
    """constraints.txt is copied and installed first; a source change reuses that layer."""
    steps = instructions()
    order = [" ".join(step) for step in steps]
    copy_pins = order.index("COPY constraints.txt /tmp/constraints.txt")
    install = next(i for i, s in enumerate(order) if "--requirement /tmp/constraints.txt" in s)
    first_source = min(i for i, s in enumerate(order) if s.startswith("COPY") and i != copy_pins)
    assert copy_pins < install < first_source
    (project,) = (s for s in order if s.startswith("RUN pip install") and "--no-deps" in s)
    assert "--no-build-isolation" in project  # nothing downloaded after the sources


def test_the_health_check_asks_readyz_soon_after_start() -> None:
    """HEALTHCHECK probes /readyz every 2 s with a start period (no start-interval)."""
    (check,) = [args for name, args in instructions() if name == "HEALTHCHECK"]
    assert "/readyz" in check and "--interval=2s" in check and "--start-period=" in check
    assert "--start-interval" not in check


def test_the_user_has_a_fixed_uid_and_gid() -> None:
    """groupadd and useradd take 10001 explicitly; USER names both."""
    steps = instructions()
    (create,) = [args for name, args in steps if name == "RUN" and "useradd" in args]
    assert f"groupadd --system --gid {GID} runsink" in create
    assert f"--uid {UID} --gid {GID}" in create
    assert ("USER", "runsink:runsink") in steps


# -- the image, built and run ----------------------------------------------------------------


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Podman:
    return Podman.here(tmp_path_factory.mktemp("podman"))


@pytest.fixture(scope="module")
def image(podman: Podman) -> str:
    """The image built from the Dockerfile, tagged as the README's `docker build` tags it."""
    args = podman.build_args(podman.base())
    podman.run("build", *args, "--tag", IMAGE, str(ROOT), timeout=900)
    return IMAGE


def send_confirmation(smtp_port: int, to: str) -> None:
    message = EmailMessage()
    message["From"], message["To"] = '"Acme" <noreply@acme.example>', to
    message["Subject"] = "Confirm your email"
    message.set_content("Your code is 482913")
    with smtplib.SMTP("127.0.0.1", smtp_port, timeout=30) as smtp:
        smtp.send_message(message)


def deliver_and_claim(url: str, smtp_port: int, token: str) -> str:
    """The agent's loop against a container: inbox, SMTP, wait, read, claim; the message id."""
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=40) as client:
        run_id = new_run_id("image")
        created = client.post("/v1/inboxes", json={"run_id": run_id, "purpose": "signup-check"})
        assert created.status_code == 201, created.text
        send_confirmation(smtp_port, created.json()["address"])
        answer = client.post(
            f"/v1/inboxes/{created.json()['inbox_id']}/wait",
            json={"timeout_s": 20, "match": {"subject_contains": "confirm"}},
        ).json()
        assert answer["next_action"] == "claim_message", answer
        message_id: str = answer["message"]["message_id"]
        read = client.get(f"/v1/messages/{message_id}").json()
        assert read["codes"][0] == "482913" and read["from_name"] == "Acme"
        claim = client.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id})
        assert claim.json()["next_action"] == "proceed", claim.text
        return message_id


def test_without_a_token_it_exits_2_naming_the_variable(podman: Podman, image: str) -> None:
    """Listening beyond loopback with no token: exit code 2, and the message names
    RUNSINK_API_TOKEN (and the opt-out)."""
    done = podman.call("run", "--rm", image, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "RUNSINK_API_TOKEN" in done.stderr and "--insecure-no-auth" in done.stderr


def test_it_runs_as_uid_and_gid_10001_owning_data(podman: Podman, image: str) -> None:
    """The process is 10001:10001 and owns the /data volume; Python is the suite's 3.11."""
    out = podman.run(
        "run", "--rm", image, "sh", "-c", "id -u; id -g; stat -c %u:%g /data; python -V"
    )
    assert out.split() == [str(UID), str(GID), f"{UID}:{GID}", "Python", out.split()[-1]]
    assert out.split()[-1].startswith("3.11.")
    assert podman.inspect(image, ".Config.Volumes") == {"/data": {}}


def test_the_package_is_installed_with_its_data_and_the_sources_are_gone(
    podman: Podman, image: str
) -> None:
    """runsink is installed in the venv (UI templates and SQL included); /src is removed."""
    script = (
        "import api, importlib.resources as r, os, sink; "
        "print(api.__file__); print(sink.__file__); print(os.path.exists('/src')); "
        "print(sorted(p.name for p in r.files('api.ui').joinpath('templates').iterdir())[:1]); "
        "print(all(any(r.files(f'sink.storage.{b}').joinpath('sql').iterdir()) "
        "for b in ('sqlite', 'postgres')))"
    )
    out = podman.run("run", "--rm", image, "python", "-c", script).splitlines()
    site = "/opt/runsink/lib/python3.11/site-packages/"
    assert out[0].startswith(site + "api/") and out[1].startswith(site + "sink/")
    assert out[2:] == ["False", out[3], "True"] and out[3].endswith(".html']")


def test_the_build_context_is_only_what_the_image_needs() -> None:
    """.dockerignore ignores everything but the package's sources, metadata and pins (no .venv,
    .git, tests or databases in the context)."""
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    kept = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert kept == {"constraints.txt", "pyproject.toml", "README.md", "sink", "api"}
    copied = {
        word.rstrip("/")
        for name, args in instructions()
        if name == "COPY"
        for word in args.split()[:-1]
    }
    assert copied == kept


@pytest.fixture(scope="module")
def readme_container(podman: Podman, image: str) -> Iterator[tuple[Container, str]]:
    """The README's `docker build` + `docker run` block, pasted into bash (docker is podman
    with this machine's build flags; its name, volume and ports swapped for unused ones)."""
    (block,) = (b for b in readme_blocks("sh") if "docker run" in b)
    smtp_port, http_port = free_port(), free_port()
    name = f"runsink-test-{uuid.uuid4().hex[:8]}"
    script = (
        block.replace("127.0.0.1:1025:1025", f"127.0.0.1:{smtp_port}:1025")
        .replace("127.0.0.1:8025:8025", f"127.0.0.1:{http_port}:8025")
        .replace("localhost:8025", f"127.0.0.1:{http_port}")
        .replace("--name runsink ", f"--name {name} ")
        .replace("runsink-data:/data", f"{name}:/data")
    )
    build = " ".join(shlex.quote(a) for a in podman.build_args(podman.base()))
    shim = (
        f'docker() {{ if [ "$1" = build ]; then shift; podman build {build} "$@"; '
        'else podman "$@"; fi; }\n'
    )
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", shim + script + '\necho "token=$RUNSINK_API_TOKEN"'],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=podman.env,
        timeout=900,
        check=False,
    )
    try:
        assert done.returncode == 0, done.stderr[-3000:]
        assert '{"status":"ready","store":"ok"}' in done.stdout
        token = done.stdout.rsplit("token=", 1)[1].strip()
        yield Container(name, smtp_port, http_port), token
    finally:
        podman.call("rm", "--force", "--volumes", "--time", "0", name)
        podman.call("volume", "rm", "--force", name)


def test_the_readme_container_is_ready_and_healthy(
    podman: Podman, readme_container: tuple[Container, str]
) -> None:
    """/readyz answers without a token, and the image's health check (run by hand) passes."""
    container, _ = readme_container
    assert wait_ready(container.url).json() == {"status": "ready", "store": "ok"}
    podman.healthy(container.id)
    assert podman.inspect(container.id, ".State.Health.Status") == "healthy"
    assert podman.inspect(container.id, ".Config.User") == "runsink:runsink"


def test_an_inbox_gets_its_mail_over_the_published_ports(
    readme_container: tuple[Container, str],
) -> None:
    """Inbox, SMTP, wait, read, claim against the README's container, with its token."""
    container, token = readme_container
    deliver_and_claim(container.url, container.smtp_port, token)
    refused = httpx.post(f"{container.url}/v1/inboxes", json={"run_id": "x", "purpose": "y"})
    assert refused.status_code == 401


def test_sigterm_exits_0_and_a_new_container_on_the_volume_keeps_the_mail(
    podman: Podman, image: str
) -> None:
    """podman stop (SIGTERM) ends it with exit code 0; a second container on the same /data
    volume serves the first one's message."""
    token = uuid.uuid4().hex
    with podman.volume() as volume:
        with podman.container(
            "-e", f"RUNSINK_API_TOKEN={token}", "-v", f"{volume}:/data", image
        ) as first:
            wait_ready(first.url)
            message_id = deliver_and_claim(first.url, first.smtp_port, token)
            podman.run("stop", "--time", "20", first.id, timeout=60)
            assert podman.inspect(first.id, ".State.ExitCode") == 0
            logs = podman.call("logs", first.id).stderr
            assert "482913" not in logs  # logs never carry mail content
        with podman.container(
            "-e", f"RUNSINK_API_TOKEN={token}", "-v", f"{volume}:/data", image
        ) as second:
            wait_ready(second.url)
            kept = httpx.get(
                f"{second.url}/v1/messages/{message_id}",
                headers={"Authorization": f"Bearer {token}"},
            )
    assert kept.status_code == 200 and kept.json()["codes"][0] == "482913"


def test_a_tls_key_must_be_readable_by_uid_10001(
    podman: Podman, image: str, tmp_path: Path
) -> None:
    """A 0600 key owned by root stops start-up (exit 2, PermissionError); the same key owned
    by 10001 serves STARTTLS over the published port (the README's note)."""
    folder = tmp_path / "tls"
    cert, key = make_certificate(folder)
    folder.chmod(0o755)
    key.chmod(0o600)
    tls = [
        *("-v", f"{folder}:/tls:ro", "-e", "RUNSINK_API_TOKEN=" + uuid.uuid4().hex),
        *("-e", "RUNSINK_TLS_CERT=/tls/cert.pem", "-e", "RUNSINK_TLS_KEY=/tls/key.pem"),
    ]
    refused = podman.call("run", "--rm", *tls, image)
    assert refused.returncode == 2 and "PermissionError" in refused.stderr, refused.stderr
    os.chown(key, UID, GID)
    with podman.container(*tls, image) as container:
        wait_ready(container.url)
        with smtplib.SMTP("127.0.0.1", container.smtp_port, timeout=30) as smtp:
            smtp.starttls(context=ssl.create_default_context(cafile=str(cert)))
            assert smtp.ehlo()[0] == 250


def _expand(value: object, token: str) -> str:
    """A workflow value with ``${{ secrets.RUNSINK_API_TOKEN }}`` filled in."""
    return re.sub(r"\$\{\{\s*secrets\.RUNSINK_API_TOKEN\s*\}\}", token, str(value))


def test_the_readme_actions_example_serves_the_pytest_plugin(
    podman: Podman, image: str, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's GitHub Actions job, run as the runner would: the service container from its
    env and ports, healthy before the steps, its run steps in bash, then the README's pytest
    example through the plugin configured only by the job's environment variables."""
    (block,) = readme_blocks("yaml")
    (job,) = yaml.safe_load(block)["jobs"].values()
    service: dict[str, Any] = job["services"]["runsink"]
    assert service["image"].rsplit("/", 1)[-1].split(":")[0] == "runsink"
    token = f"actions-{uuid.uuid4().hex}"
    ports = {int(p.split(":")[0]): free_port() for p in service["ports"]}
    assert sorted(ports) == [1025, 8025] and service["ports"] == ["1025:1025", "8025:8025"]
    env_args = [f"--env={k}={_expand(v, token)}" for k, v in service.get("env", {}).items()]
    job_env = {k: _expand(v, token) for k, v in job["env"].items()}
    job_env["RUNSINK_URL"] = job_env["RUNSINK_URL"].replace("8025", str(ports[8025]))
    job_env["RUNSINK_SMTP_PORT"] = job_env["RUNSINK_SMTP_PORT"].replace("1025", str(ports[1025]))
    run = podman.run(
        "run",
        "--detach",
        *(f"--publish=127.0.0.1:{host}:{inside}" for inside, host in ports.items()),
        *env_args,
        image,
    )
    cid = run.strip()
    try:
        podman.healthy(cid)  # a runner waits for the service's health check
        steps = [step["run"] for step in job["steps"] if "run" in step]
        pytest_steps = [s for s in steps if s.lstrip().startswith("pytest")]
        assert len(pytest_steps) == 1
        for step in steps:
            if step in pytest_steps or step.startswith("pip install"):
                continue  # the suite's venv has runsink; pytest is run below
            script = step.replace("localhost:8025", f"localhost:{ports[8025]}")
            done = subprocess.run(
                ["bash", "-eo", "pipefail", "-c", script],
                capture_output=True,
                text=True,
                env={**podman.env, **job_env},
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, done.stderr
        for key, value in job_env.items():
            monkeypatch.setenv(key, value)
        readme = README.read_text(encoding="utf-8")
        (example,) = (
            b
            for b in re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
            if "def test_password_reset" in b
        )
        pytester.makepyfile(test_signup=example)
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "-p", "no:schemathesis", "-p", "no:hypothesispytest"
        )
        result.assert_outcomes(passed=example.count("\ndef test_"))
    finally:
        podman.call("rm", "--force", "--volumes", "--time", "0", cid)
