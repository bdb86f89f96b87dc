"""Fixtures for the API tests: the app on both backends through ``TestClient``, and a real
``topicstore serve`` (uvicorn) in a subprocess on a free port of 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from store import Database

ADMIN = "admin-token-for-the-tests-0123"
TOKEN_A = "token-of-tenant-acme-0123456789"
TOKEN_B = "token-of-tenant-globex-01234567"
TENANTS = {TOKEN_A: "acme", TOKEN_B: "globex"}

#: Bounds for a server subprocess: how long it may take to answer /healthz, and to stop.
STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0


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


def reset_postgres(url: str) -> None:
    """Empty the session's PostgreSQL database (tables and id sequences)."""
    db = Database(url)
    with db.engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE subscription, change_log"))
        conn.execute(sa.text("ALTER SEQUENCE subscription_id_seq RESTART"))
        conn.execute(sa.text("ALTER SEQUENCE change_log_seq RESTART"))
    db.dispose()


@pytest.fixture(autouse=True)
def _no_topicstore_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings read ``TOPICSTORE_*``: the caller's environment must not change a test."""
    for name in list(os.environ):
        if name.startswith("TOPICSTORE_"):
            monkeypatch.delenv(name)


@pytest.fixture(params=["postgres", "duckdb"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty store on each backend, not held open by anyone: the session's PostgreSQL
    database, emptied, or the path of a new DuckDB file (the app migrates it)."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        reset_postgres(url)
        return url
    return f"duckdb:///{tmp_path / 'api.duckdb'}"


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


def topicstore_command() -> list[str]:
    """The installed ``topicstore`` entry point of this interpreter's environment."""
    script = Path(sys.executable).parent / "topicstore"
    if script.exists():
        return [str(script)]
    found = shutil.which("topicstore")
    if found is None:
        pytest.fail("the topicstore command is not installed (pip install -e .)")
    return [found]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def service_environment(**variables: str) -> dict[str, str]:
    """This process's environment without any ``TOPICSTORE_*``, plus ``variables`` (named
    without the prefix); output unbuffered so a test can read it while the server runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOPICSTORE_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update({f"TOPICSTORE_{name.upper()}": value for name, value in variables.items()})
    return env


@dataclass
class Server:
    """A ``topicstore serve`` process; its stdout and stderr go to ``log``."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, headers: Mapping[str, str] = ADMIN_HEADERS) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=dict(headers), timeout=30)

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self, *, kill: bool = False) -> int:
        """Terminate (or kill) the process and wait for it; kill it if it lingers. Returns
        the exit status (uvicorn re-raises SIGTERM after its graceful shutdown: -15)."""
        if self.process.poll() is None:
            if kill:
                self.process.kill()
            else:
                self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT)
        return self.process.returncode

    def wait_until(self, path: str, status: int) -> httpx.Response:
        """Poll ``path`` until it answers ``status`` (failing if the process exits or the
        startup bound passes)."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        last = "no answer"
        while True:
            if self.process.poll() is not None:
                pytest.fail(f"server exited ({self.process.returncode}):\n{self.output()}")
            try:
                response = httpx.get(self.url + path, timeout=5)
            except httpx.TransportError as e:
                last = repr(e)
            else:
                if response.status_code == status:
                    return response
                last = f"{response.status_code} {response.text}"
            if time.monotonic() > deadline:
                pytest.fail(f"{path} never answered {status} (last: {last}):\n{self.output()}")
            time.sleep(0.05)


def start_server(directory: Path, **variables: str) -> Server:
    """Start ``topicstore serve`` in ``directory`` with the given settings (``TOPICSTORE_*``
    without the prefix) on a free port, and wait until it answers /healthz."""
    port = free_port()
    log = directory / f"server-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*topicstore_command(), "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=service_environment(**variables),
            cwd=directory,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Server(process, port, log)
    try:
        server.wait_until("/healthz", 200)
    except BaseException:
        server.stop()
        raise
    return server


ServerFactory = Callable[..., Server]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[ServerFactory]:
    """``start_server`` in ``tmp_path``; every server started is stopped at the end."""
    started: list[Server] = []

    def start(**variables: str) -> Server:
        server = start_server(tmp_path, **variables)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
