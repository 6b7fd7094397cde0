"""The README's webhook receivers (Python and Node) run as pasted: each verifies what is
signed with its secret, prints the event, and never answers 2xx to a forged delivery."""

from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sink.client import Sink
from sink.webhook_signature import new_secret, signed_headers
from tests.support import Server, free_port, need, new_run_id
from tests.test_typescript import CLIENT, INSTALL, npm_ci, run

README = Path(__file__).resolve().parents[1] / "README.md"


def receiver_blocks() -> dict[str, str]:
    """The ```python and ```js blocks of the README's Webhooks section."""
    text = README.read_text(encoding="utf-8")
    start = text.index("## Webhooks\n")
    section = text[start : text.index("\n## ", start + 1)]
    found = dict(re.findall(r"```(python|js)\n(.*?)```", section, flags=re.DOTALL))
    assert set(found) == {"python", "js"}, found
    return found


class Receiver:
    """A pasted receiver running in its own process on a free port."""

    def __init__(self, command: list[str], cwd: Path, port: int, secret: str) -> None:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("RUNSINK_")}
        self.script = Path(command[-1]) if command[-1].endswith(".mjs") else None
        self.url = f"http://127.0.0.1:{port}/hooks"
        self.process = subprocess.Popen(
            command,
            cwd=cwd,
            env=environment | {"WEBHOOK_SECRET": secret},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._selector = selectors.DefaultSelector()
        assert self.process.stdout is not None
        self._selector.register(self.process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                assert self.process.poll() is None, "the receiver exited"
                assert time.monotonic() < deadline, "the receiver did not listen within 20 s"
                time.sleep(0.05)

    def line(self, within_s: float = 10.0) -> str:
        """The next line it prints (waits up to ``within_s``)."""
        assert self.process.stdout is not None
        if not self._selector.select(timeout=within_s):
            raise AssertionError(f"the receiver printed nothing within {within_s} s")
        return self.process.stdout.readline().decode().strip()

    def stop(self) -> None:
        if self.script is not None:
            self.script.unlink(missing_ok=True)
        self.process.kill()
        self.process.wait(timeout=10)
        self._selector.close()
        assert self.process.stdout is not None
        self.process.stdout.close()


def paste(block: str, port: int) -> str:
    assert block.count("9000") == 1, block
    return block.replace("9000", str(port))


def start_python(folder: Path, port: int, secret: str) -> Receiver:
    script = folder / "receiver.py"
    script.write_text(paste(receiver_blocks()["python"], port))
    return Receiver([sys.executable, str(script)], folder, port, secret)


def start_node(client: Path, port: int, secret: str) -> Receiver:
    # Inside the package, so `import ... from "runsink"` resolves to it (a self-reference).
    folder = client / ".test-build"
    folder.mkdir(exist_ok=True)
    script = folder / f"readme-receiver-{port}.mjs"
    script.write_text(paste(receiver_blocks()["js"], port))
    return Receiver(["node", str(script)], folder, port, secret)


@pytest.fixture
def python_receiver(tmp_path: Path) -> Iterator[tuple[Receiver, str]]:
    secret = new_secret()
    receiver = start_python(tmp_path, free_port(), secret)
    yield receiver, secret
    receiver.stop()


@pytest.fixture(scope="module")
def built_client() -> Path:
    """The TypeScript client, installed from its lockfile and built (dist/)."""
    need("Node.js", shutil.which("node") is not None, f"apt-get install nodejs npm; {INSTALL}")
    need("npm", shutil.which("npm") is not None, f"apt-get install npm; {INSTALL}")
    npm_ci(CLIENT)
    run(["npm", "run", "--silent", "build"], CLIENT)
    return CLIENT


@pytest.fixture
def node_receiver(built_client: Path) -> Iterator[tuple[Receiver, str]]:
    secret = new_secret()
    receiver = start_node(built_client, free_port(), secret)
    yield receiver, secret
    receiver.stop()


def delivery(secret: str, event_id: str) -> tuple[bytes, dict[str, str]]:
    data = {"message_id": "msg_1", "inbox_id": "ibx_1", "run_id": "ci-1", "caught": False}
    body = {"type": "message", "id": event_id, "timestamp": "2026-12-05T18:00:00.000Z"}
    raw = json.dumps(body | {"data": data}, separators=(",", ":")).encode()
    return raw, signed_headers(secret, event_id, int(time.time()), raw)


@pytest.mark.parametrize("language", ["python", "node"])
def test_readme_receiver_prints_a_signed_delivery_and_refuses_a_forged_one(
    language: str, request: pytest.FixtureRequest
) -> None:
    """A signed delivery: 204 and the event printed; a wrong secret or a changed body: no 2xx."""
    receiver, secret = request.getfixturevalue(f"{language}_receiver")
    with httpx.Client(timeout=10) as http:
        body, headers = delivery(secret, "ev_forged")
        forged = delivery(new_secret(), "ev_forged")[1]
        for attempt in (forged, headers | {"webhook-timestamp": "1614265330"}):
            assert _status(http, receiver.url, body, attempt) not in range(200, 300)
        tampered = body.replace(b"msg_1", b"msg_2")
        assert _status(http, receiver.url, tampered, headers) not in range(200, 300)
        body, headers = delivery(secret, "ev_good")
        assert http.post(receiver.url, content=body, headers=headers).status_code == 204
    printed = receiver.line()
    assert printed.startswith("message ev_good "), printed
    assert "msg_1" in printed and "ci-1" in printed


@pytest.mark.parametrize("language", ["python", "js"])
def test_readme_receivers_are_about_ten_lines(language: str) -> None:
    """Each receiver is ten lines of code, give or take the Node one's try/catch."""
    lines = [line for line in receiver_blocks()[language].splitlines() if line.strip()]
    assert len(lines) <= 11, lines


def _status(http: httpx.Client, url: str, body: bytes, headers: dict[str, str]) -> int:
    """The status of a POST, or 0 when the receiver closed without answering."""
    try:
        return http.post(url, content=body, headers=headers).status_code
    except httpx.RemoteProtocolError:
        return 0


@pytest.mark.parametrize("language", ["python", "node"])
def test_readme_receiver_verifies_what_a_real_server_sends(
    language: str, server: Server, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A webhook made with the Python client; mail to its run; the pasted receiver verifies
    the delivery and prints the message event (its run and message id)."""
    port = free_port()
    run_id = new_run_id("readme-hook")
    with Sink(server.url) as sink:
        hook = sink.create_webhook(
            f"http://127.0.0.1:{port}/hooks", run_id=run_id, events=["message"]
        )
        assert hook.secret is not None
        if language == "python":
            receiver = start_python(tmp_path, port, hook.secret)
        else:
            receiver = start_node(request.getfixturevalue("built_client"), port, hook.secret)
        try:
            inbox = sink.create_inbox(run_id=run_id, purpose="readme-webhook")
            server.send(inbox.address, subject="Welcome", body="Your code is 771234")
            message = inbox.expect_message(subject_contains="Welcome", claim=False)
            printed = receiver.line(within_s=20)
            assert printed.startswith("message ev_"), printed
            assert message.message_id in printed and run_id in printed, printed
            deadline = time.monotonic() + 10  # the receiver prints before it answers
            while (newest := sink.list_deliveries(hook.webhook_id).deliveries[0]).state != (
                "delivered"
            ):
                assert time.monotonic() < deadline, newest
                time.sleep(0.05)
        finally:
            receiver.stop()
            sink.delete_webhook(hook.webhook_id)
