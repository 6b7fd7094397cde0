"""The README's examples run as written (issue 8 item 7): the walkthrough and the pytest one."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import free_port, start_server

README = Path(__file__).parent.parent / "README.md"

pytest_plugins = ("pytester",)


def section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


# A command line whose comment is the output it promises: a word, or JSON ending in `...}`.
PROMISE = re.compile(r"^(?!\s*#).*\S\s+# (\S+|\{.*\})$")


def walkthrough() -> str:
    (script,) = blocks(section("A 60-second walkthrough"), "sh")
    return script


def promised(script: str) -> list[str]:
    """The outputs the walkthrough's comments promise, in order."""
    return [m.group(1) for line in script.splitlines() if (m := PROMISE.match(line))]


def paste(script: str, folder: Path, http_port: int, smtp_port: int) -> list[str]:
    """Run the block as pasted into bash in ``folder``, on the given ports; its stdout lines."""
    body = script.replace("localhost:8025", f"localhost:{http_port}")
    body = body.replace('SMTP("127.0.0.1", 1025)', f'SMTP("127.0.0.1", {smtp_port})')
    body = body.replace(".venv/bin/runsink", str(Path(sys.executable).parent / "runsink"))
    bash = shutil.which("bash")
    assert bash is not None
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RUNSINK_")}
    environment |= {"RUNSINK_HTTP_PORT": str(http_port), "RUNSINK_SMTP_PORT": str(smtp_port)}
    result = subprocess.run(
        [bash, "-euo", "pipefail", "-c", body],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=folder,
        env=environment,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def check_outputs(script: str, out: list[str]) -> None:
    """Every promised output appears, in order, then the run report; nothing else is printed."""
    promises = promised(script)
    assert len(promises) == 5, promises
    assert len(out) == len(promises) + 1, out
    for line, promise in zip(out, promises, strict=False):
        if promise.endswith("...}"):
            assert line.startswith(promise.removesuffix("...}")), (line, promise)
        else:
            assert line == promise
    report = json.loads(out[-1])
    assert report["run_id"].startswith("run-") and len(report["inboxes"]) == 1


def refused(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def test_walkthrough_uses_the_running_sink_twice(tmp_path: Path) -> None:
    """Pasted twice beside a running sink (`make run`), it uses that sink and keeps its promises."""
    running = start_server(tmp_path / "make-run")
    try:
        script = walkthrough()
        assert "curl -s " not in script, "curl -sS: errors are shown"
        run_ids = []
        for _ in range(2):
            out = paste(script, tmp_path, running.http_port, running.smtp_port)
            check_outputs(script, out)
            run_ids.append(json.loads(out[-1])["run_id"])
        assert run_ids[0] != run_ids[1], "each paste is a run of its own"
        assert not (tmp_path / "runsink.log").exists(), "it started no server of its own"
        assert running.process.poll() is None, "it left the running sink alone"
    finally:
        running.stop()


def test_walkthrough_starts_and_stops_its_own_sink_twice(tmp_path: Path) -> None:
    """Pasted twice with no sink running, it starts one each time and leaves nothing running."""
    script = walkthrough()
    http_port, smtp_port = free_port(), free_port()
    for _ in range(2):
        out = paste(script, tmp_path, http_port, smtp_port)
        check_outputs(script, out)
        assert refused(http_port) and refused(smtp_port), "the sink it started is stopped"
        log = (tmp_path / "runsink.log").read_text(encoding="utf-8")
        assert '"event": "listening"' in log or '"event":"listening"' in log, log[-2000:]


def test_pytest_example_runs_as_written(pytester: pytest.Pytester) -> None:
    """The README's pytest example, saved as a test file, passes against the embedded server."""
    examples = [
        b for b in blocks(section("From Python, pytest and MCP"), "python") if "def test_" in b
    ]
    assert examples, "the README shows a pytest example"
    for number, example in enumerate(examples):
        pytester.makepyfile(**{f"test_readme_{number}": example})
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:schemathesis", "-p", "no:hypothesispytest"
    )
    result.assert_outcomes(
        passed=sum(b.count("\ndef test_") + b.startswith("def test_") for b in examples)
    )
