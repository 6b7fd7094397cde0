"""The webhook endpoints (contract v3 "Webhooks"): fields, scopes and errors, table-driven, on
the real app in-process (httpx's ASGI transport over a started runtime and a real SQLite
file; sockets do not matter here). Delivery itself is tested with a real receiver elsewhere."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from sink.client import ApiError, AsyncSink, DeliveryPage, Webhook, WebhookDelivery
from tests.inproc import InProcess
from tests.pg_cluster import Cluster
from tests.webhook_receiver import Receiver

ADMIN = "admin-token-for-webhook-tests-01"
READ = "read-token-for-webhook-tests-001"
TEAM_A = "team-a-token-for-webhook-tests-1"
TOKENS = f"""
[tokens.ops]
token = "{ADMIN}"
scope = "admin"

[tokens.auditor]
token = "{READ}"
scope = "read"

[tokens.ci-team-a]
token = "{TEAM_A}"
scope = "runs:team-a-*"
"""
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


@dataclass
class App:
    """The app in this process (tests/inproc.py), and a client per caller."""

    inproc: InProcess
    clients: dict[str, httpx.Client]

    def call(self, who: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.clients[who].request(method, path, **kwargs)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def app(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[App]:
    """The app over each persistent backend, with an admin, a read and a runs: token."""
    folder = tmp_path_factory.mktemp(f"webhooks-api-{request.param}")
    (folder / "tokens.toml").write_text(TOKENS)
    db = None
    if request.param == "postgres":
        cluster: Cluster = request.getfixturevalue("pg_cluster")
        db = cluster.dsn(cluster.new_database("runsink_template"))
    inproc = InProcess(folder, "--tokens-file", str(folder / "tokens.toml"), db=db)
    clients: dict[str, httpx.Client] = {}
    try:
        for who, token in (("admin", ADMIN), ("read", READ), ("team-a", TEAM_A), ("none", None)):
            headers = {} if token is None else {"Authorization": f"Bearer {token}"}
            clients[who] = inproc.http(headers=headers)
        minted = clients["admin"].post("/v1/runs/team-a-1/token", json={"ttl_s": 600})
        assert minted.status_code == 201, minted.text
        clients["run"] = inproc.http(headers={"Authorization": f"Bearer {minted.json()['token']}"})
        yield App(inproc, clients)
    finally:
        for client in clients.values():
            client.close()
        inproc.stop()


def create(app: App, who: str = "admin", **body: Any) -> httpx.Response:
    return app.call(who, "POST", "/v1/webhooks", json={"url": "http://127.0.0.1:9/hooks", **body})


def created(app: App, who: str = "admin", **body: Any) -> dict[str, Any]:
    answer = create(app, who, **body)
    assert answer.status_code == 201, answer.text
    hook: dict[str, Any] = answer.json()
    return hook


# -- fields ------------------------------------------------------------------------------


def test_create_answers_201_with_the_contract_fields_and_the_secret_once(app: App) -> None:
    """201 {webhook_id, url, events, run_id, run_glob, secret, created_at, disabled_at};
    the secret (whsec_ + base64 of 24+ bytes) is never shown again."""
    hook = created(app, run_id="ci-1842", description="signup flow")
    assert set(hook) >= {
        "webhook_id",
        "url",
        "events",
        "run_id",
        "run_glob",
        "secret",
        "created_at",
        "disabled_at",
    }
    assert hook["events"] == ["message", "inbox", "run_event"]
    assert (hook["url"], hook["run_id"], hook["run_glob"]) == (
        "http://127.0.0.1:9/hooks",
        "ci-1842",
        None,
    )
    assert hook["description"] == "signup flow" and hook["disabled_at"] is None
    assert RFC3339.fullmatch(hook["created_at"])
    assert re.fullmatch(r"whsec_[A-Za-z0-9+/]{32,}={0,2}", hook["secret"])
    got = app.call("admin", "GET", f"/v1/webhooks/{hook['webhook_id']}").json()
    listed = app.call("admin", "GET", "/v1/webhooks").json()["webhooks"]
    assert "secret" not in got and all("secret" not in h for h in listed)
    assert got == {k: v for k, v in hook.items() if k != "secret"}
    assert got in listed


def test_events_are_kept_in_the_contract_order_without_repeats(app: App) -> None:
    """events: any of message, inbox, run_event (a subset, in that order)."""
    hook = created(app, events=["run_event", "message", "run_event"], run_glob="ci-*")
    assert hook["events"] == ["message", "run_event"] and hook["run_glob"] == "ci-*"


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost/hooks",
        "http://127.0.0.1:8000/",
        "http://[::1]:9000/h",
        "https://10.0.0.7/x?y=1",
        "HTTP://receiver.internal",
        "http://user:pw@127.0.0.1/hooks",
        "https://ci%40bot:p%3Ass@10.0.0.7/",
        "http://deploy@127.0.0.1:9000/",
        "http://web_app:8000/hooks",  # a compose service name may hold an underscore
        "http://r\u00e9cepteur.test/",  # an international name (sent as its IDNA form)
        "http://[::1]:/",  # an empty port is the scheme's own (RFC 3986 3.2.3)
    ],
)
def test_any_http_host_is_accepted(app: App, url: str) -> None:
    """Loopback, private and plain names, with or without ``user:password@`` (sent as Basic
    auth): only the scheme and a host are checked, and the create's answer gives the URL as
    given (reads hide a password: the test below)."""
    hook = created(app, url=url)
    assert hook["url"] == url
    assert app.call("admin", "GET", f"/v1/webhooks/{hook['webhook_id']}").status_code == 200


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:pw@127.0.0.1/hooks", "http://user:***@127.0.0.1/hooks"),
        ("https://ci%40bot:p%3Ass@10.0.0.7:8443/x?y=1", "https://ci%40bot:***@10.0.0.7:8443/x?y=1"),
        ("http://deploy@127.0.0.1:9000/", "http://deploy@127.0.0.1:9000/"),
        ("http://127.0.0.1:9000/", "http://127.0.0.1:9000/"),
    ],
)
def test_lists_and_reads_never_show_a_url_password(app: App, url: str, shown: str) -> None:
    """A URL's password is a secret: shown only in the create's answer (with the signing
    secret); GET and the list show it as ``user:***@`` (contract: lists never show secrets)."""
    hook = created(app, url=url)
    assert hook["url"] == url
    assert app.call("admin", "GET", f"/v1/webhooks/{hook['webhook_id']}").json()["url"] == shown
    listed = app.call("admin", "GET", "/v1/webhooks").json()["webhooks"]
    assert [h["url"] for h in listed if h["webhook_id"] == hook["webhook_id"]] == [shown]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://127.0.0.1/x"}, "url"),
        ({"url": "file:///etc/passwd"}, "url"),
        ({"url": "http://"}, "url"),
        ({"url": "127.0.0.1:9000/hooks"}, "url"),
        ({"url": "http://127.0.0.1:99999/"}, "url"),
        ({"url": "http://a b/"}, "url"),
        ({"url": "http://[::1]x/"}, "url"),
        ({"url": "http://[::1]:9000x/"}, "url"),
        ({"url": "http://a<b>/"}, "url"),
        ({"url": "http://x\\y/"}, "url"),
        ({"url": "http://r\u00e9..test/"}, "url"),
        ({"url": ""}, "url"),
        ({"url": 5}, "url"),
        ({}, "url"),
        ({"url": "http://127.0.0.1/", "events": []}, "events"),
        ({"url": "http://127.0.0.1/", "events": ["mail"]}, "events"),
        ({"url": "http://127.0.0.1/", "events": "message"}, "events"),
        ({"url": "http://127.0.0.1/", "run_id": "a b"}, "run_id"),
        ({"url": "http://127.0.0.1/", "run_glob": "a/b*"}, "run_glob"),
        ({"url": "http://127.0.0.1/", "description": "x" * 501}, "description"),
        ({"url": "http://127.0.0.1/", "secret": "whsec_mine"}, "secret"),
    ],
)
def test_bad_input_is_422_invalid_request_naming_the_field(
    app: App, body: dict[str, Any], field: str
) -> None:
    """Anything but an http(s) URL with a host, or a bad filter: 422 naming the field."""
    answer = app.call("admin", "POST", "/v1/webhooks", json=body)
    assert answer.status_code == 422, answer.text
    error = answer.json()
    assert error["error"]["code"] == "invalid_request"
    assert field in error["error"]["message"], error
    assert error["next_action"] == "fix_arguments" and error["hint"]


def test_a_body_that_is_not_json_is_422(app: App) -> None:
    """A body that is not a JSON object: 422 invalid_request, never a 500."""
    for content in (b"{", b"[]", b"null"):
        answer = app.call(
            "admin",
            "POST",
            "/v1/webhooks",
            content=content,
            headers={"Content-Type": "application/json"},
        )
        assert answer.status_code == 422, answer.text


def test_get_delete_and_test_of_an_unknown_webhook_are_404(app: App) -> None:
    """No such webhook: 404 not_found with a hint, for every route that names one."""
    for method, path in (
        ("GET", "/v1/webhooks/wh_nosuchhook"),
        ("DELETE", "/v1/webhooks/wh_nosuchhook"),
        ("GET", "/v1/webhooks/wh_nosuchhook/deliveries"),
        ("POST", "/v1/webhooks/wh_nosuchhook/test"),
        ("GET", "/v1/webhooks/not-an-id"),
        ("GET", "/v1/webhooks/" + "wh_" + "a" * 200),
    ):
        answer = app.call("admin", method, path)
        assert answer.status_code == 404, (method, path, answer.text)
        assert answer.json()["error"]["code"] == "not_found"
        assert "GET /v1/webhooks" in answer.json()["error"]["message"]


def test_delete_answers_204_and_then_the_webhook_is_gone(app: App) -> None:
    """DELETE: 204, then 404 for it, and it leaves the list."""
    hook_id = created(app)["webhook_id"]
    assert app.call("admin", "DELETE", f"/v1/webhooks/{hook_id}").status_code == 204
    assert app.call("admin", "GET", f"/v1/webhooks/{hook_id}").status_code == 404
    assert app.call("admin", "DELETE", f"/v1/webhooks/{hook_id}").status_code == 404
    listed = app.call("admin", "GET", "/v1/webhooks").json()["webhooks"]
    assert hook_id not in [h["webhook_id"] for h in listed]


def test_a_test_ping_is_202_and_shows_as_a_pending_delivery(app: App) -> None:
    """POST .../test: 202 {delivery_id}; the ping is listed as a delivery (type ping)."""
    hook_id = created(app)["webhook_id"]
    answer = app.call("admin", "POST", f"/v1/webhooks/{hook_id}/test")
    assert answer.status_code == 202, answer.text
    delivery_id = answer.json()["delivery_id"]
    page = app.call("admin", "GET", f"/v1/webhooks/{hook_id}/deliveries").json()
    assert set(page) == {"deliveries", "next_cursor", "has_more"}
    (row,) = [d for d in page["deliveries"] if d["delivery_id"] == delivery_id]
    assert set(row) == {
        "delivery_id",
        "event_id",
        "type",
        "attempt",
        "state",
        "status_code",
        "error",
        "at",
        "next_attempt_at",
    }
    assert row["type"] == "ping" and row["attempt"] >= 1
    assert row["state"] in ("pending", "delivered", "failed")
    assert RFC3339.fullmatch(row["at"])


def test_deliveries_page_newest_first_with_a_cursor(app: App) -> None:
    """limit and cursor page through the attempts, newest first, each row once."""
    receiver = Receiver("whsec_c2V0IGJlbG93", answer=lambda n: 500 if n == 1 else 204).start()
    try:
        hook = created(app, url=receiver.url, run_id="paging-only")
        receiver.secret = hook["secret"]
        hook_id = hook["webhook_id"]
        sent = {
            app.call("admin", "POST", f"/v1/webhooks/{hook_id}/test").json()["delivery_id"]
            for _ in range(3)
        }
        # Each ping fails once and is delivered on its retry: six rows that no longer change
        # (a newest-first list moves while attempts are made).
        receiver.until(lambda got: len(got) >= 6)
        deadline = time.monotonic() + 20
        while True:
            rows = _all_rows(app, hook_id, 50)
            if [state for _, _, _, state in rows].count("delivered") == 3:
                break
            assert time.monotonic() < deadline, rows
            time.sleep(0.05)
        paged = _all_rows(app, hook_id, 2)
        assert paged == rows and len(rows) == 6
        assert {row[0] for row in rows} == sent
        assert len({row[:2] for row in rows}) == len(rows), rows
        assert [row[2] for row in rows] == sorted((row[2] for row in rows), reverse=True)
    finally:
        receiver.stop()


def _all_rows(app: App, hook_id: str, limit: int) -> list[tuple[str, int, str, str]]:
    """Every attempt row, page by page of ``limit``."""
    rows: list[tuple[str, int, str, str]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": limit} | ({"cursor": cursor} if cursor else {})
        page = app.call("admin", "GET", f"/v1/webhooks/{hook_id}/deliveries", params=params)
        assert page.status_code == 200, page.text
        body = page.json()
        assert len(body["deliveries"]) <= limit
        rows += [(d["delivery_id"], d["attempt"], d["at"], d["state"]) for d in body["deliveries"]]
        if not body["has_more"]:
            assert body["next_cursor"] is None
            return rows
        cursor = body["next_cursor"]


@pytest.mark.parametrize(
    ("params", "status", "code"),
    [
        ({"limit": "0"}, 422, "invalid_request"),
        ({"limit": "501"}, 422, "invalid_request"),
        ({"limit": "x"}, 422, "invalid_request"),
        ({"cursor": "not-a-cursor"}, 400, "invalid_cursor"),
        ({"cursor": "WzEsMl0"}, 400, "invalid_cursor"),
    ],
)
def test_bad_paging_is_refused(app: App, params: dict[str, str], status: int, code: str) -> None:
    """A limit outside 1-500 is 422; a cursor this server did not give is invalid_cursor."""
    hook_id = created(app)["webhook_id"]
    answer = app.call("admin", "GET", f"/v1/webhooks/{hook_id}/deliveries", params=params)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code


# -- scopes ------------------------------------------------------------------------------

# (caller, body filter, expected status): create.
CREATE_CASES = [
    ("admin", {}, 201),
    ("admin", {"run_glob": "*"}, 201),
    ("read", {"run_id": "team-a-1"}, 403),
    ("run", {"run_id": "team-a-1"}, 403),
    ("team-a", {"run_id": "team-a-1"}, 201),
    ("team-a", {"run_id": "team-b-1"}, 403),
    ("team-a", {"run_glob": "team-a-*"}, 201),
    ("team-a", {"run_glob": "team-a-nightly-*"}, 201),
    ("team-a", {"run_glob": "team-*"}, 403),
    ("team-a", {}, 403),
    ("none", {"run_id": "team-a-1"}, 401),
]


@pytest.mark.parametrize(("who", "body", "status"), CREATE_CASES)
def test_who_may_create_which_webhook(
    app: App, who: str, body: dict[str, Any], status: int
) -> None:
    """admin any; runs:<glob> a run_id it matches or a run_glob under its prefix; read and
    run tokens none; a refusal is 403 forbidden_scope naming the scope needed."""
    answer = create(app, who, **body)
    assert answer.status_code == status, answer.text
    if status == 403:
        error = answer.json()
        assert error["error"]["code"] == "forbidden_scope"
        assert error["error"]["details"]["needed"] in ("admin", "runs:team-a-1", "runs:team-b-1")
        assert "insufficient_scope" in answer.headers["www-authenticate"]


def test_each_token_sees_and_changes_only_the_webhooks_its_scope_reaches(app: App) -> None:
    """A runs: token sees, deletes and tests only webhooks within its glob (others are 403);
    read sees all and changes none; a run token sees its run's and changes none."""
    mine = created(app, "team-a", run_id="team-a-1")["webhook_id"]
    prefix = created(app, "admin", run_glob="team-a-x*")["webhook_id"]
    other = created(app, "admin", run_id="team-b-1")["webhook_id"]
    every = created(app, "admin")["webhook_id"]

    def listed(who: str) -> set[str]:
        answer = app.call(who, "GET", "/v1/webhooks")
        assert answer.status_code == 200, answer.text
        return {h["webhook_id"] for h in answer.json()["webhooks"]}

    assert {mine, prefix, other, every} <= listed("admin")
    assert {mine, prefix, other, every} <= listed("read")
    assert {mine, prefix} <= listed("team-a") and not {other, every} & listed("team-a")
    assert mine in listed("run") and not {prefix, other, every} & listed("run")

    for who, hook, status in [
        ("team-a", other, 403),
        ("team-a", every, 403),
        ("team-a", mine, 200),
        ("read", other, 200),
        ("run", mine, 200),
        ("run", prefix, 403),
    ]:
        for path in (f"/v1/webhooks/{hook}", f"/v1/webhooks/{hook}/deliveries"):
            assert app.call(who, "GET", path).status_code == status, (who, path)

    for who, hook, status in [
        ("read", mine, 403),
        ("run", mine, 403),
        ("team-a", other, 403),
        ("team-a", prefix, 202),
    ]:
        assert app.call(who, "POST", f"/v1/webhooks/{hook}/test").status_code == status, who
    for who, hook, status in [
        ("read", mine, 403),
        ("run", mine, 403),
        ("team-a", other, 403),
        ("team-a", every, 403),
        ("team-a", mine, 204),
    ]:
        assert app.call(who, "DELETE", f"/v1/webhooks/{hook}").status_code == status, who
    assert app.call("admin", "GET", f"/v1/webhooks/{other}").status_code == 200
    for method, path, needed in (
        ("GET", f"/v1/webhooks/{other}", "read"),
        ("DELETE", f"/v1/webhooks/{other}", "admin"),
    ):
        refused = app.call("team-a", method, path)
        assert refused.json()["error"]["details"] == {"needed": needed}
        assert "team-b" not in refused.text  # nothing of the other run is said


