"""The v2 storage ports (CaughtMail, SearchIndex) on every adapter: upgrade, deletes, shared
bodies. Each shared test takes ``stores`` and runs once per adapter (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import TypeVar

import pytest

from sink import ids
from sink.mailbox import MailStore
from sink.message import summarize
from sink.search import parse_query
from sink.storage.base import Delivered, Incoming, Storage
from sink.storage.memory import MemoryStore
from sink.storage.postgres.mail import PostgresMail
from sink.storage.postgres.store import PostgresStore
from sink.storage.sqlite.fts import refold
from sink.storage.sqlite.migrate import migrations
from sink.storage.sqlite.store import SQLiteStore
from tests.pg_cluster import Cluster
from tests.support import psql
from tests.test_storage import created_event, new_inbox

T = TypeVar("T")
# An inbox row as every older schema (SQLite v1 to v3, PostgreSQL v1 and v2) stores it.
OLD_INBOX = (
    "INSERT INTO inboxes (inbox_id, run_id, purpose, local_part, address, policy, "
    "created_at, expires_at, poll_budget, state, match_json, trace_id, "
    "evidence_release_at) VALUES ('ib_aaaaaaaaaaaaaaaaaaaa', 'r1', 'p', 'l', "
    "'l@sink.test', 'ci', 0, 9e9, 5, 'created', '{}', 't', 9e9)"
)

LATEST_SQLITE = migrations()[-1][0]  # the schema version a migrated file has


RAW = b"From: Acme <a@acme.example>\r\nTo: x@gmail.com\r\nSubject: Hello there\r\n\r\nbody text\r\n"


def run(path: Path, work: Callable[[SQLiteStore], Awaitable[T]]) -> T:
    async def main() -> T:
        store = SQLiteStore(path)
        await store.open()
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(main())


class Stores:
    """One adapter's store and its mail ports (the same object in memory), fresh: in
    memory, a SQLite file in the test's folder, or a PostgreSQL database."""

    def __init__(self, name: str, place: str) -> None:
        self.name = name
        self._place = place

    def run(self, work: Callable[[Storage, MailStore], Awaitable[T]]) -> T:
        async def main() -> T:
            if self.name == "memory":
                memory = MemoryStore()
                return await work(memory, memory)
            if self.name == "sqlite":
                store = SQLiteStore(Path(self._place))
                await store.open()
                try:
                    return await work(store, store.mail)
                finally:
                    await store.close()
            pg = PostgresStore(self._place)
            await pg.open()
            try:
                return await work(pg, pg.mail)
            finally:
                await pg.close()

        return asyncio.run(main())

    @property
    def has_tables(self) -> bool:
        return self.name != "memory"

    def count(self, table: str) -> int:
        """Rows in one of the backend's own tables."""
        sql = f"SELECT COUNT(*) FROM {table}"
        if self.name == "sqlite":
            with sqlite3.connect(self._place) as db:
                return int(db.execute(sql).fetchone()[0])
        return int(psql(self._place, sql)[0][0])


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Stores:
    if request.param == "postgres":
        return Stores("postgres", request.getfixturevalue("pg_dsn"))
    return Stores(request.param, str(tmp_path / "s.db"))


def caught(raw: bytes = RAW, until: float | None = None) -> Incoming:
    now = time.time()
    return Incoming(
        raw,
        summarize(raw),
        "app@example.test",
        now,
        (),
        unrouted=("x@gmail.com",),
        caught_id=ids.new_caught_id(),
        caught_until=now + 60 if until is None else until,
    )


