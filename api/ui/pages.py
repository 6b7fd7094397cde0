"""The web UI's pages: server-rendered, a little plain JavaScript for live updates.

Reads go through the same agent the API uses (so a page shows exactly what the API
answers), plus ``RunIndex`` for the views across runs. The only change a page makes,
releasing a run, is the API's own ``DELETE /v1/runs/{run_id}``, called by the page's
script with the CSRF header.
"""

from __future__ import annotations

import asyncio
import functools
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from api.context import continue_trace
from api.downloads import download_type
from api.state import state_of
from api.ui import access
from api.ui.remote import remote_images
from api.ui.render import frame_headers, inline_cids, offset, templates
from api.ui.searchbox import left_out_note, read_box
from api.ui.webhooks import run_attempts
from sink import clock, ids
from sink.agent import Agent
from sink.errors import STATUS_AND_CODE, EvidenceReleased, NotFound, RunsinkError
from sink.message import attachment_parts
from sink.runtime import Runtime
from sink.search import MAX_QUERY_CHARS
from sink.storage.base import Listed, RunIndex

PAGE_SIZE = 50
SEARCH_SHOWN = 200  # newest matches on the search page (the API pages through the rest)
RAW_SHOWN_MAX = 512 * 1024  # bytes of raw source shown in the page (the rest: download)

# The pages' own policy: our scripts and styles only, mail HTML only in a sandboxed frame
# of our origin (whose response carries its own, stricter policy), no other origin at all.
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'"
)

_templates = functools.cache(templates)  # built on the first page served


def _runtime(request: Request) -> Runtime:
    return state_of(request).runtime


def _agent(request: Request) -> Agent:
    return state_of(request).agent


def _index(request: Request) -> RunIndex:
    return _runtime(request).backend.runs


def _csrf(request: Request) -> str:
    session: access.Session | None = request.scope.get("runsink.session")
    if session is not None:
        return session.csrf
    return state_of(request).ui.csrf


Handler = Callable[[Request], Awaitable[Response]]


def _html_errors(handler: Handler) -> Handler:
    """A page's failure is a page (the API's table gives the status), not a JSON body."""

    @functools.wraps(handler)
    async def page(request: Request) -> Response:
        try:
            return await handler(request)
        except RunsinkError as exc:
            status = next((s for cls, s, _ in STATUS_AND_CODE if isinstance(exc, cls)), 500)
            title = {404: "Not found", 410: "Released", 503: "Try again soon"}.get(status, "Error")
            return _page(request, "error.html", status, title=title, message=str(exc))

    return page


def _page(request: Request, name: str, status: int = 200, **values: Any) -> Response:
    values.setdefault("stream", None)
    values.setdefault("nav", "")
    values["csrf"] = _csrf(request)
    values["signed_in"] = request.scope.get("runsink.session") is not None
    values["now"] = clock.now()
    return _templates().TemplateResponse(
        request,
        name,
        values,
        status_code=status,
        headers={"Content-Security-Policy": PAGE_CSP, "Cache-Control": "no-store"},
    )


# -- runs ------------------------------------------------------------------------------------


@_html_errors
async def runs(request: Request) -> Response:
    query = request.query_params
    run_filter = (query.get("run") or "").strip()[:128] or None
    purpose = (query.get("purpose") or "").strip()[:64] or None
    before = _before(query.get("before"))
    found = await _index(request).recent_runs(
        clock.now(), PAGE_SIZE + 1, before, run_filter, purpose
    )
    page, more = found[:PAGE_SIZE], len(found) > PAGE_SIZE
    next_url = None
    if more:
        last = page[-1]
        params = {k: v for k, v in (("run", run_filter), ("purpose", purpose)) if v}
        params["before"] = f"{last.started_at!r}|{last.run_id}"
        next_url = "/?" + urlencode(params)
    return _page(
        request,
        "runs.html",
        runs=page,
        run_filter=run_filter or "",
        purpose=purpose or "",
        next_url=next_url,
        stream="/v1/events",
        nav="runs",
    )


