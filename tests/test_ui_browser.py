"""The web UI in a real browser (Playwright driving Debian's Chromium) over a real server."""

from __future__ import annotations

import os
import re
import smtplib
import time
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from tests.support import Server, create_inbox, need, new_run_id, start_server, wait
from tests.support_ui import (
    REMOTE,
    chromium_available,
    chromium_path,
    hostile_message,
    playwright_available,
    send_raw,
)

SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "screenshots"
LIVE_DEADLINE_MS = 1000  # new mail on the open page within 1 s of the SMTP 250
IMAGES_HOST = "images.runsink-tests.example.com"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium for the whole module."""
    need("playwright", playwright_available(), "pip install -e '.[test]'")
    need("chromium", chromium_available(), "apt-get install chromium; .ci/install/browser.sh")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=chromium_path(),
            # A public-looking name for the test's image server (remote images never load
            # from loopback names or addresses): the browser alone resolves it to loopback.
            args=[f"--host-resolver-rules=MAP {IMAGES_HOST} 127.0.0.1"],
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    opened = context.new_page()
    yield opened
    context.close()


def _send_and_time(server: Server, to: str, subject: str, html: str | None = None) -> float:
    """Send over SMTP; return the moment (monotonic) the 250 for DATA came back."""
    message = EmailMessage()
    message["From"] = "Acme Accounts <no-reply@acme.example>"
    message["To"] = to
    message["Subject"] = subject
    message.set_content("Your sign-in code is 482913. It expires in 10 minutes.")
    if html is not None:
        message.add_alternative(html, subtype="html")
    with smtplib.SMTP("127.0.0.1", server.smtp_port, timeout=30) as client:
        client.ehlo()
        client.mail("no-reply@acme.example")
        client.rcpt(to)
        code, _ = client.data(message.as_bytes())
        acknowledged = time.monotonic()
        assert code == 250
    return acknowledged


def test_new_mail_appears_on_the_open_run_page_within_a_second(server: Server, page: Any) -> None:
    """SMTP while the run page is open: the message, its event and state show, no reload."""
    from playwright.sync_api import expect

    with server.http() as client:
        inbox = create_inbox(client, new_run_id("live"))
    page.goto(f"{server.url}/runs/{inbox['run_id']}")
    expect(page.locator("body")).to_have_attribute("data-live", "open", timeout=5000)
    loaded = page.evaluate("performance.timeOrigin")
    for n in range(3):
        subject = f"Your code, take {n}"
        acknowledged = _send_and_time(server, inbox["address"], subject)
        row = page.locator("#messages tr", has_text=subject)
        expect(row).to_be_visible(timeout=LIVE_DEADLINE_MS)
        assert time.monotonic() - acknowledged < LIVE_DEADLINE_MS / 1000
    expect(page.locator("#timeline li", has_text="message_accepted")).to_have_count(3)
    assert page.evaluate("performance.timeOrigin") == loaded  # never reloaded
    with server.http() as client:
        wait(client, inbox["inbox_id"], timeout_s=1)
    badge = page.locator(f'tr[data-inbox="{inbox["inbox_id"]}"] [data-state]')
    expect(badge).to_have_text("received", timeout=LIVE_DEADLINE_MS)


def test_lists_across_runs_follow_along(server: Server, page: Any) -> None:
    """A new run shows on the open runs list; caught mail on the open caught-mail page."""
    from playwright.sync_api import expect

    page.goto(f"{server.url}/")
    expect(page.locator("body")).to_have_attribute("data-live", "open", timeout=5000)
    run_id = new_run_id("listed")
    with server.http() as client:
        create_inbox(client, run_id)
    expect(page.locator("#runs-body tr", has_text=run_id)).to_be_visible(timeout=3000)
    page.goto(f"{server.url}/caught")
    expect(page.locator("body")).to_have_attribute("data-live", "open", timeout=5000)
    nobody = f"nobody-{new_run_id()}@sink.test"
    server.send(nobody, subject="for nobody")
    expect(page.locator("#caught tr", has_text=nobody)).to_be_visible(timeout=3000)


def test_header_search_box_finds_mail_by_address(server: Server, page: Any) -> None:
    """Typing a domain into the header's box on any page lists the mail sent to it."""
    from playwright.sync_api import expect

    domain = f"gamil-{new_run_id('typo').split('-')[1]}.com"
    server.send(f"someone@{domain}", subject="sent to a typo")
    page.goto(f"{server.url}/caught")
    box = page.get_by_role("searchbox", name="Search mail")
    box.fill(domain)
    box.press("Enter")
    expect(page).to_have_url(re.compile(r"/search\?q="))
    expect(page.locator("table.list tr", has_text="sent to a typo")).to_be_visible()


