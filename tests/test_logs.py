from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from sink import logs
from tests.pg_cluster import Cluster
from tests.support import start_server


@pytest.fixture
def output() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    before = logs._OUTPUT.stream, logs._OUTPUT.level
    logs._OUTPUT.stream, logs._OUTPUT.level = stream, logging.INFO
    try:
        yield stream
    finally:
        logs._OUTPUT.stream, logs._OUTPUT.level = before


def test_a_line_is_what_json_dumps_makes(output: io.StringIO) -> None:
    """A line is json.dumps(fields, default=str): same text, None fields left out, in order."""
    logs.log("message_accepted", run_id="r-ü", inbox_id=None, size=4096, path=Path("/x"))
    line = output.getvalue()
    assert line.endswith("\n") and line.count("\n") == 1
    fields = json.loads(line)
    expected = {
        "time": fields["time"],
        "level": "info",
        "event": "message_accepted",
        "run_id": "r-ü",
        "size": 4096,
        "path": Path("/x"),
    }
    assert line == json.dumps(expected, default=str) + "\n"


def test_lines_below_the_level_are_not_written(output: io.StringIO) -> None:
    """Below the level set at start-up nothing is written; announce is always written."""
    logs._OUTPUT.level = logging.WARNING
    logs.log("message_accepted", size=1)
    assert output.getvalue() == ""
    logs.announce("listening", port=25)
    assert json.loads(output.getvalue())["event"] == "listening"


def test_the_listening_line_names_the_postgres_store_without_its_password(
    tmp_path: Path, pg_cluster: Cluster
) -> None:
    """Under PostgreSQL the listening line names the database URL, its password left out."""
    database = pg_cluster.new_database("runsink_template")
    url = f"postgresql://{pg_cluster.user}:pw-s3cret@127.0.0.1:{pg_cluster.port}/{database}"
    server = start_server(tmp_path, db=f"{url}?password=pw-s3cret&application_name=sink")
    try:
        text = server.log_path.read_text(encoding="utf-8")
        (listening,) = (json.loads(x) for x in text.splitlines() if '"listening"' in x)
    finally:
        server.stop()
    assert listening["db"] == (
        f"postgresql://{pg_cluster.user}@127.0.0.1:{pg_cluster.port}/{database}"
        "?application_name=sink"
    )
    assert "s3cret" not in server.log_path.read_text(encoding="utf-8")


def test_the_listening_line_names_the_sqlite_file(tmp_path: Path) -> None:
    """Under SQLite the listening line names the database file."""
    server = start_server(tmp_path)
    try:
        text = server.log_path.read_text(encoding="utf-8")
        (listening,) = (json.loads(x) for x in text.splitlines() if '"listening"' in x)
    finally:
        server.stop()
    assert listening["db"] == str(tmp_path / "runsink.db")


def test_a_store_that_cannot_be_opened_is_named_without_its_password(
    tmp_path: Path, pg_cluster: Cluster
) -> None:
    """Start-up that cannot open the PostgreSQL store (no such database) exits 2 naming the URL,
    its password left out (it named the unused SQLite default, runsink.db)."""
    import subprocess
    import sys

    url = f"postgresql://{pg_cluster.user}:pw-s3cret@127.0.0.1:{pg_cluster.port}/no_such_db"
    done = subprocess.run(
        [sys.executable, "-m", "sink", "serve", "--smtp-port", "0", "--http-port", "0"],
        env={"PATH": "/usr/bin:/bin", "RUNSINK_DB": url},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert url.replace(":pw-s3cret", "") in done.stderr
    assert "s3cret" not in done.stderr and "runsink.db" not in done.stderr
