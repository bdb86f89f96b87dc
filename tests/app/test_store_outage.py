"""The store stops and comes back under a running service (a PostgreSQL server of the
test's own): writes answer 503 ``store_unavailable`` with Retry-After in the envelope,
``/readyz`` answers 503 JSON, matches keep answering from memory, and once the store is
back everything works again without a restart."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.app.conftest import ADMIN_HEADERS, create, make_settings, match_ids
from tests.private_postgres import PrivatePostgres, private_postgres


@pytest.fixture
def outage() -> Iterator[tuple[PrivatePostgres, TestClient]]:
    with private_postgres() as server:
        app = create_app(make_settings(server.url), wait_until_ready=True)
        with TestClient(app) as client:
            yield server, client


def test_a_stopped_store_is_a_503_and_matching_goes_on(
    outage: tuple[PrivatePostgres, TestClient],
) -> None:
    server, client = outage
    kept = create(client, "q", "outage.*")["id"]
    assert client.get("/readyz").status_code == 200

    server.stop()
    response = client.post(
        "/v1/subscriptions", json={"subscriber": "q", "pattern": "lost.#"}, headers=ADMIN_HEADERS
    )
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "5"
    error = response.json()["error"]
    assert (error["code"], error["retry_after"]) == ("store_unavailable", 5)
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["ready"] is False
    assert match_ids(client, "outage.x") == [kept]  # from memory

    server.start()
    again = create(client, "q", "back.#")["id"]
    assert match_ids(client, "back.x") == [again]
    assert client.get("/readyz").status_code == 200