def _before(text: str | None) -> tuple[float, str] | None:
    if not text or "|" not in text:
        return None
    at, _, run_id = text.partition("|")
    try:
        return float(at), run_id[:128]
    except ValueError:
        return None


@_html_errors
async def run(request: Request) -> Response:
    run_id = request.path_params["run_id"]
    if not ids.RUN_ID.fullmatch(run_id):
        raise NotFound("no such run")
    report = await _agent(request).run_report(run_id)
    deliveries = await _index(request).run_deliveries(run_id, 200)
    attempts = await run_attempts(_runtime(request).webhooks, run_id, 200)
    starts = [r.inbox.created_at for r in report.inboxes] + [e.at for e in report.events]
    start = min(starts) if starts else clock.now()
    return _page(
        request,
        "run.html",
        run_id=run_id,
        report=report,
        deliveries=deliveries,
        attempts=attempts,
        start=start,
        offset=offset,
        stream="/v1/events?" + urlencode({"run_id": run_id}),
        nav="runs",
    )


@_html_errors
async def inbox(request: Request) -> Response:
    inbox_id = request.path_params["inbox_id"]
    if not ids.INBOX_ID.fullmatch(inbox_id):
        raise NotFound("no such inbox")
    agent = _agent(request)
    envelope = await agent.get(inbox_id, None)
    stored = await _runtime(request).store.load_inbox(inbox_id)
    page = await agent.messages(inbox_id, request.query_params.get("after"), 200, None)
    return _page(
        request,
        "inbox.html",
        envelope=envelope,
        inbox=stored,
        page=page,
        stream="/v1/events?" + urlencode({"run_id": envelope.run_id}),
        nav="runs",
    )


# -- a message --------------------------------------------------------------------------------


@_html_errors
async def message(request: Request) -> Response:
    message_id = request.path_params["message_id"]
    if not ids.MESSAGE_ID.fullmatch(message_id):
        raise NotFound("no such message")
    result = await _agent(request).read(message_id, None, None)
    continue_trace(request.scope, result.trace_id)  # as the API's read: the inbox's trace
    raw = result.stored.raw
    parts = await asyncio.to_thread(attachment_parts, raw) if raw is not None else ()
    shown_raw = None
    if raw is not None:
        shown_raw = raw[:RAW_SHOWN_MAX].decode("utf-8", "replace")
    return _page(
        request,
        "message.html",
        from_name=result.parsed.from_name if result.parsed else None,
        result=result,
        stored=result.stored,
        parsed=result.parsed,
        parts=parts,
        served_as=[download_type(p.attachment.content_type) for p in parts],
        raw=shown_raw,
        raw_truncated=raw is not None and len(raw) > RAW_SHOWN_MAX,
        remote=remote_images(result.parsed.html or "") if result.parsed else None,
        nav="runs",
    )


async def message_html(request: Request) -> Response:
    """The mail's HTML, for the sandboxed frame only: the response sandboxes itself too."""
    message_id = request.path_params["message_id"]
    if not ids.MESSAGE_ID.fullmatch(message_id):
        raise NotFound("no such message")
    result = await _agent(request).read(message_id, None, None)
    continue_trace(request.scope, result.trace_id)
    parsed = result.parsed
    if parsed is None:
        raise EvidenceReleased("the message's body was released")
    raw = result.stored.raw or b""
    html = parsed.html or ""
    if "cid:" in html.lower():
        html = inline_cids(html, await asyncio.to_thread(attachment_parts, raw))
    origins: tuple[str, ...] = ()
    if request.query_params.get("remote_images") == "1":
        origins = remote_images(html).allowed  # never a local or private address
    return HTMLResponse(html, headers=frame_headers(origins))


# -- caught mail and search -------------------------------------------------------------------


@_html_errors
async def caught(request: Request) -> Response:
    page = await _runtime(request).mailbox.caught_page(None, 200)
    return _page(request, "caught.html", items=page.items, stream="/v1/events", nav="caught")


