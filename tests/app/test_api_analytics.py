"""GET /v1/analytics/{query}: the DuckDB analytics over a route output, for the operator."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.app.conftest import ADMIN, ADMIN_HEADERS, TENANTS, TOKEN_A, bearer
from tests.routed import write_routed


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    routed = write_routed(tmp_path / "routed")
    settings = Settings(
        database_url=f"duckdb:///{tmp_path / 'a.duckdb'}",
        admin_token=ADMIN,
        tenant_tokens=TENANTS,
        reconcile_interval=None,
        analytics_dir=routed,
        analytics_subscriptions=routed / "subscriptions.parquet",
    )
    with TestClient(create_app(settings, wait_until_ready=True)) as test_client:
        yield test_client


def test_queries_answer_with_hand_computed_rows(client: TestClient) -> None:
    body = client.get("/v1/analytics/subscribers", headers=ADMIN_HEADERS).json()
    assert body["columns"] == ["tenant", "subscriber", "deliveries", "messages", "subscriptions"]
    assert body["rows"][0] == {
        "tenant": "t1",
        "subscriber": "alice",
        "deliveries": 3,
        "messages": 3,
        "subscriptions": 1,
    }
    never = client.get("/v1/analytics/never-matched", headers=ADMIN_HEADERS).json()
    assert [row["subscriber"] for row in never["rows"]] == ["eve", "frank"]
    days = client.get("/v1/analytics/timeline?bucket=day", headers=ADMIN_HEADERS).json()
    assert [row["messages"] for row in days["rows"]] == [5, 2]
    first = client.get("/v1/analytics/timeline?bucket=day&as_of=0", headers=ADMIN_HEADERS).json()
    assert [row["messages"] for row in first["rows"]] == [5]  # version 0: May 1st only


@pytest.mark.parametrize(
    ("path", "headers", "status", "code"),
    [
        ("/v1/analytics/nope", ADMIN_HEADERS, 400, "unknown_query"),
        ("/v1/analytics/subscribers", bearer(TOKEN_A), 403, "operator_only"),
        ("/v1/analytics/subscribers", {}, 401, "unauthorized"),
        ("/v1/analytics/timeline?bucket=week", ADMIN_HEADERS, 422, "invalid_request"),
        ("/v1/analytics/tenants?as_of=9", ADMIN_HEADERS, 404, "unknown_version"),
        ("/v1/analytics/tenants?as_of=-1", ADMIN_HEADERS, 422, "invalid_request"),
    ],
)
def test_refusals(
    client: TestClient, path: str, headers: dict[str, str], status: int, code: str
) -> None:
    response = client.get(path, headers=headers)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code


def test_not_configured(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"duckdb:///{tmp_path / 'b.duckdb'}",
        admin_token=ADMIN,
        reconcile_interval=None,
        analytics_dir=None,
    )
    with TestClient(create_app(settings, wait_until_ready=True)) as test_client:
        response = test_client.get("/v1/analytics/subscribers", headers=ADMIN_HEADERS)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "analytics_not_configured"


def test_the_default_directories_say_what_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no analytics setting (``make run``): ``data/routed`` and the export
    ``data/subscriptions.parquet`` beside the default store; while they hold nothing the
    refusal names the commands that fill them, with absolute paths; then the queries run."""
    monkeypatch.chdir(tmp_path)
    routed, export = tmp_path / "data" / "routed", tmp_path / "data" / "subscriptions.parquet"
    settings = Settings(
        database_url=f"duckdb:///{tmp_path / 'c.duckdb'}",
        admin_token=ADMIN,
        reconcile_interval=None,
    )
    with TestClient(create_app(settings, wait_until_ready=True)) as test_client:
        empty = test_client.get("/v1/analytics/subscribers", headers=ADMIN_HEADERS)
        assert empty.status_code == 404
        assert empty.json()["error"] == {
            "code": "no_deliveries",
            "message": f"no route output in {routed} yet: run `topicstore export {export}`, "
            f"then `topicstore route --messages MESSAGES --out {routed} --subscriptions {export}`",
        }
        write_routed(routed)
        (routed / "subscriptions.parquet").rename(export)
        rows = test_client.get("/v1/analytics/tenants", headers=ADMIN_HEADERS).json()["rows"]
        assert [row["tenant"] for row in rows] == ["t1", "t2"]
        never = test_client.get("/v1/analytics/never-matched", headers=ADMIN_HEADERS).json()
        assert [row["subscriber"] for row in never["rows"]] == ["eve", "frank"]
        export.unlink()  # the deliveries alone: never-matched says what to write
        refused = test_client.get("/v1/analytics/never-matched", headers=ADMIN_HEADERS)
        assert refused.status_code == 404
        assert refused.json()["error"]["code"] == "needs_subscriptions"
        assert refused.json()["error"]["message"].endswith(
            f": write it with `topicstore export {export}`"
        )