def test_hostile_message_runs_no_script_and_fetches_nothing(server: Server, page: Any) -> None:
    """Scripts, handlers, refresh, forms, remote CSS and images, javascript: links, SVG: inert."""
    from playwright.sync_api import expect

    with server.http() as client:
        inbox = create_inbox(client, new_run_id("hostile"))
        send_raw(server.smtp_port, inbox["address"], hostile_message(inbox["address"]))
        message_id = wait(client, inbox["inbox_id"], timeout_s=5).json()["message"]["message_id"]
    # Anything that reaches the network layer for another host is a leak: routes see it.
    left: list[str] = []
    failed: dict[str, str] = {}

    def leave(route: Any) -> None:
        left.append(route.request.url)
        route.abort()

    page.context.route(re.compile(rf"^(?!{re.escape(server.url)}/)(https?|wss?|ftp):"), leave)
    page.context.on("requestfailed", lambda r: failed.setdefault(r.url, r.failure or ""))
    url = f"{server.url}/messages/{message_id}"
    with page.expect_response(re.compile(r"/body\.html$")) as framed:
        page.goto(url)
    assert framed.value.status == 200
    frame = page.frame_locator("iframe.mail")
    expect(frame.locator("h1")).to_have_text("Your invoice")
    # What a person would click: a javascript: link and the form's button.
    frame.locator("#js").click()
    frame.locator("#pay").click()
    expect(frame.locator("img[alt=logo]")).to_have_js_property("naturalWidth", 1)  # cid: inlined
    page.wait_for_load_state("networkidle")
    assert page.url == url
    mail_frame = next(f for f in page.frames if f.url.endswith("/body.html"))
    assert mail_frame.url == f"{server.url}/messages/{message_id}/body.html"
    unset = re.compile(".*")
    expect(page.locator("body")).not_to_have_attribute("data-pwned", unset)
    expect(frame.locator("html")).not_to_have_attribute("data-pwned", unset)
    # The frame's own document: opened alone it is still sandboxed by its CSP.
    page.goto(f"{server.url}/messages/{message_id}/body.html")
    page.wait_for_load_state("networkidle")
    expect(page.locator("h1")).to_have_text("Your invoice")
    page.locator("#js").click()
    assert page.url.endswith("/body.html")
    expect(page.locator("html")).not_to_have_attribute("data-pwned", unset)
    assert left == []
    # The browser did see those URLs, and its CSP refused each one before any connection.
    refused = {u: why for u, why in failed.items() if u.startswith(REMOTE)}
    assert refused and set(refused.values()) == {"csp"}, failed


@pytest.fixture
def image_server() -> Iterator[int]:
    """A plain HTTP server answering every GET with a 1x1 PNG; its port."""
    import http.server
    import threading

    from tests.support_ui import PNG_1X1 as PNG

    class Images(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(PNG)))
            self.end_headers()
            self.wfile.write(PNG)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Images)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_remote_images_load_only_after_the_click(
    server: Server, page: Any, image_server: int
) -> None:
    """Blocked by default; the per-message button names the hosts it will contact and
    reloads the frame allowing them, and never a loopback address, even after the click."""
    from playwright.sync_api import expect

    public = f"http://{IMAGES_HOST}:{image_server}"
    with server.http() as client:
        inbox = create_inbox(client, new_run_id("images"))
        html = (
            f'<p>Hello</p><img id="remote" src="{public}/logo.png">'
            f'<img id="local" src="http://127.0.0.1:{image_server}/logo.png">'
            f'<img id="mapped" src="http://[::ffff:127.0.0.1]:{image_server}/logo.png">'
        )
        _send_and_time(server, inbox["address"], "With a remote image", html)
        message_id = wait(client, inbox["inbox_id"], timeout_s=5).json()["message"]["message_id"]
    page.goto(f"{server.url}/messages/{message_id}")
    frame = page.frame_locator("iframe.mail")
    expect(frame.locator("p")).to_have_text("Hello")
    expect(frame.locator("#remote")).to_have_js_property("naturalWidth", 0)
    button = page.get_by_role("button", name=re.compile("Load remote images"))
    expect(button).to_have_text(f"Load remote images from {public}")
    button.click()
    expect(frame.locator("#remote")).not_to_have_js_property("naturalWidth", 0)
    for local in ("#local", "#mapped"):
        expect(frame.locator(local)).to_have_js_property("naturalWidth", 0)


