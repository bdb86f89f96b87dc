"""The OpenAPI document is complete and accurate: schemathesis generates requests for every
operation (valid ones and invalid ones) and checks every answer against the document:
no server error, a documented status, the documented content type, headers and body.

DuckDB is enough here: the document and the handlers do not depend on the backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from app.main import create_app
from tests.app.conftest import ADMIN, ADMIN_HEADERS, TOKEN_A, make_settings

#: Every operation, written out so a new endpoint must be added here (and so be fuzzed).
OPERATIONS = [
    "POST /v1/subscriptions",
    "GET /v1/subscriptions",
    "POST /v1/subscriptions/bulk",
    "GET /v1/subscriptions/{sub_id}",
    "DELETE /v1/subscriptions/{sub_id}",
    "GET /v1/subscriptions-count",
    "DELETE /v1/subscribers/{subscriber}/subscriptions",
    "GET /v1/subscriptions-export",
    "POST /v1/match",
    "GET /v1/match",
    "POST /v1/match/batch",
    "POST /v1/match/headers",
    "GET /v1/snapshot",
    "GET /healthz",
    "GET /readyz",
    "GET /metrics",
    "GET /v1/analytics/{query}",
]
WITHOUT_INPUT = {"GET /healthz", "GET /readyz", "GET /metrics"}
EXAMPLES = 25

# Not checked, on purpose:
# * positive_data_acceptance: a schema-valid request may still break a rule that JSON
#   Schema cannot state (a dialect's grammar, limits in UTF-8 bytes, no NUL); the answer
#   is then a documented 400 naming the rule, which the other checks do verify.
# * negative_data_rejection: FastAPI ignores unknown or repeated query parameters (and
#   reads "FALSE" as a fine string); that leniency is not a contract worth breaking.
EXCLUDED_CHECKS = [positive_data_acceptance, negative_data_rejection]


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Any]:
    """The app's schema over ASGI (schemathesis starts the app's lifespan and its pytest
    plugin ends it after the test), with a few subscriptions so that reads find some."""
    app = create_app(
        make_settings(f"duckdb:///{tmp_path / 'openapi.duckdb'}", max_batch=50),
        wait_until_ready=True,
    )
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    seed = schema.find_operation_by_label("POST /v1/subscriptions/bulk")
    assert seed is not None
    items: list[dict[str, Any]] = [
        {"subscriber": f"s{i % 3}", "pattern": f"seed.{i}.#"} for i in range(10)
    ]
    items.append({"subscriber": "h", "kind": "headers", "criteria": {"k": None}, "mode": "any"})
    body: Any = {"items": items}
    response = seed.Case(body=body).call(headers=ADMIN_HEADERS)
    assert response.status_code == 200, response.text
    yield schema


def test_the_schema_lists_every_operation(api: Any) -> None:
    labels = [result.ok().label for result in api.get_all_operations()]
    assert sorted(labels) == sorted(OPERATIONS)


def test_the_schema_documents_auth_and_the_error_envelope(api: Any) -> None:
    document = api.raw_schema
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    envelope = {"$ref": "#/components/schemas/ErrorOut"}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            label = f"{method.upper()} {path}"
            if label in WITHOUT_INPUT:
                assert "security" not in operation, label
                continue
            assert operation["security"] == [{"HTTPBearer": []}], label
            responses = operation["responses"]
            assert {"400", "401", "422"} <= set(responses), label
            for status, response in responses.items():
                if status.startswith("4") or (status == "503" and label != "GET /readyz"):
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == envelope, (label, status)


CASES = [
    pytest.param(label, mode, id=f"{label} {mode.value}")
    for label in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if not (label in WITHOUT_INPUT and mode is GenerationMode.NEGATIVE)
]


@pytest.mark.parametrize(("label", "mode"), CASES)
@pytest.mark.parametrize("token", [ADMIN, TOKEN_A], ids=["admin", "tenant"])
def test_every_answer_is_documented_and_no_request_breaks_the_server(
    api: Any, label: str, mode: GenerationMode, token: str
) -> None:
    operation = api.find_operation_by_label(label)

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    def check(case: Any) -> None:
        case.call_and_validate(
            headers={"Authorization": f"Bearer {token}"}, excluded_checks=EXCLUDED_CHECKS
        )

    check()
