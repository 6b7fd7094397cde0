"""Pieces shared by runsink's benchmarks: servers in subprocesses, a lean SMTP client, numbers.

Run directly, this file is also the two helper processes a benchmark starts, so that
neither shares the measured server's process:

    python bench/_common.py bare-sink            # aiosmtpd that stores nothing, answers 250
    python bench/_common.py send --port P ...    # N reused SMTP connections for a fixed time

Everything talks to 127.0.0.1 only, and every loop is bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
THIS_FILE = Path(__file__).resolve()
REPO = THIS_FILE.parent.parent
STARTUP_DEADLINE_S = 30.0
STOP_DEADLINE_S = 20.0


# -- server processes ---------------------------------------------------------------


@dataclass
class ServerProcess:
    """A server we started: its process, ports and stderr log."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    smtp_port: int
    http_port: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.http_port}"

    def peak_rss_mb(self) -> float | None:
        """VmHWM (the peak resident set) from /proc, in MiB; None once the process is gone."""
        return _proc_status_mb(self.pid, "VmHWM")

    def rss_mb(self) -> float | None:
        return _proc_status_mb(self.pid, "VmRSS")

    def cpu_s(self) -> float:
        return process_cpu_s(self.pid)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                return self.process.wait(5)
        return self.process.returncode


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (from /proc/<pid>/stat), with its
    children's: those it waited for (a delivery child that died) and those alive (runsink's
    delivery child, sink/webhooks/child.py), so a server's figure is all the CPU it costs."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    seconds = ticks / os.sysconf("SC_CLK_TCK")
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    for child in children:
        with contextlib.suppress(OSError, IndexError):
            seconds += process_cpu_s(int(child))
    return seconds


def _proc_status_mb(pid: int, key: str) -> float | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024  # kB
    return None


def _environment() -> dict[str, str]:
    # A RUNSINK_* variable in the caller's shell must not change what we measure.
    return {k: v for k, v in os.environ.items() if not k.startswith("RUNSINK_")}


def free_port() -> int:
    """A port free on loopback right now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def _spawn(
    name: str,
    command: list[str],
    log_path: Path,
    ports: tuple[int, int | None] | None = None,
    cwd: Path = REPO,
) -> ServerProcess:
    """Start ``command``; it is up once it logs ``listening`` or, given ``ports``, when the
    SMTP port accepts (runsink logs ``listening`` at info, which a quieter level hides)."""
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log_file,
            env=_environment(),
            cwd=cwd,
        )
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{name} exited with {process.returncode}: {tail}")
        for raw in log_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                line = json.loads(raw)
                if isinstance(line, dict) and line.get("event") == "listening":
                    return ServerProcess(
                        name, process, log_path, int(line["smtp_port"]), line.get("http_port")
                    )
        if ports is not None and _accepts(ports[0]):
            return ServerProcess(name, process, log_path, ports[0], ports[1])
        time.sleep(0.02)
    process.kill()
    process.wait(5)
    raise RuntimeError(f"{name} did not start within {STARTUP_DEADLINE_S}s (log: {log_path})")


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False


def serve_arguments(smtp_port: int, http_port: int, db: Path) -> list[str]:
    """`serve`'s options for a server on these loopback ports with this database."""
    return [
        "--smtp-host",
        HOST,
        "--http-host",
        HOST,
        "--smtp-port",
        str(smtp_port),
        "--http-port",
        str(http_port),
        "--db",
        str(db),
    ]


def start_runsink(
    folder: Path,
    *,
    name: str = "runsink",
    log_level: str = "warning",
    policy_file: Path | None = None,
    extra_args: Sequence[str] = (),
    tree: Path = REPO,
) -> ServerProcess:
    """`python -m sink serve` on free loopback ports with a fresh database in ``folder``;
    the code of ``tree`` (another checkout, run by its own ``.venv``), or this one's."""
    folder.mkdir(parents=True, exist_ok=True)
    smtp_port, http_port = free_port(), free_port()
    python = sys.executable if tree == REPO else str(tree / ".venv" / "bin" / "python")
    command = [
        python,
        "-m",
        "sink",
        "serve",
        *serve_arguments(smtp_port, http_port, folder / "bench.db"),
        "--log-level",
        log_level,
    ]
    if policy_file is not None:
        command += ["--policy-file", str(policy_file)]
    command += list(extra_args)
    server = _spawn(name, command, folder / f"{name}.log", (smtp_port, http_port), tree)
    _wait_ready(server)
    return server


def start_bare_sink(folder: Path, *, name: str = "bare") -> ServerProcess:
    """The baseline: aiosmtpd on the same kind of loop, storing nothing."""
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(THIS_FILE), "bare-sink"]
    return _spawn(name, command, folder / f"{name}.log")


def _wait_ready(server: ServerProcess) -> None:
    import httpx

    deadline = time.monotonic() + STARTUP_DEADLINE_S
    with httpx.Client(base_url=server.url, timeout=5) as client:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                if client.get("/readyz").status_code == 200:
                    return
            time.sleep(0.02)
    raise RuntimeError(f"{server.name} never became ready (log: {server.log_path})")


