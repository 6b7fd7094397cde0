"""The OpenAPI document is valid OpenAPI 3.1 and describes what the server answers."""

from __future__ import annotations

from openapi_spec_validator import validate

from api.openapi import openapi_document
from tests.support import Server


def test_the_document_is_valid_openapi_3_1() -> None:
    """The generated document passes the OpenAPI 3.1 validator."""
    document = openapi_document()
    assert document["openapi"] == "3.1.0"
    validate(document)


def test_every_operation_documents_its_errors_with_examples() -> None:
    """Each operation names an operationId, and every documented error has an example."""
    for path, operations in openapi_document()["paths"].items():
        for method, operation in operations.items():
            assert operation.get("operationId"), (method, path)
            for status, response in operation["responses"].items():
                if status.startswith(("4", "5")) and "content" in response:
                    media = response["content"]["application/json"]
                    assert "example" in media or "oneOf" in media["schema"], (method, path, status)


def test_the_served_document_is_the_generated_one(server: Server) -> None:
    """GET /openapi.json serves the same document."""
    with server.http() as client:
        served = client.get("/openapi.json").json()
    assert served == openapi_document()


def test_the_wait_body_states_its_defaults() -> None:
    """The wait's timeout_s says an omitted value is the policy's long_poll_max_s (contract v3:
    "Tool and OpenAPI schemas state the default"), and order says oldest is the default."""
    fields = openapi_document()["components"]["schemas"]["WaitIn"]["properties"]
    assert "long_poll_max_s" in fields["timeout_s"]["description"]
    assert fields["order"]["default"] == "oldest"
