"""The live-events hub (sink/events.py): bounded log, cursors, filters, resync, wake-ups."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from sink import events
from sink.event_ids import is_event_id
from sink.events import Hub
from sink.storage.base import Event


def _frames(batch: events.Batch) -> list[tuple[str, str, dict[str, object]]]:
    out = []
    for frame in batch.frames:
        fields = dict(line.split(": ", 1) for line in frame.decode().strip().split("\n"))
        out.append((fields["id"], fields["event"], json.loads(fields["data"])))
    return out


def _event(run_id: str, kind: str = "created", **detail: object) -> Event:
    return Event(run_id, kind, 1_000.0, "ib_x", None, dict(detail))


def _ids(batch: events.Batch) -> list[str]:
    return [i for i, _, _ in _frames(batch)]


def test_run_events_come_with_the_inbox_state_they_lead_to() -> None:
    """created, polled (found / not found), claimed and expired each add an inbox event."""
    hub = Hub(boot="b")
    reader = hub.subscribe(None)
    hub.record(
        [
            _event("r", "created"),
            _event("r", "polled", outcome="evidence_not_found"),
            _event("r", "polled", outcome="received"),
            _event("r", "polled", outcome="timeout"),
            _event("r", "expired", reason="timeout"),
            _event("r", "breaker_opened"),
        ]
    )
    got = _frames(hub.read(reader))
    states = [(d["state"], d["reason"]) for _, kind, d in got if kind == "inbox"]
    assert states == [
        ("created", None),
        ("waiting", "evidence_not_found"),
        ("received", None),
        ("expired", "timeout"),
    ]
    assert [kind for _, kind, _ in got].count("run_event") == 6
    ids = [i for i, _, _ in got]
    assert len(set(ids)) == len(ids) and all(is_event_id(i) for i in ids)


def test_a_run_filter_sees_only_its_run() -> None:
    """A subscriber for one run reads that run's events; one for all reads every event."""
    hub = Hub()
    mine, everything = hub.subscribe("mine"), hub.subscribe(None)
    hub.record([_event("other"), _event("mine"), _event("other")])
    assert {d["run_id"] for _, _, d in _frames(hub.read(mine))} == {"mine"}
    assert len(_frames(hub.read(everything))) == 6


def test_last_event_id_resumes_after_it_and_unknown_ids_resync() -> None:
    """A known id replays what followed it; another key's, an old-style or a garbage id resync,
    and a resync's own id resumes from where it was given."""
    hub = Hub(boot="b")
    reader = hub.subscribe(None)  # someone listening: events are kept
    hub.record([_event("r")])
    hub.record([_event("r")])
    ids = _ids(hub.read(reader))
    resumed = hub.subscribe(None, ids[1])
    assert _ids(hub.read(resumed)) == ids[2:]
    other = Hub(boot="b")  # another key: another server's ids
    listening = other.subscribe(None)
    other.record([_event("r")])
    foreign = _ids(other.read(listening))
    assert foreign
    for stale in ("b.1", "b.m0000000000000001", "nonsense", *foreign):
        batch = hub.read(hub.subscribe("r", stale))
        assert batch.resync and _frames(batch)[0][1] == "resync"
    mark = _frames(hub.read(hub.subscribe(None, "nonsense")))[0][0]
    hub.record([_event("r")])
    assert len(hub.read(hub.subscribe(None, mark)).frames) == 2


def test_ids_come_from_the_stored_rows_and_are_the_same_for_every_reader() -> None:
    """An event's id is made from its events row and the store's key: another hub (a replica)
    with the same key gives the same ids, a run's reader the same ids as an every-run reader,
    and ids say nothing of other runs' events; a run's reader resumes exactly after itself."""
    key = b"k" * 32
    hubs = [Hub(boot="one"), Hub(boot="two")]
    readers = []
    for hub in hubs:
        hub.keyed(key)
        readers.append((hub.subscribe("mine"), hub.subscribe(None)))
        hub.record([replace(_event("mine"), seq=1)])
        hub.record([replace(_event("other"), seq=n) for n in range(2, 52)])
        hub.record([replace(_event("mine"), seq=52)])
    (mine_1, all_1), (mine_2, _) = readers
    mine = _ids(hubs[0].read(mine_1))
    assert len(mine) == 4 and mine == _ids(hubs[1].read(mine_2))
    everything = _ids(hubs[0].read(all_1))
    assert [i for i in everything if i in mine] == mine
    assert all(is_event_id(i) for i in everything)
    resumed = hubs[0].subscribe("mine", mine[1])
    assert _ids(hubs[0].read(resumed)) == mine[2:]
    unkeyed = Hub(boot="one")  # another key: other ids for the same rows
    listening = unkeyed.subscribe(None)
    unkeyed.record([replace(_event("mine"), seq=1)])
    assert not set(_ids(unkeyed.read(listening))) & set(everything)


