"""The TypeScript client (clients/typescript) and its Playwright example, run for real from pytest.

Built with its committed lockfile and tsc; its unit tests and its integration tests (each file
starts a real ``runsink serve`` on free ports from this venv) run under ``node --test``; then the
package is packed with ``npm pack``, the tarball installed into examples/playwright-signup, and
that example runs in Debian's Chromium: what users install is what is tested. On CI a missing
Node, npm or Chromium fails (``need``); locally it skips. npm installs stay cached in node_modules
between local runs (reinstalled when the lockfile is newer).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import need, start_server
from tests.support_ui import chromium_available, chromium_path

ROOT = Path(__file__).resolve().parents[1]
CLIENT = ROOT / "clients" / "typescript"
EXAMPLE = ROOT / "examples" / "playwright-signup"
RUNSINK = Path(sys.executable).with_name("runsink")
INSTALL = ".ci/install/typescript.sh"


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None, ok: bool = True) -> str:
    """Run a command; unless ``ok`` is False, its exit code must be 0 (else its output is shown)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RUNSINK_")}
    environment.update({"PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1", "NO_COLOR": "1", **(env or {})})
    result = subprocess.run(
        command,
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if ok:
        assert result.returncode == 0, (
            f"{' '.join(command)} (in {cwd}) exited with {result.returncode}\n"
            f"--- stdout\n{result.stdout[-8000:]}\n--- stderr\n{result.stderr[-8000:]}"
        )
    return result.stdout


def npm_ci(folder: Path) -> None:
    """``npm ci`` from the committed lockfile, unless node_modules is already that install."""
    installed = folder / "node_modules" / ".package-lock.json"
    lock = folder / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], folder)


@pytest.fixture(scope="module")
def client() -> Path:
    """The client, installed from its lockfile and compiled (dist/ and the tests)."""
    need("Node.js", shutil.which("node") is not None, f"apt-get install nodejs npm; {INSTALL}")
    need("npm", shutil.which("npm") is not None, f"apt-get install npm; {INSTALL}")
    npm_ci(CLIENT)
    run(["npm", "run", "--silent", "build"], CLIENT)
    run(["npm", "run", "--silent", "build:test"], CLIENT)
    return CLIENT


