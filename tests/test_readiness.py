"""/readyz tells whether the store can commit: a full disk makes it 503, and it turns back
by itself once space is free. A real full disk: a small tmpfs (needs root to mount)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import pwd
import shutil
import smtplib
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from sink.runtime import Runtime
from tests.pg_cluster import Cluster
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
    """Disk full: /readyz is 503 (reads still work, writes do not) and new mail is 452 4.3.1
    as on PostgreSQL; space freed: 200 again, with no restart."""
    server = start_server(tmp_path / "logs", db=small_disk / "runsink.db")
    try:
        assert _ready(server, 200) == 200
        with server.http() as client:
            inbox = client.post("/v1/inboxes", json={"run_id": new_run_id(), "purpose": "p"})
        filler = _fill(small_disk)
        assert _ready(server, 503) == 503
        full = [_smtp_answer(server, inbox.json()["address"], size) for size in (2000, 300_000)]
        assert full == [452, 452]
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


@pytest.fixture
def small_tablespace(pg_cluster: Cluster) -> Iterator[tuple[str, Path]]:
    """A fresh database whose files all live on a 24 MiB tmpfs (a tablespace of its own,
    owned by the postgres OS user); WAL stays on the cluster's disk, as it should."""
    mountable = os.geteuid() == 0 and shutil.which("mount") is not None
    need("a tmpfs mount (root and mount(8))", mountable, "run the suite as root")
    name = f"small_{uuid.uuid4().hex[:8]}"
    folder = pg_cluster.folder / name
    folder.mkdir()
    owner = pwd.getpwnam(pg_cluster.user) if os.geteuid() == 0 else None
    ids = f",uid={owner.pw_uid},gid={owner.pw_gid}" if owner else ""
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size=24m,mode=0700{ids}", "tmpfs", str(folder)],
        capture_output=True,
    )
    need("a tmpfs mount", mounted.returncode == 0, mounted.stderr.decode(errors="replace"))
    try:
        pg_cluster.psql(f"CREATE TABLESPACE {name} LOCATION '{folder}'")
        pg_cluster.psql(f"CREATE DATABASE {name} TABLESPACE {name}")
        try:
            yield pg_cluster.dsn(name), folder
        finally:
            pg_cluster.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            pg_cluster.psql(f"DROP TABLESPACE IF EXISTS {name}")
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _smtp_answer(server: Server, to: str, size: int) -> int:
    """The reply to one message of about ``size`` bytes (its final dot, or a refusal)."""
    body = (os.urandom(size // 2).hex() + "\r\n").encode()
    message = f"From: app@x.test\r\nTo: {to}\r\nSubject: full?\r\n\r\n".encode() + body
    try:
        with smtplib.SMTP("127.0.0.1", server.smtp_port, timeout=30) as client:
            client.sendmail("app@x.test", [to], message)
    except smtplib.SMTPResponseException as exc:
        return int(exc.smtp_code)
    except smtplib.SMTPRecipientsRefused as exc:
        return int(next(iter(exc.recipients.values()))[0])
    return 250


def test_postgres_readyz_follows_whether_the_tablespace_has_space(
    tmp_path: Path, small_tablespace: tuple[str, Path]
) -> None:
    """The database's tablespace full: /readyz 503, new mail 452 4.3.1 (never a 250, never a
    crash), a create 503 provider trouble; space freed: 200, 250 and 201 again, no restart."""
    dsn, folder = small_tablespace
    server = start_server(tmp_path / "logs", db=dsn)
    try:
        assert _ready(server, 200) == 200
        with server.http() as client:
            inbox = client.post("/v1/inboxes", json={"run_id": new_run_id(), "purpose": "p"})
        address = inbox.json()["address"]
        assert _smtp_answer(server, address, 2000) == 250
        filler = _fill(folder)
        assert _ready(server, 503) == 503
        full = [_smtp_answer(server, address, size) for size in (2000, 300_000)]
        with server.http() as client:
            assert client.get("/healthz").status_code == 200
            create = client.post("/v1/inboxes", json={"run_id": new_run_id(), "purpose": "p"})
        filler.unlink()
        assert _ready(server, 200) == 200
        after = _smtp_answer(server, address, 300_000)
        with server.http() as client:
            again = client.post("/v1/inboxes", json={"run_id": new_run_id(), "purpose": "p"})
    finally:
        server.stop()
    assert full == [452, 452]
    assert create.status_code == 503 and create.headers["Retry-After"] == "1"
    assert create.json()["next_action"] == "wait_then_retry"
    assert after == 250 and again.status_code == 201


def test_a_store_that_hangs_is_unready_within_the_deadline() -> None:
    """A store that neither answers nor fails (a frozen database) makes /readyz 503 within
    its deadline: the probe is not waited for past it (cancelling a call to a hung database
    waits on that database too), and callers meanwhile share the one probe in flight."""

    class HungStore:
        def __init__(self) -> None:
            self.pings = 0
            self.thawed = asyncio.Event()

        async def ping(self) -> None:
            self.pings += 1
            await self.thawed.wait()

    async def scenario() -> tuple[list[bool], int, bool]:
        runtime = SimpleNamespace(store=HungStore(), _ping=None)
        answers = await asyncio.gather(
            *(Runtime.store_answers(runtime, within_s=0.05) for _ in range(3))  # type: ignore[arg-type]
        )
        pings = runtime.store.pings
        runtime.store.thawed.set()
        await asyncio.sleep(0)  # the probe ends
        return list(answers), pings, await Runtime.store_answers(runtime, within_s=1.0)  # type: ignore[arg-type]

    answers, pings, later = asyncio.run(scenario())
    assert answers == [False, False, False] and pings == 1
    assert later is True
