"""Start-up imports only what the configuration uses: the MCP SDK, Jinja2 and asyncpg wait
for their first use (bench/startup.py measures what that saves)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import free_port

# `runsink serve` in a thread of a fresh interpreter, so that its sys.modules can be read:
# after start-up, after a UI page, and after an MCP call.
PROBE = """
import json, sys, threading, time, urllib.request
from api.cli import main

db, port = sys.argv[1], int(sys.argv[2])
arguments = ["serve", "--smtp-port", "0", "--http-port", str(port), "--db", db]
threading.Thread(target=main, args=(arguments,), daemon=True).start()
url = f"http://127.0.0.1:{port}"
deadline = time.monotonic() + 30
while True:
    try:
        if urllib.request.urlopen(url + "/readyz", timeout=5).status == 200:
            break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.02)

def loaded():
    return sorted(m for m in ("asyncpg", "jinja2", "mcp") if m in sys.modules)

report = {"ready": loaded()}
page = urllib.request.urlopen(url + "/", timeout=10)
report["ui"] = [page.status, loaded()]
call = urllib.request.Request(
    url + "/mcp",
    data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode(),
    headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
)
answer = urllib.request.urlopen(call, timeout=10).read().decode()
report["mcp"] = ["create_inbox" in answer, loaded()]
print(json.dumps(report))
"""


def test_serve_imports_mcp_and_jinja2_on_first_use_and_never_asyncpg_for_sqlite(
    tmp_path: Path,
) -> None:
    """Ready with none of the three loaded; a page loads Jinja2, an MCP call the SDK."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "runsink.db"), str(free_port())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report == {
        "ready": [],
        "ui": [200, ["jinja2"]],
        "mcp": [True, ["jinja2", "mcp"]],
    }