def test_a_v1_store_is_indexed_at_the_upgrade(tmp_path: Path) -> None:
    """Mail stored before v2 is searchable after it (the index is filled once, at migration)."""
    path = tmp_path / "v1.db"
    v1 = (resources.files("sink.storage.sqlite") / "sql" / "001_init.sql").read_text()
    with sqlite3.connect(path) as db:
        db.executescript(v1 + "\nPRAGMA user_version = 1;")
        db.execute(
            "INSERT INTO messages (message_pk, raw, size, subject, from_addr, to_json, cc_json, "
            "mail_from, received_at) VALUES (1, ?, ?, 'Hello there', 'a@acme.example', '[]', "
            "'[]', 'app@example.test', 1.0)",
            (RAW, len(RAW)),
        )
        db.execute(OLD_INBOX)
        db.execute(
            "INSERT INTO deliveries (message_id, inbox_id, message_pk, rcpt_json) VALUES "
            "('msg_aaaaaaaaaaaaaaaaaaaaaaaa', 'ib_aaaaaaaaaaaaaaaaaaaa', 1, '[\"l@sink.test\"]')"
        )

    async def search(store: SQLiteStore) -> list[str]:
        found = await store.mail.search(parse_query("body from:acme"), None, None, 10)
        return [f.id for f in found]

    assert run(path, search) == ["msg_aaaaaaaaaaaaaaaaaaaaaaaa"]
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == LATEST_SQLITE


ATTACHED = (
    b"From: Acme <a@acme.example>\r\nTo: l@sink.test\r\nSubject: Invoice\r\nMIME-Version: 1.0\r\n"
    b'Content-Type: multipart/mixed; boundary="b"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\n'
    b"see attached\r\n--b\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; "
    b'filename="i.pdf"\r\n\r\nJVBERi0=\r\n--b--\r\n'
)


def test_a_v2_store_with_mail_upgrades_in_place(tmp_path: Path) -> None:
    """A store made by schema v2, with mail indexed and mail not yet indexed (a delivery, its
    claim, an attachment, caught mail), keeps all of it at the v3 upgrade: listed, searchable
    by text, size, date and attachment, and new deliveries follow the old ones' seqs."""
    path = tmp_path / "v2.db"
    sql = resources.files("sink.storage.sqlite") / "sql"
    v2 = (sql / "001_init.sql").read_text() + (sql / "002_catch_all_search.sql").read_text()
    inbox, run_id = "ib_aaaaaaaaaaaaaaaaaaaa", "r1"
    with sqlite3.connect(path) as db:
        db.executescript(v2 + "\nPRAGMA user_version = 2;")
        db.execute(OLD_INBOX)  # inbox, run_id
        # What v2's indexer left: message 1 indexed and listed; 2 and 3 stored after it.
        for pk, raw, at, indexed in (
            (1, RAW, 100.0, 1),
            (2, ATTACHED, 200.0, 0),
            (3, RAW, 300.0, 0),
        ):
            db.execute(
                "INSERT INTO messages (message_pk, raw, size, subject, from_addr, to_json, "
                "cc_json, mail_from, received_at, indexed) VALUES (?, ?, ?, 'Hello there', "
                "'a@acme.example', '[]', '[]', 'app@example.test', ?, ?)",
                (pk, raw, len(raw), at, indexed),
            )
        for seq, pk in ((1, 1), (2, 2)):
            db.execute(
                "INSERT INTO deliveries (seq, message_id, inbox_id, message_pk, rcpt_json, "
                "claim_id, claim_run_id, claimed_at) "
                "VALUES (?, ?, ?, ?, '[\"l@sink.test\"]', ?, ?, ?)",
                (
                    seq,
                    f"msg_{seq:024d}",
                    inbox,
                    pk,
                    *(("clm_1", run_id, 150.0) if seq == 1 else (None, None, None)),
                ),
            )
        db.execute(
            "INSERT INTO caught (caught_id, message_pk, rcpt_json, expires_at) VALUES "
            "('cm_3', 3, '[\"x@gmail.com\"]', 9e9)"
        )
        db.execute(
            "INSERT INTO listing (id, message_pk, inbox_id, run_id) VALUES "
            "('msg_000000000000000000000001', 1, ?, ?)",
            (inbox, run_id),
        )
        db.execute(
            "INSERT INTO message_text (rowid, subject, body, sender, rcpts) VALUES "
            "(1, 'Hello there', 'body text', 'a@acme.example', 'l@sink.test')"
        )

    async def upgraded(store: SQLiteStore) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for query in (
            "",
            "body",
            "see attached",
            "has:attachment",
            "larger:200",
            "after:1970-01-01T00:02:30Z",
        ):
            found[query] = [
                f.id for f in await store.mail.search(parse_query(query), None, None, 10)
            ]
        listed = await store.deliveries_after(inbox, 0, 10)
        found["list"] = [f"{d.seq}:{d.message_id}:{d.claim and d.claim.claim_id}" for d in listed]
        message_id = ids.new_message_id()
        await store.save_message(
            Incoming(
                RAW,
                summarize(RAW),
                "app@example.test",
                400.0,
                (Delivered(inbox, run_id, message_id, ("l@sink.test",)),),
            )
        )
        found["after"] = [
            f"{d.seq}:{d.message_id}" for d in await store.deliveries_after(inbox, 2, 10)
        ]
        found["new"] = [
            f.id
            for f in await store.mail.search(
                parse_query("after:1970-01-01T00:06:00Z"), None, None, 10
            )
        ]
        return found

    one, two = "msg_000000000000000000000001", "msg_000000000000000000000002"
    found = run(path, upgraded)
    assert found[""] == ["cm_3", two, one]
    assert found["body"] == ["cm_3", one]
    assert found["see attached"] == [two]
    assert found["has:attachment"] == [two]
    assert set(found["larger:200"]) == {two}
    assert found["after:1970-01-01T00:02:30Z"] == ["cm_3", two]
    assert found["list"] == [f"1:{one}:clm_1", f"2:{two}:None"]
    assert len(found["after"]) == 1 and found["after"][0].startswith("3:")
    assert found["new"] == [found["after"][0].split(":", 1)[1]]
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == LATEST_SQLITE
        assert db.execute("SELECT indexed_upto FROM index_state").fetchone()[0] == 4
        assert (
            db.execute("SELECT COUNT(*) FROM sqlite_sequence WHERE name = 'deliveries'").fetchone()[
                0
            ]
            == 0
        )


