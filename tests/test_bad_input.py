"""Bad input on every endpoint gets a 4xx JSON error with a code: never a 500, never a trace."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.inproc import InProcess
from tests.support import create_inbox, new_run_id

TYPO_RUN_IDS = ["temp gamil com", "tamp mail com", "", "x" * 129, "run/1", "ü-run", None, 42, ["r"]]


def _assert_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"]["code"] == code
    assert "Traceback" not in response.text


@pytest.mark.parametrize("run_id", TYPO_RUN_IDS)
def test_create_rejects_bad_run_ids(app: InProcess, run_id: object) -> None:
    """A run_id outside 1-128 chars of A-Za-z0-9._:- (typos like 'temp gamil com') is 422."""
    with app.http() as client:
        response = client.post("/v1/inboxes", json={"run_id": run_id, "purpose": "signup"})
    _assert_error(response, 422, "invalid_request")


@pytest.mark.parametrize(
    "body",
    [
        {"purpose": "signup"},
        {"run_id": "r1"},
        {"run_id": "r1", "purpose": "has space"},
        {"run_id": "r1", "purpose": "p", "ttl_s": 0},
        {"run_id": "r1", "purpose": "p", "ttl_s": "60"},
        {"run_id": "r1", "purpose": "p", "ttl_s": 1.5},
        {"run_id": "r1", "purpose": "p", "ttl_s": True},
        {"run_id": "r1", "purpose": "p", "poll_budget": -1},
        {"run_id": "r1", "purpose": "p", "match": {"subject_contains": 5}},
        {"run_id": "r1", "purpose": "p", "match": {"regex": ".*"}},
        {"run_id": "r1", "purpose": "p", "match": "subject"},
        {"run_id": "r1", "purpose": "p", "unknown_field": 1},
        {"run_id": "r1", "purpose": "p", "policy": "bad name!"},
    ],
)
def test_create_rejects_wrong_shapes(app: InProcess, body: dict[str, Any]) -> None:
    """Missing fields, wrong types, unknown fields and absurd numbers are 422 invalid_request."""
    with app.http() as client:
        response = client.post("/v1/inboxes", json=body)
    _assert_error(response, 422, "invalid_request")
    assert response.json()["error"]["details"]["errors"]


@pytest.mark.parametrize(
    "content",
    [b"{", b"[]", b"null", b'"text"', b"\xff\xfe", b"", b"   ", b'{"run_id": "r1", "purpose": }'],
)
def test_create_rejects_broken_json(app: InProcess, content: bytes) -> None:
    """Broken or non-object JSON bodies are 422 invalid_request."""
    with app.http() as client:
        response = client.post(
            "/v1/inboxes", content=content, headers={"Content-Type": "application/json"}
        )
    _assert_error(response, 422, "invalid_request")


CRAFTED_JSON = {
    "nested_arrays": b"[" * 1000 + b"]" * 1000,
    "nested_objects": b'{"a":' * 1000 + b"1" + b"}" * 1000,
    "nested_in_a_field": (
        b'{"run_id": "r1", "purpose": "p", "match": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    ),
    "long_integer": b'{"run_id": "r1", "purpose": "p", "ttl_s": ' + b"9" * 5000 + b"}",
    "long_negative_integer": b'{"timeout_s": -' + b"1" * 5000 + b"}",
    "long_integer_alone": b"7" * 5000,
    "huge_exponent": b'{"run_id": "r1", "purpose": "p", "ttl_s": 1e999999}',
    # Numbers too long are 422 (the contract), decimals as integers: 60.000...0 was taken.
    "long_decimal": b'{"run_id": "r1", "purpose": "p", "ttl_s": 60.' + b"0" * 5000 + b"}",
    "long_decimal_wait": b'{"timeout_s": 1.' + b"1" * 100_000 + b"}",
}


@pytest.mark.parametrize("name", sorted(CRAFTED_JSON))
@pytest.mark.parametrize(
    "path",
    [
        "/v1/inboxes",
        "/v1/inboxes/ib_aaaaaaaaaaaaaaaaaaaa/wait",
        "/v1/messages/msg_aaaaaaaaaaaaaaaaaaaaaaaa/claim",
        "/v1/faults",
    ],
)
def test_crafted_json_is_422_never_500(app: InProcess, path: str, name: str) -> None:
    """Nesting past the recursion limit and integers past the digit limit are 422
    invalid_request (small bodies that used to be 500s)."""
    with app.http() as client:
        response = client.post(
            path, content=CRAFTED_JSON[name], headers={"Content-Type": "application/json"}
        )
    _assert_error(response, 422, "invalid_request")


JSON_PATHS = [
    "/v1/inboxes",
    "/v1/inboxes/ib_aaaaaaaaaaaaaaaaaaaa/wait",
    "/v1/messages/msg_aaaaaaaaaaaaaaaaaaaaaaaa/claim",
    "/v1/faults",
    "/mcp",
]


@st.composite
def crafted_bodies(draw: st.DrawFn) -> bytes:
    """Bodies a hostile client crafts: deep nesting, long numbers, both inside a valid-looking
    object, and arbitrary bytes."""
    depth = draw(st.integers(min_value=1, max_value=20_000))
    opener = draw(st.sampled_from([b"[", b'{"a":', b'{"match":', b'{"run_id":[']))
    closer = {b"[": b"]", b'{"a":': b"}", b'{"match":': b"}", b'{"run_id":[': b"]}"}[opener]
    digits = draw(st.integers(min_value=1, max_value=20_000))
    number = draw(st.sampled_from([b"", b"-", b"0.", b"1e"])) + b"7" * digits
    field = draw(st.sampled_from([b"ttl_s", b"timeout_s", b"poll_budget", b"count", b"id"]))
    return draw(
        st.sampled_from(
            [
                opener * depth + closer * depth,
                opener * depth,  # never closed
                b'{"run_id": "r1", "purpose": "p", "%s": %s}' % (field, number),
                b'{"run_id": "r1", "match": ' + opener * depth + number + closer * depth + b"}",
                number,
                draw(st.binary(max_size=2048)),
            ]
        )
    )


@given(path=st.sampled_from(JSON_PATHS), body=crafted_bodies())
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_no_request_body_yields_a_5xx(app: InProcess, path: str, body: bytes) -> None:
    """Whatever the body, the answer is not a server error (and never a trace)."""
    with app.http() as client:
        response = client.post(
            path,
            content=body,
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
            },
        )
    assert response.status_code < 500, (response.status_code, response.text[:200])
    assert "Traceback" not in response.text


def test_oversized_body_is_413(app: InProcess) -> None:
    """A request body over the cap is refused with 413, not read into memory."""
    with app.http() as client:
        response = client.post(
            "/v1/inboxes",
            content=b'{"run_id": "' + b"a" * (2 * 1024 * 1024) + b'"}',
            headers={"Content-Type": "application/json"},
        )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "invalid_request"


def test_bad_idempotency_key_is_422(app: InProcess) -> None:
    """An Idempotency-Key with spaces or too long is 422."""
    with app.http() as client:
        response = client.post(
            "/v1/inboxes",
            json={"run_id": new_run_id(), "purpose": "p"},
            headers={"Idempotency-Key": "a b"},
        )
    _assert_error(response, 422, "invalid_request")


@pytest.mark.parametrize(
    "path",
    [
        "/v1/inboxes/ib_doesnotexist",
        "/v1/inboxes/ib_aaaaaaaaaaaaaaaaaaaa",
        "/v1/inboxes/%00",
        "/v1/messages/msg_aaaaaaaaaaaaaaaaaaaaaaaa",
        "/v1/messages/../../etc/passwd",
        "/v1/messages/msg_aaaaaaaaaaaaaaaaaaaaaaaa/raw",
        "/v1/inboxes/ib_aaaaaaaaaaaaaaaaaaaa/messages",
        "/v1/nothing-here",
    ],
)
def test_unknown_ids_are_404(app: InProcess, path: str) -> None:
    """Unknown or malformed ids are 404 not_found."""
    with app.http() as client:
        response = client.get(path)
    _assert_error(response, 404, "not_found")


@pytest.mark.parametrize(
    "body",
    [
        {"timeout_s": -1},
        {"timeout_s": "5"},
        {"cursor": 5},
        {"match": {"max_age_s": -3}},
        {"run_id": "temp gamil com"},
        {"extra": True},
    ],
)
def test_wait_rejects_bad_bodies(app: InProcess, body: dict[str, Any]) -> None:
    """Bad wait bodies are 422 and spend no poll."""
    with app.http() as client:
        inbox = create_inbox(client)
        response = client.post(f"/v1/inboxes/{inbox['inbox_id']}/wait", json=body)
        after = client.get(f"/v1/inboxes/{inbox['inbox_id']}").json()
    _assert_error(response, 422, "invalid_request")
    assert after["attempt"] == 0


def test_wait_rejects_infinite_timeout(app: InProcess) -> None:
    """A non-finite timeout_s is 422, not a wait forever."""
    with app.http() as client:
        inbox = create_inbox(client)
        response = client.post(
            f"/v1/inboxes/{inbox['inbox_id']}/wait",
            content=b'{"timeout_s": Infinity}',
            headers={"Content-Type": "application/json"},
        )
    _assert_error(response, 422, "invalid_request")


def test_wait_rejects_a_bad_run_header(app: InProcess) -> None:
    """An X-Run-Id outside the alphabet is 422, never matched against the owner."""
    with app.http() as client:
        inbox = create_inbox(client)
        response = client.post(
            f"/v1/inboxes/{inbox['inbox_id']}/wait", json={}, headers={"X-Run-Id": "temp gamil com"}
        )
    _assert_error(response, 422, "invalid_request")


@pytest.mark.parametrize("limit", ["0", "501", "-1", "abc", "1e3", "99999999999999999999"])
def test_absurd_limits_are_422(app: InProcess, limit: str) -> None:
    """limit outside 1..500 is 422 on both listings."""
    with app.http() as client:
        inbox = create_inbox(client)
        listed = client.get(f"/v1/inboxes/{inbox['inbox_id']}/messages", params={"limit": limit})
        unrouted = client.get("/v1/unrouted", params={"limit": limit})
    _assert_error(listed, 422, "invalid_request")
    _assert_error(unrouted, 422, "invalid_request")


@pytest.mark.parametrize("body", [{}, {"run_id": ""}, {"run_id": "temp gamil com"}, {"run_id": 7}])
def test_claim_rejects_bad_bodies(app: InProcess, body: dict[str, Any]) -> None:
    """A claim needs a valid run_id."""
    with app.http() as client:
        response = client.post("/v1/messages/msg_aaaaaaaaaaaaaaaaaaaaaaaa/claim", json=body)
    _assert_error(response, 422, "invalid_request")


def test_run_paths_validate_the_run_id(app: InProcess) -> None:
    """A run path with characters outside the alphabet is 422; an unknown run report is 404."""
    with app.http() as client:
        bad = client.get("/v1/runs/temp%20gamil%20com")
        bad_delete = client.delete("/v1/runs/temp%20gamil%20com")
        unknown = client.get(f"/v1/runs/{new_run_id('ghost')}")
    _assert_error(bad, 422, "invalid_request")
    _assert_error(bad_delete, 422, "invalid_request")
    _assert_error(unknown, 404, "not_found")


def test_wrong_method_is_405_json(app: InProcess) -> None:
    """A wrong method is a JSON 405."""
    with app.http() as client:
        response = client.put("/v1/inboxes")
    _assert_error(response, 405, "method_not_allowed")


@pytest.mark.parametrize(
    "body",
    [
        {"target": "nowhere", "mode": "error"},
        {"target": "wait", "mode": "explode"},
        {"target": "wait", "mode": "error", "count": 0},
        {"target": "wait", "mode": "error", "probability": 2},
        {"target": "wait", "mode": "error", "count": 1, "probability": 0.5},
        {"target": "wait", "mode": "delay"},
    ],
)
def test_fault_specs_are_validated(app: InProcess, body: dict[str, Any]) -> None:
    """Bad fault specs are 422 invalid_request."""
    with app.http() as client:
        response = client.post("/v1/faults", json=body)
    _assert_error(response, 422, "invalid_request")


def test_wrong_method_names_the_allowed_ones(app: InProcess) -> None:
    """A 405 carries Allow with the methods the resource takes (RFC 9110)."""
    with app.http() as client:
        response = client.put("/v1/inboxes")
    assert response.status_code == 405
    assert "POST" in response.headers["allow"]


def test_whole_number_floats_are_integers(app: InProcess) -> None:
    """60.0 is a valid integer in JSON; "60" and true are still refused."""
    with app.http() as client:
        ok = client.post(
            "/v1/inboxes", json={"run_id": new_run_id(), "purpose": "p", "ttl_s": 60.0}
        )
        text = client.post(
            "/v1/inboxes", json={"run_id": new_run_id(), "purpose": "p", "ttl_s": "60"}
        )
    assert ok.status_code == 201
    _assert_error(text, 422, "invalid_request")


@pytest.mark.parametrize("path", ["/v1/inboxes", "/v1/inboxes/ib_aaaaaaaaaaaaaaaaaaaa/wait"])
def test_a_chunked_body_over_the_limit_is_413(app: InProcess, path: str) -> None:
    """Over 1 MiB without a Content-Length (chunked) is 413, as with one; not 422."""

    def chunks() -> Iterator[bytes]:
        yield b'{"run_id": "r1", "purpose": "'
        for _ in range(24):
            yield b"p" * 65536
        yield b'"}'

    with app.http() as client:
        response = client.post(path, content=chunks(), headers={"Content-Type": "application/json"})
    _assert_error(response, 413, "invalid_request")
