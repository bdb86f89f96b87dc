"""The names' rule over a real server on both backends, and through the command line's
import: a subscriber or group name with whitespace or a format character is refused with
the code of the rule on every write path (single, bulk, the bulk's quick path, MQTT
``$share/``, an import file); rows stored before the rule keep matching and can be
removed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from app.cli import app
from app.settings import get_settings
from store import Database, SubscriptionRepository
from tests.app.conftest import ADMIN, ADMIN_HEADERS, TENANTS, ServerFactory

REVERSED = "\u202egnp.exe"  # shows as "exe.png"
SPACED = "g\u00a0x"  # shows as "g x"


def _settings(store_url: str) -> dict[str, str]:
    return {
        "database_url": store_url,
        "admin_token": ADMIN,
        "tenant_tokens": json.dumps(TENANTS),
        "poll_interval": "0.1",
    }


def test_every_write_path_refuses_unseen_characters(serve: ServerFactory, store_url: str) -> None:
    server = serve(**_settings(store_url))
    server.wait_until("/readyz", 200)
    with server.client(ADMIN_HEADERS) as http:
        for body, code in [
            ({"subscriber": "w\u00a01", "pattern": "a"}, "whitespace_character"),
            ({"subscriber": "w\u30001", "pattern": "a"}, "whitespace_character"),
            ({"subscriber": REVERSED, "pattern": "a"}, "format_character"),
            ({"subscriber": "w\u200b1", "pattern": "a"}, "format_character"),
            ({"subscriber": "w 1", "pattern": "a"}, "whitespace_character"),
            ({"subscriber": "w", "pattern": "a", "group": "g\u2028x"}, "whitespace_character"),
            ({"subscriber": "w", "pattern": "a", "group": "g\u2066x"}, "format_character"),
            (
                {"subscriber": "w", "pattern": "$share/g\u0085x/a", "dialect": "mqtt"},
                "whitespace_character",
            ),
        ]:
            single = http.post("/v1/subscriptions", json=body)
            assert (single.status_code, single.json()["error"]["code"]) == (400, code), body
        bulk = http.post(
            "/v1/subscriptions/bulk",
            json={
                "items": [
                    {"subscriber": "ok", "pattern": "a"},
                    {"subscriber": "w 1", "pattern": "a"},  # plain ASCII: the quick path's
                    {"subscriber": "w", "pattern": "a", "group": SPACED},
                    {"subscriber": REVERSED, "pattern": "a", "labels": {"k": 1}},
                ]
            },
        )
        results = bulk.json()["results"]
        assert [r["status"] for r in results] == ["created", "error", "error", "error"]
        assert [r["error"]["code"] for r in results[1:]] == [
            "whitespace_character",
            "whitespace_character",
            "format_character",
        ]


def test_rows_stored_before_the_rule_keep_working(serve: ServerFactory, store_url: str) -> None:
    """Names the rule now refuses, written into the store behind the service's back (as
    rows from before the rule): the table loads them, matches and groups name them, and
    they can be removed, by id and by subscriber."""
    server = serve(**_settings(store_url))
    server.wait_until("/readyz", 200)
    with server.client(ADMIN_HEADERS) as http:
        ids = [
            http.post(
                "/v1/subscriptions",
                json={
                    "subscriber": f"w{i}",
                    "pattern": "jobs.#",
                    "group": "g",
                    "group_policy": "hash",
                },
            ).json()["id"]
            for i in range(2)
        ]
        audit = http.post("/v1/subscriptions", json={"subscriber": "audit", "pattern": "jobs.#"})
        tabbed = http.post("/v1/subscriptions", json={"subscriber": "tabbed", "pattern": "mail"})
    server.stop()
    db = Database(store_url)
    try:
        with db.engine.begin() as conn:
            conn.execute(
                sa.text('UPDATE subscription SET "group" = :g WHERE "group" IS NOT NULL'),
                {"g": SPACED},
            )
            for name, row in ((REVERSED, audit), ("queue\tline two", tabbed)):
                conn.execute(
                    sa.text("UPDATE subscription SET subscriber = :s WHERE id = :i"),
                    {"s": name, "i": row.json()["id"]},
                )
    finally:
        db.dispose()
    server = serve(**_settings(store_url))
    server.wait_until("/readyz", 200)  # the table built from the store
    with server.client(ADMIN_HEADERS) as http:
        answer = http.post("/v1/match", json={"topic": "jobs.1", "key": "k"}).json()
        (group,) = answer["groups"]
        assert group["group"] == SPACED and group["candidates"] == 2
        assert REVERSED in answer["subscribers"]
        assert http.delete(f"/v1/subscriptions/{ids[0]}").status_code == 204
        answer = http.post("/v1/match", json={"topic": "jobs.1"}).json()
        assert answer["groups"][0]["subscription"] == ids[1]
        gone = http.delete(f"/v1/subscribers/{REVERSED}/subscriptions")
        assert gone.status_code == 200 and gone.json()["deleted"] == [audit.json()["id"]]
        assert http.post("/v1/match", json={"topic": "jobs.1"}).json()["subscriptions"] == [ids[1]]
        gone = http.delete("/v1/subscribers/queue%09line%20two/subscriptions")
        assert gone.json()["deleted"] == [tabbed.json()["id"]]


def test_an_import_file_refuses_unseen_characters(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``topicstore sub import`` on the store directly: each such line is reported."""
    path = tmp_path / "subscriptions.csv"
    path.write_text(
        f"ok,a\nw\u00a01,a\n{REVERSED},a\nw,a,amqp,,g\u3000x\nw 2,a\n", encoding="utf-8"
    )
    monkeypatch.setenv("TOPICSTORE_DATABASE_URL", store_url)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["sub", "import", str(path)])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 1, result.output
    assert "created 1, already there 0, failed 4" in result.output, result.output
    for line, code in [
        (2, "whitespace_character"),
        (3, "format_character"),
        (4, "whitespace_character"),
        (5, "whitespace_character"),
    ]:
        assert f"line {line}: {code}" in result.output, result.output
    db = Database(store_url)
    try:
        with db.read() as session:
            assert [row.subscriber for row in SubscriptionRepository(session).page()] == ["ok"]
    finally:
        db.dispose()