def _v3_store(path: Path) -> None:
    """A store as schema v3 left it: a delivery and a caught mail, both indexed, their text
    in the index as v3 kept it (not folded, with token positions)."""
    sql = resources.files("sink.storage.sqlite") / "sql"
    v3 = "\n".join((sql / name).read_text() for name in sorted(sql.iterdir()) if name.name < "004")
    with sqlite3.connect(path) as db:
        db.executescript(v3 + "\nPRAGMA user_version = 3;")
        db.execute(OLD_INBOX)
        for pk, raw in ((1, RAW), (2, ATTACHED)):
            db.execute(
                "INSERT INTO messages (message_pk, raw, size, subject, from_addr, to_json, "
                "cc_json, mail_from, received_at) VALUES (?, ?, ?, 'Hello there', "
                "'a@acme.example', '[]', '[]', 'app@example.test', ?)",
                (pk, raw, len(raw), pk * 100.0),
            )
            db.execute(
                "INSERT INTO message_text (rowid, subject, body, sender, rcpts) VALUES "
                "(?, 'Hello there', 'body text', 'a@acme.example', 'l@sink.test')",
                (pk,),
            )
        db.execute(
            "INSERT INTO deliveries (seq, message_id, inbox_id, message_pk, rcpt_json) VALUES "
            "(1, 'msg_000000000000000000000001', 'ib_aaaaaaaaaaaaaaaaaaaa', 1, "
            "'[\"l@sink.test\"]')"
        )
        db.execute(
            "INSERT INTO caught (caught_id, message_pk, rcpt_json, expires_at) VALUES "
            "('cm_2', 2, '[\"x@gmail.com\"]', 9e9)"
        )
        db.execute(
            "INSERT INTO listing (id, message_pk, inbox_id, run_id, size, received_at) VALUES "
            "('msg_000000000000000000000001', 1, 'ib_aaaaaaaaaaaaaaaaaaaa', 'r1', 10, 100.0), "
            "('cm_2', 2, NULL, NULL, 10, 200.0)"
        )
        db.execute("UPDATE index_state SET indexed_upto = 2")


