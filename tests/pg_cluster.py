"""A real PostgreSQL server for the tests and benchmarks: Debian's initdb and pg_ctl.

``Cluster.start()`` makes a data folder in a temporary directory, runs ``initdb`` (as the
``postgres`` OS user when we are root: initdb refuses root), and starts the server on a
free loopback port with ``fsync=on`` and its unix socket in that folder. ``stop`` and
``start`` again keep the data (for the "database restarted mid-run" tests); ``destroy``
removes everything. Nothing here talks to a PostgreSQL that it did not start.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

_BIN_CANDIDATES = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
INSTALL_HINT = "apt-get install -y --no-install-recommends postgresql (.ci/install/postgres.sh)"


def bin_dir() -> Path | None:
    """The newest Debian PostgreSQL's bin folder, or None when no server is installed."""
    for folder in _BIN_CANDIDATES:
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def available() -> bool:
    return bin_dir() is not None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_postgres() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


@dataclass
class Cluster:
    folder: Path
    port: int
    user: str
    bin: Path
    _running: bool = field(default=False)

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    @classmethod
    def create(cls, port: int | None = None) -> Cluster:
        found = bin_dir()
        if found is None:
            raise RuntimeError(f"PostgreSQL is not installed ({INSTALL_HINT})")
        folder = Path(tempfile.mkdtemp(prefix="runsink-pg-"))
        folder.chmod(0o755)
        user = "postgres" if os.geteuid() == 0 else os.environ.get("USER", "postgres")
        if os.geteuid() == 0:
            shutil.chown(folder, "postgres", "postgres")
        cluster = cls(folder, port or _free_port(), user, found)
        cluster._run(
            [
                str(found / "initdb"),
                "-D",
                str(cluster.data),
                "-U",
                user,
                "--auth=trust",
                "--no-sync",  # the cluster is new and throwaway; the server itself runs fsync=on
                "-E",
                "UTF8",
                "--locale=C",
            ]
        )
        return cluster

    def _run(self, command: list[str]) -> None:
        result = subprocess.run(
            [*_as_postgres(), *command],
            capture_output=True,
            text=True,
            check=False,
            cwd=self.folder,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{command[0]} failed: {result.stdout}\n{result.stderr}")

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.folder}"
            " -c fsync=on -c synchronous_commit=on -c max_connections=200"
            " -c shared_buffers=64MB"
        )
        self._run(
            [
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
        self._running = True

    def stop(self, mode: str = "fast") -> None:
        if not self._running:
            return
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"])
        self._running = False

    def destroy(self) -> None:
        try:
            if self._running:
                self.stop("immediate")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def psql(self, sql: str, database: str = "postgres") -> str:
        result = subprocess.run(
            [
                str(self.bin / "psql") if (self.bin / "psql").exists() else "psql",
                "-X",
                "-q",
                "-A",
                "-t",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                self.user,
                "-d",
                database,
                "-c",
                sql,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return result.stdout.strip()

    def new_database(self, template: str | None = None) -> str:
        """A fresh database (about 50 ms), optionally copied from a template."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        clause = f" TEMPLATE {template}" if template else ""
        self.psql(f"CREATE DATABASE {name}{clause}")
        return name

    def wait_accepting(self, deadline_s: float = 30.0) -> None:
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                sock.settimeout(0.5)
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("PostgreSQL did not accept connections in time")