@_html_errors
async def search(request: Request) -> Response:
    """The search language over delivered and caught mail (``searchbox.py`` says how the box
    reads it); newest first, one page of ``SEARCH_SHOWN``."""
    text = (request.query_params.get("q") or "").strip()[:MAX_QUERY_CHARS]
    box = read_box(text)
    found: list[Listed] = []
    more = False
    if box.query is not None:
        page = await _runtime(request).mailbox.search_query(box.query, None, None, SEARCH_SHOWN)
        found, more = page.items, page.has_more
    return _page(
        request,
        "search.html",
        q=text,
        found=found,
        more=more,
        problem=box.problem,
        left_out=left_out_note(box.left_out) if box.left_out else None,
        searched=box.query is not None,
        nav="search",
    )


# -- signing in --------------------------------------------------------------------------------


async def signin_form(request: Request) -> Response:
    return _signin(request, None)


def _signin(request: Request, problem: str | None, status: int = 200) -> Response:
    next_path = _local(request.query_params.get("next"))
    return _templates().TemplateResponse(
        request,
        "signin.html",
        {
            "problem": problem,
            "next": next_path,
            "csrf": "",
            "stream": None,
            "nav": "",
            "signed_in": False,
            "now": clock.now(),
        },
        status_code=status,
        headers={"Content-Security-Policy": PAGE_CSP, "Cache-Control": "no-store"},
    )


async def signin(request: Request) -> Response:
    if not access.same_origin(request.headers):
        return _signin(request, "Sign in from this server's own page.", 403)
    # A urlencoded form, read by hand (no multipart parser needed); the body is capped upstream.
    form = parse_qs((await request.body()).decode("utf-8", "replace"), max_num_fields=10)
    token = (form.get("token") or [""])[0]
    ui = state_of(request).ui
    sessions, tokens = ui.sessions, ui.tokens
    if not tokens.required:
        return RedirectResponse(_local(request.query_params.get("next")), status_code=303)
    throttle = ui.throttle
    address = request.client.host if request.client else ""
    now = time.monotonic()
    wait_s = throttle.retry_after(address, now)
    if wait_s is not None:
        return _too_many(request, "Too many failed sign-ins from this address.", wait_s)
    holder = tokens.verify(token) if token else None
    if holder is None:
        throttle.failed(address, now)
        return _signin(request, "That token is not this server's.", 401)
    session = sessions.open(token, holder)
    if session is None:
        text = "This token has too many sessions open: sign out of one, or wait for one to end."
        return _too_many(request, text, access.SWEEP_S)
    response = RedirectResponse(_local(request.query_params.get("next")), status_code=303)
    response.headers["Set-Cookie"] = access.cookie_header(session, request.url.scheme == "https")
    response.headers["Cache-Control"] = "no-store"
    return response


def _too_many(request: Request, problem: str, wait_s: float) -> Response:
    response = _signin(request, f"{problem} Try again in {math.ceil(wait_s)} s.", 429)
    response.headers["Retry-After"] = str(max(1, math.ceil(wait_s)))
    return response


async def signout(request: Request) -> Response:
    session: access.Session | None = request.scope.get("runsink.session")
    if session is not None:
        state_of(request).ui.sessions.close(session.session_id)
    response = RedirectResponse("/signin", status_code=303)
    response.headers["Set-Cookie"] = access.cookie_header(None, request.url.scheme == "https")
    return response


def _local(target: str | None) -> str:
    """Only a path of ours: never another host (``//evil``, ``/\\evil``, schemes)."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return "/"
    return target


def static_files() -> StaticFiles:
    return StaticFiles(directory=str(resources.files("api.ui") / "static"))


def new_csrf() -> str:
    return secrets.token_urlsafe(24)


def static_routes() -> list[BaseRoute]:
    """The pages' scripts and styles (not endpoints: files, served to anyone)."""
    return [Mount("/static", app=static_files(), name="static")]
