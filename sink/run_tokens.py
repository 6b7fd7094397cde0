"""Minting a run token: a token limited to one run, that ends when the run's last lease does.

The token itself is signed, not stored (``sink/tokens.py``); minting reads the run's leases,
picks the expiry, and records a ``token_minted`` event in the run's report (who minted it
and until when; never the token). A release (``DELETE /v1/runs/{id}``) ends every lease at
once, so it ends the run's tokens too: it records a ``run_released`` event, and a token
issued before the run's latest such event is refused on use (``released_since``), on
every process that shares the store.
"""

from __future__ import annotations

from dataclasses import dataclass

from sink import clock
from sink.logs import log
from sink.policy import Policy
from sink.storage.base import RUN_RELEASED, Event, Store
from sink.tokens import Grant, Keyring
from sink.vocabulary import State


@dataclass(frozen=True, slots=True)
class MintedToken:
    token: str
    run_id: str
    expires_at: float

    def __repr__(self) -> str:  # the token stays out of tracebacks and logs
        return f"MintedToken(run_id={self.run_id!r}, expires_at={self.expires_at!r})"


def run_token_expiry(
    now: float, lease_ends: list[float], ttl_s: int | None, default_policy: Policy
) -> float:
    """When a run token minted now ends.

    The run's last live lease, or ``ttl_s`` from now if that is sooner. A run with no live
    inbox (a harness minting before the agent creates one) gets the lease an inbox created
    now would get under the default policy (``ttl_s`` capped by it).
    """
    live = [end for end in lease_ends if end > now]
    if not live:
        return now + default_policy.ttl(ttl_s)
    end = max(live)
    if ttl_s is not None:
        end = min(end, now + ttl_s)
    return end


async def mint(
    store: Store,
    keyring: Keyring,
    default_policy: Policy,
    run_id: str,
    ttl_s: int | None,
    by: Grant,
    trace_id: str | None,
) -> MintedToken:
    now = clock.now()
    reports, _ = await store.run_report(run_id)
    lease_ends = [
        r.inbox.expires_at for r in reports if r.inbox.effective(now).state is not State.EXPIRED
    ]
    expires_at = run_token_expiry(now, lease_ends, ttl_s, default_policy)
    token = keyring.mint(run_id, now, expires_at)
    await store.add_events(
        [
            Event(
                run_id=run_id,
                type="token_minted",
                at=now,
                detail={"by": by.name, "expires_at": clock.rfc3339(expires_at)},
            )
        ]
    )
    log("run_token_minted", run_id=run_id, trace_id=trace_id, by=by.name)
    return MintedToken(token, run_id, expires_at)


def release_event(run_id: str, now: float) -> Event:
    """The run report's entry for a release: from then on, the run's tokens are refused."""
    return Event(run_id=run_id, type=RUN_RELEASED, at=now)


async def released_since(store: Store, run_id: str, issued_at: float) -> bool:
    """Was the run released at or after ``issued_at`` (so a token issued then has ended)?

    Asked on every request a run token makes: one indexed look-up of the run's latest
    release, in the store (no answer kept here, so a release on one replica counts on all)."""
    released_at = await store.run_released_at(run_id)
    return released_at is not None and released_at >= issued_at
