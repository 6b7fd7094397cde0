"""The live-events hub (sink/events.py): bounded log, cursors, filters, resync, wake-ups."""

from __future__ import annotations

import asyncio
import json

import pytest

from sink import events
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
    assert [i for i, _, _ in got] == [f"b.{n}" for n in range(1, len(got) + 1)]


def test_a_run_filter_sees_only_its_run() -> None:
    """A subscriber for one run reads that run's events; one for all reads every event."""
    hub = Hub()
    mine, everything = hub.subscribe("mine"), hub.subscribe(None)
    hub.record([_event("other"), _event("mine"), _event("other")])
    assert {d["run_id"] for _, _, d in _frames(hub.read(mine))} == {"mine"}
    assert len(_frames(hub.read(everything))) == 6


def test_last_event_id_resumes_after_it_and_unknown_ids_resync() -> None:
    """A known id replays what followed it; another boot's, a future or a garbage id resync."""
    hub = Hub(boot="b")
    hub.subscribe(None)  # someone listening: events are kept
    hub.record([_event("r")])  # ids b.1, b.2
    hub.record([_event("r")])  # ids b.3, b.4
    resumed = hub.subscribe(None, "b.2")
    assert [i for i, _, _ in _frames(hub.read(resumed))] == ["b.3", "b.4"]
    for stale in ("other.1", "b.99", "nonsense", "b.-1"):
        batch = hub.read(hub.subscribe("r", stale))
        assert batch.resync and _frames(batch)[0][1] == "resync"


def test_a_run_readers_ids_say_nothing_of_other_runs() -> None:
    """A reader limited to a run gets masked ids: no sequence to count other runs' events
    by, yet each resumes exactly after itself; an every-run reader keeps plain ids."""
    hub = Hub(boot="b")
    mine = hub.subscribe("mine")
    hub.record([_event("mine")])
    hub.record([_event("other")] * 50)
    hub.record([_event("mine")])
    frames = _frames(hub.read(mine))
    ids = [i for i, _, _ in frames]
    assert len(ids) == 4 and all(i.startswith("b.m") and len(i) == 19 for i in ids)
    assert len(set(ids)) == 4
    resumed = hub.subscribe("mine", ids[1])
    assert [i for i, _, _ in _frames(hub.read(resumed))] == ids[2:]
    assert all(
        i.split(".")[1].isdigit() for i, _, _ in _frames(hub.read(hub.subscribe(None, "b.1")))
    )


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
