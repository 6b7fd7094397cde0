"""This checkout's runsink against another checkout's, side by side: is a change faster?

    git worktree add ../base HEAD~1 && (cd ../base && python3 -m venv .venv &&
        .venv/bin/pip install -e .)
    .venv/bin/python bench/ab.py --base ../base              # 1 and 8 connections
    .venv/bin/python bench/ab.py --base ../base --levels 8,8r --rounds 12

Both servers run at once, at the default log level, each with a fresh database and one
inbox; every round sends to one then the other for ``--duration`` seconds (the order
alternates), and the figure is the median of the per-round ratios. On a shared machine
whose speed swings by ±20% from one minute to the next, a ratio taken within one round
is steadier than two runs of ``ingest.py`` compared afterwards. A level ``8r`` opens a
new connection per message.

It exits 0 whatever the figures: it reports.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, median, run_sender, start_runsink  # the bench folder is no package
from ingest import POLICIES, create_inbox, settle


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--base", type=Path, required=True, help="the other checkout")
    parser.add_argument("--levels", default="1,8", help="connections, comma-separated; 8r")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per send")
    args = parser.parse_args(argv)
    base = args.base.resolve()
    if not (base / ".venv" / "bin" / "python").exists():
        parser.error(f"{base} has no .venv: make one there first (see the usage above)")

    with tempfile.TemporaryDirectory(prefix="runsink-ab-") as tmp:
        folder = Path(tmp)
        policies = folder / "policies.toml"
        policies.write_text(POLICIES)
        servers = {}
        try:
            for name, tree in (("this", REPO), ("base", base)):
                server = start_runsink(
                    folder / name, name=name, log_level="info", policy_file=policies, tree=tree
                )
                servers[name] = (server, create_inbox(server, "ingest", ttl_s=3600)["address"])
            print(f"load average {os.getloadavg()[0]:.2f} at start", flush=True)
            print("| connections | base msg/s | this msg/s | this/base | range |")
            print("|---|---|---|---|---|")
            for level in args.levels.split(","):
                ratios, rates = _compare(servers, level, args.rounds, args.duration)
                print(
                    f"| {level} | {median(rates['base']):.0f} | {median(rates['this']):.0f} "
                    f"| **{median(ratios):.3f}** | {min(ratios):.2f}-{max(ratios):.2f} |",
                    flush=True,
                )
        finally:
            for server, _ in servers.values():
                server.stop()
    return 0


def _compare(
    servers: dict[str, tuple[object, str]], level: str, rounds: int, duration: float
) -> tuple[list[float], dict[str, list[float]]]:
    connections = int(level.rstrip("r"))
    rates: dict[str, list[float]] = {"this": [], "base": []}
    ratios = []
    for round_ in range(rounds):
        order = ["this", "base"] if round_ % 2 else ["base", "this"]
        got = {}
        for name in order:
            server, rcpt = servers[name]
            result = run_sender(
                server.smtp_port,  # type: ignore[attr-defined]
                rcpt,
                connections,
                duration,
                reconnect=level.endswith("r"),
            )
            got[name] = float(result["rate"])
            # Its search index catches up now, not during the other's send.
            settle(server, int(result["sent"]))  # type: ignore[arg-type]
            rates[name].append(got[name])
        ratios.append(got["this"] / got["base"] if got["base"] else 0.0)
        print(f"  {level} round {round_ + 1}/{rounds}: {ratios[-1]:.3f}", file=sys.stderr)
    return ratios, rates


if __name__ == "__main__":
    sys.exit(main())