# -- the bare sink ------------------------------------------------------------------


async def _bare_sink() -> None:
    """aiosmtpd, one loop, ``loop.create_server`` like runsink; handle_DATA answers 250."""
    import logging

    from aiosmtpd.smtp import SMTP, Envelope, Session

    # runsink silences aiosmtpd's per-line INFO logging the same way.
    logging.getLogger("mail.log").setLevel(logging.ERROR)

    class Handler:
        async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
            return "250 OK"

    handler = Handler()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(
            handler,
            data_size_limit=26214400,
            enable_SMTPUTF8=True,
            hostname="sink.test",
            ident="bare",
            timeout=120,
            loop=loop,
        ),
        host=HOST,
        port=0,
    )
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    port = server.sockets[0].getsockname()[1]
    print(json.dumps({"event": "listening", "smtp_port": port}), file=sys.stderr, flush=True)
    await stop.wait()
    server.close()


# -- a lean SMTP client -------------------------------------------------------------


class SMTPError(Exception):
    pass


class SMTPClient:
    """Just enough SMTP for a load generator: EHLO once, then MAIL/RCPT/DATA, no pipelining."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def connect(cls, port: int, host: str = HOST) -> SMTPClient:
        reader, writer = await asyncio.open_connection(host, port)
        client = cls(reader, writer)
        code = await client._reply()
        if code != 220:
            raise SMTPError(f"greeting {code}")
        writer.write(b"EHLO bench.local\r\n")
        code = await client._reply()
        if code != 250:
            raise SMTPError(f"EHLO {code}")
        return client

    async def _reply(self) -> int:
        """Read one (possibly multi-line) reply; return its code."""
        while True:
            line = await self._reader.readline()
            if len(line) < 4:
                raise SMTPError(f"connection closed or short reply: {line!r}")
            if line[3:4] != b"-":
                return int(line[:3])

    async def send(self, mail_from: bytes, rcpt: bytes, message: bytes) -> int:
        """One transaction. ``message`` is dot-stuffed and ends with CRLF.CRLF."""
        write = self._writer.write
        write(b"MAIL FROM:<" + mail_from + b">\r\n")
        code = await self._reply()
        if code != 250:
            return code
        write(b"RCPT TO:<" + rcpt + b">\r\n")
        code = await self._reply()
        if code != 250:
            write(b"RSET\r\n")
            await self._reply()
            return code
        write(b"DATA\r\n")
        code = await self._reply()
        if code != 354:
            return code
        write(message)
        return await self._reply()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.write(b"QUIT\r\n")
            await asyncio.wait_for(self._reply(), 2)
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()


# -- a lean HTTP client ---------------------------------------------------------------


class Http:
    """A bare HTTP/1.1 client connection: one request at a time, Content-Length bodies."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Http:
        reader, writer = await asyncio.open_connection(HOST, port)
        return cls(reader, writer)

    def send(self, method: str, path: str, body: dict[str, Any] | None = None) -> None:
        payload = json.dumps(body).encode() if body is not None else b""
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        )
        self.writer.write(head.encode() + payload)

    async def response(self) -> tuple[int, bytes]:
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    async def call(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, bytes]:
        self.send(method, path, body)
        return await self.response()

    def close(self) -> None:
        self.writer.close()


def new_inbox(purpose: str, now: float) -> Any:
    """A ``NewInbox`` for a bench that writes through the real store (no hand-made SQL): a
    run of its own, an hour's lease. (sink is imported here: the sender process needs none.)"""
    import uuid

    from sink import ids
    from sink.inbox import Inbox
    from sink.storage.base import NewInbox

    local = ids.new_local_part()
    run_id = f"{purpose}-{uuid.uuid4().hex[:10]}"
    inbox = Inbox.fresh(
        inbox_id=ids.new_inbox_id(),
        run_id=run_id,
        purpose=purpose,
        address=f"{local}@sink.test",
        policy_name="ci",
        now=now,
        ttl_s=3600,
        poll_budget=12,
        trace_id=uuid.uuid4().hex,
    )
    return NewInbox(inbox, local, f"{purpose}:{run_id}", "{}", 100, 86400)


def delivery_of(new: Any, raw: bytes, now: float) -> Any:
    """An ``Incoming`` as ingest makes it: ``raw`` (without DATA's final dot) delivered to
    ``new``'s inbox, for a bench that writes through the real store."""
    from sink import ids
    from sink.message import summarize
    from sink.storage.base import Delivered, Incoming

    inbox = new.inbox
    return Incoming(
        raw=raw,
        summary=summarize(raw),
        mail_from="app@example.test",
        received_at=now,
        deliveries=(
            Delivered(inbox.inbox_id, inbox.run_id, ids.new_message_id(), (inbox.address,)),
        ),
    )


