"""pytest plugin (installed with runsink): the ``runsink`` and ``runsink_inbox`` fixtures.

- ``runsink`` (session): a runsink server for the session. By default an embedded one: a
  child process on free ports with a temporary database, stopped with SIGTERM at the end
  (extra ``runsink serve`` flags: the ``runsink_serve_args`` ini option). With
  ``RUNSINK_URL`` set, the server there instead; mail goes to ``RUNSINK_SMTP_HOST`` (default:
  the URL's host) and ``RUNSINK_SMTP_PORT`` (default 1025); ``RUNSINK_API_TOKEN`` is sent as
  the bearer token.
- ``runsink_inbox`` (per test): an inbox of its own for each test (``sink.client.Inbox``:
  ``.address``, ``.inbox_id``, ``.run_id``, ``.expect_message(**match)``). Its run_id is
  the test's node id in the run_id alphabet, with a short hash that keeps it unique per test
  and per session. ``@pytest.mark.runsink(purpose=..., policy=..., ttl_s=..., poll_budget=...)``
  sets the inbox's options.

When a test that used ``runsink_inbox`` fails, its report gets a ``runsink`` section: the
run's inboxes and events (no mail content), to tell "never sent" from "did not match".
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import smtplib
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

if TYPE_CHECKING:
    from sink.client import Inbox, Sink

RUN_ID_MAX = 128
_NOT_RUN_ID = re.compile(r"[^A-Za-z0-9._:-]+")
_INBOX_OPTIONS = ("purpose", "policy", "ttl_s", "poll_budget")

_SESSION_SALT = pytest.StashKey[str]()
_USES = pytest.StashKey[dict[str, int]]()
_INBOX = pytest.StashKey["Inbox"]()


@dataclass(frozen=True)
class Runsink:
    """The session's runsink server: where the API is, where to send mail, and a client."""

    url: str
    smtp_host: str
    smtp_port: int
    sink: Sink
    embedded: bool
    api_token: str | None = field(default=None, repr=False)

    def send(
        self,
        to: str,
        *,
        subject: str = "Hello",
        text: str = "Hello from the app.",
        html: str | None = None,
        sender: str = "app@example.test",
    ) -> None:
        """Send one message over SMTP, as the app under test would."""
        message = EmailMessage()
        message["From"] = sender
        message["To"] = to
        message["Subject"] = subject
        message.set_content(text)
        if html is not None:
            message.add_alternative(html, subtype="html")
        with smtplib.SMTP(self.smtp_host, self.smtp_port, timeout=30) as smtp:
            smtp.send_message(message)


def run_id_for(nodeid: str, salt: str, use: int = 1) -> str:
    """A run_id for a test: its node id in the run_id alphabet, ending in a unique hash.

    The hash covers the session salt, the exact node id and how many times the test asked
    (a rerun in the same session), so ids stay unique where sanitising or cutting collides.
    The end of a long node id (the test's name and parameters) is kept, not its start.
    """
    digest = hashlib.sha256(f"{salt}\0{nodeid}\0{use}".encode()).hexdigest()[:10]
    readable = _NOT_RUN_ID.sub("-", nodeid).strip("-.:")
    keep = RUN_ID_MAX - len(digest) - 1
    readable = readable[-keep:].lstrip("-.:") if len(readable) > keep else readable
    return f"{readable}.{digest}" if readable else digest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "runsink_serve_args",
        type="args",
        default=[],
        help="extra `runsink serve` flags for the embedded server (e.g. --policy-file p.toml)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "runsink(purpose=None, policy=None, ttl_s=None, poll_budget=None): "
        "options for the inbox the runsink_inbox fixture creates",
    )
    config.stash[_SESSION_SALT] = secrets.token_hex(8)
    config.stash[_USES] = {}


def pytest_report_header(config: pytest.Config) -> str | None:
    url = os.environ.get("RUNSINK_URL")
    return f"runsink: the server at RUNSINK_URL={url}" if url else None


@pytest.fixture(scope="session")
def runsink(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[Runsink]:
    """The session's runsink server: embedded on free ports, or the one at ``RUNSINK_URL``."""
    from sink.client import Sink

    external = _external(os.environ)
    if external is not None:
        url, smtp_host, smtp_port, token = external
        with Sink(url, api_token=token) as sink:
            yield Runsink(url, smtp_host, smtp_port, sink, embedded=False, api_token=token)
        return

    from sink.client.embedded import EmbeddedServer

    args = [str(a) for a in pytestconfig.getini("runsink_serve_args")]
    server = EmbeddedServer.start(tmp_path_factory.mktemp("runsink"), *args)
    try:
        with Sink(server.url) as sink:
            yield Runsink(server.url, server.smtp_host, server.smtp_port, sink, embedded=True)
    finally:
        server.stop()


@pytest.fixture
def runsink_inbox(runsink: Runsink, request: pytest.FixtureRequest) -> Inbox:
    """An inbox for this test alone, leased to a run_id derived from the test's node id."""
    marker = request.node.get_closest_marker("runsink")
    options: dict[str, Any] = dict(marker.kwargs) if marker else {}
    unknown = sorted(set(options) - set(_INBOX_OPTIONS))
    if unknown:
        pytest.fail(
            f"@pytest.mark.runsink: unknown option(s) {unknown}; known: {list(_INBOX_OPTIONS)}",
            pytrace=False,
        )
    config = request.config
    uses = config.stash[_USES]
    nodeid = request.node.nodeid
    uses[nodeid] = uses.get(nodeid, 0) + 1
    run_id = run_id_for(nodeid, config.stash[_SESSION_SALT], uses[nodeid])
    inbox = runsink.sink.create_inbox(
        run_id,
        options.pop("purpose", None) or "pytest",
        **options,
    )
    request.node.stash[_INBOX] = inbox
    return inbox


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    inbox = item.stash.get(_INBOX, None)
    if inbox is not None and report.when == "call" and report.failed:
        report.sections.append(("runsink", _describe_run(inbox)))
    return report


def _describe_run(inbox: Inbox) -> str:
    from sink.client import RunsinkClientError

    head = f"inbox {inbox.inbox_id} <{inbox.address}> run_id={inbox.run_id}"
    try:
        return f"{head}\n{inbox.report().describe()}"
    except RunsinkClientError as exc:
        return f"{head}\n(the run report could not be read: {exc})"


def _external(environ: Mapping[str, str]) -> tuple[str, str, int, str | None] | None:
    """(url, smtp_host, smtp_port, api_token) from RUNSINK_URL and friends, or None."""
    url = environ.get("RUNSINK_URL", "").strip()
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        pytest.fail(f"RUNSINK_URL: expected http(s)://host:port, got {url!r}", pytrace=False)
    smtp_host = environ.get("RUNSINK_SMTP_HOST", "").strip() or parts.hostname
    port_text = environ.get("RUNSINK_SMTP_PORT", "").strip() or "1025"
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        pytest.fail(f"RUNSINK_SMTP_PORT: expected a port number, got {port_text!r}", pytrace=False)
    token = environ.get("RUNSINK_API_TOKEN", "").strip() or None
    return url, smtp_host, int(port_text), token
