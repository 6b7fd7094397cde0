"""The PostgreSQL schema: the numbered scripts in ``sql/``, applied at open under an
advisory lock, so that replicas starting at once queue rather than race."""

from __future__ import annotations

import zlib
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sink.storage.postgres.driver import Connection

_MIGRATION_LOCK = zlib.crc32(b"runsink:migrations")


def migrations() -> list[tuple[int, str]]:
    folder = resources.files("sink.storage.postgres") / "sql"
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            found.append((int(entry.name.split("_", 1)[0]), entry.read_text(encoding="utf-8")))
    return sorted(found)


async def migrate(connection: Connection) -> int:
    """Apply the pending migrations under an advisory lock: replicas starting at once queue."""
    await connection.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK)
    try:
        await connection.execute(
            "CREATE TABLE IF NOT EXISTS runsink_migrations ("
            " version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        applied = {r[0] for r in await connection.fetch("SELECT version FROM runsink_migrations")}
        for number, script in migrations():
            if number in applied:
                continue
            async with connection.transaction():
                await connection.execute(script)
                await connection.execute(
                    "INSERT INTO runsink_migrations (version) VALUES ($1)", number
                )
        version = await connection.fetchval("SELECT MAX(version) FROM runsink_migrations")
        return int(version or 0)
    finally:
        await connection.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK)
