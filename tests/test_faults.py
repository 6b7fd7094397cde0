"""Fault injection: which calls a fault hits, and which fault requests are refused."""

from __future__ import annotations

import random
from typing import Any

import pytest

from sink.faults import Fault, FaultRegistry, FaultSpec, FaultSpecError


class FixedRandom(random.Random):
    """A Random whose draws are all the same value, to decide probability faults by hand."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def registry(seed: int = 7) -> FaultRegistry:
    return FaultRegistry(random.Random(seed))


def test_empty_registry_hits_nothing() -> None:
    """With no faults take returns None and the registry is falsy."""
    faults = registry()
    assert not faults
    assert faults.is_empty
    assert faults.take("wait", "run-1") is None


def test_add_returns_the_fault_in_force() -> None:
    """add gives the fault an flt_ id, its creation time, a full count and no hits yet."""
    faults = registry()
    fault = faults.add(FaultSpec("wait", "error", count=2, run_id="run-1"), now=12.5)
    assert fault.fault_id.startswith("flt_")
    assert len(fault.fault_id) > len("flt_")
    assert (fault.target, fault.mode, fault.count, fault.run_id) == ("wait", "error", 2, "run-1")
    assert fault.remaining == 2
    assert fault.created_at == 12.5
    assert fault.hits == 0
    assert faults.list() == [fault]
    assert faults and len(faults) == 1


def test_fault_ids_are_unique() -> None:
    """Every added fault gets its own id."""
    faults = registry()
    ids = {faults.add(FaultSpec("read", "error"), now=0.0).fault_id for _ in range(100)}
    assert len(ids) == 100


def test_count_fault_hits_the_next_n_calls_then_goes() -> None:
    """A count fault fires for exactly count calls, counting down, and is then removed."""
    faults = registry()
    faults.add(FaultSpec("claim", "timeout", count=2), now=0.0)
    first = faults.take("claim", "run-1")
    second = faults.take("claim", "run-1")
    assert first is not None and (first.remaining, first.hits) == (1, 1)
    assert second is not None and (second.remaining, second.hits) == (0, 2)
    assert faults.take("claim", "run-1") is None
    assert faults.list() == []


def test_count_fault_is_listed_with_what_is_left() -> None:
    """list shows a count fault's remaining calls and hits as they change."""
    faults = registry()
    faults.add(FaultSpec("read", "error", count=3), now=0.0)
    faults.take("read", None)
    (listed,) = faults.list()
    assert (listed.remaining, listed.hits) == (2, 1)


def test_open_ended_fault_hits_every_call() -> None:
    """A fault with neither count nor probability fires on every matching call."""
    faults = registry()
    faults.add(FaultSpec("smtp.data", "delay", delay_s=0.5), now=0.0)
    hits = [faults.take("smtp.data", None) for _ in range(10)]
    assert all(isinstance(hit, Fault) for hit in hits)
    (listed,) = faults.list()
    assert listed.hits == 10
    assert listed.remaining is None


def test_fault_only_hits_its_target() -> None:
    """A fault on one target leaves the other targets alone."""
    faults = registry()
    faults.add(FaultSpec("read", "error"), now=0.0)
    for target in ("wait", "claim", "smtp.connect", "smtp.rcpt", "smtp.data"):
        assert faults.take(target, "run-1") is None
    assert faults.take("read", "run-1") is not None


def test_probability_fault_fires_at_about_its_rate() -> None:
    """With a seeded Random a p=0.3 fault hits close to 30% of 1000 calls."""
    faults = registry(seed=2024)
    faults.add(FaultSpec("wait", "error", probability=0.3), now=0.0)
    hits = sum(faults.take("wait", "run-1") is not None for _ in range(1000))
    assert 250 <= hits <= 350
    assert faults.list()[0].hits == hits


def test_probability_one_always_fires() -> None:
    """probability=1.0 fires on every call."""
    faults = registry()
    faults.add(FaultSpec("wait", "error", probability=1.0), now=0.0)
    assert all(faults.take("wait", None) is not None for _ in range(200))


def test_probability_draw_compares_strictly() -> None:
    """A draw below p fires, a draw at or above p does not."""
    below = FaultRegistry(FixedRandom(0.49))
    below.add(FaultSpec("wait", "error", probability=0.5), now=0.0)
    assert below.take("wait", None) is not None
    at = FaultRegistry(FixedRandom(0.5))
    at.add(FaultSpec("wait", "error", probability=0.5), now=0.0)
    assert at.take("wait", None) is None


