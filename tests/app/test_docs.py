"""The documentation pages work offline: ``/docs`` (Swagger UI) and ``/redoc`` load their
scripts and styles from the service itself, and the metrics label those requests with
their route. DuckDB is enough: the pages do not depend on the backend."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.app.conftest import make_settings

#: Where a page names another resource: src, href and spec-url attributes, Swagger UI's url.
_REFERENCES = re.compile(
    r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']|url:\s*["']([^"']+)["']"""
)


@pytest.fixture
def docs_client(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(make_settings(f"duckdb:///{tmp_path / 'docs.duckdb'}"), wait_until_ready=True)
    with TestClient(app) as client:
        yield client


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_a_docs_page_loads_everything_from_the_service(docs_client: TestClient, page: str) -> None:
    response = docs_client.get(page)
    assert response.status_code == 200
    html = response.text
    assert "http://" not in html and "https://" not in html and "//cdn" not in html
    references = {a or b for a, b in _REFERENCES.findall(html)}
    assert "/openapi.json" in references
    assert len(references) >= 3, references  # the schema, a script, the favicon (and css)
    for reference in references:
        assert reference.startswith("/"), reference
        loaded = docs_client.get(reference)
        assert loaded.status_code == 200, reference
        assert len(loaded.content) > 1000, reference
    assert docs_client.get("/openapi.json").json()["info"]["title"] == "topicstore"


def test_only_the_named_assets_are_served(docs_client: TestClient) -> None:
    assert (
        docs_client.get("/docs/assets/swagger-ui.css")
        .headers["content-type"]
        .startswith("text/css")
    )
    for name in ("core.py", "..%2F__init__.py", "nothing.js"):
        assert docs_client.get(f"/docs/assets/{name}").status_code in (404, 422), name


def test_metrics_label_the_docs_with_their_route(docs_client: TestClient) -> None:
    for path in ("/docs", "/redoc", "/openapi.json", "/docs/assets/swagger-ui-bundle.js"):
        assert docs_client.get(path).status_code == 200
    metrics = docs_client.get("/metrics").text
    for route in ("/docs", "/redoc", "/openapi.json", "/docs/assets/{name}"):
        line = f'topicstore_http_requests_total{{method="GET",route="{route}",status="200"}} 1.0'
        assert line in metrics, route
    assert 'route="unmatched"' not in metrics
