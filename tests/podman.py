"""podman for the image tests: the Debian-made base, the build, containers on published ports.

This machine's quirks are handled here, not in the Dockerfile: runc's ulimits must fit under
the host's hard limits (a containers.conf of our own, via CONTAINERS_CONF), ``--format docker``
keeps HEALTHCHECK (OCI images have no such field), pip inside the build gets the host's CA
bundle (a TLS-inspecting proxy may sit between it and the package index), and with no systemd
the health check runs only when asked (``podman healthcheck run``).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support import need

ROOT = Path(__file__).resolve().parent.parent
BASE_RECIPE = ROOT / ".ci" / "image" / "base.sh"
INSTALL_HINT = "bash .ci/install/podman.sh"
IMAGE = "runsink"  # what the README's `docker build -t runsink .` names it
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
READY_DEADLINE_S = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class Podman:
    env: dict[str, str]

    @classmethod
    def here(cls, folder: Path) -> Podman:
        """podman with a containers.conf whose ulimits this machine's runc can set."""
        need("podman", shutil.which("podman") is not None, INSTALL_HINT)
        nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 1 << 20)
        conf = folder / "containers.conf"
        conf.write_text(
            f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc=4096:4096"]\n',
            encoding="utf-8",
        )
        return cls({**os.environ, "CONTAINERS_CONF": str(conf)})

    def run(self, *args: str, timeout: float = 60, check: bool = True) -> str:
        """``podman ARGS``; its stdout, or AssertionError with its stderr."""
        done = self.call(*args, timeout=timeout)
        if check:
            assert done.returncode == 0, f"podman {' '.join(args)}: {done.stderr[-3000:]}"
        return done.stdout

    def call(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["podman", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )

    def base(self) -> str:
        """The Debian-made base image's tag (made and cached by .ci/image/base.sh)."""
        need("debootstrap", shutil.which("debootstrap") is not None, INSTALL_HINT)
        done = subprocess.run(
            ["bash", str(BASE_RECIPE)],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.strip()

    def build_args(self, base: str) -> list[str]:
        """What `docker build` needs here besides the README's own arguments."""
        args = ["--format", "docker", "--network", "host", "--build-arg", f"BASE={base}"]
        if CA_BUNDLE.exists():
            args += ["--volume", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"]
        return args

    def inspect(self, what: str, template: str) -> Any:
        return json.loads(self.run("inspect", "--format", f"{{{{json {template}}}}}", what))

    def healthy(self, container: str, deadline_s: float = READY_DEADLINE_S) -> None:
        """Run the image's health check by hand (no systemd timers here) until it passes."""
        deadline = time.monotonic() + deadline_s
        while True:
            done = self.call("healthcheck", "run", container)
            if done.returncode == 0:
                return
            if time.monotonic() > deadline:
                logs = self.call("logs", container)
                raise AssertionError(f"never healthy: {done.stdout}{done.stderr}{logs.stderr}")
            time.sleep(0.2)

    @contextmanager
    def volume(self) -> Iterator[str]:
        name = f"runsink-test-{uuid.uuid4().hex[:8]}"
        self.run("volume", "create", name)
        try:
            yield name
        finally:
            self.call("volume", "rm", "--force", name)

    @contextmanager
    def container(self, *run_args: str) -> Iterator[Container]:
        """``podman run -d`` on free loopback ports; removed afterwards, whatever happened."""
        smtp_port, http_port = free_port(), free_port()
        cid = self.run(
            "run",
            "--detach",
            "--publish",
            f"127.0.0.1:{smtp_port}:1025",
            "--publish",
            f"127.0.0.1:{http_port}:8025",
            *run_args,
        ).strip()
        try:
            yield Container(cid, smtp_port, http_port)
        finally:
            self.call("rm", "--force", "--volumes", "--time", "0", cid)


@dataclass(frozen=True)
class Container:
    id: str
    smtp_port: int
    http_port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


def wait_ready(url: str, deadline_s: float = READY_DEADLINE_S) -> httpx.Response:
    """GET /readyz until it is 200 (the container's start-up), or AssertionError."""
    deadline = time.monotonic() + deadline_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            response = httpx.get(f"{url}/readyz", timeout=2)
            if response.status_code == 200:
                return response
            last = response.text
        except httpx.TransportError as exc:
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"{url}/readyz never answered 200: {last!r}")
