"""GET /v1/messages?query=: search over evidence and caught mail (real SMTP, the app in-process)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from typing import Any

import httpx
import pytest

from tests.inproc import InProcess, Served
from tests.support import app_on_each_backend, create_inbox, new_run_id, wait


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def app(request: pytest.FixtureRequest) -> InProcess:
    """Each check runs against the app on each persistent backend, in this process."""
    result: InProcess = app_on_each_backend(request)
    return result


@pytest.fixture
def http(app: InProcess) -> Iterator[httpx.Client]:
    """A client of the test's app."""
    with app.http() as client:
        yield client


def _send(
    app: Served,
    to: str,
    subject: str,
    body: str,
    sender: str = "App <app@example.test>",
    attachment: bytes | None = None,
) -> None:
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = sender, to, subject
    message.set_content(body)
    if attachment is not None:
        message.add_attachment(attachment, maintype="application", subtype="pdf", filename="a.pdf")
    with app.smtp() as client:
        client.send_message(message)


def _search(http: httpx.Client, query: str, **params: Any) -> list[dict[str, Any]]:
    response = http.get("/v1/messages", params={"query": query, "limit": 500, **params})
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"messages", "next_cursor", "has_more"}
    items: list[dict[str, Any]] = body["messages"]
    return items


@pytest.fixture
def world(app: Served, http: httpx.Client) -> dict[str, Any]:
    """Run A's evidence (one with an attachment), run B's evidence, and a caught mail."""
    tag = uuid.uuid4().hex[:10]
    run_a, run_b = new_run_id("sa"), new_run_id("sb")
    inbox_a, inbox_b = create_inbox(http, run_a), create_inbox(http, run_b)
    _send(app, inbox_a["address"], f"Reset your password {tag}", "Use code 482913 to reset.")
    _send(app, inbox_a["address"], f"Invoice {tag}", "Your invoice.", attachment=b"%PDF" * 1000)
    _send(app, inbox_b["address"], f"Welcome {tag}", "Welcome aboard.")
    _send(
        app,
        "someone@gmail.com",
        f"Newsletter {tag}",
        "Weekly news from Acme.",
        sender='"Acme Marketing" <news@acme.example>',
    )
    for inbox, count in ((inbox_a, 2), (inbox_b, 1)):
        listed = http.get(f"/v1/inboxes/{inbox['inbox_id']}/messages").json()["messages"]
        assert len(listed) == count  # stored (250 came after the commit)
    return {"tag": tag, "run_a": run_a, "run_b": run_b, "inbox_a": inbox_a, "inbox_b": inbox_b}


def _subjects(items: list[dict[str, Any]]) -> list[str]:
    return [item["subject"].split(" ")[0] for item in items]


def test_newest_first_over_evidence_and_caught_mail(http: httpx.Client, world: Any) -> None:
    """A tag finds all four, newest first; caught mail is marked and has no inbox."""
    items = _search(http, world["tag"])
    assert _subjects(items) == ["Newsletter", "Welcome", "Invoice", "Reset"]
    caught = items[0]
    assert caught["caught"] is True and caught["inbox_id"] is None and caught["run_id"] is None
    assert caught["message_id"].startswith("cm_")
    assert caught["rcpt_to"] == ["someone@gmail.com"]
    assert items[1]["caught"] is False and items[1]["run_id"] == world["run_b"]


def test_fields_and_literal_matching(http: httpx.Client, world: Any) -> None:
    """to:, from: (address or display name), subject:, phrases; gmail never matches gamil."""
    tag = world["tag"]
    assert _subjects(_search(http, f"{tag} to:gmail.com")) == ["Newsletter"]
    assert _search(http, f"{tag} to:gamil.com") == []
    assert _subjects(_search(http, f'{tag} from:"acme marketing"')) == ["Newsletter"]
    assert _subjects(_search(http, f"{tag} from:acme.example")) == ["Newsletter"]
    assert _subjects(_search(http, f"{tag} subject:invoice")) == ["Invoice"]
    assert _subjects(_search(http, f'{tag} "use code 482913"')) == ["Reset"]
    assert _subjects(_search(http, f"{tag} -newsletter -welcome")) == ["Invoice", "Reset"]
    addressed = _search(http, f"{tag} to:{world['inbox_a']['address']}")
    assert _subjects(addressed) == ["Invoice", "Reset"]


