"""Instructions per message: runsink against a bare aiosmtpd sink, counted, not timed.

    .venv/bin/python bench/instructions.py            # 1,000 messages per row
    .venv/bin/python bench/instructions.py --quick    # 300 messages per row

Messages per second on a shared 2-core machine swing by 2x from one second to the next
(bench/ingest.py shows the range of its rounds); a count of the instructions a server runs
per message does not. Each server runs under valgrind's callgrind, which counts the
instructions of every thread of the process (user space only: the kernel's side of a
``send()`` or an ``fsync()`` is not in it, and is the same for both servers but the
fsync). For each row: a warm-up, the counters zeroed, N messages over C connections, a
count; for runsink a second count after a search has made its index catch up with them,
so the work it defers past the 250 is in the figure too.

Counting is slow (callgrind runs the code 20-50 times slower), so the figures are for
cost, not speed. It needs valgrind (Debian: ``apt-get install valgrind``) and exits 0
whether or not the ratio is good: it reports.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # the bench folder is not a package: see sys.path above
    HOST,
    REPO,
    THIS_FILE,
    SMTPClient,
    free_port,
    make_message,
    serve_arguments,
)

POLICIES = """
[policy.bench]
ttl_default_s = 3600
ttl_max_s = 3600
inboxes_per_purpose = 100
"""
STARTUP_DEADLINE_S = 300.0  # imports under callgrind take tens of seconds
WARMUP_MESSAGES = 200


@dataclass
class Counted:
    """One server under callgrind: its process, where it dumps, its SMTP and HTTP ports."""

    process: subprocess.Popen[bytes]
    dump: Path
    smtp_port: int
    http_port: int | None
    dumps: int = 0

    def zero(self) -> None:
        subprocess.run(
            ["callgrind_control", "-z", str(self.process.pid)], check=True, capture_output=True
        )

    def count(self) -> int:
        """Instructions since the last zero (a dump, which also zeroes the counters)."""
        subprocess.run(
            ["callgrind_control", "-d", str(self.process.pid)], check=True, capture_output=True
        )
        self.dumps += 1
        dumped = Path(f"{self.dump}.{self.dumps}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if dumped.exists():
                match = re.search(r"^summary: (\d+)", dumped.read_text(errors="replace"), re.M)
                if match:
                    return int(match.group(1))
            time.sleep(0.2)
        raise RuntimeError(f"no callgrind dump at {dumped}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def _callgrind(dump: Path, command: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={dump}",
            "--dump-instr=no",
            *command,
        ],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )


def start_runsink(folder: Path) -> Counted:
    smtp_port, http_port = free_port(), free_port()
    (folder / "policies.toml").write_text(POLICIES)
    process = _callgrind(
        folder / "runsink.cg",
        [
            sys.executable,
            "-m",
            "sink",
            "serve",
            *serve_arguments(smtp_port, http_port, folder / "bench.db"),
            "--policy-file",
            str(folder / "policies.toml"),
        ],
        folder / "runsink.log",
    )
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"runsink exited: {(folder / 'runsink.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"http://{HOST}:{http_port}/readyz", timeout=5).status_code == 200:
                return Counted(process, folder / "runsink.cg", smtp_port, http_port)
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise RuntimeError("runsink did not start under callgrind")


def start_bare(folder: Path) -> Counted:
    log = folder / "bare.log"
    process = _callgrind(folder / "bare.cg", [sys.executable, str(THIS_FILE), "bare-sink"], log)
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the bare sink exited: {log.read_text()[-2000:]}")
        match = re.search(r'"smtp_port": (\d+)', log.read_text(errors="replace"))
        if match:
            return Counted(process, folder / "bare.cg", int(match.group(1)), None)
        time.sleep(0.5)
    process.kill()
    raise RuntimeError("the bare sink did not start under callgrind")


@dataclass(frozen=True)
class Level:
    """A row: ``connections`` at once, reused (``8``) or a new one per message (``8r``:
    greeting, EHLO, the transaction, QUIT)."""

    connections: int
    reconnect: bool

    @classmethod
    def parse(cls, text: str) -> Level:
        return cls(int(text.rstrip("r")), text.endswith("r"))

    def __str__(self) -> str:
        return (
            f"{self.connections}, new connection each" if self.reconnect else str(self.connections)
        )


async def send(port: int, rcpt: str, level: Level, count: int) -> None:
    """``count`` messages over ``level``'s connections; every one must get 250."""
    message = make_message(rcpt)
    left = count

    async def sender() -> None:
        nonlocal left
        client = await SMTPClient.connect(port)
        try:
            while left > 0:
                left -= 1
                code = await client.send(b"app@example.test", rcpt.encode(), message)
                if code != 250:
                    raise RuntimeError(f"the server answered {code}")
                if level.reconnect and left > 0:
                    await client.close()
                    client = await SMTPClient.connect(port)
        finally:
            await client.close()

    await asyncio.gather(*(sender() for _ in range(level.connections)))


