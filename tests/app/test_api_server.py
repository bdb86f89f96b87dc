"""The service as deployed: ``topicstore serve`` (uvicorn) in its own process, talked to
over real sockets. Startup, auth and limits over the wire, restarts (every acknowledged
write survives), the refusal to start without an admin token, and development mode with
the command line going through the running server."""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest

from harness.server import Server, run_command, service_environment, start_server
from matcher import create_matcher
from migrations.runner import upgrade
from store import Database, DatabaseLockedError, NewSubscription, SubscriptionRepository
from tests.app.conftest import (
    A_HEADERS,
    ADMIN,
    ADMIN_HEADERS,
    B_HEADERS,
    TENANTS,
    ServerFactory,
    kill_mid_writes,
)

WIRE_MAX_BODY = 4096
CLI_TIMEOUT = 120


def settings_for(url: str, **more: str) -> dict[str, str]:
    """The server's settings (environment variables without the prefix)."""
    return {
        "database_url": url,
        "admin_token": ADMIN,
        "tenant_tokens": json.dumps(TENANTS),
        "poll_interval": "0.1",
        **more,
    }


def test_startup_loads_the_store_then_is_ready_with_no_lag(
    serve: ServerFactory, store_url: str
) -> None:
    db = Database(store_url)
    upgrade(db.url)
    with db.write() as session:
        SubscriptionRepository(session).add_many(
            [NewSubscription(f"s{i}", f"boot.{i}.#", tenant="acme") for i in range(40)]
        )
    db.dispose()  # the DuckDB file must be free for the server

    server = serve(**settings_for(store_url, shadow_every="1"))
    ready = server.wait_until("/readyz", 200).json()
    assert ready == {"ready": True, "seq": 40, "lag": 0, "lag_seconds": 0.0, "subscriptions": 40}
    with server.client(A_HEADERS) as http_client:
        response = http_client.get("/v1/match", params={"topic": "boot.7.x"})
        assert response.json() == {"subscriptions": [8], "subscribers": ["s7"], "groups": []}
    metrics = httpx.get(server.url + "/metrics").text
    assert re.search(r"^topicstore_subscriptions 40\.0$", metrics, re.M), metrics
    assert re.search(r"^topicstore_ready 1\.0$", metrics, re.M)
    assert re.search(r"^topicstore_change_lag 0\.0$", metrics, re.M)
    # Both default engines answered the one match (shadow check on every match) and agreed.
    assert re.search(r"^topicstore_shadow_checks_total 1\.0$", metrics, re.M), metrics
    assert re.search(r"^topicstore_shadow_disagreements_total 0\.0$", metrics, re.M)
    assert re.search(r"^topicstore_capacity_refusals_total 0\.0$", metrics, re.M), metrics
    assert 'topicstore_http_requests_total{method="GET",route="/v1/match",status="200"} 1.0' in (
        metrics
    )
    # The answering engine's fixed capacities, filled as the same patterns fill them here.
    same = create_matcher("native")
    same.subscribe_many((i, f"boot.{i - 1}.#") for i in range(1, 41))
    assert same.capacity()["trie_nodes"][0] == 82  # root, boot, and 'i' and '#' each
    for name, (used, limit) in same.capacity().items():
        series = re.search(
            rf'^topicstore_engine_capacity_fill{{capacity="{name}"}} (\S+)$', metrics, re.M
        )
        assert series and float(series[1]) == used / limit, (name, metrics)


