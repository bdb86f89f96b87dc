"""Fixtures for the API tests: the app on both backends through ``TestClient``, and a real
``topicstore serve`` (uvicorn) in a subprocess (``harness.server``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from harness.server import Server, start_server
from harness.services import reset_postgres

ADMIN = "admin-token-for-the-tests-0123"
TOKEN_A = "token-of-tenant-acme-0123456789"
TOKEN_B = "token-of-tenant-globex-01234567"
TENANTS = {TOKEN_A: "acme", TOKEN_B: "globex"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


ADMIN_HEADERS = bearer(ADMIN)
A_HEADERS = bearer(TOKEN_A)
B_HEADERS = bearer(TOKEN_B)


def make_settings(database_url: str, **overrides: Any) -> Settings:
    """The service's settings for a test: our tokens, no periodic reconciliation (a test
    must see what the write path did, not what a later rebuild repaired), no ``.env``, and
    a short PostgreSQL poll so that stopping the listener does not wait a second."""
    values: dict[str, Any] = {
        "database_url": database_url,
        "admin_token": ADMIN,
        "tenant_tokens": TENANTS,
        "reconcile_interval": None,
        "poll_interval": 0.1,
        **overrides,
    }
    return Settings(_env_file=None, **values)


@pytest.fixture(autouse=True)
def _no_topicstore_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings read ``TOPICSTORE_*``: the caller's environment must not change a test."""
    for name in list(os.environ):
        if name.startswith("TOPICSTORE_"):
            monkeypatch.delenv(name)


@pytest.fixture(params=["postgres", "duckdb"])
def store_url(request: pytest.FixtureRequest) -> str:
    """An empty, migrated store on each backend, not held open by anyone: the session's
    PostgreSQL database, emptied, or a new DuckDB file."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        reset_postgres(url)
        return url
    make: Callable[[str], str] = request.getfixturevalue("new_duckdb")
    return make("api.duckdb")


ClientFactory = Callable[..., TestClient]


@pytest.fixture
def make_client(store_url: str) -> Iterator[ClientFactory]:
    """Build the app on ``store_url`` with extra settings, started and ready; closed at the
    end of the test. Server errors raise in the test (``raise_server_exceptions``)."""
    opened: list[TestClient] = []

    def make(**overrides: Any) -> TestClient:
        app = create_app(make_settings(store_url, **overrides), wait_until_ready=True)
        client = TestClient(app)
        client.__enter__()
        opened.append(client)
        return client

    yield make
    for client in reversed(opened):
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: ClientFactory) -> TestClient:
    """The app with default limits on each backend."""
    return make_client()


def create(
    client: TestClient,
    subscriber: str,
    pattern: str,
    headers: Mapping[str, str] = ADMIN_HEADERS,
    **fields: Any,
) -> dict[str, Any]:
    """POST one subscription that must be new (201); returns the row."""
    response = client.post(
        "/v1/subscriptions",
        json={"subscriber": subscriber, "pattern": pattern, **fields},
        headers=headers,
    )
    assert response.status_code == 201, response.text
    row: dict[str, Any] = response.json()
    return row


def match_ids(
    client: TestClient | httpx.Client,
    topic: str,
    headers: Mapping[str, str] = ADMIN_HEADERS,
    **fields: Any,
) -> list[int]:
    response = client.post("/v1/match", json={"topic": topic, **fields}, headers=headers)
    assert response.status_code == 200, response.text
    ids: list[int] = response.json()["subscriptions"]
    return ids


# -- a real server ------------------------------------------------------------------------

ServerFactory = Callable[..., Server]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[ServerFactory]:
    """``start_server`` in ``tmp_path``; every server started is stopped at the end."""
    started: list[Server] = []

    def start(**settings: str) -> Server:
        server = start_server(tmp_path, settings)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def kill_mid_writes(server: Server, enough: int) -> list[tuple[int, int]]:
    """Create subscriptions ``kill.<i>`` through ``server`` from a thread, SIGKILL the
    server once ``enough`` were acknowledged, and return every acknowledged (i, id): the
    writes a store must keep. The writer stops at the first failure (the kill), so the i
    run from 0 without gaps; one more write may have been in flight."""
    acknowledged: list[tuple[int, int]] = []
    reached = threading.Event()

    def write() -> None:
        with server.client(ADMIN_HEADERS) as http_client:
            for i in range(100_000):
                try:
                    response = http_client.post(
                        "/v1/subscriptions", json={"subscriber": "w", "pattern": f"kill.{i}"}
                    )
                except httpx.TransportError:
                    return
                if response.status_code != 201:
                    return
                acknowledged.append((i, response.json()["id"]))
                if len(acknowledged) == enough:
                    reached.set()

    writer = threading.Thread(target=write)
    writer.start()
    assert reached.wait(timeout=120), server.output()
    server.stop(kill=True)
    writer.join(timeout=60)
    assert not writer.is_alive()
    return acknowledged
