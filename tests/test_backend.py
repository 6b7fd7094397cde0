"""The storage backend bundle: chosen by URL in one place, its offers as data, and the
runtime over the memory backend (real SMTP into a runtime whose store is dicts)."""

from __future__ import annotations

import asyncio
import smtplib
import subprocess
import sys
from pathlib import Path

from sink.agent import CreateRequest
from sink.config import Settings
from sink.events import Hub
from sink.runtime import Runtime
from sink.storage.backend import Announced, Backend, open_backend
from sink.storage.base import Event
from sink.storage.memory import memory_backend


def test_a_file_path_opens_sqlite_without_importing_asyncpg(tmp_path: Path) -> None:
    """A SQLite path chooses the SQLite backend, which offers nothing shared and never
    imports asyncpg (that comes only with a postgresql:// URL)."""
    code = (
        "import sys; from pathlib import Path; from sink.config import Settings; "
        "from sink.events import Hub; from sink.storage.backend import open_backend; "
        f"b = open_backend(Settings(db=Path({str(tmp_path / 's.db')!r})), Hub()); "
        "print(b.name, b.poll_slots, b.fleet_breakers, b.feed, b.feed_announces_commits, "
        "'asyncpg' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == ["sqlite", "None", "None", "None", "False", "False"]


def test_a_postgresql_url_offers_what_replicas_share() -> None:
    """A postgresql:// URL chooses PostgreSQL, offering poll slots, fleet breakers and a
    feed that announces every commit (nothing is opened until the runtime starts)."""
    backend = open_backend(Settings(db_url="postgresql://u@127.0.0.1:1/none"), Hub())
    assert backend.name == "postgresql"
    assert backend.poll_slots is not None and backend.fleet_breakers is not None
    assert backend.feed is not None and backend.feed_announces_commits
    assert backend.runs is not backend.store  # an object of its own, as mail is


def test_the_runtime_runs_over_the_memory_backend() -> None:
    """Runtime(settings, memory_backend): mail sent over real SMTP is delivered to an inbox
    the agent created, and the store announces its commits to the runtime's live hub."""

    async def scenario() -> tuple[str, int, list[str]]:
        heard: list[str] = []

        class Heard:
            def record(self, events: list[Event]) -> None:
                heard.extend(e.type for e in events)

        def opener(settings: Settings, hub: Announced) -> Backend:
            assert isinstance(hub, Hub)  # the runtime's own live hub
            return memory_backend(settings, Heard())

        runtime = Runtime(Settings(domain="sink.test", smtp_port=0), opener)
        await runtime.start()
        try:
            assert runtime.agent is not None
            request = CreateRequest(run_id="run-memory", purpose="signup")
            body = {"run_id": "run-memory", "purpose": "signup"}
            created = (await runtime.agent.create(request, body, None, None)).envelope
            inbox_id, address = created.inbox_id, created.address
            await asyncio.to_thread(_send, runtime.smtp_port, address)
            delivered = await runtime.store.deliveries_after(inbox_id, 0, 10)
            return runtime.backend.name, len(delivered), heard
        finally:
            await runtime.close()

    name, delivered, heard = asyncio.run(scenario())
    assert name == "memory" and delivered == 1
    assert heard == ["created", "message_accepted"]


def _send(port: int, to: str) -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as smtp:
        smtp.sendmail("app@example.test", [to], b"Subject: hi\r\n\r\nbody\r\n")
