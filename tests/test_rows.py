from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from sink.nearmiss import NearMissFound
from sink.storage.base import Delivered, Event, Late
from sink.storage.rows import (
    accepted_event,
    accepted_fields,
    json_strings,
    late_events,
    late_fields,
    near_miss_event,
    near_miss_fields,
)
from sink.storage.sqlite.migrate import prepare
from sink.storage.sqlite.writer import NotingConnection, insert_event_fields, insert_events


@given(st.lists(st.text(st.characters(exclude_categories=())), max_size=5))
def test_json_strings_is_json_dumps_of_the_list(values: list[str]) -> None:
    """json_strings gives json.dumps's very text for any strings, lone surrogates included."""
    assert json_strings(values) == json.dumps(values)
    assert json_strings(tuple(values)) == json.dumps(values)


def test_ingest_events_are_stored_once_with_their_row_ids(tmp_path: Path) -> None:
    """SQLite's insert_event_fields writes each event's row and notes the Event built with
    its row id, the same Event the shared builders give (accepted, near miss, late)."""
    db = sqlite3.connect(tmp_path / "runsink.db", factory=NotingConnection)
    prepare(db)
    db.notes = []
    delivered = Delivered("ib_1", "run-1", "msg_1", ("a@sink.test",))
    found = NearMissFound("ib_2", "run-2", "signup@sink.test", 1)
    late = [Late("ib_3", "run-3", "c@sink.test"), Late("ib_4", "run-4", "d@sink.test")]
    fields = [
        accepted_fields(delivered, 10.0, 4096),
        near_miss_fields(found, 10.0),
        *late_fields(late, 10.0, 4096),
    ]
    with db:
        insert_events(db, [Event("run-0", "claimed", 9.0, "ib_0", "msg_0", {"claim_id": "c"})])
        insert_event_fields(db, fields)
    built = [
        accepted_event(delivered, 10.0, 4096),
        near_miss_event(found, 10.0),
        *late_events(late, 10.0, 4096),
    ]
    rows = db.execute("SELECT id, run_id, type, detail_json FROM events ORDER BY id").fetchall()
    assert [(e.seq, e.run_id, e.type, e.detail) for e in db.notes] == [
        (i, run, kind, json.loads(detail)) for i, run, kind, detail in rows
    ]
    assert [replace(e, seq=None) for e in db.notes[1:]] == built
    db.close()