def _searches(path: Path) -> dict[str, list[str]]:
    async def search(store: SQLiteStore) -> dict[str, list[str]]:
        found = {}
        for query in ("from:ACME", "see attached", '-"SEE ATTACHED"', "to:gmail", "body"):
            found[query] = [
                f.id for f in await store.mail.search(parse_query(query), None, None, 9)
            ]
        return found

    return run(path, search)


def test_a_v3_store_is_searchable_after_the_v4_upgrade_refolds_its_text(tmp_path: Path) -> None:
    """v4 rebuilds the full-text index (folded text, no positions): the mail indexed under
    v3 is found by its text again, from its bodies, case-insensitively; a stop during the
    rebuild resumes it at the next open."""
    path = tmp_path / "v3.db"
    _v3_store(path)
    one = "msg_000000000000000000000001"
    expected = {
        "from:ACME": ["cm_2", one],
        "see attached": ["cm_2"],
        '-"SEE ATTACHED"': [one],
        "to:gmail": ["cm_2", one],
        "body": [one],  # RAW's body; ATTACHED's text says "see attached"
    }
    assert _searches(path) == expected
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == LATEST_SQLITE
        assert db.execute("SELECT refold_upto FROM index_state").fetchone()[0] == 0
        # As if the process stopped before the rebuild's first batch committed.
        db.execute("DELETE FROM message_text")
        db.execute("UPDATE index_state SET refold_upto = 2")
    assert _searches(path) == expected