def test_disguised_filename_shows_its_real_extension_and_downloads(
    server: Server, page: Any
) -> None:
    """invoice<U+202E>fdp.exe reads as such; clicking downloads it as an attachment."""
    from playwright.sync_api import expect

    with server.http() as client:
        inbox = create_inbox(client, new_run_id("names"))
        send_raw(server.smtp_port, inbox["address"], hostile_message(inbox["address"]))
        message_id = wait(client, inbox["inbox_id"], timeout_s=5).json()["message"]["message_id"]
    page.goto(f"{server.url}/messages/{message_id}")
    page.get_by_role("tab", name=re.compile("Attachments")).click()
    name = page.locator(".attachments .filename").nth(1)
    expect(name).to_have_text("invoice⟨U+202E⟩fdp.exe")
    assert "\u202e" not in name.inner_text()
    assert name.inner_text().endswith(".exe")
    with page.expect_download() as downloading:
        page.locator(".attachments a").nth(1).click()
    download = downloading.value
    assert download.suggested_filename == "invoicefdp.exe"
    assert Path(download.path()).read_bytes() == b"MZ not really a program"
    expect(page.get_by_role("heading", level=1)).to_contain_text("Invoice ⟨U+202E⟩exe.pdf")


def test_with_a_token_the_browser_signs_in_once(
    browser: Any, tmp_path: Path, policy_file: str
) -> None:
    """The page asks for the token, works after, and the token shows in no URL or page."""
    from playwright.sync_api import expect

    token = "ui-browser-token-0123456789"
    guarded = start_server(tmp_path / "guarded", "--policy-file", policy_file, "--api-token", token)
    try:
        with guarded.http(headers={"Authorization": f"Bearer {token}"}) as api:
            inbox = create_inbox(api, new_run_id("signin"))
        context = browser.new_context()
        page = context.new_page()
        urls: list[str] = []
        page.on("request", lambda request: urls.append(request.url))
        page.goto(f"{guarded.url}/runs/{inbox['run_id']}")
        expect(page).to_have_url(re.compile(r"/signin\?next="))
        page.get_by_label("API token").fill("wrong")
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("alert")).to_contain_text("not this server's")
        page.get_by_label("API token").fill(token)
        page.get_by_role("button", name="Sign in").click()
        expect(page).to_have_url(f"{guarded.url}/runs/{inbox['run_id']}")
        expect(page.locator("body")).to_have_attribute("data-live", "open", timeout=5000)
        _send_and_time(guarded, inbox["address"], "After signing in")
        expect(page.locator("#messages tr", has_text="After signing in")).to_be_visible(
            timeout=LIVE_DEADLINE_MS
        )
        cookie = next(c for c in context.cookies() if c["name"] == "runsink_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert token not in cookie["value"] and token not in page.content()
        assert not any(token in u for u in urls)
        assert page.evaluate("document.cookie") == ""  # HttpOnly: no script sees it
        with guarded.http() as anonymous:
            assert anonymous.get(f"/v1/runs/{inbox['run_id']}").status_code == 401
        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name=re.compile("Release this run")).click()
        expect(page.locator(f'tr[data-inbox="{inbox["inbox_id"]}"] [data-state]')).to_have_text(
            "expired"
        )
        context.close()
    finally:
        guarded.stop()


