"""The README's examples run as written (issue 8 item 7): the walkthrough and the pytest one."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Server, start_server

README = Path(__file__).parent.parent / "README.md"

pytest_plugins = ("pytester",)


def section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


@pytest.fixture(scope="module")
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server of its own: the walkthrough uses a fixed run id (ci-1842)."""
    running = start_server(tmp_path_factory.mktemp("readme"))
    yield running
    running.stop()


def test_walkthrough_runs_as_pasted(own_server: Server) -> None:
    """The walkthrough block, pasted into bash (its ports swapped for free ones), gets the code."""
    (script,) = blocks(section("A 60-second walkthrough"), "sh")
    lines = script.splitlines()
    assert "runsink serve &" in lines[0], "the walkthrough starts the server first"
    body = "\n".join(lines[1:])
    assert "localhost:8025/readyz" in body, "the walkthrough waits for /readyz"
    assert "curl -s " not in body, "curl -sS: errors are shown"
    body = body.replace("localhost:8025", f"localhost:{own_server.http_port}")
    body = body.replace('SMTP("127.0.0.1", 1025)', f'SMTP("127.0.0.1", {own_server.smtp_port})')
    bash = shutil.which("bash")
    assert bash is not None
    result = subprocess.run(
        [bash, "-euo", "pipefail", "-c", body], capture_output=True, text=True, timeout=90
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert "claim_message" in out and "482913" in out and "Acme" in out and "proceed" in out
    assert '"run_id":"ci-1842"' in out[-1]


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