def make_message(to: str, size: int = 4096) -> bytes:
    """A plain-text mail of about ``size`` bytes, ready for DATA (dot-stuffed, terminated)."""
    head = (
        "From: App <app@example.test>\r\n"
        f"To: <{to}>\r\n"
        "Subject: Your sign-in code is 428913\r\n"
        "Date: Tue, 20 Oct 2026 02:30:00 +0000\r\n"
        "Message-ID: <bench@example.test>\r\n"
        "MIME-Version: 1.0\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        "\r\n"
        "Hello, your code is 428913. Or follow https://app.example.test/verify?t=abc123\r\n"
    )
    filler = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.\r\n"
    body = head
    while len(body) + len(filler) <= size - 5:
        body += filler
    return body.encode() + b".\r\n"


# -- the sender process -------------------------------------------------------------


async def _blast(
    port: int,
    rcpt: str,
    connections: int,
    duration: float,
    warmup: float,
    size: int,
    server_pid: int | None,
    reconnect: bool = False,
) -> dict[str, Any]:
    """Send over ``connections`` connections; count 250s inside the timed window.

    Connections are reused, or with ``reconnect`` each message has one of its own
    (greeting, EHLO, the transaction, QUIT), the way many apps send.
    """
    message = make_message(rcpt, size)
    clients = await asyncio.gather(*(SMTPClient.connect(port) for _ in range(connections)))
    loop = asyncio.get_running_loop()
    start = loop.time()
    window_start = start + warmup
    deadline = window_start + duration
    counted = 0
    sent = 0  # every 250, the warm-up's too (what the server stored)
    codes: Counter[int] = Counter()
    failures: Counter[str] = Counter()

    async def worker(client: SMTPClient) -> None:
        nonlocal counted, sent
        while loop.time() < deadline:
            try:
                if reconnect:
                    await client.close()
                    client = await SMTPClient.connect(port)
                code = await client.send(b"app@example.test", rcpt.encode(), message)
            except (SMTPError, OSError) as exc:
                failures[type(exc).__name__] += 1
                return
            now = loop.time()
            if code == 250:
                sent += 1
                if window_start <= now < deadline:
                    counted += 1
            else:
                codes[code] += 1

    def cpu() -> tuple[float, float]:
        server = process_cpu_s(server_pid) if server_pid else 0.0
        return time.process_time(), server

    async def cpu_at(moment: float) -> tuple[float, float]:
        await asyncio.sleep(max(0.0, moment - loop.time()))
        return cpu()

    # The window's CPU, the sender's own and the server's, sampled at its two edges.
    at_start = asyncio.ensure_future(cpu_at(window_start))
    at_end = asyncio.ensure_future(cpu_at(deadline))
    await asyncio.gather(*(worker(c) for c in clients))
    (client_0, server_0), (client_1, server_1) = await at_start, await at_end
    await asyncio.gather(*(c.close() for c in clients))
    return {
        "connections": connections,
        "ok": counted,
        "sent": sent,
        "rate": counted / duration,
        "other_codes": {str(k): v for k, v in codes.items()},
        "failures": dict(failures),
        "client_cpu_share": (client_1 - client_0) / duration,
        "server_cpu_share": (server_1 - server_0) / duration if server_pid else None,
        "server_cpu_us_per_msg": (server_1 - server_0) / counted * 1e6
        if server_pid and counted
        else None,
    }


def run_sender(
    port: int,
    rcpt: str,
    connections: int,
    duration: float,
    warmup: float = 0.5,
    size: int = 4096,
    server_pid: int | None = None,
    reconnect: bool = False,
) -> dict[str, Any]:
    """Run the sender in its own process (it must not share the server's CPU in-process)."""
    command = [
        sys.executable,
        str(THIS_FILE),
        "send",
        "--port",
        str(port),
        "--rcpt",
        rcpt,
        "--connections",
        str(connections),
        "--duration",
        str(duration),
        "--warmup",
        str(warmup),
        "--size",
        str(size),
    ]
    if server_pid is not None:
        command += ["--server-pid", str(server_pid)]
    if reconnect:
        command.append("--reconnect")
    limit = warmup + duration + 60
    done = subprocess.run(
        command, capture_output=True, timeout=limit, env=_environment(), check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"sender failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


# -- numbers ------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


# -- entry point for the helper processes -------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/_common.py")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("bare-sink", help="aiosmtpd that stores nothing")
    send = commands.add_parser("send", help="SMTP load over reused connections")
    send.add_argument("--port", type=int, required=True)
    send.add_argument("--rcpt", required=True)
    send.add_argument("--connections", type=int, default=1)
    send.add_argument("--duration", type=float, default=3.0)
    send.add_argument("--warmup", type=float, default=0.5)
    send.add_argument("--size", type=int, default=4096)
    send.add_argument("--server-pid", type=int, help="also report this process's CPU")
    send.add_argument("--reconnect", action="store_true", help="a new connection per message")
    args = parser.parse_args(argv)
    if args.command == "bare-sink":
        asyncio.run(_bare_sink())
        return 0
    result = asyncio.run(
        _blast(
            args.port,
            args.rcpt,
            args.connections,
            args.duration,
            args.warmup,
            args.size,
            args.server_pid,
            args.reconnect,
        )
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
