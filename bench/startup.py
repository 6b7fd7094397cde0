"""Start-up: exec to ready, and the idle RSS once ready, for runsink and its floors.

    .venv/bin/python bench/startup.py              # 7 rounds (about 20 s)
    .venv/bin/python bench/startup.py --quick      # 3 rounds

Each round starts, one after another and in turn first, each in a fresh process:
- **python -c pass**: the interpreter alone, exec to exit (its RSS: an interpreter idle
  on a read of its stdin);
- **bare aiosmtpd**: `bench/_common.py bare-sink` (aiosmtpd on `loop.create_server`), exec
  until it says it listens;
- **runsink serve**: `python -m sink serve` on free loopback ports with a fresh SQLite file
  and the default loop and log level, exec until `GET /readyz` answers 200 (probed every
  5 ms over a raw socket, so that the probe costs next to nothing); then at once, as a CI job
  would, `POST /v1/inboxes`: exec until that 201 is the first inbox.

CPU to ready is the process's user + system time when it is ready (`/proc/<pid>/stat`;
clock ticks of 10 ms): unlike the wall time it leaves out waiting for a core on a busy
machine. Idle RSS is `VmRSS` 0.5 s after ready (runsink's: after its first inbox). The table
shows the median and the range. A first, unmeasured round writes the bytecode caches (as
`pip install` does), since a shell with `PYTHONDONTWRITEBYTECODE` would otherwise make every
start compile runsink anew.
"""

from __future__ import annotations

import argparse
import os
import resource
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import HOST, REPO, THIS_FILE, free_port, serve_arguments  # bench/ is sys.path[0]

DEADLINE_S = 30.0
IDLE_S = 0.5
PROBE_EVERY_S = 0.005


def _environment() -> dict[str, str]:
    # As installed: bytecode cached (a first, unmeasured round writes it), no RUNSINK_*.
    skip = ("RUNSINK_", "PYTHONDONTWRITEBYTECODE")
    return {k: v for k, v in os.environ.items() if not k.startswith(skip)}


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds so far (/proc/<pid>/stat): the figure the machine's load
    moves least, where exec-to-ready also counts the time spent waiting for a core."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


# exec to ready (s), CPU to ready (s), idle RSS (MiB), exec to the first inbox (s, runsink only)
Figures = tuple[float, float, float, float | None]


def python_pass() -> Figures:
    """Exec to exit of ``python -c pass``; the RSS of an interpreter that runs nothing but
    a read of its stdin (a child's peak RSS from wait4 counts its parent's pages)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=_environment(), check=True)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    idle = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        env=_environment(),
    )
    try:
        time.sleep(IDLE_S)
        return elapsed, cpu, _rss_mb(idle.pid), None
    finally:
        assert idle.stdin is not None
        idle.stdin.close()
        idle.wait(10)


def _measure(
    command: list[str],
    ready: Callable[[subprocess.Popen[bytes]], bool],
    cwd: Path = REPO,
    then: Callable[[], None] | None = None,
) -> Figures:
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=_environment(),
        cwd=cwd,
    )
    try:
        deadline = started + DEADLINE_S
        while not ready(process):
            if process.poll() is not None:
                assert process.stderr is not None
                tail = process.stderr.read()[-2000:].decode(errors="replace")
                raise RuntimeError(f"{command[1:3]} exited with {process.returncode}: {tail}")
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{command[1:3]} not ready within {DEADLINE_S} s")
            time.sleep(PROBE_EVERY_S)
        elapsed = time.perf_counter() - started
        cpu = _cpu_s(process.pid)
        after = None
        if then is not None:
            then()
            after = time.perf_counter() - started
        time.sleep(IDLE_S)
        return elapsed, cpu, _rss_mb(process.pid), after
    finally:
        _stop(process)


def bare_aiosmtpd() -> Figures:
    """Ready once it prints its `listening` line (after `create_server` returned)."""

    def said_listening(process: subprocess.Popen[bytes]) -> bool:
        assert process.stderr is not None
        readable, _, _ = select.select([process.stderr], [], [], PROBE_EVERY_S)
        return bool(readable) and b"listening" in process.stderr.readline()

    return _measure([sys.executable, str(THIS_FILE), "bare-sink"], said_listening)


def runsink(folder: Path, tree: Path = REPO) -> Figures:
    """Ready once `GET /readyz` is 200, then the first inbox; the code of ``tree`` (``python
    -m`` runs the package in its working directory), by this interpreter and its dependencies."""
    http_port = free_port()
    db = folder / f"startup-{time.monotonic_ns()}.db"
    command = [sys.executable, "-m", "sink", "serve", *serve_arguments(free_port(), http_port, db)]
    request = f"GET /readyz HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode()

    def answers_ready(process: subprocess.Popen[bytes]) -> bool:
        try:
            with socket.create_connection((HOST, http_port), timeout=2) as probe:
                probe.sendall(request)
                return probe.recv(64).startswith(b"HTTP/1.1 200")
        except OSError:
            return False

    def first_inbox() -> None:
        body = b'{"run_id": "startup", "purpose": "signup"}'
        create = (
            f"POST /v1/inboxes HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        with socket.create_connection((HOST, http_port), timeout=DEADLINE_S) as client:
            client.sendall(create + body)
            status = client.recv(64)
        if not status.startswith(b"HTTP/1.1 201"):
            raise RuntimeError(f"POST /v1/inboxes answered {status!r}")

    return _measure(command, answers_ready, tree, first_inbox)


def _spread(values: list[float], shape: str) -> str:
    low, high = shape.format(min(values)), shape.format(max(values))
    return f"{shape.format(statistics.median(values))} ({low}-{high})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    parser.add_argument(
        "--also",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="also runsink from this checkout (e.g. an older commit: git archive | tar -x)",
    )
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else args.rounds
    with tempfile.TemporaryDirectory(prefix="runsink-startup-") as tmp:
        measures: dict[str, Callable[[], Figures]] = {
            "python -c pass": python_pass,
            "bare aiosmtpd": bare_aiosmtpd,
            "runsink serve": lambda: runsink(Path(tmp)),
        }
        for tree in args.also:
            measures[f"runsink serve ({tree})"] = lambda tree=tree: runsink(Path(tmp), tree)
        results: dict[str, list[Figures]] = {name: [] for name in measures}
        names = list(measures)
        for name in names:  # unmeasured: compiles and caches the bytecode, warms the disk cache
            measures[name]()
        for number in range(rounds):
            shift = number % len(names)  # each goes first in turn
            for name in names[shift:] + names[:shift]:
                results[name].append(measures[name]())
    print(f"Start-up, {rounds} rounds, median (range); load average {os.getloadavg()[0]:.2f}\n")
    print(
        "| process | exec to ready, ms | CPU to ready, ms | idle RSS, MiB | exec to 1st inbox, ms |"
    )
    print("|---|---|---|---|---|")
    for name, figures in results.items():
        inbox = [f[3] * 1000 for f in figures if f[3] is not None]
        columns = [
            _spread([f[0] * 1000 for f in figures], "{:.0f}"),
            _spread([f[1] * 1000 for f in figures], "{:.0f}"),
            _spread([f[2] for f in figures], "{:.1f}"),
            _spread(inbox, "{:.0f}") if inbox else "-",
        ]
        print(f"| {name} | " + " | ".join(columns) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
