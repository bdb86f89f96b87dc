"""``topicstore serve --workers N`` on PostgreSQL: N processes on one port, each with its
own loader and change listener. A write through one worker is matchable on that worker
when its response arrives, and on the other within the propagation bound (the doorbell,
or at worst the listener's poll). On DuckDB more than one worker is refused."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx

from harness.server import running_server, service_environment, topicstore_command
from harness.services import reset_postgres
from tests.app.conftest import ADMIN, ADMIN_HEADERS, TENANTS

POLL_S = 0.5
WRITES = 20


def _worker_clients(url: str, wanted: int = 2, tries: int = 60) -> dict[int, httpx.Client]:
    """Kept-alive clients, one per worker (a new connection lands on whichever worker
    accepts it first, so connect until each has been seen)."""
    clients: dict[int, httpx.Client] = {}
    for _ in range(tries):
        client = httpx.Client(base_url=url, headers=ADMIN_HEADERS, timeout=10)
        worker = client.get("/healthz").json()["worker"]
        if worker in clients:
            client.close()
        else:
            clients[worker] = client
        if len(clients) == wanted:
            break
    return clients


def _wait_ready(clients: dict[int, httpx.Client], timeout_s: float = 60.0) -> None:
    """Until every worker, on its own connection, answers ``/readyz`` 200: each builds its
    own table, and a probe through the shared port may reach the first one ready (CI once
    matched on a worker still building: 503 ``not_ready``)."""
    deadline = time.monotonic() + timeout_s
    for worker, client in clients.items():
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, f"worker {worker} not ready in {timeout_s} s"
            time.sleep(0.05)


def _ids(client: httpx.Client, topic: str) -> list[int]:
    response = client.post("/v1/match", json={"topic": topic})
    assert response.status_code == 200, response.text
    ids: list[int] = response.json()["subscriptions"]
    return ids


def test_a_write_on_one_worker_is_matched_on_both(tmp_path: Path, postgres_url: str) -> None:
    reset_postgres(postgres_url)
    settings = {
        "database_url": postgres_url,
        "admin_token": ADMIN,
        "tenant_tokens": json.dumps(TENANTS),
        "poll_interval": str(POLL_S),
    }
    with running_server(tmp_path, settings, args=["--workers", "2"]) as server:
        server.wait_until("/readyz", 200)
        clients = _worker_clients(server.url)
        assert len(clients) == 2, f"one worker answered every connection: {list(clients)}"
        _wait_ready(clients)
        (first, a), (second, b) = clients.items()
        delays = []
        try:
            for i in range(WRITES):
                writer, other = (a, b) if i % 2 else (b, a)
                created = writer.post(
                    "/v1/subscriptions", json={"subscriber": "w", "pattern": f"workers.{i}.#"}
                )
                assert created.status_code == 201, created.text
                sub_id = created.json()["id"]
                assert _ids(writer, f"workers.{i}.x") == [sub_id]  # before the response
                started = time.monotonic()
                while _ids(other, f"workers.{i}.x") != [sub_id]:
                    assert time.monotonic() - started < POLL_S + 1.0, f"write {i} not seen"
                    time.sleep(0.002)
                delays.append(time.monotonic() - started)
            assert {a.get("/healthz").json()["worker"], b.get("/healthz").json()["worker"]} == {
                first,
                second,
            }
        finally:
            for client in clients.values():
                client.close()
    delays.sort()
    print(
        f"other worker saw the write after: median {delays[len(delays) // 2] * 1000:.1f} ms, "
        f"max {delays[-1] * 1000:.1f} ms"
    )


def test_duckdb_refuses_more_than_one_worker(tmp_path: Path) -> None:
    env = service_environment(
        {"database_url": f"duckdb:///{tmp_path / 'one.duckdb'}", "admin_token": ADMIN}
    )
    done = subprocess.run(
        [*topicstore_command(), "serve", "--workers", "2"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "workers_need_postgres" in done.stderr
    assert not (tmp_path / "one.duckdb").exists()  # refused before creating anything
