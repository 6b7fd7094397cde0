"""Shared fixtures: real runsink servers in subprocesses, on free ports, with real SQLite files;
and the real app in this process (``tests/inproc.py``) where the socket is not the point."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from sink.storage.memory import memory_backend
from tests.inproc import InProcess
from tests.pg_cluster import INSTALL_HINT as PG_HINT
from tests.pg_cluster import Cluster
from tests.pg_cluster import available as pg_available
from tests.support import Server, need, start_replicas, start_server

TEST_POLICIES = """
# Fast schedules for tests: the contract's rules, with intervals short enough for CI.
[policy.ci]
poll_interval_s = [0]
long_poll_max_s = 10

[policy.paced]
poll_interval_s = [1.5, 3]

[policy.tiny]
poll_budget = 2
poll_interval_s = [0]
inboxes_per_purpose = 2

[policy.strict]
late_arrival = "reject"
poll_interval_s = [0]

[policy.fragile]
poll_interval_s = [0]
provider_deadline_s = 0.3
breaker_failure_threshold = 2
breaker_cooldown_s = 0.6
breaker_cooldown_max_s = 1.0

[policy.sturdy]
# Like fragile, with a cooldown long enough to observe on a loaded machine.
poll_interval_s = [0]
provider_deadline_s = 0.3
breaker_failure_threshold = 2
breaker_cooldown_s = 1.0
breaker_cooldown_max_s = 1.5

[policy.brief]
poll_interval_s = [0]
ttl_default_s = 1
retention_s = 1

[policy.kept]
poll_interval_s = [0]
retention_s = 86400

[policy.probing]
poll_interval_s = [0]
provider_deadline_s = 10.0
breaker_failure_threshold = 2
breaker_cooldown_s = 0.6
breaker_cooldown_max_s = 1.0

[policy.small]
poll_interval_s = [0]
max_message_bytes = 2048

[policy.guided]
# Agent guidance (v3): a short long-poll and an early "no mail at all".
poll_interval_s = [0]
long_poll_max_s = 1.5
hint_after_s = 1
inboxes_per_purpose = 2
"""


@pytest.fixture(scope="session")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("policies") / "policies.toml"
    path.write_text(TEST_POLICIES)
    return str(path)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory, policy_file: str) -> Iterator[Server]:
    """One shared server for the suite (tests isolate themselves by run_id)."""
    folder = tmp_path_factory.mktemp("server")
    running = start_server(folder, "--policy-file", policy_file, "--enable-faults")
    yield running
    running.stop()


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    """An HTTP client on the test's server (the shared one, or its module's own ``server``)."""
    with server.http() as client:
        yield client


@pytest.fixture(scope="session")
def app(tmp_path_factory: pytest.TempPathFactory, policy_file: str) -> Iterator[InProcess]:
    """The real app in this process over the memory backend, shared by the suite (tests
    isolate themselves by run_id): requests go through an ASGI bridge, mail through the
    runtime's own SMTP listener."""
    folder = tmp_path_factory.mktemp("app")
    flags = ("--policy-file", policy_file, "--enable-faults")
    running = InProcess(folder, *flags, backend=memory_backend)
    yield running
    running.stop()


# -- PostgreSQL: one real server per session, a fresh database per test ------------------


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """A real PostgreSQL (Debian's initdb/pg_ctl) for the session, stopped in a finally."""
    need("PostgreSQL", pg_available(), PG_HINT)
    cluster = Cluster.create()
    try:
        cluster.start()
        cluster.psql("CREATE DATABASE runsink_template")
        asyncio.run(_migrate(cluster.dsn("runsink_template")))
        yield cluster
    finally:
        cluster.destroy()


async def _migrate(dsn: str) -> None:
    import asyncpg

    from sink.storage.postgres.migrate import migrate

    connection = await asyncpg.connect(dsn)
    try:
        await migrate(connection)
    finally:
        await connection.close()


@pytest.fixture
def pg_dsn(pg_cluster: Cluster) -> str:
    """A fresh, migrated database for one test (CREATE DATABASE ... TEMPLATE: ~50 ms)."""
    return pg_cluster.dsn(pg_cluster.new_database("runsink_template"))


@pytest.fixture(scope="session")
def pg_server(
    tmp_path_factory: pytest.TempPathFactory, policy_file: str, pg_cluster: Cluster
) -> Iterator[Server]:
    """The shared server's twin on PostgreSQL (a database of its own)."""
    folder = tmp_path_factory.mktemp("pg-server")
    dsn = pg_cluster.dsn(pg_cluster.new_database("runsink_template"))
    running = start_server(folder, "--policy-file", policy_file, "--enable-faults", db=dsn)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def sqlite_app(tmp_path_factory: pytest.TempPathFactory, policy_file: str) -> Iterator[InProcess]:
    """The app in this process over a SQLite file, shared by the suite."""
    folder = tmp_path_factory.mktemp("sqlite-app")
    running = InProcess(folder, "--policy-file", policy_file, "--enable-faults")
    yield running
    running.stop()


@pytest.fixture(scope="session")
def pg_app(
    tmp_path_factory: pytest.TempPathFactory, policy_file: str, pg_cluster: Cluster
) -> Iterator[InProcess]:
    """The app in this process over a PostgreSQL database of its own, shared by the suite."""
    folder = tmp_path_factory.mktemp("pg-app")
    dsn = pg_cluster.dsn(pg_cluster.new_database("runsink_template"))
    running = InProcess(folder, "--policy-file", policy_file, "--enable-faults", db=dsn)
    yield running
    running.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def own_db(request: pytest.FixtureRequest) -> str | None:
    """For a test that starts its own server, once per persistent backend: None (a SQLite
    file in the server's folder) or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return None
    cluster: Cluster = request.getfixturevalue("pg_cluster")
    return cluster.dsn(cluster.new_database("runsink_template"))


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, policy_file: str, pg_cluster: Cluster
) -> Iterator[tuple[Server, Server]]:
    """Two replicas on one fresh PostgreSQL database, for a test module (its tests isolate
    themselves by run_id or a tag)."""
    dsn = pg_cluster.dsn(pg_cluster.new_database("runsink_template"))
    a, b = start_replicas(tmp_path_factory.mktemp("pair"), dsn, policy_file, 2)
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()
