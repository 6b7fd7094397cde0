"""API security: bearer token, open health checks, safe headers, raw mail never rendered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from api.auth import API_FAILURES_PER_MINUTE
from tests.inproc import InProcess
from tests.support import create_inbox, new_run_id, wait

TOKEN = "s3cret-token-for-tests-0123456789"
LATER = "later-token-for-tests-0123456789"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, policy_file: str) -> Iterator[InProcess]:
    """The app in this process, its token from the environment."""
    folder = tmp_path_factory.mktemp("guarded")
    running = InProcess(folder, "--policy-file", policy_file, env={"RUNSINK_API_TOKEN": TOKEN})
    yield running
    running.stop()


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer wrong",
        f"Basic {TOKEN}",
        f"Bearer {TOKEN}x",
        f"bearer {TOKEN[:-1]}",
        f"Bearer  {TOKEN}",
        f"Bearer\t{TOKEN}",
        f"Bearer {TOKEN} {TOKEN}",
        f"Bearer {TOKEN},",
        f"Bearer={TOKEN}",
    ],
)
def test_v1_needs_the_bearer_token(guarded: InProcess, authorization: str | None) -> None:
    """Every /v1 call without the right bearer token is 401 unauthorized."""
    headers = {} if authorization is None else {"Authorization": authorization}
    with guarded.http(headers=headers) as client:
        response = client.post("/v1/inboxes", json={"run_id": new_run_id(), "purpose": "p"})
        listing = client.get("/v1/unrouted")
    for answer in (response, listing):
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "unauthorized"
        assert answer.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_the_scheme_is_case_insensitive(guarded: InProcess, scheme: str) -> None:
    """The scheme name is case-insensitive (RFC 9110 11.1); the token is exact."""
    with guarded.http(headers={"Authorization": f"{scheme} {TOKEN}"}) as client:
        assert client.get("/v1/unrouted").status_code == 200


def test_the_right_token_works_and_health_stays_open(guarded: InProcess) -> None:
    """With the token the API answers; /healthz and /readyz need none."""
    with guarded.http(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        created = client.post("/v1/inboxes", json={"run_id": new_run_id(), "purpose": "p"})
    with guarded.http() as anonymous:
        health = anonymous.get("/healthz")
        ready = anonymous.get("/readyz")
        metrics = anonymous.get("/metrics")
    assert created.status_code == 201
    assert health.status_code == 200 and ready.status_code == 200
    assert metrics.status_code == 401


@pytest.mark.parametrize("path", ["/healthz/x", "/healthzz", "/readyz/../v1/inboxes", "/readyzx"])
def test_only_the_exact_health_paths_are_open(guarded: InProcess, path: str) -> None:
    """A path that merely starts like /healthz or /readyz needs the token like any other."""
    with guarded.http() as anonymous:
        answer = anonymous.get(path)
    assert answer.status_code == 401, (path, answer.status_code)


def test_every_response_has_safe_headers(app: InProcess) -> None:
    """Responses carry nosniff, no framing, no referrer, a strict CSP and no-store."""
    with app.http() as client:
        for response in (
            client.get("/healthz"),
            client.get("/v1/inboxes/ib_x"),
            client.get("/openapi.json"),
        ):
            assert response.headers["x-content-type-options"] == "nosniff"
            assert response.headers["x-frame-options"] == "DENY"
            assert response.headers["referrer-policy"] == "no-referrer"
            assert "default-src 'none'" in response.headers["content-security-policy"]
            assert response.headers["cache-control"] == "no-store"
            assert response.headers["x-trace-id"]


def test_mail_html_is_never_served_as_html(app: InProcess) -> None:
    """Raw mail is message/rfc822 as an attachment; HTML bodies only inside JSON."""
    run_id = new_run_id()
    html = "<html><body><script>alert(1)</script><a href='https://evil.test'>x</a></body></html>"
    with app.http() as client:
        inbox = create_inbox(client, run_id)
        app.send(inbox["address"], subject="xss", html=html)
        message_id = wait(client, inbox["inbox_id"], timeout_s=5).json()["message"]["message_id"]
        raw = client.get(f"/v1/messages/{message_id}/raw")
        read = client.get(f"/v1/messages/{message_id}")
    assert raw.headers["content-type"].startswith("message/rfc822")
    assert raw.headers["content-disposition"].startswith("attachment;")
    assert raw.headers["x-content-type-options"] == "nosniff"
    assert read.headers["content-type"].startswith("application/json")
    assert "<script>" in read.json()["html"]


def test_openapi_is_3_1_and_lists_every_endpoint(app: InProcess) -> None:
    """/openapi.json is OpenAPI 3.1 with every endpoint of the contract."""
    with app.http() as client:
        document = client.get("/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    paths = document["paths"]
    for path, methods in {
        "/v1/inboxes": {"post"},
        "/v1/inboxes/{inbox_id}": {"get"},
        "/v1/inboxes/{inbox_id}/wait": {"post"},
        "/v1/inboxes/{inbox_id}/messages": {"get"},
        "/v1/messages/{message_id}": {"get"},
        "/v1/messages/{message_id}/raw": {"get"},
        "/v1/messages/{message_id}/claim": {"post"},
        "/v1/runs/{run_id}": {"get", "delete"},
        "/v1/unrouted": {"get"},
        "/v1/unrouted/{caught_id}": {"get"},
        "/v1/unrouted/{caught_id}/raw": {"get"},
        "/v1/messages": {"get"},
        "/v1/faults": {"get", "post", "delete"},
        "/healthz": {"get"},
        "/readyz": {"get"},
        "/metrics": {"get"},
    }.items():
        assert methods <= set(paths[path]), path
    assert {"EnvelopeOut", "ErrorOut", "RefusalOut", "MessageOut"} <= set(
        document["components"]["schemas"]
    )


def test_token_from_flag_is_constant_time_compared(tmp_path: Path, policy_file: str) -> None:
    """--api-token works the same as the variable (the flag wins)."""
    running = InProcess(
        tmp_path,
        "--policy-file",
        policy_file,
        "--api-token",
        TOKEN,
        env={"RUNSINK_API_TOKEN": "other-token-123456789"},
    )
    try:
        with running.http(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            assert client.get("/v1/unrouted").status_code == 200
        with running.http(headers={"Authorization": "Bearer other-token-123456789"}) as client:
            assert client.get("/v1/unrouted").status_code == 401
    finally:
        running.stop()


def test_wrong_bearer_tokens_from_one_address_are_throttled(tmp_path: Path) -> None:
    """Past 300 wrong tokens a minute from one address: 429 with Retry-After (a guess is not
    checked); a token that worked before and a signed run token still work; no token is no
    guess."""
    folder = tmp_path / "throttled"
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f'[tokens.later]\ntoken = "{LATER}"\nscope = "admin"\n')
    running = InProcess(folder, "--api-token", TOKEN, "--tokens-file", str(tokens))
    try:
        admin = {"Authorization": f"Bearer {TOKEN}"}
        run_id = new_run_id("throttle")
        with running.http(headers=admin) as client:
            create_inbox(client, run_id)
        with running.http() as client:
            assert client.get("/v1/unrouted", headers=admin).status_code == 200
            run_token = client.post(f"/v1/runs/{run_id}/token", json={}, headers=admin)
            minted = {"Authorization": f"Bearer {run_token.json()['token']}"}
            for _ in range(150):
                assert client.get("/v1/unrouted").status_code == 401  # no token: no guess
            for n in range(API_FAILURES_PER_MINUTE):
                wrong = {"Authorization": f"Bearer wrong-token-{n:06d}-abcdef"}
                assert client.get("/v1/unrouted", headers=wrong).status_code == 401
            throttled = client.get("/v1/unrouted", headers={"Authorization": "Bearer guess"})
            never_used = client.get("/v1/unrouted", headers={"Authorization": f"Bearer {LATER}"})
            still = client.get("/v1/unrouted", headers=admin)
            run = client.get(f"/v1/runs/{run_id}", headers=minted)
    finally:
        running.stop()
    for refused in (throttled, never_used):
        assert refused.status_code == 429, refused.text
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        body = refused.json()
        assert body["error"]["code"] == "too_many_failures"
        assert (body["status"], body["next_action"]) == ("blocked", "wait_then_retry")
        assert body["retry_after"] == float(refused.headers["Retry-After"]) and body["hint"]
    assert still.status_code == 200 and run.status_code == 200