def test_first_matching_fault_that_fires_wins() -> None:
    """Faults are tried oldest first; one that does not fire lets the next one try."""
    faults = FaultRegistry(FixedRandom(0.9))
    faults.add(FaultSpec("wait", "timeout", probability=0.5), now=0.0)  # draws 0.9: misses
    counted = faults.add(FaultSpec("wait", "error", count=1), now=1.0)
    always = faults.add(FaultSpec("wait", "delay", delay_s=1.0), now=2.0)
    first = faults.take("wait", None)
    assert first is not None and first.fault_id == counted.fault_id
    second = faults.take("wait", None)
    assert second is not None and second.fault_id == always.fault_id


def test_run_scoped_fault_hits_only_its_run() -> None:
    """A fault with run_id fires for that run only, not for other runs or calls without a run."""
    faults = registry()
    faults.add(FaultSpec("wait", "error", run_id="run-a"), now=0.0)
    assert faults.take("wait", "run-b") is None
    assert faults.take("wait", None) is None
    assert faults.take("wait", "run-a") is not None


def test_unscoped_fault_hits_every_run() -> None:
    """A fault without run_id fires for any run, and for calls that have no run yet."""
    faults = registry()
    faults.add(FaultSpec("smtp.connect", "error"), now=0.0)
    assert faults.take("smtp.connect", None) is not None
    assert faults.take("smtp.connect", "run-a") is not None


def test_other_runs_do_not_use_up_a_scoped_count() -> None:
    """Calls from other runs leave a run-scoped count fault's remaining untouched."""
    faults = registry()
    faults.add(FaultSpec("claim", "error", count=1, run_id="run-a"), now=0.0)
    for _ in range(5):
        assert faults.take("claim", "run-b") is None
    hit = faults.take("claim", "run-a")
    assert hit is not None and hit.remaining == 0


def test_clear_removes_everything_and_counts() -> None:
    """clear removes every fault and says how many there were."""
    faults = registry()
    faults.add(FaultSpec("wait", "error"), now=0.0)
    faults.add(FaultSpec("read", "timeout", count=3), now=0.0)
    assert faults.clear() == 2
    assert faults.list() == []
    assert not faults
    assert faults.take("wait", None) is None
    assert faults.clear() == 0


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"target": "smtp.quit"}, "target"),
        ({"mode": "crash"}, "mode"),
        ({"count": 0}, "count"),
        ({"count": -1}, "count"),
        ({"count": True}, "count"),
        ({"probability": 0.0}, "probability"),
        ({"probability": 1.01}, "probability"),
        ({"probability": -0.5}, "probability"),
        ({"probability": float("nan")}, "probability"),
        ({"count": 2, "probability": 0.5}, "probability"),
        ({"mode": "delay"}, "delay_s"),
        ({"mode": "delay", "delay_s": 0.0}, "delay_s"),
        ({"mode": "delay", "delay_s": 60.5}, "delay_s"),
        ({"mode": "error", "delay_s": 1.0}, "delay_s"),
        ({"run_id": ""}, "run_id"),
        ({"run_id": "run a"}, "run_id"),
        ({"run_id": "r" * 129}, "run_id"),
        ({"run_id": "run\n"}, "run_id"),
    ],
)
def test_invalid_specs_name_the_field(fields: dict[str, Any], field: str) -> None:
    """validate and add reject a bad request with a FaultSpecError naming the field."""
    spec = FaultSpec(**{"target": "wait", "mode": "error", **fields})
    with pytest.raises(FaultSpecError) as caught:
        spec.validate()
    assert caught.value.field == field
    faults = registry()
    with pytest.raises(FaultSpecError):
        faults.add(spec, now=0.0)
    assert not faults


@pytest.mark.parametrize(
    "spec",
    [
        FaultSpec("wait", "timeout"),
        FaultSpec("smtp.rcpt", "error", count=1),
        FaultSpec("read", "error", probability=1.0),
        FaultSpec("smtp.data", "delay", delay_s=60.0, count=5),
        FaultSpec("claim", "delay", delay_s=0.01, probability=0.25),
        FaultSpec("wait", "error", run_id="A-z0.9_:" + "x" * 120),
    ],
)
def test_valid_specs_pass(spec: FaultSpec) -> None:
    """Well-formed requests, including the edge values, validate cleanly."""
    spec.validate()
