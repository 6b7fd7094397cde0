"""The SQLite schema: the numbered scripts in ``sql/`` (``PRAGMA user_version`` says which
ran), applied when the writer opens the file, with what a new schema needs done to old mail
(the search index refolded, pending mail indexed)."""

from __future__ import annotations

import sqlite3
from importlib import resources

from sink.storage.sqlite.fts import index_pending, refold

_SERVER_KEYS_TABLE = """
CREATE TABLE IF NOT EXISTS server_keys (
    name TEXT PRIMARY KEY,
    key  BLOB NOT NULL
)"""


def migrations() -> list[tuple[int, str]]:
    folder = resources.files("sink.storage.sqlite") / "sql"
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            found.append((int(entry.name.split("_", 1)[0]), entry.read_text(encoding="utf-8")))
    return sorted(found)


def prepare(db: sqlite3.Connection) -> None:
    """On the writer's connection, once: file format, WAL, then the pending migrations."""
    db.execute("PRAGMA auto_vacuum = INCREMENTAL")  # only takes effect on a new file
    db.execute("PRAGMA journal_mode = WAL")
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    for number, script in migrations():
        if number > version:
            db.executescript(
                f"BEGIN IMMEDIATE;\n{script}\nPRAGMA user_version = {number};\nCOMMIT;"
            )
    # Outside the numbered migrations on purpose: the table is independent of the mail
    # schema, and being idempotent it cannot collide with a migration added beside it.
    db.execute(_SERVER_KEYS_TABLE)
    # The search index's text of the mail indexed before schema v4 goes back in, by batches
    # (a stop in between resumes where it was).
    while True:
        db.execute("BEGIN IMMEDIATE")
        try:
            done = refold(db, 1000)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if done:
            break
    # Mail not yet in the search index (stored before v2, or just before a stop) goes in now.
    while True:
        db.execute("BEGIN IMMEDIATE")
        try:
            _, more = index_pending(db, 1000)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if not more:
            break
