"""Rate limits through the service: admin requests (a bulk one counts once), matches and
batch topics per tenant, 429 with Retry-After and the envelope, the operator exempt unless
configured, the refusals in /metrics; over a real uvicorn too, and ``sub import`` through
it waiting out every 429 without losing an item."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import app as cli
from app.cli.http import HttpAdmin
from app.main import create_app
from app.settings import get_settings
from tests.app.conftest import (
    A_HEADERS,
    ADMIN,
    ADMIN_HEADERS,
    B_HEADERS,
    TENANTS,
    TOKEN_A,
    ServerFactory,
    make_settings,
)
from topicstore.client import RateLimitedError

#: A rate so slow that no token comes back during a test: only the burst counts.
FROZEN = "0.001"


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Any]:
    """Build the app on a DuckDB file with the given settings (the limiter does not
    depend on the backend)."""
    opened: list[TestClient] = []

    def make(**overrides: Any) -> TestClient:
        url = f"duckdb:///{tmp_path / f'limits{len(opened)}.duckdb'}"
        client = TestClient(create_app(make_settings(url, **overrides), wait_until_ready=True))
        client.__enter__()
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.__exit__(None, None, None)


def _refused(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 429, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == "rate_limited"
    assert int(response.headers["Retry-After"]) == error["retry_after"] >= 1
    assert response.headers["X-Request-ID"]
    return error


def _refusals(client: TestClient | httpx.Client, kind: str, tenant: str) -> float:
    text = client.get("/metrics").text
    pattern = (
        rf'topicstore_rate_limited_total\{{kind="{kind}",tenant="{re.escape(tenant)}"\}} (\S+)'
    )
    found = re.search(pattern, text)
    return float(found.group(1)) if found else 0.0


def test_admin_requests_are_limited_per_tenant_and_a_bulk_counts_once(limited: Any) -> None:
    client = limited(rate_admin=float(FROZEN), rate_admin_burst=2)
    items = [{"subscriber": "q", "pattern": f"p.{i}"} for i in range(5)]
    bulk = client.post("/v1/subscriptions/bulk", json={"items": items}, headers=A_HEADERS)
    assert bulk.status_code == 200
    assert client.get("/v1/subscriptions", headers=A_HEADERS).status_code == 200
    error = _refused(client.get("/v1/subscriptions", headers=A_HEADERS))
    assert error["retry_after"] == 1000  # one token at 0.001/s
    _refused(
        client.post(
            "/v1/subscriptions", json={"subscriber": "q", "pattern": "late"}, headers=A_HEADERS
        )
    )
    # Nothing of the refused write was stored; another tenant and the operator still pass.
    assert (
        len(client.get("/v1/subscriptions?tenant=acme", headers=ADMIN_HEADERS).json()["items"]) == 5
    )
    assert client.get("/v1/subscriptions", headers=B_HEADERS).status_code == 200
    assert all(client.get("/v1/audit", headers=ADMIN_HEADERS).status_code == 200 for _ in range(10))
    assert _refusals(client, "admin", "acme") == 2
    assert _refusals(client, "admin", "globex") == 0


def test_matches_and_batch_topics_have_buckets_of_their_own(limited: Any) -> None:
    client = limited(
        rate_match=float(FROZEN),
        rate_match_burst=2,
        rate_batch_topics=float(FROZEN),
        rate_batch_topics_burst=5,
    )
    assert client.get("/v1/match", params={"topic": "a"}, headers=A_HEADERS).status_code == 200
    headers_match = client.post(
        "/v1/match/headers", json={"headers": {"k": "v"}}, headers=A_HEADERS
    )
    assert headers_match.status_code == 200
    _refused(client.post("/v1/match", json={"topic": "a"}, headers=A_HEADERS))
    batch = {"topics": ["a", "b", "c"]}
    assert client.post("/v1/match/batch", json=batch, headers=A_HEADERS).status_code == 200
    _refused(client.post("/v1/match/batch", json=batch, headers=A_HEADERS))  # 2 topics left
    assert (
        client.post("/v1/match/batch", json={"topics": ["a", "b"]}, headers=A_HEADERS).status_code
        == 200
    )
    assert client.post("/v1/match", json={"topic": "a"}, headers=B_HEADERS).status_code == 200
    assert _refusals(client, "match", "acme") == 1
    assert _refusals(client, "batch_topics", "acme") == 1


def test_the_operator_is_limited_only_when_configured(limited: Any) -> None:
    free = limited(rate_admin=float(FROZEN), rate_admin_burst=1)
    assert all(
        free.get("/v1/subscriptions", headers=ADMIN_HEADERS).status_code == 200 for _ in range(5)
    )
    bound = limited(rate_admin=float(FROZEN), rate_admin_burst=1, rate_limit_operator=True)
    assert bound.get("/v1/subscriptions", headers=ADMIN_HEADERS).status_code == 200
    _refused(bound.get("/v1/subscriptions", headers=ADMIN_HEADERS))
    assert _refusals(bound, "admin", "(operator)") == 1


def _server_settings(tmp_path: Path, **more: str) -> dict[str, str]:
    return {
        "database_url": f"duckdb:///{tmp_path / 'limited.duckdb'}",
        "admin_token": ADMIN,
        "tenant_tokens": json.dumps(TENANTS),
        "poll_interval": "0.1",
        **more,
    }


def test_a_real_server_answers_429_with_retry_after(serve: ServerFactory, tmp_path: Path) -> None:
    server = serve(**_server_settings(tmp_path, rate_admin=FROZEN, rate_admin_burst="1"))
    server.wait_until("/readyz", 200)
    with server.client(A_HEADERS) as client:
        assert client.get("/v1/subscriptions").status_code == 200
        refused = client.get("/v1/subscriptions")
        error = _refused(refused)
        assert refused.headers["Retry-After"] == "1000"
        assert error["message"] == "over the admin rate of 0.001/s (burst 1); retry in 1000 s"
        assert _refusals(client, "admin", "acme") == 1

    # The command line's client waits out a 429, but not one that asks for more than a
    # minute: that is reported at once, with the wait asked for.
    waits: list[float] = []
    with (
        HttpAdmin(server.url, TOKEN_A, sleep=waits.append) as admin,
        pytest.raises(RateLimitedError) as e,
    ):
        admin.page()
    assert (e.value.status, e.value.code, e.value.retry_after) == (429, "rate_limited", 1000)
    assert waits == []


def test_sub_import_waits_out_429s_and_stores_every_item(
    serve: ServerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1 request a second, 2 at once, for the operator too: importing 6 items one per
    request meets a 429 from the third on, waits its Retry-After (1 s) and goes on."""
    server = serve(
        **_server_settings(
            tmp_path, rate_admin="1", rate_admin_burst="2", rate_limit_operator="true"
        )
    )
    server.wait_until("/readyz", 200)
    path = tmp_path / "items.csv"
    path.write_text("".join(f"q{i},import.{i}\n" for i in range(6)), encoding="utf-8")
    monkeypatch.setenv("TOPICSTORE_ADMIN_TOKEN", ADMIN)
    get_settings.cache_clear()
    try:
        runner = CliRunner()
        imported = runner.invoke(
            cli, ["sub", "import", str(path), "--batch", "1", "--api", server.url, "--json"]
        )
        # Times without an offset are UTC: the command line sends them with one, as the
        # API takes only RFC 3339 times.
        window = ["--from", "2000-01-01T00:00:00", "--to", "2999-01-01"]
        audited = runner.invoke(cli, ["audit", "--api", server.url, "--json", *window])
    finally:
        get_settings.cache_clear()
    assert imported.exit_code == 0, imported.output
    summary = json.loads(imported.stdout.strip().splitlines()[-1])
    assert summary == {"created": 6, "exists": 0, "failed": 0, "errors": []}
    with server.client(ADMIN_HEADERS) as client:
        # Requests 3 to 6 each meet one 429 (unless a request took a second by itself).
        assert _refusals(client, "admin", "(operator)") >= 1
    assert audited.exit_code == 0, audited.output
    rows = json.loads(audited.stdout)
    assert [row["action"] for row in rows] == ["bulk_create"] * 6
    assert sorted(p for row in rows for p in row["ids"]) == list(range(1, 7))
    assert {row["address"] for row in rows} == {"127.0.0.1"}
    assert len({row["request_id"] for row in rows}) == 6
