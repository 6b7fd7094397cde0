"""Fault injection: the faults a test asks for, and which call each one hits; pure.

Only served with ``--enable-faults``, never under the ``production`` policy (the caller checks).
A fault names a ``target`` (an agent operation or an SMTP step) and a ``mode``:

- ``timeout``: the call is held until its provider deadline, then fails as ``provider_timeout``;
- ``error``: ``provider_error`` (over SMTP a 451 reply, a 421 greeting for ``smtp.connect``);
- ``delay``: ``delay_s`` seconds are added, then the call proceeds.

How often it fires: ``count`` = the next N matching calls (the fault is removed once used up);
``probability`` = each matching call with that chance (drawn from the injected
``random.Random``); neither = every matching call until the faults are cleared. ``run_id``
limits a fault to one run's calls. Only a call that reaches the provider asks (``take``); one
refused as ``circuit_open`` or ``too_early`` uses nothing up. When several faults match, the
oldest that fires wins.
"""

from __future__ import annotations

import dataclasses
import random
import re
from dataclasses import dataclass
from typing import Final

__all__ = [
    "MAX_DELAY_S",
    "MODES",
    "TARGETS",
    "Fault",
    "FaultRegistry",
    "FaultSpec",
    "FaultSpecError",
]

TARGETS: Final = ("wait", "read", "claim", "smtp.connect", "smtp.rcpt", "smtp.data")
MODES: Final = ("timeout", "error", "delay")
MAX_DELAY_S: Final = 60.0

_RUN_ID: Final = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class FaultSpecError(ValueError):
    """A fault request that cannot be honoured; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """What ``POST /v1/faults`` asks for."""

    target: str
    mode: str
    count: int | None = None
    probability: float | None = None
    delay_s: float | None = None
    run_id: str | None = None

    def validate(self) -> None:
        """Raise FaultSpecError for the first field that is wrong."""
        if self.target not in TARGETS:
            raise FaultSpecError(
                "target", f"unknown target {self.target!r}; expected one of {', '.join(TARGETS)}"
            )
        if self.mode not in MODES:
            raise FaultSpecError(
                "mode", f"unknown mode {self.mode!r}; expected one of {', '.join(MODES)}"
            )
        if self.count is not None and self.probability is not None:
            raise FaultSpecError("probability", "give count or probability, not both")
        if self.count is not None and (isinstance(self.count, bool) or self.count < 1):
            raise FaultSpecError("count", f"must be an integer >= 1, got {self.count!r}")
        if self.probability is not None and not 0 < self.probability <= 1:
            raise FaultSpecError("probability", f"must be in (0, 1], got {self.probability!r}")
        if self.mode == "delay":
            if self.delay_s is None:
                raise FaultSpecError("delay_s", "mode 'delay' needs delay_s")
            if not 0 < self.delay_s <= MAX_DELAY_S:
                raise FaultSpecError(
                    "delay_s", f"must be in (0, {MAX_DELAY_S:g}], got {self.delay_s!r}"
                )
        elif self.delay_s is not None:
            raise FaultSpecError("delay_s", f"only mode 'delay' takes delay_s, not {self.mode!r}")
        if self.run_id is not None and not (
            isinstance(self.run_id, str) and _RUN_ID.fullmatch(self.run_id)
        ):
            raise FaultSpecError("run_id", "must be 1-128 characters of A-Za-z0-9._:-")


@dataclass(frozen=True, slots=True)
class Fault:
    """An injected fault as the registry holds it (and as ``GET /v1/faults`` lists it)."""

    fault_id: str
    target: str
    mode: str
    count: int | None
    probability: float | None
    delay_s: float | None
    run_id: str | None
    remaining: int | None
    """Calls left to hit, for a count fault; None otherwise."""
    created_at: float
    hits: int
    """Calls hit so far."""

    def matches(self, target: str, run_id: str | None) -> bool:
        return self.target == target and (self.run_id is None or self.run_id == run_id)


class FaultRegistry:
    """The faults in force, oldest first. In memory; the caller owns the only instance."""

    __slots__ = ("_faults", "_rng")

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng if rng is not None else random.Random()
        self._faults: dict[str, Fault] = {}  # by fault_id, in creation order

    def __len__(self) -> int:
        return len(self._faults)

    def __bool__(self) -> bool:
        return bool(self._faults)

    @property
    def is_empty(self) -> bool:
        return not self._faults

    def add(self, spec: FaultSpec, now: float) -> Fault:
        """Validate ``spec`` (FaultSpecError) and put it in force."""
        spec.validate()
        fault = Fault(
            fault_id=self._new_id(),
            target=spec.target,
            mode=spec.mode,
            count=spec.count,
            probability=spec.probability,
            delay_s=spec.delay_s,
            run_id=spec.run_id,
            remaining=spec.count,
            created_at=now,
            hits=0,
        )
        self._faults[fault.fault_id] = fault
        return fault

    def list(self) -> list[Fault]:
        """The faults in force, oldest first."""
        return [*self._faults.values()]

    def clear(self) -> int:
        """Remove every fault; return how many there were."""
        removed = len(self._faults)
        self._faults.clear()
        return removed

    def take(self, target: str, run_id: str | None) -> Fault | None:
        """The fault that hits this call, as it stands after the hit; None if none fires.

        Call it only for a call that reaches the provider. A count fault is used up by one,
        and removed at zero.
        """
        if not self._faults:
            return None
        for fault in self._faults.values():
            if not fault.matches(target, run_id):
                continue
            if fault.probability is not None and self._rng.random() >= fault.probability:
                continue
            remaining = None if fault.remaining is None else fault.remaining - 1
            hit = dataclasses.replace(fault, remaining=remaining, hits=fault.hits + 1)
            # Returning right after the change keeps the iteration above safe.
            if remaining == 0:
                del self._faults[fault.fault_id]
            else:
                self._faults[fault.fault_id] = hit
            return hit
        return None

    def _new_id(self) -> str:
        while True:
            fault_id = f"flt_{self._rng.getrandbits(64):016x}"
            if fault_id not in self._faults:
                return fault_id