def test_screenshots_of_the_run_and_message_pages(
    browser: Any, server: Server, tmp_path: Path
) -> None:
    """Realistic pages as PNGs; with RUNSINK_UPDATE_SCREENSHOTS=1 into docs/screenshots/,
    the ones the README shows (a plain run leaves the repository's copies alone)."""
    from playwright.sync_api import expect

    folder = SCREENSHOTS if os.environ.get("RUNSINK_UPDATE_SCREENSHOTS") == "1" else tmp_path

    run_id = "ci-4521-checkout-e2e"
    with server.http() as client:
        report = client.get(f"/v1/runs/{run_id}")
        if report.status_code == 200:
            client.delete(f"/v1/runs/{run_id}")
            run_id = new_run_id("ci-4521-checkout-e2e")
        signup = create_inbox(client, run_id, purpose="signup-check")
        reset = create_inbox(client, run_id, purpose="password-reset")
        html = (
            "<div style='font-family:sans-serif;max-width:480px;margin:auto'>"
            "<h2 style='color:#0b5cad'>Confirm your email</h2>"
            "<p>Hi Sam, your sign-in code is <b style='font-size:22px'>482913</b>.</p>"
            "<p><a href='https://app.acme.example/verify?t=8f3a2c' "
            "style='background:#0b5cad;color:#fff;padding:8px 14px;border-radius:6px;"
            "text-decoration:none'>Verify email</a></p>"
            "<p style='color:#888'>Sent by Acme <img src='https://tracker.acme.example/p.gif'>"
            "</p></div>"
        )
        _send_and_time(server, signup["address"], "Confirm your email", html)
        answer = wait(client, signup["inbox_id"], timeout_s=5).json()
        message_id = answer["message"]["message_id"]
        client.post(f"/v1/messages/{message_id}/claim", json={"run_id": run_id})
        wait(client, reset["inbox_id"], timeout_s=0)
    folder.mkdir(parents=True, exist_ok=True)
    for scheme, size, suffix in [
        ("light", {"width": 1200, "height": 860}, ""),
        ("dark", {"width": 390, "height": 844}, "-phone-dark"),
    ]:
        context = browser.new_context(viewport=size, color_scheme=scheme)
        page = context.new_page()
        page.goto(f"{server.url}/runs/{run_id}")
        expect(page.locator("body")).to_have_attribute("data-live", "open", timeout=5000)
        page.screenshot(path=str(folder / f"run{suffix}.png"), full_page=True)
        page.goto(f"{server.url}/messages/{message_id}")
        # The whole page in the viewport, rather than full_page: Chromium's full-page capture
        # can miss the sandboxed frame (a process of its own) while it is resized.
        tall = page.evaluate("document.documentElement.scrollHeight")
        page.set_viewport_size({"width": size["width"], "height": tall})
        expect(page.frame_locator("iframe.mail").locator("h2")).to_have_text("Confirm your email")
        page.screenshot(path=str(folder / f"message{suffix}.png"))
        context.close()
    for name in ("run.png", "message.png", "run-phone-dark.png", "message-phone-dark.png"):
        assert (folder / name).stat().st_size > 10_000


def test_keyboard_moves_between_message_tabs(server: Server, page: Any) -> None:
    """Tabs follow the ARIA pattern: arrow keys move, the panel follows."""
    from playwright.sync_api import expect

    with server.http() as client:
        inbox = create_inbox(client, new_run_id("keys"))
        _send_and_time(server, inbox["address"], "Tabs", "<p>html</p>")
        message_id = wait(client, inbox["inbox_id"], timeout_s=5).json()["message"]["message_id"]
    page.goto(f"{server.url}/messages/{message_id}")
    page.get_by_role("tab", name="HTML").focus()
    page.keyboard.press("ArrowRight")
    expect(page.get_by_role("tab", name="Text")).to_be_focused()
    expect(page.locator("#panel-text")).to_be_visible()
    expect(page.locator("#panel-text")).to_contain_text("482913")
    page.keyboard.press("End")
    expect(page.locator("#panel-attachments")).to_be_visible()
