"""The evidence facts of v3 (resends, mismatches, near misses), on every storage backend.

The real Agent and Ingest over each adapter of ``tests/test_storage.py``'s ``OPENERS``
(memory, SQLite, PostgreSQL), on a fake clock: what an agent's answers say about newer
matching mail, ``order: newest``, the mail a mismatching wait passed over, and caught mail
addressed a typo away from the inbox.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sink import ids
from sink.agent import Agent, CreateRequest, WaitRequest
from sink.clock import FakeClock
from sink.config import Settings
from sink.envelope import Envelope
from sink.faults import FaultRegistry
from sink.guard import Guard
from sink.inbox import Match
from sink.ingest import Ingest
from sink.metrics import Metrics
from sink.storage.base import Storage
from sink.storage.postgres.store import PostgresStore
from sink.vocabulary import NextAction, Reason, State, Status
from sink.waiters import Waiters
from tests.test_storage import Backend, backend  # noqa: F401  (the parametrised fixture)

SENDER = "app@example.test"
KNOWN_LOCAL = "rknownlocalpart000001"


class KnownIds(ids.Ids):
    """Random ids, but the inboxes' local part is known before they are created."""

    def local_part(self) -> str:
        return KNOWN_LOCAL


class World:
    """The product's agent side and SMTP side over one store, on a fake clock."""

    def __init__(self, store: Storage, new_ids: ids.Ids = ids.RANDOM) -> None:
        self.clock = FakeClock()
        settings = Settings(domain="sink.test")
        waiters, metrics = Waiters(), Metrics()
        guard = Guard(FaultRegistry(random.Random(0)), store, metrics, self.clock)
        slots = store.slots if isinstance(store, PostgresStore) else None  # as the backend offers
        self.agent = Agent(store, waiters, settings, guard, metrics, self.clock, new_ids, slots)
        self.ingest = Ingest(store, waiters, settings, metrics, self.clock)
        self.run_id = "run-evidence"

    async def create(self, purpose: str = "signup") -> Envelope:
        request = CreateRequest(run_id=self.run_id, purpose=purpose)
        body = {"run_id": self.run_id, "purpose": purpose}
        return (await self.agent.create(request, body, None, None)).envelope

    async def send(self, to: str, subject: str) -> None:
        """One mail over the real ingest path (routing, then storing), a second later."""
        self.clock.advance(1)
        recipient = await self.ingest.route(to, None)
        raw = f"From: {SENDER}\r\nTo: {to}\r\nSubject: {subject}\r\n\r\nbody\r\n".encode()
        await self.ingest.deliver(SENDER, [recipient], raw)

    async def wait(self, inbox_id: str, **given: Any) -> Envelope:
        """A look-once wait, past any ``next_poll_at`` (the clock moves a minute first)."""
        self.clock.advance(60)
        request = WaitRequest(timeout_s=0, run_id=self.run_id, **given)
        return await self.agent.wait(inbox_id, request, None)

    async def get(self, inbox_id: str) -> Envelope:
        return await self.agent.get(inbox_id, None)


def scenario(
    backend: Backend,  # noqa: F811
    work: Callable[[World], Awaitable[None]],
    new_ids: ids.Ids = ids.RANDOM,
) -> None:
    async def run(store: Storage) -> None:
        await work(World(store, new_ids))

    backend.run(run)


def typo_of(address: str) -> str:
    """The address with its last local-part letter doubled (one insert away)."""
    local, _, domain = address.partition("@")
    return f"{local}{local[-1]}@{domain}"


# -- resends -------------------------------------------------------------------------


