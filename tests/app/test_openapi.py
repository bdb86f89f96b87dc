"""The OpenAPI document is complete and accurate: schemathesis generates requests for every
operation (valid ones and invalid ones) and checks every answer against the document:
no server error, a documented status, the documented content type, headers and body.

DuckDB is enough here: the document and the handlers do not depend on the backend."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from pydantic import TypeAdapter, ValidationError
from schemathesis import GenerationMode

from app.main import create_app
from app.operations import EARLIEST, LATEST
from matcher import MatcherError, get_dialect
from store.records import MAX_LABELS_BYTES, MAX_NAME_BYTES
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
    "GET /v1/subscribers/{subscriber}/redundant",
    "GET /v1/subscriptions-export",
    "POST /v1/match",
    "GET /v1/match",
    "GET /v1/match/explain",
    "POST /v1/match/batch",
    "POST /v1/match/headers",
    "GET /v1/snapshot",
    "GET /v1/whoami",
    "GET /healthz",
    "GET /readyz",
    "GET /metrics",
    "GET /v1/analytics/{query}",
    "GET /v1/audit",
]
WITHOUT_INPUT = {"GET /healthz", "GET /readyz", "GET /metrics"}
#: Operations with no parameter and no body (the token is sent by the test, not generated):
#: there is nothing to make invalid, so a negative case cannot exist (hypothesis says
#: Unsatisfiable). ``test_the_schema_lists_every_operation`` checks they still take none.
WITHOUT_PARAMETERS = WITHOUT_INPUT | {"GET /v1/whoami"}
EXAMPLES = 25

#: Every check runs (positive data accepted, negative data refused included): the document
#: states the rules the service enforces (``app.contract``). Some it can only describe
#: (JSON Schema cannot state them): a limit in UTF-8 bytes, a dialect's grammar, a range of
#: date-times (the audit's ``from``/``to``), parameters that exclude each other (the
#: listing's ``overlaps``/``covered_by``) or one that needs another's value (those two only
#: in a topic dialect), a list as long as another (a batch's ``keys`` and ``topics``):
#: generated requests that break those are dropped (``_within_the_described_rules``,
#: ``filter_query``), as a client reading the descriptions would not send them. The grammar
#: itself is checked against the real brokers elsewhere (tests/matcher); here only the HTTP
#: contract is.
EXCLUDED_CHECKS: list[Any] = []


def _grammatical(dialect: Any, text: Any, kind: str) -> bool:
    if not isinstance(text, str):
        return True  # a type the schema forbids: the schema's own checks cover it
    try:
        grammar = get_dialect(dialect if isinstance(dialect, str) else "amqp")
    except ValueError:
        return True  # an unknown dialect: the schema's enum covers it
    try:
        if kind == "topic":
            grammar.split_topic(text)
        else:
            grammar.parse_pattern(text)
    except MatcherError:
        return False
    return True


def _fits(value: Any, limit: int = MAX_NAME_BYTES) -> bool:
    return not isinstance(value, str) or len(value.encode("utf-8", "surrogatepass")) <= limit


def _in_time_range(value: Any) -> bool:
    """A date-time within the audit's documented range (or not a date-time: the schema's
    own checks cover that)."""
    try:
        instant = TypeAdapter(datetime).validate_python(value)
    except ValidationError:
        return True
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return EARLIEST <= instant < LATEST


def _within_the_described_query_rules(query: dict[str, Any]) -> bool:
    if "topic" in query and not _grammatical(query.get("dialect"), query["topic"], "topic"):
        return False
    searches = [name for name in ("overlaps", "covered_by") if name in query]
    if len(searches) > 1 or (searches and query.get("dialect") == "headers"):
        return False
    if searches and not _grammatical(query.get("dialect"), query[searches[0]], "pattern"):
        return False
    if not all(_in_time_range(query.get(name)) for name in ("from", "to") if name in query):
        return False
    return all(_fits(value) for value in query.values())


def _within_the_described_rules(body: Any) -> bool:
    if not isinstance(body, dict):
        return True
    topics, keys = body.get("topics"), body.get("keys")
    if isinstance(topics, list) and isinstance(keys, list) and len(keys) != len(topics):
        return False
    labels = body.get("labels")
    if isinstance(labels, dict) and (
        len(json.dumps(labels, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        > MAX_LABELS_BYTES
    ):
        return False
    dialect = body.get("dialect")
    if "topic" in body and not _grammatical(dialect, body["topic"], "topic"):
        return False
    if body.get("kind", "topic") == "topic" and not _grammatical(
        dialect, body.get("pattern", ""), "pattern"
    ):
        return False
    return all(_fits(body.get(name)) for name in ("subscriber", "tenant"))


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Any]:
    """The app's schema over ASGI (schemathesis starts the app's lifespan and its pytest
    plugin ends it after the test), with a few subscriptions so that reads find some."""
    app = create_app(
        make_settings(f"duckdb:///{tmp_path / 'openapi.duckdb'}", max_batch=50),
        wait_until_ready=True,
    )
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    # The test sends the token itself (admin or tenant, below): a negative case that drops
    # the Authorization header would get it back and be "accepted".
    schema.config.generation.update(with_security_parameters=False)
    # A batch over its documented maxItems is refused with 413 batch_too_large (the body
    # limit's status): a refusal, which the check's default list of statuses leaves out.
    rejection = schema.config.checks.negative_data_rejection
    rejection.expected_statuses = [*rejection.expected_statuses, "413"]

    @schema.hook
    def filter_body(context: Any, body: Any) -> bool:
        return _within_the_described_rules(body)

    @schema.hook
    def filter_query(context: Any, query: Any) -> bool:
        return not isinstance(query, dict) or _within_the_described_query_rules(query)

    @schema.hook
    def filter_path_parameters(context: Any, path_parameters: Any) -> bool:
        values = path_parameters.values() if isinstance(path_parameters, dict) else ()
        return all(_fits(value) for value in values)

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
    operations = [result.ok() for result in api.get_all_operations()]
    assert sorted(operation.label for operation in operations) == sorted(OPERATIONS)
    for operation in operations:  # no negative case is generated for these: they take none
        if operation.label in WITHOUT_PARAMETERS:
            assert not operation.definition.raw.get("parameters"), operation.label
            assert "requestBody" not in operation.definition.raw, operation.label


def test_the_schema_documents_auth_and_the_error_envelope(api: Any) -> None:
    document = api.raw_schema
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    envelope = {"$ref": "#/components/schemas/ErrorOut"}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            label = f"{method.upper()} {path}"
            if label == "GET /healthz":
                assert "security" not in operation, label
                continue
            if label in WITHOUT_INPUT:  # a token is optional: the operator's adds per-tenant
                assert operation["security"] == [{"HTTPBearer": []}, {}], label
                assert (
                    operation["responses"]["401"]["content"]["application/json"]["schema"]
                    == envelope
                ), label
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
    if not (label in WITHOUT_PARAMETERS and mode is GenerationMode.NEGATIVE)
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
