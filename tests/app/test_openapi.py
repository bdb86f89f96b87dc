"""The OpenAPI document is complete and accurate: schemathesis runs every check against a
real server (``st run --checks all``: documented statuses, content types, headers and
bodies, no server error, schema-valid data accepted and schema-violating data refused,
undocumented methods refused with the right ``Allow``), with the operator's token and a
tenant's, and finds nothing.

The rules the document can only describe (limits in UTF-8 bytes, rules across two
parameters) are kept by ``tests/app/schemathesis_hooks.py``, which ``schemathesis.toml``
loads for any ``st run`` from the repository."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from harness.services import reset_postgres
from tests.app.conftest import (
    ADMIN,
    ADMIN_HEADERS,
    TENANTS,
    TOKEN_A,
    ServerFactory,
    make_settings,
)
from tests.routed import write_routed

ROOT = Path(__file__).resolve().parents[2]
#: The configuration ``st run`` reads from the repository.
CONFIG = ROOT / "schemathesis.toml"

#: Every operation, written out so a new endpoint must be added here (and so be fuzzed).
OPERATIONS = [
    "POST /v1/subscriptions",
    "GET /v1/subscriptions",
    "POST /v1/subscriptions/bulk",
    "GET /v1/subscriptions/{sub_id}",
    "PATCH /v1/subscriptions/{sub_id}",
    "DELETE /v1/subscriptions/{sub_id}",
    "DELETE /v1/subscriptions",
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
    "GET /v1/metrics/history",
    "GET /healthz",
    "GET /readyz",
    "GET /metrics",
    "GET /v1/analytics/{query}",
    "GET /v1/audit",
]
WITHOUT_INPUT = {"GET /healthz", "GET /readyz", "GET /metrics"}


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The served document (building it needs no running app)."""
    store = tmp_path_factory.mktemp("openapi") / "openapi.duckdb"
    served: dict[str, Any] = create_app(make_settings(f"duckdb:///{store}")).openapi()
    return served


def _operations(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        f"{method.upper()} {path}": operation
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    }


def test_the_schema_lists_every_operation(document: dict[str, Any]) -> None:
    assert sorted(_operations(document)) == sorted(OPERATIONS)


def test_the_schema_documents_auth_and_the_error_envelope(document: dict[str, Any]) -> None:
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    envelope = {"$ref": "#/components/schemas/ErrorOut"}
    for label, operation in _operations(document).items():
        if label == "GET /healthz":
            assert "security" not in operation, label
            continue
        if label in WITHOUT_INPUT:  # a token is optional: the operator's adds per-tenant
            assert operation["security"] == [{"HTTPBearer": []}, {}], label
            assert (
                operation["responses"]["401"]["content"]["application/json"]["schema"] == envelope
            ), label
            continue
        assert operation["security"] == [{"HTTPBearer": []}], label
        responses = operation["responses"]
        assert {"400", "401", "422"} <= set(responses), label
        for status, response in responses.items():
            if status.startswith("4") or (status == "503" and label != "GET /readyz"):
                schema = response["content"]["application/json"]["schema"]
                assert schema == envelope, (label, status)


#: A value for each path parameter, to name one resource of every path.
PATH_VALUES = {"sub_id": "7", "subscriber": "s", "query": "subscribers"}
METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def test_a_method_a_path_lacks_gets_405_naming_the_documented_ones(
    document: dict[str, Any], tmp_path: Path
) -> None:
    """Every path of the document, asked with every method it does not document, answers
    405 with ``Allow`` listing exactly the documented ones: a concrete path is not also an
    instance of a templated one (``/v1/subscriptions/bulk`` is not subscription ``bulk``)."""
    app = create_app(make_settings(f"duckdb:///{tmp_path / 'allow.duckdb'}"))
    with TestClient(app) as client:
        for path, operations in document["paths"].items():
            url = re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES[m.group(1)], path)
            documented = ", ".join(sorted(method.upper() for method in operations))
            for method in METHODS:
                if method.lower() in operations:
                    continue
                response = client.request(method, url, headers=ADMIN_HEADERS)
                assert response.status_code == 405, (method, url, response.text)
                assert response.headers["Allow"] == documented, (method, url)
                if method != "HEAD":  # a HEAD answer has no body
                    assert response.json()["error"]["code"] == "method_not_allowed"