def measure(server: Counted, rcpt: str, level: Level, count: int) -> tuple[int, int | None]:
    """Instructions per message at the 250s and, for runsink, with its index caught up."""
    asyncio.run(send(server.smtp_port, rcpt, level, WARMUP_MESSAGES))
    settle(server)
    server.zero()
    asyncio.run(send(server.smtp_port, rcpt, level, count))
    at_250 = server.count()
    if server.http_port is None:
        return at_250 // count, None
    settle(server)
    indexed = server.count()
    return at_250 // count, (at_250 + indexed) // count


def settle(server: Counted) -> None:
    """runsink: a search, which indexes every stored message before it answers."""
    if server.http_port is not None:
        response = httpx.get(
            f"http://{HOST}:{server.http_port}/v1/messages",
            params={"query": "zzqx-never-there", "limit": 1},
            timeout=120,
        )
        response.raise_for_status()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 messages per row")
    parser.add_argument("--messages", type=int, help="messages per row")
    parser.add_argument(
        "--levels",
        default="1,8,8r",
        help="connections, comma-separated; 8r: 8 with a new connection per message",
    )
    args = parser.parse_args(argv)
    count = args.messages or (300 if args.quick else 1000)
    levels = [Level.parse(level) for level in args.levels.split(",")]
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 0

    folder = Path(tempfile.mkdtemp(prefix="runsink-instructions-"))
    rows: list[tuple[Level, int, int, int]] = []
    try:
        bare = start_bare(folder)
        try:
            bare_counts = [measure(bare, "x@sink.test", level, count)[0] for level in levels]
        finally:
            bare.stop()
        runsink = start_runsink(folder)
        try:
            created = httpx.post(
                f"http://{HOST}:{runsink.http_port}/v1/inboxes",
                json={"run_id": "bench-instructions", "purpose": "bench", "ttl_s": 3600},
                timeout=60,
            )
            created.raise_for_status()
            rcpt = created.json()["address"]
            for level, bare_count in zip(levels, bare_counts, strict=True):
                at_250, indexed = measure(runsink, rcpt, level, count)
                rows.append((level, bare_count, at_250, indexed or at_250))
        finally:
            runsink.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    print(
        f"instructions per ~4 KB message under callgrind ({count} messages a row, "
        f"load average {os.getloadavg()[0]:.2f}; counts do not depend on it)\n"
    )
    print(
        "| connections | bare aiosmtpd | runsink, at the 250 | runsink, index caught up "
        "| runsink/bare (250) | runsink/bare (indexed) |"
    )
    print("|---|---|---|---|---|---|")
    for level, bare_count, at_250, indexed in rows:
        print(
            f"| {level} | {bare_count:,} | {at_250:,} | {indexed:,} | "
            f"**{at_250 / bare_count:.2f}** | {indexed / bare_count:.2f} |"
        )
    print(
        "\n(user-space instructions of every thread of the server; the kernel's work, "
        "send() and fsync() among it, is not counted)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