# -- the Python client ---------------------------------------------------------------------


def test_the_async_client_creates_lists_pings_and_deletes_webhooks(app: App) -> None:
    """AsyncSink's webhook methods make the calls above and return typed models."""

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app.inproc.app)
        async with AsyncSink(app.inproc.url, api_token=ADMIN, transport=transport) as sink:
            hook = await sink.create_webhook(
                "http://127.0.0.1:9/hooks", events=["inbox"], run_id="ci-7", description="d"
            )
            assert isinstance(hook, Webhook) and hook.secret and hook.secret.startswith("whsec_")
            assert hook.secret not in repr(hook)
            assert (hook.events, hook.run_id, hook.run_glob) == (("inbox",), "ci-7", None)
            got = await sink.get_webhook(hook.webhook_id)
            assert got.secret is None and got.created_at == hook.created_at
            assert hook.webhook_id in [h.webhook_id for h in await sink.list_webhooks()]
            delivery_id = await sink.test_webhook(hook.webhook_id)
            page = await sink.list_deliveries(hook.webhook_id, limit=10)
            assert isinstance(page, DeliveryPage) and not page.has_more
            (row,) = page.deliveries
            assert isinstance(row, WebhookDelivery)
            assert (row.delivery_id, row.type) == (delivery_id, "ping")
            await sink.delete_webhook(hook.webhook_id)
            with pytest.raises(ApiError) as refused:
                await sink.get_webhook(hook.webhook_id)
            assert (refused.value.status, refused.value.code) == (404, "not_found")

    app.inproc.call(scenario())


