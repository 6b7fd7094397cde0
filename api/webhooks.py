"""The webhook endpoints (contract v3, "Webhooks"): create, list, get, delete, deliveries, test.

Scopes: the route's operation (``scopes.WEBHOOKS`` to look, ``scopes.WEBHOOK_CHANGE`` to
create, delete or test) is checked in front of every route, and again here; which webhooks a
token reaches is ``scopes.covers_webhook`` over each webhook's own filter: lists show only
those; anything else on a webhook outside it (or creating one) is 403 naming the scope needed.
The secret is in the create answer only.

The wire models are imported where they are used (start-up imports no pydantic).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.auth import grant_of
from api.inputs import model, parse_json
from api.state import state_of
from sink import clock, scopes, webhook_calls
from sink.errors import ForbiddenScope, InvalidRequest, RequestTooLarge
from sink.scopes import Kind, Scope
from sink.webhook_calls import LIMIT_MAX, no_webhook

if TYPE_CHECKING:
    from api.schemas import DeliveryOut, WebhookOut
    from sink.webhooks.model import Attempt, Webhook
    from sink.webhooks.port import WebhookStore

_WEBHOOK_ID = re.compile(r"wh_[a-z0-9]{1,64}")


def _store(request: Request) -> WebhookStore:
    return state_of(request).runtime.webhooks


async def create_webhook(request: Request) -> Response:
    from api.middleware import BODY_TOO_LARGE, BodyTooLarge
    from api.schemas import CreatedWebhookOut, WebhookIn

    try:
        raw = await request.body()
    except BodyTooLarge as exc:
        raise RequestTooLarge(BODY_TOO_LARGE) from exc
    given = model(WebhookIn, parse_json(raw))
    webhook_calls.checked_url(given.url)  # 422 before any scope's 403
    scope = _allowed(request, scopes.WEBHOOK_CHANGE)
    if not scopes.covers_webhook(scope, given.run_id, given.run_glob):
        raise _outside(scope, given.run_id)
    hook = webhook_calls.new_webhook(
        given.url,
        events=list(given.events) if given.events else None,
        run_id=given.run_id,
        run_glob=given.run_glob,
        description=given.description,
        now=clock.now(),
        by_admin=scope.kind is Kind.ADMIN,
    )
    await _store(request).create_webhook(hook)
    out = CreatedWebhookOut(**_webhook_out(hook, whole=True).model_dump(), secret=hook.secret)
    return JSONResponse(out.model_dump(mode="json"), status_code=201)


async def list_webhooks(request: Request) -> Response:
    from api.schemas import WebhookListOut

    scope = _allowed(request, scopes.WEBHOOKS)
    hooks = await _store(request).webhooks()
    seen = [_webhook_out(h) for h in hooks if scopes.covers_webhook(scope, h.run_id, h.run_glob)]
    return JSONResponse(WebhookListOut(webhooks=seen).model_dump(mode="json"))


async def get_webhook(request: Request) -> Response:
    hook = await _visible(request, scopes.WEBHOOKS)
    return JSONResponse(_webhook_out(hook).model_dump(mode="json"))


async def delete_webhook(request: Request) -> Response:
    hook = await _visible(request, scopes.WEBHOOK_CHANGE)
    if not await _store(request).delete_webhook(hook.webhook_id):
        raise no_webhook(hook.webhook_id)  # deleted by another request meanwhile
    return Response(status_code=204)


async def list_deliveries(request: Request) -> Response:
    from api.schemas import DeliveryListOut

    hook = await _visible(request, scopes.WEBHOOKS)
    limit = _limit(request)
    before = webhook_calls.position(request.query_params.get("cursor"))
    rows = await _store(request).deliveries(hook.webhook_id, before, limit + 1)
    page, has_more = rows[:limit], len(rows) > limit
    out = DeliveryListOut(
        deliveries=[_delivery_out(a) for a in page],
        next_cursor=webhook_calls.cursor(page[-1].position) if has_more and page else None,
        has_more=has_more,
    )
    return JSONResponse(out.model_dump(mode="json"))


async def test_webhook(request: Request) -> Response:
    from api.schemas import PingOut

    hook = await _visible(request, scopes.WEBHOOK_CHANGE)
    delivery_id = await webhook_calls.ping(_store(request), hook, clock.now())
    return JSONResponse(PingOut(delivery_id=delivery_id).model_dump(mode="json"), status_code=202)


# -- scope -------------------------------------------------------------------------------


def _allowed(request: Request, op: scopes.Op) -> Scope:
    """The request's scope, once it may do ``op`` on some webhook (403 otherwise)."""
    scope = grant_of(request.scope).scope
    needed = scopes.decide(scope, op)
    if needed is not None:
        raise ForbiddenScope(
            f"this token's scope ({scope}) may look at webhooks but not create, delete or test "
            f"them; that needs the scope {needed}",
            needed,
        )
    return scope


