"""What a request brings in: its JSON body, a wire model over it, a run it names.

Shared by the handlers (``api/agent.py``, ``api/mailbox.py``, ...) and the wait endpoint's
lean path (``api/waitpath.py``, which reads the raw bytes itself), so both refuse the same
input with the same words.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, TypeVar

from starlette.requests import Request

from api.auth import grant_of, route_op
from api.context import context_of
from api.middleware import BODY_TOO_LARGE, BodyTooLarge
from api.state import state_of
from sink import ids
from sink.errors import InvalidRequest, RequestTooLarge

if TYPE_CHECKING:
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")


def parse_json(raw: bytes, required: bool = True) -> Any:
    """The body as JSON (an empty body is ``{}`` unless ``required``); 422 otherwise."""
    if not raw.strip():
        if required:
            raise InvalidRequest("a JSON object body is required")
        return {}
    try:
        return json.loads(raw, parse_float=_float)
    except RecursionError as exc:
        # 1,000 nested brackets (2 KB) reach the interpreter's recursion limit.
        raise InvalidRequest("the JSON nests too deeply", {"problem": "json_too_deep"}) from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"the body is not valid JSON ({exc.__class__.__name__})") from exc
    except ValueError as exc:
        # int() refuses more than sys.get_int_max_str_digits() digits (4,300 by default).
        raise InvalidRequest(
            "a number in the JSON has too many digits", {"problem": "json_number_too_long"}
        ) from exc


def _float(text: str) -> float:
    # As for integers (the interpreter's limit, 4,300 digits by default): a longer decimal
    # is refused too.
    if len(text) > sys.get_int_max_str_digits():
        raise ValueError("a number with too many digits")
    return float(text)


def model(model: type[M], body: Any) -> M:
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    return model.model_validate(body)


def run_id_param(value: str | None, where: str) -> str | None:
    if value is None:
        return None
    if not ids.RUN_ID.fullmatch(value):
        raise InvalidRequest(f"{where}: a run_id is 1-128 chars of A-Za-z0-9._:-", {"field": where})
    return value


def named_run(body_run: str | None, header_run: str | None, query_run: str | None) -> str | None:
    """The run a caller names (body, ``X-Run-Id``, ``?run_id=``): at most one, once."""
    header = run_id_param(header_run, "X-Run-Id")
    query = run_id_param(query_run, "run_id")
    given = [r for r in (body_run, header, query) if r is not None]
    if len(set(given)) > 1:
        raise InvalidRequest("the run is named twice, differently (body, X-Run-Id, ?run_id)")
    return given[0] if given else None


# -- from a Starlette request (the handlers) --------------------------------------------------


async def request_body(request: Request) -> bytes:
    """The body's bytes; over the limit is 413 (``api/middleware.py`` counts them)."""
    try:
        return await request.body()
    except BodyTooLarge as exc:
        raise RequestTooLarge(BODY_TOO_LARGE) from exc


async def json_body(request: Request, required: bool = True) -> Any:
    return parse_json(await request_body(request), required)


def int_query(request: Request, name: str, default: int, low: int, high: int) -> int:
    """A whole-number query parameter from ``low`` to ``high`` (``default`` when absent)."""
    text = request.query_params.get(name)
    if text is None:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise InvalidRequest(
            f"{name}: expected a whole number from {low} to {high}", {"field": name}
        )
    return int(text)


def caller_run(request: Request, body_run: str | None = None) -> str | None:
    """The run the caller names (``named_run``), checked against its token's scope."""
    run = named_run(body_run, request.headers.get("x-run-id"), request.query_params.get("run_id"))
    context_of(request.scope).note(run_id=run)
    if run is not None:
        check_named_run(request, run)
    return run


def check_named_run(request: Request, run_id: str) -> None:
    """A run the caller names must be within its token's scope (api/auth.py decides)."""
    op, _, _ = route_op(request.method, request.scope["path"])
    state_of(request).authority.check_run(grant_of(request.scope), op, run_id)