# -- the web UI's run page -------------------------------------------------------------------


def test_the_run_page_shows_the_runs_webhook_deliveries(app: App) -> None:
    """A run's page lists each attempt at its events: webhook, event, attempt, state, status;
    another run's deliveries are not there."""
    receiver = Receiver("whsec_c2V0IGJlbG93", answer=lambda n: 500 if n == 1 else 204).start()
    try:
        run_id, other_run = f"ui-hooks-{uuid.uuid4().hex[:8]}", f"ui-else-{uuid.uuid4().hex[:8]}"
        hook = created(app, url=receiver.url, run_id=run_id, events=["inbox"])
        other = created(app, url=receiver.url, run_id=other_run, events=["inbox"])
        receiver.secret = hook["secret"]
        for run in (run_id, other_run):
            made = app.call("admin", "POST", "/v1/inboxes", json={"run_id": run, "purpose": "ui"})
            assert made.status_code == 201, made.text
        deadline = time.monotonic() + 20
        while True:
            page = app.call("admin", "GET", f"/v1/webhooks/{hook['webhook_id']}/deliveries")
            states = [d["state"] for d in page.json()["deliveries"]]
            if "delivered" in states:
                break
            assert time.monotonic() < deadline, states
            time.sleep(0.05)
        html = app.call("admin", "GET", f"/runs/{run_id}").text
        rows = re.findall(r'<tr data-delivery="(dlv_\w+)">(.*?)</tr>', html, flags=re.S)
        assert rows, html
        assert all(other["webhook_id"] not in cells for _, cells in rows)
        text = [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", cells)).strip() for _, cells in rows]
        ours = [row for row in text if hook["webhook_id"] in row]  # webhooks for every run too
        first, retried = ours[-1], ours[-2]  # newest first
        assert " inbox ev_" in first, first
        assert re.search(r" 1 pending .*500 http_500$", first), first
        assert re.search(r" 2 delivered 204", retried), retried
    finally:
        receiver.stop()


def test_the_run_page_shows_a_webhook_url_without_its_password(app: App) -> None:
    """A webhook URL's ``user:password@`` shows on the run page as ``user:***@``."""
    run_id = f"ui-auth-{uuid.uuid4().hex[:8]}"
    url = "http://ci:hunter2-pw@127.0.0.1:9/hook"
    hook = created(app, url=url, run_id=run_id, events=["inbox"])
    try:
        made = app.call("admin", "POST", "/v1/inboxes", json={"run_id": run_id, "purpose": "ui"})
        assert made.status_code == 201, made.text
        html = app.call("admin", "GET", f"/runs/{run_id}").text
    finally:
        app.call("admin", "DELETE", f"/v1/webhooks/{hook['webhook_id']}")
    assert re.search(r'<tr data-delivery="dlv_\w+">', html), html
    assert "http://ci:***@127.0.0.1:9/hook" in html and "hunter2" not in html