def test_a_received_answer_counts_the_newer_matching_deliveries(backend: Backend) -> None:  # noqa: F811
    """Wait, get and claim all say how many unclaimed matching mails came after theirs."""

    async def work(world: World) -> None:
        inbox = await world.create()
        for subject in ("Your code 111", "Newsletter", "Your code 222", "Your code 333"):
            await world.send(inbox.address, subject)
        code = Match(subject_contains="code")
        waited = await world.wait(inbox.inbox_id, match=code)
        assert waited.state is State.RECEIVED and waited.message is not None
        assert waited.message.subject == "Your code 111" and waited.newer_matching == 2
        page = await world.agent.messages(inbox.inbox_id, None, 50, world.run_id)
        subjects = {d.message_id: d.subject for d in page.messages}
        assert waited.newest_matching is not None
        assert subjects[waited.newest_matching] == "Your code 333"  # the resend's newest
        got = await world.get(inbox.inbox_id)  # by the last wait's criteria, not "anything"
        assert got.newer_matching == 2
        claimed = await world.agent.claim(waited.message.message_id, world.run_id, None)
        assert claimed.next_action is NextAction.PROCEED and claimed.newer_matching == 2
        again = await world.agent.claim(waited.message.message_id, world.run_id, None)
        assert again.reason is Reason.ALREADY_CLAIMED and again.newer_matching == 2
        last = await world.wait(inbox.inbox_id, match=code)
        assert last.message is not None and last.message.subject == "Your code 222"
        assert last.newer_matching == 1

    scenario(backend, work)


def test_an_answer_without_a_message_has_no_newer_matching(backend: Backend) -> None:  # noqa: F811
    """null, not 0, when the answer names no message."""

    async def work(world: World) -> None:
        inbox = await world.create()
        assert inbox.newer_matching is None
        assert (await world.wait(inbox.inbox_id)).newer_matching is None

    scenario(backend, work)


def test_a_claim_after_the_lease_names_no_message_and_no_newer_one(backend: Backend) -> None:  # noqa: F811
    """lease_expired beside an earlier claim: newer_matching null, no "without evidence"."""

    async def work(world: World) -> None:
        inbox = await world.create()
        await world.send(inbox.address, "Your code 111")
        await world.send(inbox.address, "Your code 222")
        waited = await world.wait(inbox.inbox_id)
        assert waited.message is not None and waited.newer_matching == 1
        await world.agent.claim(waited.message.message_id, world.run_id, None)
        page = await world.agent.messages(inbox.inbox_id, None, 50, world.run_id)
        (other,) = [d.message_id for d in page.messages if d.claim is None]
        world.clock.advance(3600)  # past the lease
        late = await world.agent.claim(other, world.run_id, None)
        assert late.reason is Reason.LEASE_EXPIRED and late.message is None
        assert late.newer_matching is None
        assert late.hint is not None and "without evidence" not in late.hint

    scenario(backend, work)


def test_order_newest_returns_the_newest_match_and_passes_older_ones_over(
    backend: Backend,  # noqa: F811
) -> None:
    """A resend: newest takes the last code; once claimed, the older one is never returned."""

    async def work(world: World) -> None:
        inbox = await world.create()
        await world.send(inbox.address, "Your code 111")
        await world.send(inbox.address, "Your code 222")
        await world.send(inbox.address, "Newsletter")
        code = Match(subject_contains="code")
        newest = await world.wait(inbox.inbox_id, match=code, order="newest")
        assert newest.message is not None and newest.message.subject == "Your code 222"
        assert newest.newer_matching == 0 and newest.state is State.RECEIVED
        again = await world.wait(inbox.inbox_id, match=code)  # unclaimed: the same one
        assert again.message is not None and again.message.message_id == newest.message.message_id
        await world.agent.claim(newest.message.message_id, world.run_id, None)
        after = await world.wait(inbox.inbox_id, match=code)
        assert after.state is State.WAITING and after.message is None

    scenario(backend, work)


# -- recoverable mismatches --------------------------------------------------------------


def test_a_mismatch_shows_what_it_passed_over_and_the_cursor_to_look_again(
    backend: Backend,  # noqa: F811
) -> None:
    """Up to 3 unmatched, newest first, and the cursor from before the wait (GET too)."""

    async def work(world: World) -> None:
        inbox = await world.create()
        for subject in ("Welcome 1", "Welcome 2", "Welcome 3", "Welcome 4"):
            await world.send(inbox.address, subject)
        before = await world.get(inbox.inbox_id)
        assert before.unmatched == () and before.rescan_cursor is None
        missed = await world.wait(inbox.inbox_id, match=Match(subject_contains="code"))
        assert missed.reason is Reason.EVIDENCE_MISMATCH
        assert missed.next_action is NextAction.VERIFY_TRIGGER
        assert [u.subject for u in missed.unmatched] == ["Welcome 4", "Welcome 3", "Welcome 2"]
        assert all(u.from_addr == SENDER for u in missed.unmatched)
        assert missed.rescan_cursor == before.cursor and missed.cursor != before.cursor
        got = await world.get(inbox.inbox_id)
        assert got.unmatched == missed.unmatched and got.rescan_cursor == missed.rescan_cursor
        rescan = await world.wait(
            inbox.inbox_id, cursor=missed.rescan_cursor, match=Match(subject_contains="welcome 1")
        )
        assert rescan.message is not None and rescan.message.subject == "Welcome 1"
        assert rescan.unmatched == () and rescan.rescan_cursor is None

    scenario(backend, work)


