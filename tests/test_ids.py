"""Ids are unguessable and cursors are opaque, bound to their inbox."""

from __future__ import annotations

import random

import pytest

from sink.clock import rfc3339, seconds_up
from sink.errors import InvalidCursor
from sink.ids import (
    CAUGHT_ID,
    MESSAGE_ID,
    Ids,
    decode_cursor,
    encode_cursor,
    new_inbox_id,
    new_local_part,
    new_message_id,
)


def test_ids_are_distinct_and_lowercase() -> None:
    """Generated ids do not repeat; addresses are lowercase."""
    locals_ = {new_local_part() for _ in range(1000)}
    assert len(locals_) == 1000 and all(x == x.lower() for x in locals_)
    assert len({new_message_id() for _ in range(1000)}) == 1000


def test_mail_ids_sort_by_their_millisecond_and_keep_75_random_bits() -> None:
    """Message and caught-mail ids: the same shape as ever, sorting by the time they were
    made (so that a group commit's ids share an index page), random after the millisecond."""
    times = iter([1_700_000_000.000, 1_700_000_000.0004, 1_700_000_000.001, 4_102_444_800.0])
    made = Ids(random.Random(7).randbytes, lambda: next(times))
    ids = [made.message_id(), made.message_id(), made.caught_id(), made.message_id()]
    assert all(MESSAGE_ID.fullmatch(i) for i in ids[:2] + ids[3:]) and CAUGHT_ID.fullmatch(ids[2])
    stamps = [i.split("_")[1][:9] for i in ids]
    assert stamps[0] == stamps[1] < stamps[2] < stamps[3]  # 2023, 2023, 2023 +1 ms, 2100
    assert ids[0] != ids[1]
    tails = {Ids(now=lambda: 0.0).message_id()[-15:] for _ in range(1000)}
    assert len(tails) == 1000
    assert ids[0] < new_message_id() < ids[3]  # the system clock: after 2023, before 2100


def test_cursor_round_trip() -> None:
    """A cursor decodes to the position it was made from, for its own inbox only."""
    inbox_id, other = new_inbox_id(), new_inbox_id()
    cursor = encode_cursor(inbox_id, 12345)
    assert decode_cursor(inbox_id, cursor) == 12345
    with pytest.raises(InvalidCursor):
        decode_cursor(other, cursor)


@pytest.mark.parametrize("cursor", ["", "abc", "c1_", "c1_!!!!", "c1_" + "A" * 200, "c1_aWJfeC4x"])
def test_foreign_cursors_are_refused(cursor: str) -> None:
    """Strings we did not issue are InvalidCursor."""
    with pytest.raises(InvalidCursor):
        decode_cursor(new_inbox_id(), cursor)


def test_times_are_rfc3339_milliseconds_utc() -> None:
    """Times are RFC 3339, UTC, milliseconds, Z."""
    assert rfc3339(0) == "1970-01-01T00:00:00.000Z"
    assert rfc3339(1.2349) == "1970-01-01T00:00:01.234Z"


def test_retry_after_rounds_up_to_a_tenth() -> None:
    """retry_after rounds up to 0.1 s and is never negative."""
    assert seconds_up(1.21) == 1.3 and seconds_up(1.2) == 1.2 and seconds_up(-3) == 0.0


def test_system_random_bytes_come_from_a_pool_never_handed_out_twice() -> None:
    """Slices of the pool are consecutive and distinct; a request past the pool refills it."""
    from sink.ids import SystemRandomBytes

    source = SystemRandomBytes()
    pieces = [source(15) for _ in range(1000)]  # past one 4 KiB pool
    assert all(len(p) == 15 for p in pieces)
    assert len(set(pieces)) == len(pieces)
    assert len(source(10_000)) == 10_000


def test_a_forked_child_draws_other_random_bytes_than_its_parent() -> None:
    """After a fork the child's pool is its own: parent and child never make the same id."""
    import os

    from sink.ids import SystemRandomBytes

    source = SystemRandomBytes()
    source(1)  # the pool is filled before the fork
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        os.write(writing, source(32))
        os._exit(0)
    os.close(writing)
    from_child = os.read(reading, 32)
    os.close(reading)
    os.waitpid(child, 0)
    assert len(from_child) == 32 and from_child != source(32)