#: The runs, each bounded: the operator's token through every phase (examples, the coverage
#: phase's deterministic cases, fuzzing, stateful sequences of linked calls), a tenant's
#: through examples and fuzzing (it sees the same operations; many answer 403). The coverage
#: phase's cases (most of the run: every boundary and invalid shape of every parameter) do
#: not depend on ``EXAMPLES``; the random ones are drawn anew each run, from a new seed.
EXAMPLES = 10
RUNS = [
    pytest.param(ADMIN, "examples,coverage,fuzzing,stateful", EXAMPLES, id="admin"),
    pytest.param(TOKEN_A, "examples,fuzzing", 10, id="tenant"),
]


@pytest.fixture
def fuzzed(serve: ServerFactory, postgres_url: str, tmp_path: Path) -> str:
    """A real server on PostgreSQL, with analytics over a route output and a few
    subscriptions so that reads find some; no rate limit (the fuzzer is one client that
    does not wait). Returns the document's URL."""
    reset_postgres(postgres_url)
    routed = write_routed(tmp_path / "routed")
    server = serve(
        database_url=postgres_url,
        admin_token=ADMIN,
        tenant_tokens=json.dumps(TENANTS),
        poll_interval="0.1",
        max_batch="50",
        rate_admin="0",
        rate_match="0",
        rate_batch_topics="0",
        analytics_dir=str(routed),
        analytics_subscriptions=str(routed / "subscriptions.parquet"),
        # No sweep: a subscription the fuzzer made with a short ttl stays (expired) for
        # the run, so a later call on it finds it (409 subscription_expired, documented).
        expiry_sweep_interval="0",
    )
    items: list[dict[str, Any]] = [
        {"subscriber": f"s{i % 3}", "pattern": f"seed.{i}.#"} for i in range(10)
    ]
    items.append({"subscriber": "h", "kind": "headers", "criteria": {"k": None}, "mode": "any"})
    with server.client(ADMIN_HEADERS) as client:
        response = client.post("/v1/subscriptions/bulk", json={"items": items})
    assert response.status_code == 200, response.text
    return f"{server.url}/openapi.json"


def _bounded_config(directory: Path) -> Path:
    """The repository's configuration with the bounded run's hooks
    (``tests/app/schemathesis_budget.py``: the described rules, and labels nested at most
    two levels), keeping what a failure leaves for ``st replay`` under ``directory``."""
    text = CONFIG.read_text(encoding="utf-8")
    hooks = 'hooks = "tests.app.schemathesis_hooks"'
    assert hooks in text
    config = directory / "schemathesis.toml"
    bounded = text.replace(hooks, 'hooks = "tests.app.schemathesis_budget"')
    config.write_text(f"{bounded}\n[cache]\ndirectory = {json.dumps(str(directory))}\n")
    return config


@pytest.mark.slow
@pytest.mark.parametrize(("token", "phases", "examples"), RUNS)
def test_schemathesis_finds_nothing(
    fuzzed: str, tmp_path: Path, token: str, phases: str, examples: int
) -> None:
    events = tmp_path / "events.ndjson"
    command = [
        *(sys.executable, "-m", "schemathesis.cli"),
        *("--config-file", str(_bounded_config(tmp_path))),
        *("run", fuzzed, "--checks", "all", "--phases", phases),
        # One worker: schemathesis' threads trip a CPython 3.11 parser bug (hypothesis
        # describing a strategy of the deep labels schema), and the server has one core.
        *("--max-examples", str(examples), "--workers", "1"),
        *("--header", f"Authorization: Bearer {token}"),
        *("--generation-database", "none", "--no-color"),
        *("--report", "ndjson", "--report-ndjson-path", str(events)),
    ]
    # From the repository: the configuration names the hooks as a module of it.
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    summary = "\n".join(run.stdout.splitlines()[-40:])
    assert run.returncode == 0, run.stdout[-20_000:] + run.stderr[-5_000:]
    tested: set[str] = set()
    cases = 0
    for line in events.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        recorder = event.get("ScenarioFinished", {}).get("recorder", {})
        tested.update([recorder["label"]] if "label" in recorder else [])
        cases += len(recorder.get("cases", ()))
    assert set(OPERATIONS) <= tested, summary  # and "Stateful tests", its sequences
    print(f"schemathesis ({phases}): {cases} cases, 0 failures")