def test_only_a_mismatch_answer_carries_the_mail_it_passed_over(
    backend: Backend,  # noqa: F811
) -> None:
    """A too-early wait right after a mismatch says too_early, with unmatched [] and no
    rescan_cursor (contract v3: every answer but evidence_mismatch has neither)."""

    async def work(world: World) -> None:
        inbox = await world.create()
        await world.send(inbox.address, "Welcome")
        missed = await world.wait(inbox.inbox_id, match=Match(subject_contains="code"))
        assert missed.reason is Reason.EVIDENCE_MISMATCH and missed.unmatched
        request = WaitRequest(timeout_s=0, run_id=world.run_id)
        early = await world.agent.wait(inbox.inbox_id, request, None)  # before next_poll_at
        assert early.reason is Reason.TOO_EARLY
        assert early.unmatched == () and early.rescan_cursor is None

    scenario(backend, work)


# -- near misses ---------------------------------------------------------------------------


def test_mail_to_a_mistyped_address_is_a_near_miss_of_the_inbox(backend: Backend) -> None:  # noqa: F811
    """Caught mail one edit away: get lists it, a wait says evidence_misaddressed, the run
    report records it without content."""

    async def work(world: World) -> None:
        inbox = await world.create()
        typo = typo_of(inbox.address)
        await world.send(typo, "Your code 123456")
        got = await world.get(inbox.inbox_id)
        assert got.state is State.CREATED and got.reason is None  # a get keeps its reason
        assert [(n.address, n.distance) for n in got.near_misses] == [(typo, 1)]
        waited = await world.wait(inbox.inbox_id)
        assert (waited.state, waited.status) == (State.WAITING, Status.RETRYABLE)
        assert waited.reason is Reason.EVIDENCE_MISADDRESSED
        assert waited.next_action is NextAction.VERIFY_TRIGGER
        assert waited.near_misses == got.near_misses
        report = await world.agent.run_report(world.run_id)
        events = [e for e in report.events if e.type == "near_miss"]
        assert [(e.inbox_id, e.detail) for e in events] == [
            (inbox.inbox_id, {"address": typo, "distance": 1})
        ]
        # Matching evidence arrives: the list goes from that answer.
        await world.send(inbox.address, "Your code 654321")
        found = await world.wait(inbox.inbox_id)
        assert found.state is State.RECEIVED and found.near_misses == ()

    scenario(backend, work)


def test_only_wait_and_get_answers_carry_near_misses(backend: Backend) -> None:  # noqa: F811
    """A replayed create and a claim after the lease have near_misses [] (contract v3: "its
    wait and get answers carry near_misses ... other answers have near_misses: []"), and the
    late claim's hint says it came after the lease."""

    async def work(world: World) -> None:
        inbox = await world.create()
        await world.send(typo_of(inbox.address), "Your code 123456")
        await world.send(inbox.address, "Welcome")
        assert (await world.get(inbox.inbox_id)).near_misses  # a get tells it
        replayed = await world.create()
        assert replayed.inbox_id == inbox.inbox_id and replayed.near_misses == ()
        page = await world.agent.messages(inbox.inbox_id, None, 50, world.run_id)
        (delivery,) = page.messages
        world.clock.advance(3600)  # past the lease
        late = await world.agent.claim(delivery.message_id, world.run_id, None)
        assert late.reason is Reason.LEASE_EXPIRED and late.near_misses == ()
        assert late.hint is not None and "after the inbox's lease ended" in late.hint

    scenario(backend, work)


