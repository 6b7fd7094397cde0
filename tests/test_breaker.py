"""The circuit breaker and its registry, driven by a fake clock (plain floats)."""

from __future__ import annotations

import pytest

from sink.breaker import (
    Admission,
    Breaker,
    BreakerKey,
    Breakers,
    BreakerSettings,
    BreakerState,
    Transition,
)

SETTINGS = BreakerSettings(failure_threshold=3, cooldown_s=5.0, cooldown_max_s=15.0)
OPEN, CLOSED, HALF_OPEN = BreakerState.OPEN, BreakerState.CLOSED, BreakerState.HALF_OPEN


def opened_at(now: float, settings: BreakerSettings = SETTINGS) -> Breaker:
    """A breaker that opened at ``now`` after the threshold of failures."""
    breaker = Breaker(settings)
    for _ in range(settings.failure_threshold):
        assert breaker.admit(now).allowed
        breaker.record_failure(now)
    assert breaker.state is OPEN
    return breaker


def test_new_breaker_is_closed_and_admits() -> None:
    """A new breaker is closed and lets calls through without a probe or retry_after."""
    breaker = Breaker(SETTINGS)
    assert breaker.state is CLOSED
    assert breaker.admit(0.0) == Admission(
        allowed=True, probe=False, retry_after=None, transition=None
    )
    assert breaker.opened_at is None


def test_opens_after_threshold_consecutive_failures() -> None:
    """The threshold-th consecutive failure opens the breaker for cooldown_s, not before."""
    breaker = Breaker(SETTINGS)
    assert breaker.record_failure(1.0) is None
    assert breaker.record_failure(2.0) is None
    assert breaker.state is CLOSED
    assert breaker.record_failure(3.0) == Transition(CLOSED, OPEN, 5.0)
    assert breaker.state is OPEN
    assert breaker.opened_at == 3.0
    assert breaker.consecutive_failures == 3


def test_threshold_of_one_opens_on_first_failure() -> None:
    """With failure_threshold 1 a single failure opens the breaker."""
    breaker = Breaker(BreakerSettings(failure_threshold=1, cooldown_s=1.0, cooldown_max_s=1.0))
    assert breaker.record_failure(0.0) == Transition(CLOSED, OPEN, 1.0)


def test_success_resets_consecutive_count() -> None:
    """A success in between resets the count, so failures must be consecutive to open."""
    breaker = Breaker(SETTINGS)
    breaker.record_failure(0.0)
    breaker.record_failure(1.0)
    assert breaker.record_success(2.0) is None
    assert breaker.consecutive_failures == 0
    breaker.record_failure(3.0)
    breaker.record_failure(4.0)
    assert breaker.state is CLOSED
    assert breaker.consecutive_failures == 2


def test_open_refuses_with_remaining_cooldown() -> None:
    """While open every call is refused with retry_after = the cooldown left."""
    breaker = opened_at(100.0)
    for now, left in [(100.0, 5.0), (102.0, 3.0), (104.5, 0.5)]:
        admission = breaker.admit(now)
        assert not admission.allowed
        assert not admission.probe
        assert admission.transition is None
        assert admission.retry_after == pytest.approx(left)
    assert breaker.state is OPEN


def test_retry_after_has_a_positive_floor() -> None:
    """Just before the cooldown ends retry_after is the 0.1 s floor, never zero or less."""
    breaker = opened_at(100.0)
    assert breaker.admit(104.99).retry_after == pytest.approx(0.1)


def test_retry_after_never_exceeds_cooldown_when_clock_steps_back() -> None:
    """A clock that stepped back does not make the refusal longer than one cooldown."""
    breaker = opened_at(100.0)
    assert breaker.admit(90.0).retry_after == pytest.approx(5.0)


def test_exactly_one_probe_among_concurrent_admits() -> None:
    """After the cooldown one call becomes the probe; the others are refused while it runs."""
    breaker = opened_at(100.0)
    admissions = [breaker.admit(105.0) for _ in range(5)]
    probes = [a for a in admissions if a.allowed]
    assert len(probes) == 1
    assert probes[0] is admissions[0]
    assert probes[0].probe
    assert probes[0].transition == Transition(OPEN, HALF_OPEN, None)
    for refused in admissions[1:]:
        assert not refused.probe
        assert refused.transition is None
        assert refused.retry_after == pytest.approx(SETTINGS.cooldown_s)
    assert breaker.state is HALF_OPEN
    assert breaker.probe_in_flight


