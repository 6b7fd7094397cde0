"""Schemathesis against the OpenAPI document: no 500s, documented statuses, bodies matching it.

The cases come from the document the server serves at /openapi.json (built in-process by
``api.openapi.openapi_document``, and checked equal to the served one), so pytest can make
one test per operation at collection time. Every case is sent over real HTTP to this
module's own server, started without --enable-faults: fuzzing POST /v1/faults there gets
404 and cannot inject faults into the shared server's other tests, and DELETE
/v1/runs/{run_id} releases nothing anyone else uses.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import Case
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from api.openapi import openapi_document
from tests.support import Server, create_inbox, new_run_id, start_server

# Long-polls end at once and polls never run out, so fuzzed waits stay fast and keep
# reaching the store instead of an expired inbox's answer.
FUZZ_POLICIES = """
[policy.ci]
poll_interval_s = [0]
long_poll_max_s = 0.2
poll_budget = 1000000
"""
CONFORMANCE = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
# Schema-invalid input must get a 4xx. Only where the case is sent as generated: swapping in
# real ids can turn a case meant to be invalid into a valid one.
CHECKS = [*CONFORMANCE, negative_data_rejection]
SEED_DEADLINE_S = 10.0


@dataclass(frozen=True)
class Seeded:
    """Real ids, so that part of the fuzzing gets past 404 into the domain."""

    run_id: str
    inbox_id: str
    message_id: str
    cursor: str
    other_run_id: str  # DELETE /v1/runs/{run_id} may release this run, never run_id


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("schemathesis")
    policy_file = folder / "policies.toml"
    policy_file.write_text(FUZZ_POLICIES)
    running = start_server(folder, "--policy-file", str(policy_file))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def seeded(fuzz_server: Server) -> Seeded:
    run_id, other_run_id = new_run_id("fuzz"), new_run_id("fuzz-other")
    with fuzz_server.http() as client:
        inbox = create_inbox(client, run_id, purpose="schemathesis")
        create_inbox(client, other_run_id, purpose="schemathesis")
        fuzz_server.send(inbox["address"], subject="Your code is 123456")
        deadline = time.monotonic() + SEED_DEADLINE_S
        while not (page := client.get(f"/v1/inboxes/{inbox['inbox_id']}/messages").json())[
            "messages"
        ]:
            assert time.monotonic() < deadline, "the seeded message was never stored"
            time.sleep(0.05)
    return Seeded(
        run_id=run_id,
        inbox_id=inbox["inbox_id"],
        message_id=page["messages"][0]["message_id"],
        cursor=inbox["cursor"],
        other_run_id=other_run_id,
    )


def test_the_fuzzed_document_is_the_served_one(fuzz_server: Server) -> None:
    """GET /openapi.json serves exactly the document the cases below are generated from."""
    with fuzz_server.http() as client:
        assert client.get("/openapi.json").json() == openapi_document()


# GET /v1/events is a stream that never ends by itself: tests/test_ui_http.py covers it.
schema = schemathesis.openapi.from_dict(openapi_document()).exclude(path="/v1/events")
# The operations that name an inbox, a message or a run (in the path or the body).
with_ids = schema.include(path_regex=r"^/v1/(inboxes|messages|runs)")
HYPOTHESIS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)


@schema.parametrize()
@HYPOTHESIS
def test_every_operation_honours_its_schema(case: Case[Any], fuzz_server: Server) -> None:
    """Any input: no server error, a documented status, headers and body; bad input gets 4xx."""
    case.call_and_validate(base_url=fuzz_server.url, checks=CHECKS, timeout=20)


@with_ids.parametrize()
@HYPOTHESIS
def test_real_ids_reach_the_domain_and_honour_the_schema(
    case: Case[Any], fuzz_server: Server, seeded: Seeded
) -> None:
    """With real inbox, message and run ids and cursors: no server error, documented answers."""
    _use_real_ids(case, seeded)
    case.call_and_validate(base_url=fuzz_server.url, checks=CONFORMANCE, timeout=20)


def _use_real_ids(case: Case[Any], seeded: Seeded) -> None:
    """Swap the generated ids for real ones, so the cases get past 404 into the domain."""
    ids = {
        "inbox_id": seeded.inbox_id,
        "message_id": seeded.message_id,
        "run_id": seeded.other_run_id,  # the path of GET/DELETE /v1/runs/{run_id}
    }
    for name, value in ids.items():
        if case.path_parameters and name in case.path_parameters:
            case.path_parameters[name] = value
    if case.query and "after" in case.query:
        case.query["after"] = seeded.cursor
    if isinstance(case.body, dict):
        if "run_id" in case.body:
            case.body["run_id"] = seeded.run_id
        if "cursor" in case.body:
            case.body["cursor"] = seeded.cursor
