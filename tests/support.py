"""Test support: start a real server process, send real SMTP, read its JSON logs."""

from __future__ import annotations

import json
import os
import signal
import smtplib
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx

from sink import clock
from sink.webhook_signature import new_secret
from sink.webhooks.model import Webhook, new_webhook_id

STARTUP_DEADLINE_S = 30.0


def need(component: str, available: bool, install: str) -> None:
    """Skip a test whose real component (a browser, a database, a mailer) is missing here.

    On CI (``CI`` set, as ``.ci/run`` runs) a missing component is a failure, never a skip:
    ``.ci/run`` installs every one of them.
    """
    if available:
        return
    import pytest

    message = f"{component} is not installed here ({install})"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; .ci/run should have installed it", pytrace=False)
    pytest.skip(message)


def free_port() -> int:
    """A loopback port free right now (for a command that needs its port up front)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def new_run_id(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def new_webhook(**fields: Any) -> Webhook:
    """A webhook value (not stored): every event of every run, to a port nothing listens on,
    created now; ``fields`` replace any of that."""
    values: dict[str, Any] = {
        "webhook_id": new_webhook_id(),
        "url": "http://127.0.0.1:9/hook",
        "events": ("message", "inbox", "run_event"),
        "run_id": None,
        "run_glob": None,
        "description": None,
        "secret": new_secret(),
        "created_at": clock.now(),
    }
    values.update(fields)
    return Webhook(**values)


class Mailer:
    """Sends real SMTP to a server's listener (``smtp_port`` on loopback)."""

    smtp_port: int

    def smtp(self) -> smtplib.SMTP:
        return smtplib.SMTP("127.0.0.1", self.smtp_port, timeout=30)

    def send(
        self,
        to: str | list[str],
        subject: str = "Hello",
        body: str = "Hello from the app.",
        sender: str = "app@example.test",
        html: str | None = None,
    ) -> None:
        message = EmailMessage()
        message["From"] = sender
        message["To"] = to if isinstance(to, str) else ", ".join(to)
        message["Subject"] = subject
        message.set_content(body)
        if html is not None:
            message.add_alternative(html, subtype="html")
        with self.smtp() as client:
            client.send_message(message)


@dataclass
class Server(Mailer):
    process: subprocess.Popen[bytes]
    folder: Path
    db: Path | str  # a SQLite file, or a postgresql:// URL
    log_path: Path
    smtp_port: int
    http_port: int
    args: list[str] = field(default_factory=list)
    smtps_port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def http(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30, **kwargs)

    def log_lines(self) -> list[dict[str, Any]]:
        lines = []
        for raw in self.log_path.read_text(encoding="utf-8", errors="replace").splitlines():
            if raw.strip():
                lines.append(json.loads(raw))
        return lines

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
                raise
        return self.process.returncode

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)


def start_server(
    folder: Path,
    *args: str,
    db: Path | str | None = None,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> Server:
    """Start ``python -m sink serve`` on free ports; ``preexec_fn`` runs in the child before
    it starts (e.g. to lower its descriptor limit)."""
    folder.mkdir(parents=True, exist_ok=True)
    db = db or folder / "runsink.db"
    log_path = folder / f"server-{uuid.uuid4().hex[:6]}.log"
    command = [
        sys.executable,
        "-m",
        "sink",
        "serve",
        "--smtp-port",
        "0",
        "--http-port",
        "0",
        "--db",
        str(db),
        "--log-level",
        "debug",
        *args,
    ]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RUNSINK_")}
    environment.update(env or {})
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=log_file,
            env=environment,
            preexec_fn=preexec_fn,
        )
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"runsink exited with {process.returncode}: {log_path.read_text()[-2000:]}"
            )
        for line in _lines(log_path):
            if line.get("event") == "listening":
                server = Server(
                    process,
                    folder,
                    db,
                    log_path,
                    line["smtp_port"],
                    line["http_port"],
                    list(args),
                    line.get("smtps_port"),
                )
                _wait_ready(server, deadline)
                return server
        time.sleep(0.02)
    process.kill()
    raise RuntimeError(
        f"runsink did not start within {STARTUP_DEADLINE_S}s: {log_path.read_text()[-2000:]}"
    )


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            yield json.loads(raw)
        except json.JSONDecodeError:
            continue


def _wait_ready(server: Server, deadline: float) -> None:
    with server.http() as client:
        while time.monotonic() < deadline:
            try:
                if client.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.02)
    raise RuntimeError("runsink never became ready")


def create_inbox(
    client: httpx.Client, run_id: str | None = None, purpose: str = "signup-check", **body: Any
) -> dict[str, Any]:
    payload = {"run_id": run_id or new_run_id(), "purpose": purpose, **body}
    response = client.post("/v1/inboxes", json=payload)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def wait(client: httpx.Client, inbox_id: str, **body: Any) -> httpx.Response:
    """A wait that looks once unless the test gives timeout_s (omitted, it would long-poll)."""
    body.setdefault("timeout_s", 0)
    return client.post(f"/v1/inboxes/{inbox_id}/wait", json=body)


def psql(dsn: str, sql: str) -> list[list[str]]:
    """Rows of a query on a test's own PostgreSQL (psql in a subprocess, unaligned output)."""
    from tests.pg_cluster import bin_dir

    folder = bin_dir()
    command = str(folder / "psql") if folder and (folder / "psql").exists() else "psql"
    result = subprocess.run(
        [command, "-X", "-q", "-A", "-t", "-F", "\t", "-d", dsn, "-c", sql],
        capture_output=True,
        text=True,
        check=True,
    )
    return [line.split("\t") for line in result.stdout.splitlines() if line]


def on_each_backend(request: Any, server: Server) -> Server:
    """For a module's ``server`` override: the shared SQLite server, or its PostgreSQL twin."""
    if request.param == "postgres":
        pg: Server = request.getfixturevalue("pg_server")
        return pg
    return server


def app_on_each_backend(request: Any) -> Any:
    """For a module's ``app`` override: the app in this process over SQLite or PostgreSQL."""
    return request.getfixturevalue("pg_app" if request.param == "postgres" else "sqlite_app")


def make_certificate(folder: Path, name: str = "sink.test") -> tuple[Path, Path]:
    """A self-signed certificate for ``name``, localhost and 127.0.0.1 (a client that
    trusts it as its CA verifies it), and its key: PEM files in ``folder``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [
        x509.DNSName(name),
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def start_replicas(folder: Path, dsn: str, policy_file: str, count: int) -> list[Server]:
    """``count`` runsink processes on one database, each in its own folder; all or none."""
    replicas: list[Server] = []
    try:
        for n in range(count):
            replicas.append(
                start_server(
                    folder / f"r{n}", "--policy-file", policy_file, "--enable-faults", db=dsn
                )
            )
    except BaseException:
        for replica in replicas:
            replica.stop()
        raise
    return replicas