def test_case_folds_in_every_script_and_pieces_apart_never_match(
    app: InProcess, http: httpx.Client
) -> None:
    """Case-insensitive beyond ASCII (ÉCOLE, STRASSE/straße, ΣΟΦΙΑ); and a text is found
    whole or not at all: a body holding "abcd cdef" has every 3-letter piece of "abcdef"
    but not "abcdef", so it is no match, and -abcdef keeps it."""
    tag = uuid.uuid4().hex[:10]
    inbox = create_inbox(http, new_run_id("fold"))
    _send(app, inbox["address"], f"ÉCOLE {tag}", "Grüße aus der STRASSE. ΣΟΦΙΑ. abcd cdef")
    assert len(_search(http, tag)) == 1
    for found in ("école", "ÉCOLE", "GRÜSSE", "straße", "σοφια", "abcd cdef", "ABCD"):
        assert len(_search(http, f'{tag} "{found}"')) == 1, found
        assert _search(http, f'{tag} -"{found}"') == [], found
    for missing in ("abcdef", "ecole", "cdefg", "der strasse!"):
        assert _search(http, f'{tag} "{missing}"') == [], missing
        assert len(_search(http, f'{tag} -"{missing}"')) == 1, missing
    assert len(_search(http, f"subject:{tag} subject:école")) == 1
    assert _search(http, f"subject:{tag} subject:strasse") == []


def test_filters(http: httpx.Client, world: Any) -> None:
    """run:, inbox:, is:caught, has:attachment, larger:/smaller:, before:/after:."""
    tag = world["tag"]
    assert _subjects(_search(http, f"{tag} run:{world['run_a']}")) == ["Invoice", "Reset"]
    assert _subjects(_search(http, f"{tag} run:{world['run_a']} -invoice")) == ["Reset"]
    assert _subjects(_search(http, f"{tag} run:{world['run_a']} -is:claimed code")) == ["Reset"]
    assert _subjects(_search(http, f"{tag} inbox:{world['inbox_b']['inbox_id']}")) == ["Welcome"]
    assert _subjects(_search(http, f"{tag} is:caught")) == ["Newsletter"]
    assert _subjects(_search(http, f"{tag} -is:caught")) == ["Welcome", "Invoice", "Reset"]
    assert _subjects(_search(http, f"{tag} has:attachment")) == ["Invoice"]
    assert _subjects(_search(http, f"{tag} larger:3k")) == ["Invoice"]
    assert _subjects(_search(http, f"{tag} smaller:3k")) == ["Newsletter", "Welcome", "Reset"]
    today = datetime.now(UTC).date()
    assert len(_search(http, f"{tag} after:{today - timedelta(days=1)}")) == 4
    assert _search(http, f"{tag} before:{today - timedelta(days=1)}") == []


def test_claimed_and_unclaimed(http: httpx.Client, world: Any) -> None:
    """is:unclaimed is evidence not yet claimed; is:claimed is claimed evidence."""
    tag, inbox_b = world["tag"], world["inbox_b"]
    assert _subjects(_search(http, f"{tag} is:unclaimed")) == ["Welcome", "Invoice", "Reset"]
    found = wait(http, inbox_b["inbox_id"], timeout_s=5).json()
    message_id = found["message"]["message_id"]
    claimed = http.post(f"/v1/messages/{message_id}/claim", json={"run_id": world["run_b"]})
    assert claimed.json()["next_action"] == "proceed"
    assert _subjects(_search(http, f"{tag} is:claimed")) == ["Welcome"]
    assert _subjects(_search(http, f"{tag} is:unclaimed")) == ["Invoice", "Reset"]