async def _visible(request: Request, op: scopes.Op) -> Webhook:
    """The webhook of the path (404 if none), if the token's scope reaches it: else 403
    naming ``read`` (to look) or ``admin`` (to change), never the webhook's runs."""
    scope = _allowed(request, op)
    webhook_id: str = request.path_params["webhook_id"]
    if not _WEBHOOK_ID.fullmatch(webhook_id):
        raise no_webhook(webhook_id)
    hook = await _store(request).webhook(webhook_id)
    if hook is None:
        raise no_webhook(webhook_id)
    if not scopes.covers_webhook(scope, hook.run_id, hook.run_glob):
        needed = "admin" if op.changes else "read"
        raise ForbiddenScope(
            f"this token's scope ({scope}) does not reach webhook {webhook_id}: it reaches "
            f"only webhooks for its own runs; this one needs the scope {needed}",
            needed,
        )
    return hook


def _outside(scope: Scope, run_id: str | None) -> ForbiddenScope:
    prefix = (scope.glob or "").split("*", 1)[0]
    return ForbiddenScope(
        f"this token's scope ({scope}) creates webhooks only for its runs: a run_id its glob "
        f"matches, or a run_glob that starts with {prefix!r}; this one needs the scope "
        + (f"runs:{run_id}" if run_id is not None else "admin"),
        f"runs:{run_id}" if run_id is not None else "admin",
    )


# -- input -------------------------------------------------------------------------------


def _limit(request: Request) -> int:
    text = request.query_params.get("limit")
    if text is None:
        return webhook_calls.LIMIT_DEFAULT
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= LIMIT_MAX:
        raise InvalidRequest(
            f"limit: expected a whole number from 1 to {LIMIT_MAX}", {"field": "limit"}
        )
    return int(text)


# -- output ------------------------------------------------------------------------------


def _webhook_out(hook: Webhook, whole: bool = False) -> WebhookOut:
    """``whole``: the URL as given (the create's answer, where the secret is shown too);
    otherwise without its password (``user:***@``): lists and reads never show secrets."""
    from api.schemas import WebhookOut

    return WebhookOut(
        webhook_id=hook.webhook_id,
        url=hook.url if whole else webhook_calls.shown_url(hook.url),
        events=list(hook.events),
        run_id=hook.run_id,
        run_glob=hook.run_glob,
        description=hook.description,
        created_at=clock.rfc3339(hook.created_at),
        disabled_at=clock.rfc3339_or_none(hook.disabled_at),
    )


def _delivery_out(attempt: Attempt) -> DeliveryOut:
    from api.schemas import DeliveryOut

    return DeliveryOut(
        delivery_id=attempt.delivery_id,
        event_id=attempt.event_id,
        type=attempt.type,
        attempt=attempt.attempt,
        state=attempt.state.value,
        status_code=attempt.status_code,
        error=attempt.error,
        at=clock.rfc3339(attempt.at),
        next_attempt_at=clock.rfc3339_or_none(attempt.next_attempt_at),
    )
