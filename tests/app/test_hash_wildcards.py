"""The RabbitMQ 4.3 profile (``max_hash_wildcards=2``) on every write path: the API (one
item and bulk), the command line's direct mode (add and import) and a real server with the
command line through its API; and the rows stored before it was set, which still load,
match and can be removed (on a restart, and on a replica applying another's writes)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner, Result

from app.cli import app
from app.main import create_app
from app.settings import Settings, get_settings
from harness.server import running_server
from harness.services import reset_postgres
from tests.app.conftest import ADMIN, ADMIN_HEADERS, ClientFactory, create, make_settings, match_ids
from tests.app.test_cli_errors import assert_one_error, run_cli

CODE: Final = "too_many_hash_wildcards"
OVER: Final = "a.#.b.#.c.#"
#: RabbitMQ 4.3.5's message (``rabbit_exchange_type_topic:validate_binding/2``).
MESSAGE: Final = f"Topic binding key '{OVER}' uses 3 '#' wildcards, at most 2 are allowed"
#: Within the limit: two '#' words, and '#' inside a word (a literal).
WITHIN: Final = ("#.b.#", "a#.#.#")


def _error(response: Any) -> tuple[int, str, str]:
    error = response.json()["error"]
    return response.status_code, error["code"], error["message"]


def test_the_setting_is_off_by_default_and_at_least_one() -> None:
    assert Settings(_env_file=None).limits().max_hash_wildcards is None
    assert Settings(_env_file=None, max_hash_wildcards=2).limits().max_hash_wildcards == 2
    with pytest.raises(ValueError, match="max_hash_wildcards"):
        Settings(_env_file=None, max_hash_wildcards=0)


def test_the_api_refuses_a_third_hash_one_item_and_in_bulk(make_client: ClientFactory) -> None:
    client = make_client(max_hash_wildcards=2)
    one = client.post(
        "/v1/subscriptions", json={"subscriber": "q", "pattern": OVER}, headers=ADMIN_HEADERS
    )
    assert _error(one) == (400, CODE, MESSAGE)
    within = [create(client, "q", pattern)["id"] for pattern in WITHIN]
    items: list[dict[str, Any]] = [
        {"subscriber": "q", "pattern": OVER},  # plain: the quick path sends it on
        {"subscriber": "q", "pattern": "bulk.ok"},
        {"subscriber": "q", "pattern": "#.#.#.#", "labels": {"k": "v"}},  # the full path
        {"subscriber": "q", "pattern": "a/#", "dialect": "mqtt"},  # MQTT: one '#', last
    ]
    bulk = client.post("/v1/subscriptions/bulk", json={"items": items}, headers=ADMIN_HEADERS)
    assert bulk.status_code == 207, bulk.text  # some items failed
    body = bulk.json()
    assert (body["created"], body["failed"]) == (2, 2)
    errors = {r["index"]: r["error"] for r in body["results"] if r["status"] == "error"}
    assert errors == {
        0: {"code": CODE, "message": MESSAGE},
        2: {
            "code": CODE,
            "message": "Topic binding key '#.#.#.#' uses 4 '#' wildcards, at most 2 are allowed",
        },
    }
    assert match_ids(client, "a.b.c") == within[:1]  # '#.b.#'; 'a#' is a literal word


def test_without_the_setting_any_number_is_taken(client: TestClient) -> None:
    sub_id = create(client, "q", "#.#.#.#.#")["id"]
    assert match_ids(client, "a") == [sub_id]


def test_rows_stored_before_the_limit_still_match_and_can_be_removed(
    make_client: ClientFactory,
) -> None:
    before = make_client()
    old = create(before, "q", OVER)["id"]
    before.__exit__(None, None, None)
    limited = make_client(max_hash_wildcards=2)  # builds its table from the store
    assert match_ids(limited, "a.b.c") == [old]
    assert limited.get(f"/v1/subscriptions/{old}", headers=ADMIN_HEADERS).status_code == 200
    # The same pattern again is a new write: refused, as RabbitMQ refuses binding it again.
    again = limited.post(
        "/v1/subscriptions", json={"subscriber": "q", "pattern": OVER}, headers=ADMIN_HEADERS
    )
    assert _error(again) == (400, CODE, MESSAGE)
    removed = limited.delete(f"/v1/subscriptions/{old}", headers=ADMIN_HEADERS)
    assert removed.status_code == 204
    assert match_ids(limited, "a.b.c") == []


@pytest.fixture
def two_replicas(postgres_url: str) -> Iterator[tuple[TestClient, TestClient]]:
    """Two apps on one PostgreSQL database: one without the limit, one with it."""
    reset_postgres(postgres_url)
    clients = [
        TestClient(create_app(make_settings(postgres_url, **more), wait_until_ready=True))
        for more in ({}, {"max_hash_wildcards": 2})
    ]
    for client in clients:
        client.__enter__()
    yield clients[0], clients[1]
    for client in reversed(clients):
        client.__exit__(None, None, None)


def test_a_replica_with_the_limit_applies_rows_written_without_it(
    two_replicas: tuple[TestClient, TestClient],
) -> None:
    writer, limited = two_replicas
    sub_id = create(writer, "q", OVER)["id"]
    _until(lambda: match_ids(limited, "a.b.c") == [sub_id])
    # ... in every engine it builds, and it goes on applying.
    services = limited.app.state.services  # type: ignore[attr-defined]
    for name, engine in services.table()._topic[("default", "amqp")].items():
        assert sorted(engine.match("a.b.c")) == [sub_id], name
    later = create(writer, "q", "later")["id"]
    _until(lambda: match_ids(limited, "later") == [later])
    assert limited.delete(f"/v1/subscriptions/{sub_id}", headers=ADMIN_HEADERS).status_code == 204
    assert match_ids(limited, "a.b.c") == []
    _until(lambda: match_ids(writer, "a.b.c") == [])


def _until(check: Callable[[], bool], timeout_s: float = 15.0) -> None:
    """Wait for ``check`` (the change log's propagation, documented within 5 s)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not propagated"
        time.sleep(0.05)


# -- the command line ---------------------------------------------------------------------


def _cli(args: list[str], store_url: str, monkeypatch: pytest.MonkeyPatch, **env: str) -> Result:
    monkeypatch.setenv("TOPICSTORE_DATABASE_URL", store_url)
    for name, value in env.items():
        monkeypatch.setenv(f"TOPICSTORE_{name.upper()}", value)
    get_settings.cache_clear()
    try:
        return CliRunner().invoke(app, args)
    finally:
        get_settings.cache_clear()


def test_the_direct_command_line_refuses_and_keeps_the_rows_before(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    added = _cli(["sub", "add", "old", OVER, "--json"], store_url, monkeypatch)
    assert added.exit_code == 0, added.output
    old = json.loads(added.stdout)["id"]

    refused = _cli(["sub", "add", "q", OVER], store_url, monkeypatch, max_hash_wildcards="2")
    assert refused.exit_code == 1, refused.output
    assert f"error: {CODE}: {MESSAGE}" in refused.output

    path = tmp_path / "subs.csv"
    path.write_text(f"q,{OVER}\nq,#.b.#\nq,#.#.#,amqp,acme\n", encoding="utf-8")
    imported = _cli(
        ["sub", "import", str(path), "--json"], store_url, monkeypatch, max_hash_wildcards="2"
    )
    assert imported.exit_code == 1, imported.output
    report = json.loads(imported.stdout)
    assert (report["created"], report["failed"]) == (1, 2)
    assert [(e["line"], e["code"]) for e in report["errors"]] == [(1, CODE), (3, CODE)]

    matched = _cli(["match", "a.b.c", "--json"], store_url, monkeypatch, max_hash_wildcards="2")
    assert matched.exit_code == 0, matched.output
    assert json.loads(matched.stdout)["subscribers"] == ["old", "q"]
    removed = _cli(["sub", "rm", str(old)], store_url, monkeypatch, max_hash_wildcards="2")
    assert removed.exit_code == 0, removed.output
    after = _cli(["match", "a.b.c", "--json"], store_url, monkeypatch, max_hash_wildcards="2")
    assert json.loads(after.stdout)["subscribers"] == ["q"]


def test_a_real_server_and_the_command_line_through_it(tmp_path: Path) -> None:
    """``topicstore serve`` with ``TOPICSTORE_MAX_HASH_WILDCARDS=2`` and the command line
    in its API mode (it holds the DuckDB file), each a process of its own."""
    store = {"database_url": "duckdb:///data/p.duckdb", "admin_token": ADMIN}
    before = run_cli(tmp_path, "sub", "add", "old", OVER, "--json", **store)
    assert before.returncode == 0, before.stderr
    old = json.loads(before.stdout)["id"]
    settings = {**store, "max_hash_wildcards": "2"}
    with running_server(tmp_path, settings) as server:
        server.wait_until("/readyz", 200)
        through = {**settings, "port": str(server.port)}
        assert_one_error(run_cli(tmp_path, "sub", "add", "q", OVER, **through), CODE, 1)
        path = tmp_path / "subs.jsonl"
        path.write_text(
            json.dumps({"subscriber": "q", "pattern": "#.#.#"})
            + "\n"
            + json.dumps({"subscriber": "q", "pattern": "#.b.#"})
            + "\n"
        )
        imported = run_cli(tmp_path, "sub", "import", str(path), "--json", **through)
        assert imported.returncode == 1, imported.stderr
        assert [(e["line"], e["code"]) for e in json.loads(imported.stdout)["errors"]] == [
            (1, CODE)
        ]
        with server.client(ADMIN_HEADERS) as http:
            one = http.post("/v1/subscriptions", json={"subscriber": "q", "pattern": OVER})
            assert _error(one) == (400, CODE, MESSAGE)
            bulk = http.post(
                "/v1/subscriptions/bulk", json={"items": [{"subscriber": "q", "pattern": OVER}]}
            )
            assert bulk.json()["results"][0]["error"]["code"] == CODE
            assert http.post("/v1/match", json={"topic": "a.b.c"}).json()["subscribers"] == [
                "old",
                "q",
            ]
            assert http.delete(f"/v1/subscriptions/{old}").status_code == 204
            assert http.post("/v1/match", json={"topic": "a.b.c"}).json()["subscribers"] == ["q"]
