"""/readyz tells whether the store can commit: a full disk makes it 503, and it turns back
by itself once space is free. A real full disk: a small tmpfs (needs root to mount)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Server, need, new_run_id, start_server

DEADLINE_S = 20.0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted for the test."""
    mountable = os.geteuid() == 0 and shutil.which("mount") is not None
    need("a tmpfs mount (root and mount(8))", mountable, "run the suite as root")
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True
    )
    need("a tmpfs mount", mounted.returncode == 0, mounted.stderr.decode(errors="replace"))
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(folder: Path) -> Path:
    """Write a file until the filesystem has no space left."""
    filler = folder / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb", buffering=0) as out:
        with contextlib.suppress(OSError):
            while True:
                out.write(chunk)
        small = b"\0" * 512
        try:
            while True:
                out.write(small)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def _ready(server: Server, want: int) -> int:
    end = time.monotonic() + DEADLINE_S
    with server.http() as client:
        while True:
            status = client.get("/readyz").status_code
            if status == want or time.monotonic() > end:
                return status
            time.sleep(0.1)


def test_readyz_follows_whether_the_store_can_commit(tmp_path: Path, small_disk: Path) -> None:
    """Disk full: /readyz is 503 (reads still work, writes do not); space freed: 200 again,
    with no restart."""
    server = start_server(tmp_path / "logs", db=small_disk / "runsink.db")
    try:
        assert _ready(server, 200) == 200
        filler = _fill(small_disk)
        assert _ready(server, 503) == 503
        with server.http() as client:
            assert client.get("/healthz").status_code == 200
            create = client.post("/v1/inboxes", json={"run_id": new_run_id(), "purpose": "p"})
            assert create.status_code == 503
        filler.unlink()
        assert _ready(server, 200) == 200
        with server.http() as client:
            create = client.post("/v1/inboxes", json={"run_id": new_run_id(), "purpose": "p"})
            assert create.status_code == 201
    finally:
        server.stop()
