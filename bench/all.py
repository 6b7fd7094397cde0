"""Run every benchmark in bench/ and write their reports into bench/RESULTS.md.

    .venv/bin/python bench/all.py            # the full runs (tens of minutes)
    .venv/bin/python bench/all.py --quick    # each script's smoke run
    .venv/bin/python bench/all.py ingest     # only the named ones
    .venv/bin/python bench/all.py --quick --full store_size   # smoke runs, but that one in full

Each script starts what it measures and its peer in the same run and prints its own
Markdown table; this only runs them one after another (never two at once: they would
measure each other) and keeps what they print, with the date and the machine's load.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> (script, extra arguments for a quick run). The order is the report's.
SCRIPTS: dict[str, tuple[str, list[str]]] = {
    "ingest": ("ingest.py", ["--quick"]),
    "instructions": ("instructions.py", ["--quick"]),
    "search": ("search.py", ["--quick"]),
    "longpoll": ("longpoll.py", ["--quick"]),
    "longpoll_memory": ("longpoll_memory.py", ["--quick"]),
    "abuse": ("abuse.py", ["--quick"]),
    "ui": ("ui.py", ["--quick"]),
    "postgres": ("postgres.py", ["--quick"]),
    "store_size": ("store_size.py", ["--quick"]),
    "commit_pages": ("commit_pages.py", ["--commits", "100"]),
    "untrusted": ("untrusted.py", []),
    "startup": ("startup.py", ["--quick"]),
    "near_miss": ("near_miss.py", ["--quick"]),
    "webhooks": ("webhooks.py", ["--quick"]),
    "agent": ("agent.py", []),
    "run_token": ("run_token.py", ["--duration", "1"]),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"which ones (default: all of {list(SCRIPTS)})")
    parser.add_argument("--quick", action="store_true", help="each script's smoke run")
    parser.add_argument(
        "--full", action="append", default=[], metavar="NAME", help="with --quick: run NAME in full"
    )
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    args = parser.parse_args(argv)
    names = args.names or list(SCRIPTS)
    unknown = [name for name in [*names, *args.full] if name not in SCRIPTS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")

    sections = [
        "# Benchmark results",
        "",
        f"Written by `bench/all.py{' --quick' if args.quick else ''}"
        f"{''.join(f' --full {name}' for name in args.full)}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.2f} at start. "
        "Every ratio compares runsink with a peer measured in the same run.",
    ]
    failed = 0
    for name in names:
        script, quick_args = SCRIPTS[name]
        path = HERE / script
        sections += ["", f"## {name} (`bench/{script}`)", ""]
        if not path.exists():
            sections.append("(not present in this checkout)")
            continue
        quick = args.quick and name not in args.full
        command = [sys.executable, str(path), *(quick_args if quick else [])]
        print(f"== {' '.join(command[1:])}", file=sys.stderr, flush=True)
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        elapsed = time.monotonic() - started
        sys.stderr.write(done.stderr[-4000:])
        if done.returncode != 0:
            failed += 1
            sections.append(f"failed with exit code {done.returncode} after {elapsed:.0f} s:")
            sections += ["", "```", done.stderr[-3000:].rstrip(), "```"]
            continue
        sections.append(done.stdout.strip())
        sections += ["", f"({elapsed:.0f} s)"]
    args.out.write_text("\n".join(sections) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
