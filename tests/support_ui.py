"""Support for the web UI's tests and bench: a store full of runs, and the browser.

``seed_runs`` writes through the real SQLite store (the same writer and group commit the
server uses), before the server starts on that file: 10k runs in a few seconds, where the
HTTP API would need minutes.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

from sink import clock, ids
from sink.inbox import Match, State
from sink.inbox import Inbox as InboxValue
from sink.storage.base import Delivered, Event, Incoming, NewInbox
from sink.message import summarize
from sink.storage.sqlite import SQLiteStore

CHROMIUM = os.environ.get("RUNSINK_CHROMIUM", "/usr/bin/chromium")


def chromium_available() -> bool:
    return Path(CHROMIUM).exists() or shutil.which("chromium") is not None


def chromium_path() -> str:
    return CHROMIUM if Path(CHROMIUM).exists() else (shutil.which("chromium") or CHROMIUM)


def playwright_available() -> bool:
    try:
        import playwright  # noqa: F401
    except ImportError:
        return False
    return True


def seed_runs(db: Path, runs: int, domain: str = "sink.test", with_mail_every: int = 10) -> None:
    """``runs`` runs of one inbox each, spread over the last day; every n-th has a message."""
    asyncio.run(_seed(db, runs, domain, with_mail_every))


async def _seed(db: Path, runs: int, domain: str, with_mail_every: int) -> None:
    store = SQLiteStore(db)
    await store.open()
    try:
        now = clock.now()
        batch: list[asyncio.Future[object]] = []
        for n in range(runs):
            batch.append(
                asyncio.ensure_future(_one_run(store, n, now - (runs - n), domain, with_mail_every))
            )
            if len(batch) >= 256:
                await asyncio.gather(*batch)
                batch.clear()
        await asyncio.gather(*batch)
    finally:
        await store.close()


async def _one_run(
    store: SQLiteStore, n: int, at: float, domain: str, with_mail_every: int
) -> object:
    run_id = f"seed-{n:05d}"
    local = ids.new_local_part()
    inbox = InboxValue(
        inbox_id=ids.new_inbox_id(),
        run_id=run_id,
        purpose="signup-check" if n % 2 else "password-reset",
        address=f"{local}@{domain}",
        policy_name="ci",
        created_at=at,
        expires_at=at + 600,
        poll_budget=12,
        polls_used=0,
        next_poll_at=None,
        cursor_seq=0,
        state=State.CREATED,
        reason=None,
        evidence=None,
        match=Match(),
        trace_id=ids.new_trace_id(),
    )
    new = NewInbox(
        inbox=inbox,
        local_part=local,
        idempotency_key=f"{inbox.purpose}:{run_id}",
        request_json=json.dumps({"run_id": run_id, "purpose": inbox.purpose}),
        inboxes_per_purpose=3,
        retention_s=86400,
    )
    created = Event(run_id, "created", at, inbox.inbox_id, detail={"purpose": inbox.purpose})
    await store.create_inbox(new, created)
    if with_mail_every and n % with_mail_every == 0:
        raw = (
            f"From: app@example.test\r\nTo: {inbox.address}\r\nSubject: Welcome {n}\r\n\r\n"
            f"Your code is {100000 + n}.\r\n"
        ).encode()
        delivered = Delivered(inbox.inbox_id, run_id, ids.new_message_id(), (inbox.address,))
        await store.save_message(
            Incoming(raw, summarize(raw), "app@example.test", at + 1, (delivered,))
        )
    return None
