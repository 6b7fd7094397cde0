"""The delivery child: a process of its own that makes the attempts, off the ingest process.

    child = Child(on_outcome, on_restart, on_recorded, db)   # the worker's
    await child.run(stopping)               # starts it at the first send, restarts it if it dies
    child.send(key, url, secret, event_id, timestamp, body, delivery_id, attempt, now)

Signing and POSTing a delivery (``attempt.py``), with its task, its timeout and the answer's
socket reads, costs the process that does it about a third of what the whole delivery costs
the server (callgrind: a message 2.34M instructions; with a webhook 3.11M, 2.78M with the
attempts here); the child takes it off the loop that takes mail (and its GIL), which pays
a pipe write and read per loop turn instead. The child runs the server's own ``sink`` (its
folder first on the path), at a lower CPU priority than the server (``NICE``: on a busy
machine the mail is taken first, the deliveries follow), ignores Ctrl-C (the server stops
it) and ends at the end of its input.

With ``db`` (SQLite: the store's file) the child also writes the delivered attempts itself,
those that end within ``RECORD_S`` of each other in one transaction of its own connection
(``sink/storage/sqlite/webhooks.py record_delivered``): the server's writer, which takes the
mail, never sees them. Everything else (the outbox, the leases, the schedule, a failed
attempt's settle) is the server's.

On the pipe, server to child: a JSON line
``[key, url, secret, event_id, timestamp, n, delivery_id, attempt, now]`` then the body's
``n`` bytes (``now``: the server's clock when it sent it, so a delivered attempt's time
follows the server's clock); child to server, a line per attempt as it ends,
``key status error`` (``-`` for none), and with ``db`` a line ``+ key key ...`` once
delivered attempts are written, or ``! key ...`` for those it could not write (the server
settles them). The child ends when its stdin closes (the server stopped, or was killed:
nothing is left behind but the attempts it writes before it exits). If the child dies,
``on_restart`` is told once a new one runs (the first one too): the worker sends it the
attempts that had no answer (not settled, they are made again: at least once) and those that
waited for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sink.webhooks.attempt import post
from sink.webhooks.http import Http1

if TYPE_CHECKING:  # (the child imports it only when it writes: SQLite)
    from sink.storage.sqlite.webhooks import Delivered

IN_FLIGHT = 64  # attempts in flight in the child (the worker never sends more)
NICE = 5  # the child's priority below the server's (os.nice): mail first on a busy machine
RECORD_S = 0.1  # a delivered attempt is written this late at most, with the others
_RECORD_MAX = 256  # ... or as soon as this many wait
_RESTART_S = (0.05, 0.25, 1.0, 2.0)  # waits before restarting a child that died, growing

Outcome = Callable[[str, int | None, str | None], None]
Keys = Callable[[list[str], bool], None]  # keys written (True) or not (False)

# The child runs this server's own code: the folder holding the ``sink`` package it imported
# goes first on the child's path (``-m`` would look in the working directory first).
_ROOT = str(Path(__file__).resolve().parent.parent.parent)
_RUN = "import sys; sys.path.insert(0, sys.argv[1]); from sink.webhooks.child import main; main()"


class Child:
    """The server's side: the child process, its pipe, its restarts."""

    def __init__(
        self,
        on_outcome: Outcome,
        on_restart: Callable[[], None],
        on_recorded: Keys | None = None,
        db: str | None = None,
    ) -> None:
        """``db``: the SQLite file the child writes the delivered attempts to (``on_recorded``
        hears which it wrote); None: every attempt is settled by the server."""
        self._on_outcome = on_outcome
        self._on_restart = on_restart
        self._on_recorded = on_recorded
        self._db = db
        self._process: asyncio.subprocess.Process | None = None
        self._ready = asyncio.Event()
        self._wanted = asyncio.Event()
        self._out: list[bytes] = []  # frames of this turn of the loop, not written yet
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def records(self) -> bool:
        """Does the child write the delivered attempts itself?"""
        return self._db is not None

    def send(
        self,
        key: str,
        url: str,
        secret: str,
        event_id: str,
        timestamp: int,
        body: bytes,
        delivery_id: str = "",
        attempt: int = 0,
        now: float = 0.0,
    ) -> bool:
        """Hand one attempt to the child; False if none runs (the worker keeps it and sends
        it again at the restart)."""
        process = self._process
        if not self._ready.is_set() or process is None or process.stdin is None:
            self._wanted.set()  # the first attempt starts the child
            return False
        head = json.dumps(
            [key, url, secret, event_id, timestamp, len(body), delivery_id, attempt, now]
        )
        self._out += (head.encode(), b"\n", body)
        if len(self._out) == 3:  # the first of this turn: written at its end, all in one
            asyncio.get_running_loop().call_soon(self._write)
        return True

    def _write(self) -> None:
        out, self._out = self._out, []
        process = self._process
        if out and process is not None and process.stdin is not None:
            process.stdin.write(b"".join(out))

    def close(self) -> None:
        """Stopping: the child ends at the end of its input (what it had in flight is not
        answered: made again after the restart)."""
        process = self._process
        if process is not None and process.stdin is not None:
            process.stdin.close()

    async def run(self, stopping: asyncio.Event) -> None:
        failures = 0
        try:
            # Started at the first attempt: a server without webhooks never runs one.
            wanted = asyncio.ensure_future(self._wanted.wait())
            halted = asyncio.ensure_future(stopping.wait())
            await asyncio.wait({wanted, halted}, return_when=asyncio.FIRST_COMPLETED)
            wanted.cancel()
            halted.cancel()
            while not stopping.is_set():
                started = await self._start()
                if started:
                    self._on_restart()  # what waited for it, or the one before left unanswered
                    self.restarts += 1
                    failures = 0
                    await self._read(stopping)
                if stopping.is_set():
                    break
                from sink.logs import warn  # (logs are the server's: not in the child)

                code = None if self._process is None else self._process.returncode
                warn("webhook_child_died", returncode=code)
                wait = _RESTART_S[min(failures, len(_RESTART_S) - 1)]
                failures += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), wait)
        finally:
            self._ready.clear()
            await self._stop()

    async def _start(self) -> bool:
        try:
            self._process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                _RUN,
                _ROOT,
                self._db or "",
                str(RECORD_S),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
        except OSError:
            self._process = None
            return False
        self._ready.set()
        return True

    async def _read(self, stopping: asyncio.Event) -> None:
        process = self._process
        assert process is not None and process.stdout is not None
        stdout = process.stdout
        rest = b""
        try:
            while not stopping.is_set():
                chunk = await stdout.read(65536)  # every answer that came, at once
                if not chunk:
                    break
                *lines, rest = (rest + chunk).split(b"\n")
                for line in lines:
                    self._heard(line.decode().split())
        except (OSError, ValueError):
            pass  # a child that writes nonsense is ended and started anew
        finally:
            self._ready.clear()
            self._out = []  # not written to this child: sent to the next (on_restart)
            await self._stop()

    def _heard(self, words: list[str]) -> None:
        if words[0] in ("+", "!"):
            if self._on_recorded is None:
                raise ValueError("the child wrote attempts it was not asked to")
            self._on_recorded(words[1:], words[0] == "+")
            return
        key, status, error = words
        self._on_outcome(
            key, None if status == "-" else int(status), None if error == "-" else error
        )

    async def _stop(self) -> None:
        process = self._process
        if process is None:
            return
        if process.returncode is None:
            if process.stdin is not None:
                process.stdin.close()  # the child ends at EOF (writing what it holds first)
            try:
                await asyncio.wait_for(process.wait(), 2.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()


# -- the child process ---------------------------------------------------------------------


class _Recorder:
    """The child's writes of delivered attempts: gathered for ``RECORD_S``, one transaction."""

    def __init__(self, path: str, delay: float, say: Callable[[str], None]) -> None:
        from sink.storage.sqlite.webhooks import Delivered, record_delivered

        self._record = record_delivered
        self._item = Delivered
        self._path = path
        self._delay = delay
        self._say = say
        self._db: sqlite3.Connection | None = None
        self._waiting: list[tuple[str, Delivered]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._writing: asyncio.Task[None] | None = None

    def add(self, key: str, delivery_id: str, attempt: int, status: int, at: float) -> None:
        self._waiting.append((key, self._item(delivery_id, attempt, status, at)))
        if len(self._waiting) >= _RECORD_MAX:
            self._go()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._delay, self._go)

    def _go(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._writing is None and self._waiting:
            self._writing = asyncio.ensure_future(self._write())

    async def _write(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                try:
                    written = await asyncio.to_thread(self._in_thread, [d for _, d in batch])
                except sqlite3.Error:
                    written = set()
                done = [k for k, d in batch if d.delivery_id in written]
                left = [k for k, d in batch if d.delivery_id not in written]
                if done:
                    self._say("+ " + " ".join(done) + "\n")
                if left:
                    self._say("! " + " ".join(left) + "\n")
        finally:
            self._writing = None

    def _in_thread(self, batch: list[Delivered]) -> set[str]:
        if self._db is None:
            self._db = sqlite3.connect(
                self._path, isolation_level=None, check_same_thread=False, timeout=5.0
            )
            # A delivered attempt lost to a power cut is made again: no fsync of its own
            # (the server's next commit carries it to the disk).
            self._db.execute("PRAGMA synchronous = NORMAL")
        return self._record(self._db, batch)

    async def close(self) -> None:
        self._go()
        while self._writing is not None:
            await self._writing
            self._go()
        if self._db is not None:
            self._db.close()


async def _serve(db: str, delay: float) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, sys.stdout
    )
    out = asyncio.StreamWriter(transport, protocol, None, loop)
    http = Http1(IN_FLIGHT)
    tasks: set[asyncio.Task[None]] = set()
    answers: list[str] = []  # of this turn of the loop: written at its end, in one write

    def answer() -> None:
        out.write("".join(answers).encode())
        answers.clear()

    def say(line: str) -> None:
        answers.append(line)
        if len(answers) == 1:
            loop.call_soon(answer)

    recorder = _Recorder(db, delay, say) if db else None

    async def attempt(frame: list[Any], body: bytes) -> None:
        key, url, secret, event_id, ts, _, delivery_id, number, now = frame
        begun = time.monotonic()
        status, error = await post(http, url, secret, event_id, ts, body)
        say(f"{key} {'-' if status is None else status} {error or '-'}\n")
        if recorder is not None and error is None and status is not None:
            # Its time on the server's clock: when it was sent, and how long it took.
            recorder.add(key, delivery_id, number, status, now + time.monotonic() - begun)

    try:
        while True:
            line = await reader.readline()
            if not line:
                return  # the server closed the pipe: it stopped, or died
            frame = json.loads(line)
            body = await reader.readexactly(frame[5])
            task = asyncio.create_task(attempt(frame, body))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    except (asyncio.IncompleteReadError, ValueError):
        return
    finally:
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if recorder is not None:
            await recorder.close()  # what was delivered is written before the child ends
            answer()
        await http.close()


def main() -> None:
    # A Ctrl-C reaches the whole process group: the server stops, and this child with it
    # when the server closes its input (not before: its attempts would look failed).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.nice(NICE)
    db = sys.argv[2] if len(sys.argv) > 2 else ""
    delay = float(sys.argv[3]) if len(sys.argv) > 3 else RECORD_S
    # Its stderr is the server's log: whatever a library says there is a JSON line too.
    from sink.logs import setup

    setup("warning")
    if db:  # imported now, not in the loop's first turn that needs it (a 0.1 s stall)
        import sink.storage.sqlite.webhooks  # noqa: F401
    # Not asyncio's debug mode, even when the server runs in it (PYTHONASYNCIODEBUG): its
    # notes on the child's slow turns are not the server's.
    asyncio.run(_serve(db, delay), debug=False)


if __name__ == "__main__":
    main()
