"""The scripted agent's scenarios, next to a naive wait-and-poll loop: calls, characters, time.

Starts a real ``runsink serve`` with the short policy of ``tests/scripted_agent.py`` and
plays every scenario there twice, all at the same time, over one MCP transport:

- guided: the scripted agent of the tests (it follows next_tool, next_arguments and
  retry_after, and ends on a stop or on a hint that names a cause outside runsink);
- naive: what agents did before the guidance fields: create_inbox, trigger the app, then
  wait_for_message (timeout_s 30) again and again until a message arrives (claim it,
  read it, submit its first code) or the inbox expires (create the next one, up to 3); it
  reads no next_tool, next_arguments or hint.

Printed per scenario and agent: how it ended, calls, the characters of the answers it
read (tokens ~ characters / 4) and the wall time; and the size of what a model reads
before its first call (tools/list and the server instructions). Waits are real: the
policy keeps them short (long_poll_max_s 2, hint_after_s 5, poll_budget 12).

    .venv/bin/python bench/agent.py                    # about a minute
    .venv/bin/python bench/agent.py --transport stdio
    .venv/bin/python bench/agent.py --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.scripted_agent import (
    MAX_CALLS,
    POLICY,
    POLICY_NAME,
    SCENARIOS,
    Answer,
    Connection,
    Outcome,
    StagingApp,
    Step,
    connect,
    play,
    tools_list_chars,
)
from tests.support import start_server

NAIVE_INBOXES = 3  # older agents made a new inbox when one expired, up to the policy
NAIVE_TIMEOUT_S = 30  # and asked for long waits (capped by long_poll_max_s)
NAIVE_MAX_CALLS = 80
NAIVE_DEADLINE_S = 180.0


async def naive_agent(
    connection: Connection, app: StagingApp, run_id: str, purpose: str, **create: Any
) -> Outcome:
    """Wait and poll until a message or the budget ends; never reads the guidance fields."""
    started = time.monotonic()
    steps: list[Step] = []

    async def call(tool: str, arguments: dict[str, Any]) -> Answer:
        answer = await connection.call(tool, arguments)
        steps.append(Step(tool, arguments, answer, time.monotonic() - started))
        return answer

    def end(how: str, **more: Any) -> Outcome:
        return Outcome(how, steps, time.monotonic() - started, **more)

    for _ in range(NAIVE_INBOXES):
        made = await call("create_inbox", {"run_id": run_id, "purpose": purpose, **create})
        if made.is_error:
            return end("stop")  # policy_forbids: no more inboxes
        address, inbox_id = made.body["address"], made.body["inbox_id"]
        await app.trigger(address)
        while len(steps) < NAIVE_MAX_CALLS:
            waited = await call(
                "wait_for_message",
                {"inbox_id": inbox_id, "run_id": run_id, "timeout_s": NAIVE_TIMEOUT_S},
            )
            body = waited.body
            if body.get("retry_after"):
                await asyncio.sleep(body["retry_after"])
            if waited.is_error:
                continue
            if body.get("state") == "expired":
                break
            if body.get("message") and body.get("state") == "received":
                message_id = body["message"]["message_id"]
                await call("claim_message", {"message_id": message_id, "run_id": run_id})
                read = await call("read_message", {"message_id": message_id, "run_id": run_id})
                codes = read.body.get("codes") or [None]
                code = codes[0]
                accepted = code is not None and app.verify(address, code)
                return end("code", code=code, accepted=accepted)
    return end("budget")


def _ended(outcome: Outcome, has_code: bool, guided: bool) -> str:
    if outcome.ended_by == "code":
        return "valid code" if outcome.accepted else "WRONG code"
    if outcome.ended_by == "cause":
        return "cause named"
    if outcome.ended_by == "stop" and guided:
        return "stop, cause named"  # the stop answer's hint, which this agent reads
    if outcome.ended_by in ("stop", "budget") and not has_code:
        return "gave up, cause unknown"
    return outcome.ended_by


def _figures(outcome: Outcome, has_code: bool, guided: bool) -> dict[str, Any]:
    return {
        "ended": _ended(outcome, has_code, guided),
        "calls": outcome.calls,
        "inboxes": outcome.tools().count("create_inbox"),
        "answer_chars": outcome.answer_chars,
        "tokens": round(outcome.answer_chars / 4),
        "wall_s": round(outcome.wall_s, 1),
    }


async def measure(url: str, smtp_port: int, transport: str) -> list[dict[str, Any]]:
    async with connect(transport, url) as connection:
        guided = asyncio.gather(*(play(s, connection, url, smtp_port, "guide") for s in SCENARIOS))
        naive = asyncio.gather(
            *(
                play(s, connection, url, smtp_port, "naive", naive_agent, NAIVE_DEADLINE_S)
                for s in SCENARIOS
            )
        )
        done = await asyncio.gather(guided, naive)
    rows = []
    for scenario, (g, _, _), (n, _, _) in zip(SCENARIOS, *done, strict=True):
        rows.append(
            {
                "scenario": scenario.name,
                "guided": _figures(g, scenario.has_code, guided=True),
                "naive": _figures(n, scenario.has_code, guided=False),
            }
        )
    return rows


def _table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| scenario | guided: ended | calls | answer chars (~tokens) | wall s "
        "| naive: ended | calls | answer chars (~tokens) | wall s |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for row in rows:
        cells = [row["scenario"]]
        for who in ("guided", "naive"):
            f = row[who]
            cells += [
                f["ended"],
                str(f["calls"]),
                f"{f['answer_chars']:,} (~{f['tokens']:,})",
                f"{f['wall_s']:.1f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    total = {
        who: (
            sum(r[who]["calls"] for r in rows),
            sum(r[who]["answer_chars"] for r in rows),
            sum(r[who]["wall_s"] for r in rows),
        )
        for who in ("guided", "naive")
    }
    (gc, gch, gw), (nc, nch, nw) = total["guided"], total["naive"]
    lines.append(
        f"| **all** | | {gc} | {gch:,} (~{gch // 4:,}) | {gw:.1f} "
        f"| | {nc} | {nch:,} (~{nch // 4:,}) | {nw:.1f} |"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transport", choices=("http", "stdio"), default="http")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    assert MAX_CALLS <= NAIVE_MAX_CALLS
    with tempfile.TemporaryDirectory() as folder:
        policy = Path(folder) / "policies.toml"
        policy.write_text(POLICY)
        server = start_server(
            Path(folder),
            "--policy-file",
            str(policy),
            "--default-policy",
            POLICY_NAME,
            "--enable-faults",
        )
        try:
            tools_chars, instructions_chars = tools_list_chars(server.url)
            started = time.monotonic()
            rows = asyncio.run(measure(server.url, server.smtp_port, args.transport))
            elapsed = time.monotonic() - started
        finally:
            server.stop()
    print(
        f"Scripted agent vs naive wait-and-poll, MCP over {args.transport}, policy "
        f"`{POLICY_NAME}` (long_poll_max_s 2, hint_after_s 5, poll_budget 12, "
        f"inboxes_per_purpose 2); all {2 * len(rows)} runs at once took {elapsed:.0f} s; "
        f"load average {os.getloadavg()[0]:.1f}.\n"
    )
    print(
        f"Before the first call a model reads tools/list: {tools_chars:,} characters "
        f"(~{tools_chars // 4:,} tokens), and the server instructions: {instructions_chars:,} "
        f"characters (~{instructions_chars // 4:,} tokens).\n"
    )
    print("\n".join(_table(rows)))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "tools_list_chars": tools_chars,
                    "instructions_chars": instructions_chars,
                    "rows": rows,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