@pytest.fixture(scope="module")
def example(client: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The Playwright example with the client installed from its packed tarball."""
    need("chromium", chromium_available(), f"apt-get install chromium; {INSTALL}")
    packed = tmp_path_factory.mktemp("pack")
    run(["npm", "pack", "--silent", "--ignore-scripts", "--pack-destination", str(packed)], client)
    (tarball,) = packed.glob("runsink-*.tgz")
    npm_ci(EXAMPLE)
    installed = EXAMPLE / "node_modules" / "runsink"
    run(["npm", "install", "--no-save", "--no-audit", "--no-fund", str(tarball)], EXAMPLE)
    assert not installed.is_symlink(), "runsink must be installed from the tarball, not linked"
    assert (installed / "dist" / "playwright.js").is_file()
    yield EXAMPLE


def example_env() -> dict[str, str]:
    return {"RUNSINK_COMMAND": str(RUNSINK), "CHROMIUM_PATH": chromium_path()}


def test_unit_tests_pass(client: Path) -> None:
    """The client's unit tests (node --test on the compiled output) pass."""
    output = run(["node", "--test", ".test-build/unit/"], client)
    assert "# fail 0" in output


def test_integration_tests_pass_against_a_real_server(client: Path) -> None:
    """The client's integration tests pass against real `runsink serve` processes on free ports."""
    assert RUNSINK.exists(), f"no {RUNSINK}: make install"
    output = run(
        ["node", "--test", "--test-concurrency=1", ".test-build/integration/"],
        client,
        {"RUNSINK_COMMAND": str(RUNSINK)},
    )
    assert "# fail 0" in output


def test_playwright_example_signs_up_in_chromium_from_the_packed_client(
    example: Path, tmp_path: Path
) -> None:
    """Four signups at RUNSINK_URL on 2 workers verify, each with its own inbox's code; released."""
    spec = example / "tests" / "signup.spec.ts"
    assert len(spec.read_text().splitlines()) <= 15
    server = start_server(tmp_path / "runsink")
    try:
        external = {
            "RUNSINK_URL": server.url,
            "RUNSINK_SMTP_HOST": "127.0.0.1",
            "RUNSINK_SMTP_PORT": str(server.smtp_port),
        }
        output = run(
            ["npx", "playwright", "test", "--reporter=list"], example, {**example_env(), **external}
        )
        assert "4 passed" in output, output
        assert "using 2 workers" in output, output
        with server.http() as http:
            mail = http.get("/v1/messages", params={"query": "subject:code"}).json()["messages"]
            runs = [m["run_id"] for m in mail]
            assert len(mail) == 4 and len(set(runs)) == 4, mail
            assert not any(m["caught"] for m in mail), mail
            for run_id in runs:
                report = http.get(f"/v1/runs/{run_id}").json()
                assert len(report["inboxes"]) == 1, report
                types = [e["type"] for e in report["events"]]
                assert types.count("message_accepted") == 1 and "claimed" in types, types
                assert "released" in types, types
    finally:
        server.stop()


def test_a_failing_playwright_test_carries_the_run_report(example: Path) -> None:
    """A failing test (its worker started its own server) says why and carries the run report."""
    output = run(
        ["npx", "playwright", "test", "-c", "playwright.failing.config.ts", "--reporter=json"],
        example,
        example_env(),
        ok=False,
    )
    tests = [t for spec in _specs(json.loads(output)) for t in spec["tests"]]
    results = [r for t in tests for r in t["results"]]
    assert [r["status"] for r in results] == ["failed"], output[-4000:]
    (result,) = results
    error = result["error"]["message"]
    assert "EvidenceNotFound" in error
    assert "reason=evidence_not_found, next_action=wait_for_message" in error
    assert "\n  hint: " in error
    (attachment,) = [a for a in result["attachments"] if a["name"] == "runsink-run-report"]
    assert attachment["contentType"] == "application/json"
    report = json.loads(base64.b64decode(attachment["body"]))
    assert report["run_id"] in error
    assert [i["inbox_id"] for i in report["report"]["inboxes"]] == [report["inbox_id"]]
    assert any(e["type"] == "polled" for e in report["report"]["events"]), report["summary"]


def test_readme_and_example_type_check_against_the_packed_client(example: Path) -> None:
    """The READMEs' TypeScript examples and the example's own compile (strict) as installed."""
    blocks = _ts_blocks(ROOT / "README.md", "JavaScript and Playwright")
    blocks += _ts_blocks(CLIENT / "README.md", "Playwright Test")
    blocks += _ts_blocks(CLIENT / "README.md", "The client")
    assert len(blocks) == 4, blocks
    checks = [example / f"readme-check-{i}.ts" for i in range(len(blocks))]
    for check, block in zip(checks, blocks, strict=True):
        check.write_text(block)
    types = CLIENT / "node_modules" / "@types"
    try:
        run(
            [
                "node",
                str(CLIENT / "node_modules" / "typescript" / "bin" / "tsc"),
                *("--noEmit", "--strict", "--skipLibCheck", "--allowJs", "--target", "es2022"),
                *("--module", "nodenext", "--moduleResolution", "nodenext"),
                *("--typeRoots", str(types), "--types", "node"),
                *(check.name for check in checks),
                "tests/signup.spec.ts",
                "failing/never-sent.spec.ts",
                "global-setup.ts",
                "playwright.config.ts",
                "playwright.failing.config.ts",
            ],
            example,
        )
    finally:
        for check in checks:
            check.unlink()


def _ts_blocks(readme: Path, heading: str) -> list[str]:
    """The ```ts blocks of one section (up to the next heading of its level or above)."""
    text = readme.read_text()
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 5)
    return re.findall(r"```ts\n(.*?)```", text[start : end if end >= 0 else None], re.S)


def _specs(suite: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from suite.get("specs", [])
    for child in suite.get("suites", []):
        yield from _specs(child)
