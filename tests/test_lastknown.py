"""The last known inboxes: what the Agent answers from while the store cannot be read."""

from __future__ import annotations

from dataclasses import replace

from sink.inbox import Evidence
from sink.lastknown import LastKnown
from tests.test_storage import new_inbox


def test_keeps_the_latest_of_each_inbox_and_forgets_the_least_recently_seen() -> None:
    """Bounded: past its size the inbox seen longest ago goes; seeing one again renews it."""
    known = LastKnown(kept=2)
    first, second, third = (new_inbox(f"r{n}").inbox for n in range(3))
    known.saw(first)
    known.saw(second)
    known.saw(replace(first, polls_used=1))  # first is now the most recent
    known.saw(third)
    assert known.inbox(second.inbox_id) is None
    latest = known.inbox(first.inbox_id)
    assert latest is not None and latest.polls_used == 1
    assert known.inbox(third.inbox_id) == third and len(known) == 2


def test_knows_which_inbox_a_message_it_handed_out_belongs_to() -> None:
    """Evidence in an inbox, or a message listed for it, leads back to the inbox."""
    known = LastKnown()
    inbox = new_inbox().inbox
    evidence = Evidence("msg_a", 1, "Subject", "app@x.test", inbox.created_at)
    known.saw(replace(inbox, evidence=evidence))
    known.saw_message("msg_b", inbox.inbox_id)
    assert known.inbox_of("msg_a") == known.inbox_of("msg_b") == known.inbox(inbox.inbox_id)
    assert known.inbox_of("msg_unknown") is None
