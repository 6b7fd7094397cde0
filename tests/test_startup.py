"""Start-up imports only what the configuration uses: the MCP SDK, Jinja2, asyncpg and
tomllib (a policy or tokens file) wait for their first use, and pydantic with the wire models
(api/schemas.py, api/views.py) loads right after the first answer (api/warmup.py);
bench/startup.py measures what that saves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import free_port

# `runsink serve` in a thread of a fresh interpreter, so that its sys.modules can be read:
# when the first answer (the readiness probe's) has been sent, once the wire models have
# loaded after it, after a UI page, and after an MCP call.
PROBE = """
import json, sys, threading, time, urllib.request
import api.warmup
from api.cli import main

LAZY = (
    "api.openapi", "api.schemas", "api.views", "asyncpg", "jinja2", "mcp", "pydantic", "tomllib"
)

def loaded():
    return sorted(m for m in LAZY if m in sys.modules)

at_first_answer = []
warmed = threading.Event()
load_wire = api.warmup.load_wire

def load_wire_noting_modules():
    at_first_answer.extend(loaded())
    load_wire()
    warmed.set()

api.warmup.load_wire = load_wire_noting_modules

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

assert warmed.wait(30), "the wire models never loaded"
report = {"ready": at_first_answer, "warm": loaded()}

def unbuilt():
    models = sys.modules["api.schemas"]
    return [n for n in api.warmup.FIRST_MODELS if not getattr(models, n).__pydantic_complete__]

deadline = time.monotonic() + 30
while unbuilt() and time.monotonic() < deadline:
    time.sleep(0.01)
report["unbuilt"] = unbuilt()
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


def test_serve_is_ready_without_pydantic_mcp_jinja2_or_asyncpg(tmp_path: Path) -> None:
    """Ready with none loaded; the wire models (and the first calls' validators) after the
    first answer, Jinja2 with a page, the MCP SDK with an MCP call, never asyncpg for SQLite."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "runsink.db"), str(free_port())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    wire = ["api.schemas", "api.views", "pydantic"]
    assert report == {
        "ready": [],
        "warm": wire,
        "unbuilt": [],
        "ui": [200, sorted([*wire, "jinja2"])],
        "mcp": [True, sorted([*wire, "jinja2", "mcp"])],
    }
