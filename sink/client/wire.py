"""The HTTP shape of each call, shared by the sync and async clients.

Each operation is a ``Call`` (method, path, body, headers, how long it may take) and a way
to read its answer. Building and reading are pure; the clients only send.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from sink.client.errors import ApiError, OwnershipRefused, ProtocolError, Unavailable
from sink.client.models import (
    DeliveryPage,
    Envelope,
    FoundPage,
    Match,
    MatchLike,
    Message,
    MessagePage,
    RunReport,
    RunToken,
    Webhook,
)

T = TypeVar("T")

# A long-poll is held by the server for up to timeout_s; the HTTP read timeout must outlast it.
LONG_POLL_MARGIN_S = 10.0
# A wait without timeout_s long-polls for the policy's long_poll_max_s (30 s under ci), which
# the client does not know: its read allows this much (the server answers by its own cap).
UNSTATED_LONG_POLL_S = 600.0


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    method: str
    path: str
    read: Callable[[httpx.Response], T]
    json: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    long_poll_s: float | None = None

    def timeout(self, default: httpx.Timeout) -> httpx.Timeout:
        if self.long_poll_s is None or default.read is None:
            return default
        read = default.read + self.long_poll_s + LONG_POLL_MARGIN_S
        return httpx.Timeout(default.connect, read=read, write=default.write, pool=default.pool)


@dataclass(frozen=True, slots=True)
class Created:
    envelope: Envelope
    replayed: bool
    capped: tuple[str, ...] = ()  # v2: the request's values the policy lowered


def create_inbox(
    run_id: str,
    purpose: str,
    *,
    ttl_s: int | None,
    poll_budget: int | None,
    policy: str | None,
    match: MatchLike | None,
    idempotency_key: str | None,
) -> Call[Created]:
    body: dict[str, Any] = {"run_id": run_id, "purpose": purpose}
    for key, value in (("ttl_s", ttl_s), ("poll_budget", poll_budget), ("policy", policy)):
        if value is not None:
            body[key] = value
    criteria = Match.of(match)
    if criteria:
        body["match"] = criteria.as_json()
    headers = {} if idempotency_key is None else {"Idempotency-Key": idempotency_key}
    return Call("POST", "/v1/inboxes", _created, json=body, headers=headers)


def get_inbox(inbox_id: str) -> Call[Envelope]:
    return Call("GET", f"/v1/inboxes/{_seg(inbox_id)}", envelope)


def wait_for_message(
    inbox_id: str,
    *,
    timeout_s: float | None,
    cursor: str | None,
    match: MatchLike | None,
    run_id: str | None,
    order: str | None = None,
) -> Call[Envelope]:
    body: dict[str, Any] = {}
    if timeout_s is not None:  # else the policy's long_poll_max_s, as the tool's default
        body["timeout_s"] = timeout_s
    if order is not None:
        body["order"] = order
    if cursor is not None:
        body["cursor"] = cursor
    criteria = Match.of(match)
    if criteria is not None:
        body["match"] = criteria.as_json()
    if run_id is not None:
        body["run_id"] = run_id
    path = f"/v1/inboxes/{_seg(inbox_id)}/wait"
    long_poll_s = UNSTATED_LONG_POLL_S if timeout_s is None else timeout_s
    return Call("POST", path, envelope, json=body, long_poll_s=long_poll_s)


def list_messages(
    inbox_id: str, *, after: str | None, limit: int | None, run_id: str | None
) -> Call[MessagePage]:
    params: dict[str, Any] = {}
    if after is not None:
        params["after"] = after
    if limit is not None:
        params["limit"] = limit
    path = f"/v1/inboxes/{_seg(inbox_id)}/messages"
    return Call("GET", path, _reader(MessagePage.from_json), params=params, headers=_run(run_id))


def read_message(message_id: str, *, run_id: str | None) -> Call[Message]:
    path = f"/v1/messages/{_seg(message_id)}"
    return Call("GET", path, _reader(Message.from_json), headers=_run(run_id))


def raw_message(message_id: str, *, run_id: str | None) -> Call[bytes]:
    path = f"/v1/messages/{_seg(message_id)}/raw"
    return Call("GET", path, _raw, headers=_run(run_id))


def claim_message(message_id: str, run_id: str) -> Call[Envelope]:
    path = f"/v1/messages/{_seg(message_id)}/claim"
    return Call("POST", path, envelope, json={"run_id": run_id})


def run_report(run_id: str) -> Call[RunReport]:
    return Call("GET", f"/v1/runs/{_seg(run_id)}", _reader(RunReport.from_json))


def find_mail(
    query: str, *, run_id: str | None, limit: int | None, cursor: str | None
) -> Call[FoundPage]:
    params: dict[str, Any] = {"query": query}
    if limit is not None:
        params["limit"] = limit
    if cursor is not None:
        params["cursor"] = cursor
    return Call(
        "GET", "/v1/messages", _reader(FoundPage.from_json), params=params, headers=_run(run_id)
    )


def release_run(run_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/runs/{_seg(run_id)}", _nothing)


def mint_run_token(run_id: str, *, ttl_s: int | None) -> Call[RunToken]:
    body: dict[str, Any] = {} if ttl_s is None else {"ttl_s": ttl_s}
    path = f"/v1/runs/{_seg(run_id)}/token"
    return Call("POST", path, _reader(RunToken.from_json), json=body)


def create_webhook(
    url: str,
    *,
    events: Sequence[str] | None,
    run_id: str | None,
    run_glob: str | None,
    description: str | None,
) -> Call[Webhook]:
    body: dict[str, Any] = {"url": url}
    if events is not None:
        body["events"] = list(events)
    for key, value in (("run_id", run_id), ("run_glob", run_glob), ("description", description)):
        if value is not None:
            body[key] = value
    return Call("POST", "/v1/webhooks", _reader(Webhook.from_json), json=body)


def list_webhooks() -> Call[tuple[Webhook, ...]]:
    def parse(data: dict[str, Any]) -> tuple[Webhook, ...]:
        hooks = data.get("webhooks")
        if not isinstance(hooks, list):
            raise ProtocolError("GET /v1/webhooks: the answer has no 'webhooks' list")
        return tuple(Webhook.from_json(hook) for hook in hooks)

    return Call("GET", "/v1/webhooks", _reader(parse))


def get_webhook(webhook_id: str) -> Call[Webhook]:
    return Call("GET", f"/v1/webhooks/{_seg(webhook_id)}", _reader(Webhook.from_json))


def delete_webhook(webhook_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/webhooks/{_seg(webhook_id)}", _nothing)


def list_deliveries(
    webhook_id: str, *, cursor: str | None, limit: int | None
) -> Call[DeliveryPage]:
    params: dict[str, Any] = {}
    if cursor is not None:
        params["cursor"] = cursor
    if limit is not None:
        params["limit"] = limit
    path = f"/v1/webhooks/{_seg(webhook_id)}/deliveries"
    return Call("GET", path, _reader(DeliveryPage.from_json), params=params)


def test_webhook(webhook_id: str) -> Call[str]:
    def parse(data: dict[str, Any]) -> str:
        delivery_id = data.get("delivery_id")
        if not isinstance(delivery_id, str):
            raise ProtocolError("POST /v1/webhooks/{id}/test: the answer has no 'delivery_id'")
        return delivery_id

    return Call("POST", f"/v1/webhooks/{_seg(webhook_id)}/test", _reader(parse), json={})


# -- reading answers -----------------------------------------------------------------


def envelope(response: httpx.Response) -> Envelope:
    """An envelope answer; a claim after the lease (409 ``lease_expired``) is one too."""
    data = _json(response)
    if response.is_success or (isinstance(data, dict) and "state" in data):
        return Envelope.from_json(data)
    raise _error(response, data)


def _created(response: httpx.Response) -> Created:
    replayed = response.headers.get("idempotent-replayed", "").lower() == "true"
    data = _json(response)
    capped = data.get("capped") if isinstance(data, dict) else None
    fields = tuple(str(field) for field in capped) if isinstance(capped, list) else ()
    return Created(envelope(response), replayed, fields)


def _reader(parse: Callable[[dict[str, Any]], T]) -> Callable[[httpx.Response], T]:
    def read(response: httpx.Response) -> T:
        data = _json(response)
        if not response.is_success:
            raise _error(response, data)
        return parse(data)

    return read


def _raw(response: httpx.Response) -> bytes:
    if not response.is_success:
        raise _error(response, _json(response))
    return response.content


def _nothing(response: httpx.Response) -> None:
    if not response.is_success:
        raise _error(response, _json(response))


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        if response.is_success:
            raise ProtocolError(
                f"{response.request.method} {response.request.url.path}: "
                f"{response.status_code} with a body that is not JSON"
            ) from None
        return None


def _error(response: httpx.Response, data: Any) -> ApiError:
    """The exception for an error answer: refusal, 503 with Retry-After, or an error object."""
    status = response.status_code
    trace = response.headers.get("x-trace-id")
    body = data if isinstance(data, dict) else {}
    found = body.get("error")
    error: dict[str, Any] = found if isinstance(found, dict) else {}
    code = str(error.get("code") or body.get("reason") or f"http_{status}")
    message = str(error.get("message") or response.reason_phrase or "error")
    given = error.get("details")
    details: dict[str, Any] = given if isinstance(given, dict) else {}
    guidance = {
        name: body.get(name)
        for name in ("next_action", "next_tool", "next_arguments", "hint")
        if name in body
    }
    if body.get("reason") in ("wrong_run", "claimed_by_other_run"):
        guidance.setdefault("next_action", "stop")
        reason = str(body["reason"])
        return OwnershipRefused(status, reason, message, details, trace, guidance)
    if status == 503:
        after = _retry_after(response)
        return Unavailable(status, code, message, details, trace, after, guidance)
    return ApiError(status, code, message, details, trace, guidance)


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _seg(value: str) -> str:
    return quote(value, safe="")


def _run(run_id: str | None) -> dict[str, str]:
    return {} if run_id is None else {"X-Run-Id": run_id}