def test_probe_success_closes_and_resets() -> None:
    """A successful probe closes the breaker, clears the failures and restores cooldown_s."""
    breaker = opened_at(100.0)
    breaker.admit(105.0)
    breaker.record_failure(105.5)  # the probe fails: cooldown 10
    assert breaker.admit(115.5).probe
    assert breaker.record_success(116.0) == Transition(HALF_OPEN, CLOSED, None)
    assert breaker.state is CLOSED
    assert breaker.consecutive_failures == 0
    assert breaker.cooldown_s == 5.0
    assert breaker.opened_at is None
    assert not breaker.probe_in_flight
    assert breaker.admit(116.0).allowed
    # It takes the full threshold again to reopen, and the cooldown starts over at cooldown_s.
    assert breaker.record_failure(117.0) is None
    assert breaker.record_failure(118.0) is None
    assert breaker.record_failure(119.0) == Transition(CLOSED, OPEN, 5.0)


def test_probe_failure_reopens_with_doubled_cooldown() -> None:
    """A failed probe reopens the breaker from that moment with the cooldown doubled."""
    breaker = opened_at(100.0)
    assert breaker.admit(106.0).probe
    assert breaker.record_failure(107.0) == Transition(HALF_OPEN, OPEN, 10.0)
    assert breaker.state is OPEN
    assert breaker.opened_at == 107.0
    assert breaker.admit(112.0).retry_after == pytest.approx(5.0)
    assert not breaker.admit(116.9).allowed
    assert breaker.admit(117.0).probe


def test_cooldown_doubling_is_capped() -> None:
    """Repeated probe failures double the cooldown up to cooldown_max_s and no further."""
    breaker = opened_at(0.0)
    now = 0.0
    cooldowns = []
    for _ in range(4):
        now += breaker.cooldown_s
        assert breaker.admit(now).probe
        transition = breaker.record_failure(now)
        assert transition is not None
        cooldowns.append(transition.cooldown_s)
    assert cooldowns == [10.0, 15.0, 15.0, 15.0]


def test_abandon_probe_lets_next_call_probe_at_once() -> None:
    """A probe cancelled without an answer frees the slot: the next call probes immediately."""
    breaker = opened_at(100.0)
    assert breaker.admit(105.0).probe
    assert not breaker.admit(105.1).allowed
    breaker.abandon_probe(105.2)
    assert breaker.state is HALF_OPEN
    again = breaker.admit(105.2)
    assert again.allowed
    assert again.probe
    assert again.transition is None  # still half-open: nothing new to log
    assert not breaker.admit(105.3).allowed


def test_abandon_probe_outside_half_open_changes_nothing() -> None:
    """abandon_probe on a closed or open breaker is a no-op."""
    breaker = Breaker(SETTINGS)
    breaker.abandon_probe(0.0)
    assert breaker.state is CLOSED
    breaker = opened_at(100.0)
    breaker.abandon_probe(101.0)
    assert breaker.state is OPEN
    assert not breaker.admit(101.0).allowed


def test_results_recorded_while_open_are_ignored() -> None:
    """Stragglers admitted before the breaker opened neither close it nor restart its cooldown."""
    breaker = opened_at(100.0)
    assert breaker.record_success(101.0) is None
    assert breaker.record_failure(102.0) is None
    assert breaker.state is OPEN
    assert breaker.opened_at == 100.0
    assert breaker.cooldown_s == 5.0
    assert breaker.admit(105.0).probe


@pytest.mark.parametrize(
    ("threshold", "cooldown", "cooldown_max"),
    [(0, 5.0, 60.0), (3, 0.0, 60.0), (3, -1.0, 60.0), (3, 5.0, 4.0), (3, float("nan"), 60.0)],
)
def test_settings_reject_nonsense(threshold: int, cooldown: float, cooldown_max: float) -> None:
    """Settings need threshold >= 1, a positive cooldown and a cap no lower than it."""
    with pytest.raises(ValueError):
        BreakerSettings(threshold, cooldown, cooldown_max)