def test_the_rebuild_goes_by_batches_newest_first(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    _v3_store(path)
    with sqlite3.connect(path) as db:
        db.executescript(
            (
                resources.files("sink.storage.sqlite") / "sql" / "004_folded_search_text.sql"
            ).read_text()
        )
        db.row_factory = sqlite3.Row
        assert refold(db, 1) is False
        assert db.execute("SELECT refold_upto FROM index_state").fetchone()[0] == 1
        assert [r[0] for r in db.execute("SELECT rowid FROM message_text")] == [2]
        assert refold(db, 1) is True
        assert db.execute("SELECT refold_upto FROM index_state").fetchone()[0] == 0
        assert db.execute("SELECT subject FROM message_text WHERE rowid = 1").fetchone()[0] == (
            "hello there"
        )


def test_mail_stored_after_the_newest_message_went_is_indexed(tmp_path: Path) -> None:
    """The index's watermark is never passed by a message number used again: caught mail
    dropped (its message row with it), then new mail, which search still finds."""

    async def scenario(store: SQLiteStore) -> list[str]:
        await store.save_message(caught())
        assert len(await store.mail.search(parse_query(""), None, None, 10)) == 1
        assert await store.mail.drop_oldest_caught(time.time(), 10) == 1
        again = caught()
        await store.save_message(again)
        assert again.caught_id is not None
        return [again.caught_id] + [
            f.id for f in await store.mail.search(parse_query("hello"), None, None, 10)
        ]

    expected, *found = run(tmp_path / "s.db", scenario)
    assert found == [expected]


def test_caught_mail_expires_and_its_message_goes(stores: Stores) -> None:
    """After its retention the caught mail, its message row and its index row are gone."""

    async def work(store: Storage, mail: MailStore) -> tuple[int, int, int]:
        await store.save_message(caught(until=time.time() - 1))
        await store.save_message(caught(until=time.time() + 600))
        assert await mail.count(parse_query("hello"), None, 100) == 2  # both indexed
        expired = await mail.expire_caught(time.time(), 100)
        left = len(await mail.caught_page(None, 10))
        indexed = await mail.count(parse_query("hello"), None, 100)
        return expired, left, indexed

    assert stores.run(work) == (1, 1, 1)
    if stores.has_tables:
        assert stores.count("messages") == 1
        assert stores.count("message_text") == 1


def test_the_sweepers_turn_with_no_caught_mail_due_leaves_the_index_to_the_pause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """expire_caught with nothing due indexes nothing (the sweeper asks every second, ingest
    or not); with mail due, it catches the index up and deletes."""
    import sink.storage.sqlite.fts as adapter

    monkeypatch.setattr(adapter, "_INDEX_QUIET_S", 3600.0)  # no pause in this test
    path = tmp_path / "s.db"

    async def listed(store: SQLiteStore) -> int:
        return len(await store._read("SELECT seq FROM listing"))

    async def work(store: SQLiteStore) -> tuple[int, int, int, int]:
        await store.save_message(caught(until=time.time() + 600))
        await store.save_message(caught(until=time.time() + 600))
        none_due = await store.mail.expire_caught(time.time(), 100)
        before = await listed(store)
        due = await store.mail.expire_caught(time.time() + 601, 1)
        return none_due, before, due, await listed(store)

    assert run(path, work) == (0, 0, 1, 1)


def test_a_shared_body_stays_while_either_use_needs_it(stores: Stores) -> None:
    """Evidence released: the caught copy keeps the body; caught mail gone too: body released."""

    async def work(
        store: Storage, mail: MailStore
    ) -> tuple[bytes | None, bytes | None, bytes | None]:
        new = new_inbox()
        await store.create_inbox(new, created_event(new))
        inbox = new.inbox
        message_id = ids.new_message_id()
        both = caught()
        both = Incoming(
            both.raw,
            both.summary,
            both.mail_from,
            both.received_at,
            (Delivered(inbox.inbox_id, inbox.run_id, message_id, (inbox.address,)),),
            unrouted=both.unrouted,
            caught_id=both.caught_id,
            caught_until=both.caught_until,
        )
        await store.save_message(both)
        await store.release_run(inbox.run_id, time.time())
        assert both.caught_id is not None
        kept = await mail.caught_message(both.caught_id)
        evidence = await store.raw(message_id)
        # The caught mail is found by the body it keeps; the released evidence by its
        # metadata only (its subject), never by that body.
        assert [e.id for e in await mail.search(parse_query('"body text"'), None, None, 9)] == [
            both.caught_id
        ]
        assert {e.id for e in await mail.search(parse_query("hello"), None, None, 9)} == {
            both.caught_id,
            message_id,
        }
        await mail.expire_caught(both.caught_until + 1, 10)
        # Its body gone, the text of the body is no longer found (the subject still is).
        assert await mail.search(parse_query('"body text"'), None, None, 9) == []
        assert len(await mail.search(parse_query("hello"), None, None, 9)) == 1
        after = await store.message(message_id)
        return (kept.raw if kept else None), evidence, (after.raw if after else b"gone")

    kept, evidence, after = stores.run(work)
    assert kept == RAW  # the caught copy still reads whole
    assert evidence is None  # the released evidence does not
    assert after is None  # both uses over: the body is gone, the delivery's metadata stays


def test_delete_refuses_live_evidence_and_deletes_nothing(stores: Stores) -> None:
    """Naming live evidence refuses the whole delete; with no names, live evidence stays."""

    async def work(store: Storage, mail: MailStore) -> tuple[tuple[str, ...], int, int, list[str]]:
        new = new_inbox()
        await store.create_inbox(new, created_event(new))
        inbox = new.inbox
        message_id = ids.new_message_id()
        raw = RAW.replace(b"x@gmail.com", inbox.address.encode())
        delivered = (Delivered(inbox.inbox_id, inbox.run_id, message_id, (inbox.address,)),)
        await store.save_message(
            Incoming(raw, summarize(raw), "app@example.test", time.time(), delivered)
        )
        other = caught()
        await store.save_message(other)
        assert other.caught_id is not None
        refused = await mail.delete_listed([other.caught_id, message_id], time.time())
        after_refusal = await mail.count(parse_query(""), None, 100)
        everything = await mail.delete_listed(None, time.time())
        again = await mail.delete_listed([other.caught_id], time.time())
        assert again.deleted == 0 and not again.refused  # already gone: nothing, no error
        left = [f.id for f in await mail.search(parse_query(""), None, None, 10)]
        return refused.refused, after_refusal, everything.deleted, left

    refused, after_refusal, deleted, left = stores.run(work)
    assert len(refused) == 1 and refused[0].startswith("msg_")
    assert after_refusal == 2
    assert deleted == 1
    assert len(left) == 1 and left[0].startswith("msg_")


def test_a_v2_postgres_database_is_listed_and_indexed_at_the_upgrade(
    pg_cluster: Cluster,
) -> None:
    """Mail stored before schema v3 is listed by the migration and searchable after it."""
    database = pg_cluster.new_database()
    for number in (1, 2):
        folder = resources.files("sink.storage.postgres") / "sql"
        (script,) = [f for f in folder.iterdir() if f.name.startswith(f"00{number}_")]
        pg_cluster.psql(script.read_text(), database)
    pg_cluster.psql(
        "CREATE TABLE runsink_migrations (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ "
        "NOT NULL DEFAULT now()); INSERT INTO runsink_migrations (version) VALUES (1), (2);"
        "INSERT INTO messages (message_key, raw, size, subject, from_addr, to_json, cc_json, "
        "mail_from, received_at) VALUES ('msg_aaaaaaaaaaaaaaaaaaaaaaaa', "
        f"convert_to('{RAW.decode()}', 'UTF8'), {len(RAW)}, 'Hello there', 'a@acme.example', "
        "'[]', '[]', 'app@example.test', 1.0);"
        f"{OLD_INBOX};"
        "INSERT INTO deliveries (inbox_id, seq, message_id, message_key, rcpt_json) VALUES "
        "('ib_aaaaaaaaaaaaaaaaaaaa', 1, 'msg_aaaaaaaaaaaaaaaaaaaaaaaa', "
        "'msg_aaaaaaaaaaaaaaaaaaaaaaaa', '[\"l@sink.test\"]');",
        database,
    )
    dsn = pg_cluster.dsn(database)

    async def search(store: Storage, mail: MailStore) -> list[str]:
        found = await mail.search(parse_query("BODY from:acme run:r1"), None, None, 10)
        return [f.id for f in found]

    assert Stores("postgres", dsn).run(search) == ["msg_aaaaaaaaaaaaaaaaaaaaaaaa"]
    folder = resources.files("sink.storage.postgres") / "sql"
    latest = max(int(f.name.split("_")[0]) for f in folder.iterdir() if f.name.endswith(".sql"))
    assert latest >= 3
    assert psql(dsn, "SELECT MAX(version) FROM runsink_migrations") == [[str(latest)]]


def test_postgres_text_search_past_the_newest_first_walk(pg_dsn: str) -> None:
    """Beyond the newest entries it walks first, a text term is found through the trigram
    index: the same results, order, paging, offsets and counts."""

    def mail_with(subject: str) -> Incoming:
        raw = RAW.replace(b"Hello there", subject.encode())
        return replace(caught(raw), summary=summarize(raw))

    async def work(store: Storage, mail: MailStore) -> None:
        assert isinstance(mail, PostgresMail)
        mail.walk_first = 2  # the walk sees 2 entries; the index finds the rest
        subjects = ["alpha one", "beta two", "alpha three", "beta four", "alpha five", "beta six"]
        for subject in subjects:
            await store.save_message(mail_with(subject))
        alpha = parse_query("alpha")
        found = await mail.search(alpha, None, None, 10)
        assert [f.subject for f in found] == ["alpha five", "alpha three", "alpha one"]
        assert [f.subject for f in await mail.search(alpha, None, None, 1, 1)] == ["alpha three"]
        older = await mail.search(alpha, None, found[0].position, 10)
        assert [f.subject for f in older] == ["alpha three", "alpha one"]
        assert await mail.count(alpha, None, 100) == 3
        assert await mail.count(alpha, None, 2) == 2
        assert await mail.count(parse_query("alpha -five"), None, 100) == 2
        assert await mail.search(parse_query("gamma"), None, None, 10) == []

    Stores("postgres", pg_dsn).run(work)
