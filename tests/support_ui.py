"""Support for the web UI's tests and bench: a store full of runs, and the browser.

``seed_runs`` writes through the real SQLite store (the same writer and group commit the
server uses), before the server starts on that file: 10k runs in a few seconds, where the
HTTP API would need minutes.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

from sink import clock, ids
from sink.inbox import Inbox as InboxValue
from sink.message import summarize
from sink.storage.base import Delivered, Event, Incoming, NewInbox
from sink.storage.sqlite.store import SQLiteStore

CHROMIUM = os.environ.get("RUNSINK_CHROMIUM", "/usr/bin/chromium")


def chromium_available() -> bool:
    return Path(CHROMIUM).exists() or shutil.which("chromium") is not None


def chromium_path() -> str:
    return CHROMIUM if Path(CHROMIUM).exists() else (shutil.which("chromium") or CHROMIUM)


def playwright_available() -> bool:
    try:
        import playwright  # noqa: F401
    except ImportError:
        return False
    return True


def seed_runs(db: Path, runs: int, domain: str = "sink.test", with_mail_every: int = 10) -> None:
    """``runs`` runs of one inbox each, spread over the last day; every n-th has a message."""
    asyncio.run(_seed(db, runs, domain, with_mail_every))


async def _seed(db: Path, runs: int, domain: str, with_mail_every: int) -> None:
    store = SQLiteStore(db)
    await store.open()
    try:
        now = clock.now()
        batch: list[asyncio.Future[object]] = []
        for n in range(runs):
            batch.append(
                asyncio.ensure_future(_one_run(store, n, now - (runs - n), domain, with_mail_every))
            )
            if len(batch) >= 256:
                await asyncio.gather(*batch)
                batch.clear()
        await asyncio.gather(*batch)
    finally:
        await store.close()


async def _one_run(
    store: SQLiteStore, n: int, at: float, domain: str, with_mail_every: int
) -> object:
    run_id = f"seed-{n:05d}"
    local = ids.new_local_part()
    inbox = InboxValue.fresh(
        inbox_id=ids.new_inbox_id(),
        run_id=run_id,
        purpose="signup-check" if n % 2 else "password-reset",
        address=f"{local}@{domain}",
        policy_name="ci",
        now=at,
        ttl_s=600,
        poll_budget=12,
        trace_id=ids.new_trace_id(),
    )
    new = NewInbox(
        inbox=inbox,
        local_part=local,
        idempotency_key=f"{inbox.purpose}:{run_id}",
        request_json=json.dumps({"run_id": run_id, "purpose": inbox.purpose}),
        inboxes_per_purpose=3,
        retention_s=86400,
    )
    created = Event(run_id, "created", at, inbox.inbox_id, detail={"purpose": inbox.purpose})
    await store.create_inbox(new, created)
    if with_mail_every and n % with_mail_every == 0:
        raw = (
            f"From: app@example.test\r\nTo: {inbox.address}\r\nSubject: Welcome {n}\r\n\r\n"
            f"Your code is {100000 + n}.\r\n"
        ).encode()
        delivered = Delivered(inbox.inbox_id, run_id, ids.new_message_id(), (inbox.address,))
        await store.save_message(
            Incoming(raw, summarize(raw), "app@example.test", at + 1, (delivered,))
        )
    return None


# -- mail the UI tests send ---------------------------------------------------------------------

REMOTE = "http://remote.invalid"  # no request may ever leave for it

HOSTILE_HTML = f"""<html><head>
<meta http-equiv="refresh" content="0; url={REMOTE}/refreshed">
<style>body {{ background: url({REMOTE}/css-bg.png); }} @import url({REMOTE}/x.css);</style>
<script>document.documentElement.setAttribute("data-pwned", "script");
window.top.document.body.setAttribute("data-pwned", "script"); fetch("{REMOTE}/fetched");</script>
<base href="{REMOTE}/">
</head><body onload="document.documentElement.setAttribute('data-pwned', 'onload')">
<h1>Your invoice</h1>
<img src="{REMOTE}/tracker.png"
  onerror="document.documentElement.setAttribute('data-pwned', 'onerror')">
<img src="cid:logo@runsink" alt="logo">
<a id="js"
  href="javascript:document.documentElement.setAttribute('data-pwned', 'js-link')">click me</a>
<form id="f" action="{REMOTE}/post" method="post">
  <input name="card" value="1"><button id="pay">Pay</button></form>
<svg xmlns="http://www.w3.org/2000/svg" onload="document.documentElement.dataset.pwned = 'svg'">
<script>document.documentElement.setAttribute("data-pwned", "svg-script");</script>
<image href="{REMOTE}/svg.png"/></svg>
<iframe src="{REMOTE}/frame"></iframe>
<object data="{REMOTE}/object"></object>
</body></html>"""

# A 1x1 transparent PNG, the cid: image.
PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)
SVG_ATTACHMENT = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'


def hostile_message(to: str, subject: str = "Invoice \u202eexe.pdf") -> bytes:
    """HTML that tries everything, a cid: image, and attachments with disguised names."""
    import base64

    html = HOSTILE_HTML.encode()
    png = base64.encodebytes(PNG_1X1).decode()
    svg = base64.encodebytes(SVG_ATTACHMENT).decode()
    return (
        "From: =?utf-8?q?Billing_=E2=80=AE_Team?= <billing@example.test>\r\n"
        f"To: {to}\r\n"
        f"Subject: =?utf-8?b?{base64.b64encode(subject.encode()).decode()}?=\r\n"
        "MIME-Version: 1.0\r\n"
        'Content-Type: multipart/mixed; boundary="outer"\r\n\r\n'
        "--outer\r\n"
        'Content-Type: multipart/related; boundary="rel"\r\n\r\n'
        "--rel\r\n"
        "Content-Type: text/html; charset=utf-8\r\n\r\n"
        f"{html.decode()}\r\n"
        "--rel\r\n"
        "Content-Type: image/png\r\n"
        "Content-Transfer-Encoding: base64\r\n"
        "Content-ID: <logo@runsink>\r\n\r\n"
        f"{png}\r\n"
        "--rel--\r\n"
        "--outer\r\n"
        "Content-Type: application/pdf\r\n"
        "Content-Disposition: attachment; filename*=UTF-8''invoice%E2%80%AEfdp.exe\r\n\r\n"
        "MZ not really a program\r\n"
        "--outer\r\n"
        "Content-Type: image/svg+xml\r\n"
        "Content-Transfer-Encoding: base64\r\n"
        'Content-Disposition: attachment; filename="pic\u200b.svg"\r\n\r\n'
        f"{svg}\r\n"
        "--outer\r\n"
        "Content-Type: text/html\r\n"
        'Content-Disposition: attachment; filename="page.html"\r\n\r\n'
        "<script>alert(1)</script>\r\n"
        "--outer--\r\n"
    ).encode()


def send_raw(smtp_port: int, to: str, raw: bytes, sender: str = "billing@example.test") -> None:
    import smtplib

    with smtplib.SMTP("127.0.0.1", smtp_port, timeout=30) as client:
        client.sendmail(sender, [to], raw)