def test_near_misses_follow_the_rules_of_the_contract(backend: Backend) -> None:  # noqa: F811
    """Within 2 edits (a swap is one; +tag and case are none; the domain may be off by 2),
    after the inbox was created, of a live inbox only; newest first, at most 3."""

    async def work(world: World) -> None:
        # A typo of the address-to-be, sent before the inbox existed: never its near miss.
        await world.send(f"{KNOWN_LOCAL[:-1]}@sink.test", "Sent before the inbox existed")
        inbox = await world.create()
        local = inbox.address.split("@")[0]
        assert local == KNOWN_LOCAL
        assert (await world.get(inbox.inbox_id)).near_misses == ()
        swapped = f"{local[:3]}{local[4]}{local[3]}{local[5:]}@sink.test"
        sent = [
            (f"{local[:-3]}xyz@sink.test", None),  # three edits: ignored
            (swapped, 1),  # neighbours swapped: one edit
            (f"{local[:-1]}+signup@sink.test", 1),  # the tag removed, then one edit
            (f"{local.upper()}@sink.tset", 1),  # case is no edit; the domain is one off
        ]
        for address, _ in sent:
            await world.send(address, "Your code")
        got = await world.get(inbox.inbox_id)
        expected = [(a, d) for a, d in reversed(sent) if d is not None]
        assert [(n.address, n.distance) for n in got.near_misses] == expected
        times = [n.received_at for n in got.near_misses]
        assert times == sorted(times, reverse=True)
        await world.send(f"{local[:-1]}@sink.test", "A fourth near miss")
        assert len((await world.get(inbox.inbox_id)).near_misses) == 3  # the newest 3

    scenario(backend, work, KnownIds())


def test_an_expired_inbox_gets_no_near_misses(backend: Backend) -> None:  # noqa: F811
    """Once its lease ends (here: its run released), mail a typo away is just caught mail."""

    async def work(world: World) -> None:
        inbox = await world.create()
        await world.agent.release(world.run_id, None)
        await world.send(typo_of(inbox.address), "Your code")
        assert (await world.get(inbox.inbox_id)).near_misses == ()
        report = await world.agent.run_report(world.run_id)
        assert "near_miss" not in [e.type for e in report.events]

    scenario(backend, work)


def test_a_mismatch_wins_over_a_near_miss(backend: Backend) -> None:  # noqa: F811
    """Mail that arrived and did not match says more than mail that nearly arrived."""

    async def work(world: World) -> None:
        inbox = await world.create()
        await world.send(typo_of(inbox.address), "Your code")
        await world.send(inbox.address, "Newsletter")
        waited = await world.wait(inbox.inbox_id, match=Match(subject_contains="code"))
        assert waited.reason is Reason.EVIDENCE_MISMATCH and len(waited.near_misses) == 1
        assert [u.subject for u in waited.unmatched] == ["Newsletter"]

    scenario(backend, work)


def test_near_misses_told_before_a_claim_are_no_news_to_the_next_wait(
    backend: Backend,  # noqa: F811
) -> None:
    """After the run claimed its evidence, a wait for a next message counts only near misses
    caught since the claim."""

    async def work(world: World) -> None:
        inbox = await world.create()
        await world.send(typo_of(inbox.address), "Your code")
        await world.send(inbox.address, "Your code")
        found = await world.wait(inbox.inbox_id)
        assert found.message is not None
        await world.agent.claim(found.message.message_id, world.run_id, None)
        world.clock.advance(1)
        quiet = await world.wait(inbox.inbox_id)
        assert quiet.reason is Reason.EVIDENCE_NOT_FOUND and quiet.near_misses == ()
        await world.send(typo_of(inbox.address), "Your next code")
        told = await world.wait(inbox.inbox_id)
        assert told.reason is Reason.EVIDENCE_MISADDRESSED and len(told.near_misses) == 1

    scenario(backend, work)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)  # memory: no restart
def test_a_reopened_store_knows_the_live_inboxes_made_before(backend: Backend) -> None:  # noqa: F811
    """The near-miss index is loaded from the store at start-up: a process started after the
    inbox was created (a restart, another replica) still records its near misses."""
    made: dict[str, Envelope] = {}

    async def create(world: World) -> None:
        made["inbox"] = await world.create()

    async def later(world: World) -> None:
        inbox = made["inbox"]
        world.clock.advance(5)
        await world.send(typo_of(inbox.address), "Your code")
        got = await world.get(inbox.inbox_id)
        assert [n.address for n in got.near_misses] == [typo_of(inbox.address)]

    scenario(backend, create)
    scenario(backend, later)
