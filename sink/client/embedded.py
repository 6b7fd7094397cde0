"""A runsink server in a child process, on free ports, for a test session.

``EmbeddedServer.start(folder)`` runs ``python -m sink serve --smtp-port 0 --http-port 0
--db folder/runsink.db``, reads the ports from its ``listening`` log line, waits until
``/readyz`` answers 200, and ``stop()`` ends it with SIGTERM (the server's clean shutdown).
The pytest plugin uses it; so can any other test runner.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx

STARTUP_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
_POLL_S = 0.02


class EmbeddedServerError(RuntimeError):
    """The embedded server did not start; the message ends with its last log lines."""


@dataclass
class EmbeddedServer:
    process: subprocess.Popen[bytes]
    folder: Path
    log_path: Path
    smtp_host: str
    smtp_port: int
    http_host: str
    http_port: int

    @property
    def url(self) -> str:
        host = f"[{self.http_host}]" if ":" in self.http_host else self.http_host
        return f"http://{host}:{self.http_port}"

    @classmethod
    def start(
        cls, folder: Path, *args: str, startup_timeout_s: float = STARTUP_TIMEOUT_S
    ) -> EmbeddedServer:
        """Start the server with a fresh database in ``folder``; extra ``args`` go to serve."""
        folder.mkdir(parents=True, exist_ok=True)
        log_path = folder / "runsink.log"
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
            str(folder / "runsink.db"),
            *args,
        ]
        # The caller's RUNSINK_* settings describe the server it would use instead of this one.
        environment = {k: v for k, v in os.environ.items() if not k.startswith("RUNSINK_")}
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log_file,
                env=environment,
            )
        deadline = time.monotonic() + startup_timeout_s
        try:
            server = cls._listening(process, folder, log_path, deadline)
            server._wait_ready(deadline)
        except BaseException:
            _end(process)
            raise
        return server

    @classmethod
    def _listening(
        cls, process: subprocess.Popen[bytes], folder: Path, log_path: Path, deadline: float
    ) -> EmbeddedServer:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise EmbeddedServerError(
                    f"runsink exited with code {process.returncode} at start-up:\n{_tail(log_path)}"
                )
            for line in _json_lines(log_path):
                if line.get("event") == "listening":
                    smtp_host, http_host = (
                        _reachable(line.get("smtp_host")),
                        _reachable(line.get("http_host")),
                    )
                    smtp_port, http_port = int(str(line["smtp_port"])), int(str(line["http_port"]))
                    return cls(
                        process, folder, log_path, smtp_host, smtp_port, http_host, http_port
                    )
            time.sleep(_POLL_S)
        raise EmbeddedServerError(f"runsink did not start listening in time:\n{_tail(log_path)}")

    def _wait_ready(self, deadline: float) -> None:
        with httpx.Client(base_url=self.url, timeout=5) as http:
            while time.monotonic() < deadline:
                try:
                    if http.get("/readyz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if self.process.poll() is not None:
                    break
                time.sleep(_POLL_S)
        raise EmbeddedServerError(f"runsink never became ready:\n{_tail(self.log_path)}")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, then wait; killed if it does not stop in time. Returns the exit code."""
        return _end(self.process, timeout_s)

    def __enter__(self) -> EmbeddedServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _end(process: subprocess.Popen[bytes], timeout_s: float = STOP_TIMEOUT_S) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait(5)
    return process.returncode


def _reachable(host: object) -> str:
    """Where a client on this machine connects to a server bound to ``host``."""
    if not isinstance(host, str) or host in ("", "0.0.0.0", "::"):
        return "127.0.0.1"
    return host


def _json_lines(path: Path) -> list[dict[str, object]]:
    lines = []
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(parsed, dict):
            lines.append(parsed)
    return lines


def _tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