@pytest.fixture(scope="module")
def wire(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the wire checks below (DuckDB; the checks do not depend on the
    backend), with a small body limit."""
    directory = tmp_path_factory.mktemp("wire")
    url = f"duckdb:///{directory / 'wire.duckdb'}"
    server = start_server(directory, settings_for(url, max_body_bytes=str(WIRE_MAX_BODY)))
    try:
        server.wait_until("/readyz", 200)
        yield server
    finally:
        server.stop()


def test_the_server_never_loads_pandas(wire: Server) -> None:
    """``app.heap.keep_pandas_out``: a write binds parameters through DuckDB's client,
    which imports pandas (50 MB resident) unless the import is stopped; the write must still
    succeed and the match find it."""
    with wire.client(ADMIN_HEADERS) as http_client:
        created = http_client.post(
            "/v1/subscriptions",
            json={"subscriber": "np", "pattern": "nopandas.*", "tenant": "acme"},
        )
        assert created.status_code == 201, created.text
    with wire.client(A_HEADERS) as http_client:
        found = http_client.get("/v1/match", params={"topic": "nopandas.x"}).json()
        assert created.json()["id"] in found["subscriptions"]
    maps = Path(f"/proc/{wire.process.pid}/maps").read_text()
    assert "duckdb" in maps  # the check below looks at the right process
    assert "/pandas/" not in maps


def _still_serving(server: Server) -> None:
    assert httpx.get(server.url + "/healthz", timeout=10).status_code == 200


def test_auth_over_the_wire(wire: Server) -> None:
    with httpx.Client(base_url=wire.url, timeout=30) as http_client:
        anonymous = http_client.post("/v1/match", json={"topic": "a"})
        assert anonymous.status_code == 401
        assert anonymous.headers["www-authenticate"] == "Bearer"
        assert anonymous.json()["error"]["code"] == "unauthorized"
        unknown = http_client.get("/v1/subscriptions", headers={"Authorization": "Bearer x" * 3})
        assert unknown.status_code == 401

        created = http_client.post(
            "/v1/subscriptions", json={"subscriber": "q", "pattern": "auth.#"}, headers=A_HEADERS
        )
        assert created.status_code == 201 and created.json()["tenant"] == "acme"
        sub_id = created.json()["id"]
        for_b = http_client.post("/v1/match", json={"topic": "auth.x"}, headers=B_HEADERS)
        assert for_b.json()["subscriptions"] == []
        for_a = http_client.post("/v1/match", json={"topic": "auth.x"}, headers=A_HEADERS)
        assert for_a.json()["subscriptions"] == [sub_id]
        assert http_client.get(f"/v1/subscriptions/{sub_id}", headers=B_HEADERS).status_code == 404
        refused = http_client.get(
            "/v1/match", params={"topic": "auth.x", "tenant": "acme"}, headers=B_HEADERS
        )
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "wrong_tenant"
        admin = http_client.get(
            "/v1/match", params={"topic": "auth.x", "tenant": "acme"}, headers=ADMIN_HEADERS
        )
        assert admin.json()["subscriptions"] == [sub_id]
    _still_serving(wire)


def _raw_exchange(server: Server, request: bytes) -> bytes:
    """Send bytes as they are (no client normalizing the URL) and read the whole answer."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_limits_over_the_wire(wire: Server) -> None:
    auth = {**ADMIN_HEADERS, "content-type": "application/json"}
    with httpx.Client(base_url=wire.url, timeout=30) as http_client:
        large = http_client.post(
            "/v1/match", json={"topic": "a" * (WIRE_MAX_BODY + 1)}, headers=auth
        )
        assert large.status_code == 413 and large.json()["error"]["code"] == "body_too_large"
        _still_serving(wire)

        def chunks() -> Iterator[bytes]:
            yield b'{"topic": "'
            for _ in range(64):
                yield b"a" * 1024
            yield b'"}'

        chunked = http_client.post("/v1/match", content=chunks(), headers=auth)
        assert chunked.request.headers["transfer-encoding"] == "chunked"
        assert chunked.status_code == 413 and chunked.json()["error"]["code"] == "body_too_large"
        _still_serving(wire)

        not_utf8 = http_client.post("/v1/match", content=b'{"topic": "\xff"}', headers=auth)
        assert not_utf8.status_code == 400 and not_utf8.json()["error"]["code"] == "invalid_utf8"
        _still_serving(wire)

    # http.client sends the URL exactly as given.
    for method, path, code in (
        ("GET", "/v1/match?topic=%FF", "invalid_utf8"),
        ("GET", "/v1/match?topic=a%00", "nul_byte"),
        ("DELETE", "/v1/subscribers/%FF/subscriptions", "invalid_utf8"),
    ):
        connection = http.client.HTTPConnection("127.0.0.1", wire.port, timeout=10)
        connection.request(method, path, headers=ADMIN_HEADERS)
        response = connection.getresponse()
        body = json.loads(response.read())
        connection.close()
        assert (response.status, body["error"]["code"]) == (400, code), (path, body)
        _still_serving(wire)

    # Raw non-ASCII bytes in the request line: refused before the app (by uvicorn's parser).
    answer = _raw_exchange(
        wire, b"GET /v1/match?topic=\xff HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    _still_serving(wire)


def _create(http_client: httpx.Client, body: Mapping[str, object], headers: dict[str, str]) -> int:
    response = http_client.post("/v1/subscriptions", json=body, headers=headers)
    assert response.status_code == 201, response.text
    sub_id: int = response.json()["id"]
    return sub_id


def _matched(server: Server, topics: list[str], headers: dict[str, str]) -> list[list[int]]:
    with server.client(headers) as http_client:
        response = http_client.post("/v1/match/batch", json={"topics": topics})
    assert response.status_code == 200, response.text
    return [result["subscriptions"] for result in response.json()["results"]]


def test_every_acknowledged_write_is_matched_after_a_restart(
    serve: ServerFactory, store_url: str
) -> None:
    first = serve(**settings_for(store_url))
    first.wait_until("/readyz", 200)
    expected: dict[str, dict[str, list[int]]] = {"acme": {}, "globex": {}}
    headers = {"acme": A_HEADERS, "globex": B_HEADERS}
    with first.client(ADMIN_HEADERS) as http_client:
        for i in range(40):
            tenant = "acme" if i % 2 else "globex"
            body = {"subscriber": f"s{i % 3}", "pattern": f"restart.{i}.*"}
            expected[tenant][f"restart.{i}.x"] = [_create(http_client, body, headers[tenant])]
        bulk = http_client.post(
            "/v1/subscriptions/bulk",
            json={"items": [{"subscriber": "b", "pattern": f"bulk.{i}"} for i in range(150)]},
            headers=A_HEADERS,
        )
        assert bulk.status_code == 200, bulk.text
        for i, result in enumerate(bulk.json()["results"]):
            expected["acme"][f"bulk.{i}"] = [result["id"]]
        for i in range(0, 40, 8):  # acknowledged deletes must stay deleted
            tenant = "acme" if i % 2 else "globex"
            (sub_id,) = expected[tenant][f"restart.{i}.x"]
            deleted = http_client.delete(f"/v1/subscriptions/{sub_id}", headers=headers[tenant])
            assert deleted.status_code == 204
            expected[tenant][f"restart.{i}.x"] = []
    first.stop()
    assert "Application shutdown complete" in first.output()  # graceful, on SIGTERM

    second = serve(**settings_for(store_url))
    ready = second.wait_until("/readyz", 200).json()
    assert ready["lag"] == 0 and ready["subscriptions"] == 40 + 150 - 5
    for tenant, topics in expected.items():
        assert _matched(second, list(topics), headers[tenant]) == list(topics.values())


def test_writes_acknowledged_before_a_kill_survive_it(serve: ServerFactory, store_url: str) -> None:
    """A writer keeps creating subscriptions while the server is killed (SIGKILL, no
    shutdown at all): every 201 it got must be matched by the next server."""
    first = serve(**settings_for(store_url))
    first.wait_until("/readyz", 200)
    acknowledged = kill_mid_writes(first, enough=60)

    second = serve(**settings_for(store_url))
    second.wait_until("/readyz", 200)
    attempted = max(i for i, _ in acknowledged) + 2  # one more may have been in flight
    matched = _matched(second, [f"kill.{i}" for i in range(attempted)], ADMIN_HEADERS)
    for i, sub_id in acknowledged:
        assert matched[i] == [sub_id], i
    unacknowledged = [ids for i, ids in enumerate(matched) if i >= len(acknowledged)]
    assert sum(map(len, unacknowledged)) <= 1


def test_refuses_to_start_without_an_admin_token(tmp_path: Path) -> None:
    url = f"duckdb:///{tmp_path / 'never.duckdb'}"
    result = run_command(
        ["serve", "--port", "1"],
        service_environment({"database_url": url, "dev": "false"}),
        tmp_path,
        CLI_TIMEOUT,
    )
    assert result.returncode != 0
    assert "TOPICSTORE_ADMIN_TOKEN" in result.stderr and "TOPICSTORE_DEV" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "never.duckdb").exists()  # refused before touching the store

    short = run_command(
        ["serve", "--port", "1"],
        service_environment({"database_url": url, "admin_token": "short"}),
        tmp_path,
        CLI_TIMEOUT,
    )
    assert short.returncode != 0
    assert "TOPICSTORE_ADMIN_TOKEN" in short.stderr and "16" in short.stderr
    assert "Traceback" not in short.stderr


def _cli(tmp_path: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    return run_command(args, service_environment(settings), tmp_path, CLI_TIMEOUT)


def test_dev_mode_announces_its_token_and_the_cli_goes_through_the_server(
    serve: ServerFactory, tmp_path: Path
) -> None:
    url = f"duckdb:///{tmp_path / 'dev.duckdb'}"
    server = serve(database_url=url, dev="true", poll_interval="0.1")
    output = server.output()
    announced = re.search(r"DEVELOPMENT MODE\W+admin token: (\S+)", output)
    assert announced, output
    token = announced.group(1)
    assert (tmp_path / "data" / "dev-admin-token").read_text().strip() == token
    for where in ("/docs", "/ui"):  # the banner names the pages a newcomer opens
        assert f"{server.url}{where}" in output
        assert httpx.get(server.url + where).status_code == 200
    assert httpx.get(server.url + "/v1/subscriptions").status_code == 401
    with server.client({"Authorization": f"Bearer {token}"}) as http_client:
        assert http_client.get("/v1/subscriptions").status_code == 200

    # The server owns the DuckDB file ...
    with pytest.raises(DatabaseLockedError):
        Database(url)

    # ... so the command line (no --api, no token: the dev token file) goes through it.
    cli_settings = {"database_url": url, "port": str(server.port)}
    added = _cli(tmp_path, "sub", "add", "cli-queue", "cli.*.x", "--json", **cli_settings)
    assert added.returncode == 0, added.stderr
    result = json.loads(added.stdout)
    assert result["status"] == "created"
    sub_id = result["id"]
    matched = _cli(tmp_path, "match", "cli.a.x", "--json", **cli_settings)
    assert matched.returncode == 0, matched.stderr
    assert json.loads(matched.stdout) == {
        "subscriptions": [sub_id],
        "subscribers": ["cli-queue"],
        "groups": [],
    }
    with server.client({"Authorization": f"Bearer {token}"}) as http_client:
        row = http_client.get(f"/v1/subscriptions/{sub_id}").json()
        assert (row["subscriber"], row["pattern"]) == ("cli-queue", "cli.*.x")
        assert http_client.get("/v1/match", params={"topic": "cli.b.x"}).json()[
            "subscriptions"
        ] == [sub_id]

    # A restart in development mode keeps the token it made.
    server.stop()
    assert "Application shutdown complete" in server.output()
    again = serve(database_url=url, dev="true", poll_interval="0.1")
    assert f"admin token: {token}" in again.output()
