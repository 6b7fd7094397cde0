"""HTTP for running the service: liveness, readiness, metrics, this API's OpenAPI document,
and fault injection (``--enable-faults``). Their rows are in ``api/endpoints.py``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.inputs import json_body, model
from api.replies import model_response
from api.state import state_of
from sink import clock
from sink.errors import FaultsDisabled, InvalidRequest
from sink.faults import FaultRegistry, FaultSpec, FaultSpecError

# -- faults ----------------------------------------------------------------------------


def _faults(request: Request) -> FaultRegistry:
    registry = state_of(request).runtime.faults
    if registry is None:
        raise FaultsDisabled("fault injection is off (start with --enable-faults)")
    return registry


async def add_fault(request: Request) -> Response:
    from api.schemas import FaultIn
    from api.views import fault_out

    registry = _faults(request)
    given = model(FaultIn, await json_body(request))
    spec = FaultSpec(
        target=given.target,
        mode=given.mode,
        count=given.count,
        probability=given.probability,
        delay_s=given.delay_s,
        run_id=given.run_id,
    )
    try:
        fault = registry.add(spec, clock.now())
    except FaultSpecError as exc:
        raise InvalidRequest(f"{exc.field}: {exc.message}", {"field": exc.field}) from exc
    return model_response(fault_out(fault), 201)


async def list_faults(request: Request) -> Response:
    from api.schemas import FaultListOut
    from api.views import fault_out

    registry = _faults(request)
    return model_response(FaultListOut(faults=[fault_out(f) for f in registry.list()]))


async def clear_faults(request: Request) -> Response:
    _faults(request).clear()
    return Response(status_code=204)


# -- service -------------------------------------------------------------------------------


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    if not await state_of(request).runtime.store_answers(within_s=2.0):
        return JSONResponse({"status": "unavailable", "store": "unavailable"}, status_code=503)
    if state_of(request).runtime.stopping.is_set():
        return JSONResponse({"status": "unavailable", "store": "ok"}, status_code=503)
    return JSONResponse({"status": "ready", "store": "ok"})


async def metrics(request: Request) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    return Response(state_of(request).runtime.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


async def openapi(request: Request) -> Response:
    from api.openapi import openapi_document

    return JSONResponse(openapi_document())