def test_the_log_is_bounded_and_a_reader_left_behind_resyncs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past KEEP_MAX events the oldest go; a reader whose cursor went with them resyncs."""
    monkeypatch.setattr(events, "KEEP_MAX", 100)
    monkeypatch.setattr(events, "_TRIM_CHUNK", 10)
    hub = Hub()
    slow = hub.subscribe(None)
    for _ in range(200):
        hub.record([_event("r", "breaker_opened")])
    assert len(hub._log) <= 100
    batch = hub.read(slow)
    assert batch.resync
    hub.record([_event("r", "breaker_opened")])
    assert len(hub.read(slow).frames) == 1  # and reads on from there


def test_one_wake_up_per_group_however_many_events() -> None:
    """Waiting readers wake once for a burst; an idle wait ends for a keep-alive; close ends."""

    async def scenario() -> None:
        hub = Hub()
        readers = [hub.subscribe(None) for _ in range(100)]
        for reader in readers:
            hub.read(reader)  # past the first look
        waits = [asyncio.ensure_future(hub.wait(r, idle_s=5)) for r in readers]
        await asyncio.sleep(0)
        for _ in range(50):
            hub.record([_event("r", "breaker_opened")])
        batches = await asyncio.gather(*waits)
        assert all(len(b.frames) == 50 for b in batches)
        idle = await hub.wait(readers[0], idle_s=0.01)
        assert idle.idle and not idle.frames
        ending = asyncio.ensure_future(hub.wait(readers[1], idle_s=5))
        await asyncio.sleep(0)
        hub.close()
        assert (await ending).closed

    asyncio.run(scenario())


def test_a_reader_whose_events_are_filtered_out_still_gets_its_keep_alive() -> None:
    """Other runs' events wake a runs: reader but do not hold back its idle keep-alive."""

    async def scenario() -> None:
        hub = Hub()
        reader = hub.subscribe(None, glob="team-a-*")
        hub.read(reader)

        async def busy() -> None:
            while True:
                hub.record([_event("team-b-1", "breaker_opened")])
                await asyncio.sleep(0.01)

        noise = asyncio.ensure_future(busy())
        try:
            batch = await asyncio.wait_for(hub.wait(reader, idle_s=0.2), 5)
        finally:
            noise.cancel()
        assert batch.idle and not batch.frames
        hub.record([_event("team-a-1", "breaker_opened")])
        assert len((await hub.wait(reader, idle_s=5)).frames) == 1

    asyncio.run(scenario())


def test_a_reader_that_leaves_stops_waiting() -> None:
    """leave() ends that reader's wait at once; unsubscribe forgets it."""

    async def scenario() -> None:
        hub = Hub()
        reader = hub.subscribe("r")
        hub.read(reader)
        waiting = asyncio.ensure_future(hub.wait(reader, idle_s=5))
        await asyncio.sleep(0)
        hub.leave(reader)
        assert (await waiting).closed
        hub.unsubscribe(reader)
        assert hub.subscribers == 0

    asyncio.run(scenario())


def test_nothing_is_kept_while_nobody_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no reader for KEEP_S, events cost nothing; an id from before still resyncs."""
    hub = Hub(boot="b")
    hub.record([_event("r")])  # nobody has ever listened: skipped
    assert hub._log == [] and hub.published == 0
    reader = hub.subscribe(None)
    hub.record([_event("r")])
    last = _frames(hub.read(reader))[-1][0]
    hub.unsubscribe(reader)
    hub.record([_event("r")])  # the reader left just now: still kept, for its resume
    assert len(hub.read(hub.subscribe(None, last)).frames) == 2
    for subscriber in list(hub._groups.get(None, events._Group()).members):
        hub.unsubscribe(subscriber)
    monkeypatch.setattr(events, "KEEP_S", 0.0)
    hub._last_left -= 1
    hub.record([_event("r")])  # nobody for longer than KEEP_S: skipped
    assert hub._log == []
    assert hub.read(hub.subscribe(None, last)).resync