def test_a_named_run_sees_only_its_own_mail(http: httpx.Client, world: Any) -> None:
    """With X-Run-Id: that run's inboxes only, never caught mail, whatever the query."""
    tag, run_a = world["tag"], world["run_a"]
    headers = {"X-Run-Id": run_a}
    found = http.get("/v1/messages", params={"query": tag}, headers=headers).json()["messages"]
    assert _subjects(found) == ["Invoice", "Reset"]
    assert {item["run_id"] for item in found} == {run_a}
    for query in (f"{tag} is:caught", f"{tag} run:{world['run_b']}", "to:gmail.com"):
        response = http.get("/v1/messages", params={"query": query}, headers=headers)
        assert response.json()["messages"] == [], query
    everything = http.get("/v1/messages", params={"limit": 500}, headers=headers).json()
    assert {item["run_id"] for item in everything["messages"]} == {run_a}


def test_cursor_pages_without_overlap(http: httpx.Client, world: Any) -> None:
    """limit=1 pages through the four, in order; next_cursor is null on the last page."""
    seen: list[str] = []
    cursor = None
    for _ in range(5):
        params: dict[str, Any] = {"query": world["tag"], "limit": 1}
        if cursor:
            params["cursor"] = cursor
        page = http.get("/v1/messages", params=params).json()
        seen += _subjects(page["messages"])
        cursor = page["next_cursor"]
        assert page["has_more"] is (cursor is not None)
        if cursor is None:
            break
    assert seen == ["Newsletter", "Welcome", "Invoice", "Reset"]
    filtered = http.get("/v1/messages", params={"query": f"{world['tag']} -is:caught", "limit": 2})
    rest = http.get(
        "/v1/messages",
        params={"query": f"{world['tag']} -is:caught", "cursor": filtered.json()["next_cursor"]},
    )
    assert _subjects(rest.json()["messages"]) == ["Reset"]


@pytest.mark.parametrize(
    ("params", "status", "code"),
    [
        ({"query": "ab"}, 422, "invalid_request"),
        ({"query": '"open'}, 422, "invalid_request"),
        ({"query": "is:read"}, 422, "invalid_request"),
        ({"query": "before:soon"}, 422, "invalid_request"),
        ({"cursor": "l1_bm9wZQ"}, 400, "invalid_cursor"),
        ({"cursor": "c1_aWJfYWJjZGVmZ2hpamtsbW5vcHFyc3QuMA"}, 400, "invalid_cursor"),
        ({"limit": "0"}, 422, "invalid_request"),
        ({"query": "x" * 2000}, 422, "invalid_request"),
        # Neither store can look a NUL up: it was a 503 provider_error, retried forever.
        ({"query": "\x00abc"}, 422, "invalid_request"),
        ({"query": 'subject:"a\x00bc"'}, 422, "invalid_request"),
        ({"query": "-abc\x00"}, 422, "invalid_request"),
    ],
)
def test_bad_input_is_4xx_never_5xx(
    http: httpx.Client, params: dict[str, str], status: int, code: str
) -> None:
    """A query the language refuses names the term; a foreign cursor is invalid_cursor."""
    response = http.get("/v1/messages", params=params)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    if "query" in params and status == 422:
        assert error["message"].startswith("query:")


def test_released_evidence_is_found_by_its_metadata_not_its_body(
    app: InProcess, http: httpx.Client
) -> None:
    """One message to an inbox and to an unrouted address: once the run is released, its
    evidence is found by subject only, not by the body the caught mail still keeps; the
    caught mail is found by both. Both ways the index may drive (a narrowing filter, text)."""
    tag = uuid.uuid4().hex[:10]
    run_id = new_run_id("rel")
    inbox = create_inbox(http, run_id)
    _send(app, f"{inbox['address']}, nobody-{tag}@gmail.example", f"Mixed {tag}", f"body{tag}")
    evidence = http.get(f"/v1/inboxes/{inbox['inbox_id']}/messages").json()["messages"]
    assert http.delete(f"/v1/runs/{run_id}").status_code == 204
    for extra in ("", " -is:claimed"):  # text first; then with a filter beside it
        by_body = _search(http, f"body{tag}{extra}")
        assert [item["caught"] for item in by_body] == [True], by_body
        by_subject = _search(http, f"mixed {tag}{extra}")
        assert sorted(item["caught"] for item in by_subject) == [False, True]
    narrowed = _search(http, f"body{tag} run:{run_id}")  # the run's few entries drive
    assert narrowed == []
    (released,) = _search(http, f"subject:{tag} run:{run_id}")
    assert released["message_id"] == evidence[0]["message_id"] and released["released"]