def test_registry_returns_the_same_breaker_for_a_key() -> None:
    """get creates a breaker on demand and returns that same one afterwards."""
    breakers = Breakers()
    key = BreakerKey("run-1", "ib_1", "wait")
    first = breakers.get(key, SETTINGS)
    assert breakers.get(key, SETTINGS) is first
    assert len(breakers) == 1


@pytest.mark.parametrize(
    "other",
    [
        BreakerKey("run-1", "ib_1", "read"),
        BreakerKey("run-1", "ib_2", "wait"),
        BreakerKey("run-2", "ib_1", "wait"),
    ],
    ids=["operation", "inbox", "run"],
)
def test_registry_isolates_keys(other: BreakerKey) -> None:
    """Opening the breaker of one (run, inbox, operation) leaves every other key closed."""
    breakers = Breakers()
    key = BreakerKey("run-1", "ib_1", "wait")
    for now in (1.0, 2.0, 3.0):
        breakers.get(key, SETTINGS).record_failure(now)
    assert breakers.get(key, SETTINGS).state is OPEN
    assert not breakers.get(key, SETTINGS).admit(4.0).allowed
    neighbour = breakers.get(other, SETTINGS)
    assert neighbour.state is CLOSED
    assert neighbour.admit(4.0).allowed
    assert breakers.snapshot() == {key: OPEN, other: CLOSED}


def test_forget_idle_drops_settled_breakers_after_the_grace() -> None:
    """Closed breakers with no failures are dropped once untouched for idle_after_s."""
    breakers = Breakers(idle_after_s=60.0, forget_after_s=600.0)
    settled = BreakerKey("run-1", "ib_1", "wait")
    failing = BreakerKey("run-1", "ib_1", "claim")
    breakers.get(settled, SETTINGS).admit(0.0)
    breakers.get(settled, SETTINGS).record_success(1.0)
    breakers.get(failing, SETTINGS).record_failure(1.0)
    assert breakers.forget_idle(30.0) == 0  # within the grace: a call may still be in flight
    assert breakers.forget_idle(61.0) == 0  # scans at most once per idle_after_s
    assert breakers.forget_idle(90.0) == 1
    assert breakers.snapshot() == {failing: CLOSED}
    assert breakers.get(failing, SETTINGS).consecutive_failures == 1


def test_forget_idle_drops_any_breaker_untouched_for_forget_after_s() -> None:
    """Even an open breaker is forgotten after forget_after_s of silence, and comes back closed."""
    breakers = Breakers(idle_after_s=60.0, forget_after_s=600.0)
    key = BreakerKey("run-1", "ib_1", "read")
    for now in (1.0, 2.0, 3.0):
        breakers.get(key, SETTINGS).record_failure(now)
    assert breakers.forget_idle(500.0) == 0
    assert breakers.get(key, SETTINGS).state is OPEN
    assert breakers.forget_idle(603.0) == 1
    assert len(breakers) == 0
    assert breakers.get(key, SETTINGS).state is CLOSED


def test_forget_idle_drops_breakers_never_used() -> None:
    """A breaker fetched but never admitted or recorded on is dropped at the next scan."""
    breakers = Breakers()
    breakers.get(("run-1", "ib_1", "wait"), SETTINGS)
    assert breakers.forget_idle(0.0) == 1


def test_registry_rejects_nonsense_ages() -> None:
    """idle_after_s must be positive and forget_after_s no shorter than it."""
    with pytest.raises(ValueError):
        Breakers(idle_after_s=0.0)
    with pytest.raises(ValueError):
        Breakers(idle_after_s=60.0, forget_after_s=30.0)


def test_registry_find_and_discard() -> None:
    """find() does not create; discard() forgets a breaker at once."""
    registry = Breakers()
    key = BreakerKey("run", "inbox", "wait")
    assert registry.find(key) is None and len(registry) == 0
    created = registry.get(key, BreakerSettings(2, 1.0, 4.0))
    assert registry.find(key) is created
    registry.discard(key)
    assert registry.find(key) is None and len(registry) == 0
