"""A deterministic, in-process fake of runsink, for testing an agent before connecting a real one.

``FakeSink`` has the client's interface (``sink.client.SinkApi``): ``create_inbox`` returns
the same ``Inbox`` handle, answers are the same ``Envelope``/``Message`` objects, errors the
same exceptions. What happens during each wait is scripted::

    fake = FakeSink([Waiting(), Waiting(), Received(subject="Reset", text="code 123456")])
    inbox = fake.create_inbox("run-1", "password-reset")
    message = inbox.expect_message(subject_contains="Reset")   # instant: the clock is fake

Other scripts: ``[Expired("lease")]``; ``[ProviderTimeout(), CircuitOpen(retry_after=5)]``.
Steps are used, in order, by the waits that reach the provider (as injected faults are on the
server); once the script is used up, nothing more arrives. ``deliver`` lets mail arrive
outside a wait, as SMTP would. Webhooks are kept and their deliveries queued, never sent.

The fake is the product itself: the real ``sink.agent.Agent`` and ``sink.ingest.Ingest`` over
the memory store (``sink.storage.memory``), and each step goes in through the product's own
hooks (``Received`` is an ingest, provider trouble an injected fault, ``Expired`` the clock,
``CircuitOpen`` the breaker). ``tests/test_client_contract.py`` runs one suite against the fake
and a real server. Time is a ``FakeClock``: long-polls and pauses move it instead of sleeping.
Ids come from a seeded generator, so a run is repeatable. No sockets; no thread or event loop
outlives a call.
"""

from __future__ import annotations

from sink.fake.aio import AsyncFakeSink
from sink.fake.script import (
    EPOCH,
    CircuitOpen,
    Expired,
    FakeClock,
    ProviderError,
    ProviderTimeout,
    Received,
    Step,
    Waiting,
)
from sink.fake.sink import FakeSink

__all__ = [
    "EPOCH",
    "AsyncFakeSink",
    "CircuitOpen",
    "Expired",
    "FakeClock",
    "FakeSink",
    "ProviderError",
    "ProviderTimeout",
    "Received",
    "Step",
    "Waiting",
]
