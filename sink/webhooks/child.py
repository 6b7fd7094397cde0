"""The delivery child: a process of its own that makes the attempts, off the ingest process.

    child = Child(on_outcome, on_restart)   # the worker's
    await child.run(stopping)               # starts it at the first send, restarts it if it dies
    child.send(key, url, secret, event_id, timestamp, body)  # False: none runs yet

Signing and POSTing a delivery (``attempt.py``), with its task, its timeout and the answer's
socket reads, costs the process that does it about a third of what the whole delivery costs
the server (callgrind: a message 2.34M instructions; with a webhook 3.11M, 2.78M with the
attempts here); the child takes it off the loop that takes mail (and its GIL), which pays
a pipe write and read per loop turn instead. The
child runs the server's own ``sink`` (its folder first on the path), ignores Ctrl-C (the
server stops it) and ends at the end of its input.
The server keeps everything else: the outbox, the leases, the schedule, the settles.

On the pipe, server to child: a JSON line ``[key, url, secret, event_id, timestamp, n]``
then the body's ``n`` bytes; child to server: a line ``key status error`` (``-`` for
none), one per attempt, as it ends. The child ends when its stdin closes (the server
stopped, or was killed: nothing is left behind). If the child dies, ``on_restart`` is told
once a new one runs (the first one too): the worker sends it the attempts that had no
answer (not settled, they are made again: at least once) and those that waited for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from sink.webhooks.attempt import post
from sink.webhooks.http import Http1

IN_FLIGHT = 64  # attempts in flight in the child (the worker never sends more)
_RESTART_S = (0.05, 0.25, 1.0, 2.0)  # waits before restarting a child that died, growing

Outcome = Callable[[str, int | None, str | None], None]

# The child runs this server's own code: the folder holding the ``sink`` package it imported
# goes first on the child's path (``-m`` would look in the working directory first).
_ROOT = str(Path(__file__).resolve().parent.parent.parent)
_RUN = "import sys; sys.path.insert(0, sys.argv[1]); from sink.webhooks.child import main; main()"


class Child:
    """The server's side: the child process, its pipe, its restarts."""

    def __init__(self, on_outcome: Outcome, on_restart: Callable[[], None]) -> None:
        self._on_outcome = on_outcome
        self._on_restart = on_restart
        self._process: asyncio.subprocess.Process | None = None
        self._ready = asyncio.Event()
        self._wanted = asyncio.Event()
        self._out: list[bytes] = []  # frames of this turn of the loop, not written yet
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def send(
        self, key: str, url: str, secret: str, event_id: str, timestamp: int, body: bytes
    ) -> bool:
        """Hand one attempt to the child; False if none runs (the worker keeps it and sends
        it again at the restart)."""
        process = self._process
        if not self._ready.is_set() or process is None or process.stdin is None:
            self._wanted.set()  # the first attempt starts the child
            return False
        head = json.dumps([key, url, secret, event_id, timestamp, len(body)])
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
                    key, status, error = line.decode().split()
                    self._on_outcome(
                        key, None if status == "-" else int(status), None if error == "-" else error
                    )
        except (OSError, ValueError):
            pass  # a child that writes nonsense is ended and started anew
        finally:
            self._ready.clear()
            self._out = []  # not written to this child: sent to the next (on_restart)
            await self._stop()

    async def _stop(self) -> None:
        process = self._process
        if process is None:
            return
        if process.returncode is None:
            if process.stdin is not None:
                process.stdin.close()  # the child ends at EOF
            try:
                await asyncio.wait_for(process.wait(), 1.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()


# -- the child process ---------------------------------------------------------------------


async def _serve() -> None:
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

    async def attempt(key: str, url: str, secret: str, event_id: str, ts: int, body: bytes) -> None:
        status, error = await post(http, url, secret, event_id, ts, body)
        answers.append(f"{key} {'-' if status is None else status} {error or '-'}\n")
        if len(answers) == 1:
            loop.call_soon(answer)

    try:
        while True:
            line = await reader.readline()
            if not line:
                return  # the server closed the pipe: it stopped, or died
            key, url, secret, event_id, ts, size = json.loads(line)
            body = await reader.readexactly(size)
            task = asyncio.create_task(attempt(key, url, secret, event_id, ts, body))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    except (asyncio.IncompleteReadError, ValueError):
        return
    finally:
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await http.close()


def main() -> None:
    # A Ctrl-C reaches the whole process group: the server stops, and this child with it
    # when the server closes its input (not before: its attempts would look failed).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    asyncio.run(_serve())


if __name__ == "__main__":
    main()
