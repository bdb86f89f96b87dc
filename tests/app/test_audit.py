"""The audit log: every admin change writes its rows in the change's own transaction, on
both backends, through the API and the command line's direct mode; ``GET /v1/audit``
pages and filters them and keeps tenants apart; old rows are purged after the retention."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.auth import Caller, Origin, token_name
from app.cli import app
from app.operations import AdminOperations
from app.settings import get_settings
from migrations.runner import upgrade
from store import AuditRepository, Database
from tests.app.conftest import (
    A_HEADERS,
    ADMIN_HEADERS,
    B_HEADERS,
    TOKEN_A,
    ClientFactory,
    create,
    make_settings,
)
from topicstore.models import SubscriptionIn
from topicstore.times import YEARS, digits_between


def _audit(client: TestClient, headers: Mapping[str, str] = ADMIN_HEADERS, **params: Any) -> Any:
    response = client.get("/v1/audit", params=params, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def _without_times(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k not in ("id", "created_at")} for row in rows]


def test_every_admin_change_writes_one_row_per_tenant(client: TestClient) -> None:
    acme = token_name(TOKEN_A, "acme")
    one = create(client, "q1", "a.*", headers={**A_HEADERS, "X-Request-ID": "req-create"})
    again = client.post(
        "/v1/subscriptions", json={"subscriber": "q1", "pattern": "a.*"}, headers=A_HEADERS
    )
    assert again.status_code == 200  # nothing changed: no row
    bulk = client.post(
        "/v1/subscriptions/bulk",
        json={
            "items": [
                {"subscriber": "q2", "pattern": "b.#", "tenant": "globex"},
                {"subscriber": "q2", "pattern": "b.*", "tenant": "acme"},
                {"subscriber": "q3", "pattern": "c", "tenant": "acme"},
                {"subscriber": "q1", "pattern": "a.*", "tenant": "acme"},  # exists
                {"subscriber": "q1", "pattern": "a..#"},  # the default tenant
            ]
        },
        headers={**ADMIN_HEADERS, "X-Request-ID": "req-bulk"},
    )
    assert bulk.status_code == 200, bulk.text
    ids = [r["id"] for r in bulk.json()["results"]]
    gone = client.delete(f"/v1/subscriptions/{one['id']}", headers=A_HEADERS)
    assert gone.status_code == 204
    removed = client.delete("/v1/subscribers/q2/subscriptions?tenant=acme", headers=ADMIN_HEADERS)
    assert removed.json() == {"deleted": [ids[1]], "more": False}
    nothing = client.delete("/v1/subscribers/nobody/subscriptions", headers=A_HEADERS)
    assert nothing.json() == {"deleted": [], "more": False}  # nothing changed: no row
    selected = client.delete("/v1/subscriptions?tenant=globex", headers=ADMIN_HEADERS)
    assert selected.json() == {"deleted": [ids[0]], "more": False}
    none = client.delete("/v1/subscriptions?subscriber=nobody", headers=A_HEADERS)
    assert none.json() == {"deleted": [], "more": False}  # nothing changed: no row

    rows = _audit(client)["items"]
    assert [row["id"] for row in rows] == sorted(row["id"] for row in rows)
    bulk_request = bulk.headers["X-Request-ID"]
    assert bulk_request == "req-bulk"
    common = {"address": "testclient"}
    assert _without_times(rows) == [
        {
            "tenant": "acme",
            "action": "create",
            "ids": [one["id"]],
            "caller_tenant": "acme",
            "caller_name": acme,
            "request_id": "req-create",
            **common,
        },
        *(
            {
                "tenant": tenant,
                "action": "bulk_create",
                "ids": created,
                "caller_tenant": None,
                "caller_name": "operator",
                "request_id": "req-bulk",
                **common,
            }
            for tenant, created in (
                ("acme", [ids[1], ids[2]]),
                ("default", [ids[4]]),
                ("globex", [ids[0]]),
            )
        ),
        {
            "tenant": "acme",
            "action": "delete",
            "ids": [one["id"]],
            "caller_tenant": "acme",
            "caller_name": acme,
            "request_id": gone.headers["X-Request-ID"],
            **common,
        },
        {
            "tenant": "acme",
            "action": "delete_subscriber",
            "ids": [ids[1]],
            "caller_tenant": None,
            "caller_name": "operator",
            "request_id": removed.headers["X-Request-ID"],
            **common,
        },
        {
            "tenant": "globex",
            "action": "delete",
            "ids": [ids[0]],
            "caller_tenant": None,
            "caller_name": "operator",
            "request_id": selected.headers["X-Request-ID"],
            **common,
        },
    ]
    # A request without an id gets one made for it: 32 hex digits, one per request.
    made = {r.headers["X-Request-ID"] for r in (gone, removed, selected)}
    assert len(made) == 3 and all(len(m) == 32 and int(m, 16) >= 0 for m in made)
    assert TOKEN_A not in str(rows)


def test_tenants_see_their_own_rows_and_filters_page_through(client: TestClient) -> None:
    for i in range(5):
        create(client, f"a{i}", f"x.{i}", headers=A_HEADERS)
        create(client, f"b{i}", f"y.{i}", headers=B_HEADERS)
    acme = _audit(client, A_HEADERS)["items"]
    assert len(acme) == 5 and {row["tenant"] for row in acme} == {"acme"}
    refused = client.get("/v1/audit", params={"tenant": "globex"}, headers=A_HEADERS)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "wrong_tenant"
    assert len(_audit(client)["items"]) == 10  # the operator: every tenant
    assert len(_audit(client, tenant="globex")["items"]) == 5
    assert _audit(client, action="delete")["items"] == []

    # Keyset pages: pass next_after back until it is null.
    seen: list[int] = []
    after = None
    while True:
        page = _audit(client, limit=3, **({} if after is None else {"after": after}))
        seen += [row["id"] for row in page["items"]]
        after = page["next_after"]
        if after is None:
            break
    assert seen == [row["id"] for row in _audit(client)["items"]]
    # Newest first, paged the same way: the same rows, reversed.
    newest: list[int] = []
    after = None
    while True:
        extra: dict[str, Any] = {} if after is None else {"after": after}
        page = _audit(client, limit=4, order="desc", **extra)
        newest += [row["id"] for row in page["items"]]
        after = page["next_after"]
        if after is None:
            break
    assert newest == seen[::-1]
    assert [r["id"] for r in _audit(client, order="desc", tenant="acme")["items"]] == sorted(
        (r["id"] for r in acme), reverse=True
    )
    bad_order = client.get("/v1/audit", params={"order": "up"}, headers=ADMIN_HEADERS)
    assert bad_order.status_code == 422

    # Time range: [from, to) around the rows' own times.
    rows = _audit(client)["items"]
    middle = rows[4]["created_at"]
    before = _audit(client, to=middle)["items"]
    since = _audit(client, **{"from": middle})["items"]
    assert [r["id"] for r in before] + [r["id"] for r in since] == [r["id"] for r in rows]
    assert since[0]["id"] == rows[4]["id"]
    late: dict[str, Any] = {"from": "2999-01-01T00:00:00Z"}
    assert _audit(client, **late)["items"] == []
    # The same instant in another offset: the row at ``middle`` and those after it.
    shifted = datetime.fromisoformat(middle).astimezone(timezone(timedelta(hours=-5)))
    shifted_since: dict[str, Any] = {"from": shifted.isoformat()}
    assert _audit(client, **shifted_since)["items"] == since
    # Only an RFC 3339 date-time with an offset is a time: not a number (seconds since
    # 1970 to pydantic), a date, a time without an offset or a day that does not exist.
    for bad in ("0.5", "1700000000", "2026-01-01", "2026-01-01T00:00:00", "2026-02-30T00:00:00Z"):
        refused = client.get("/v1/audit", params={"to": bad}, headers=ADMIN_HEADERS)
        assert refused.status_code == 422, bad
        assert refused.json()["error"]["code"] == "invalid_request", bad
    # The year as written bounds a time (the offset moves the instant by less than a day).
    for far in ("1900-01-01T00:00:00Z", "1969-12-31T23:59:59-01:00", "9999-01-01T00:00:00Z"):
        refused = client.get("/v1/audit", params={"from": far}, headers=ADMIN_HEADERS)
        assert refused.status_code == 422, far
        assert refused.json()["error"]["code"] == "time_out_of_range", far
    edge: dict[str, Any] = {"from": "1970-01-01T00:00:00+01:00", "to": "9998-12-31T23:59:59-23:59"}
    assert _audit(client, **edge)["items"] == rows


def test_a_bad_request_id_is_refused_and_the_given_one_echoed(client: TestClient) -> None:
    for bad in (b"", b"x" * 129, b"has space", "é".encode()):
        response = client.get(
            "/v1/subscriptions", headers=[*ADMIN_HEADERS.items(), ("X-Request-ID", bad)]
        )
        assert response.status_code == 400, bad
        assert response.json()["error"]["code"] == "invalid_request_id"
        assert len(response.headers["X-Request-ID"]) == 32
    twice = client.get("/healthz", headers=[("X-Request-ID", "a"), ("X-Request-ID", "b")])
    assert twice.status_code == 400
    ok = client.get("/healthz", headers={"X-Request-ID": "t" * 128})
    assert ok.status_code == 200
    assert ok.headers["X-Request-ID"] == "t" * 128


def test_a_refused_write_leaves_no_row(make_client: ClientFactory) -> None:
    client = make_client(tenant_quota=2)
    items = [{"subscriber": "q", "pattern": f"p.{i}"} for i in range(3)]
    over = client.post("/v1/subscriptions/bulk", json={"items": items}, headers=A_HEADERS)
    assert over.status_code == 403
    assert _audit(client)["items"] == []


def test_the_change_and_its_row_commit_together(postgres_url: str) -> None:
    """If the audit row cannot be written, the change is not either (PostgreSQL enforces
    the column's 255 characters; a caller name over it fails the insert)."""
    from harness.services import reset_postgres

    reset_postgres(postgres_url)
    db = Database(postgres_url)
    try:
        operations = AdminOperations(db, make_settings(postgres_url))
        caller = Caller("acme", name="n" * 300)
        with pytest.raises(sa.exc.DBAPIError):
            operations.create(SubscriptionIn(subscriber="q", pattern="a"), caller)
        with db.read() as session:
            count = session.execute(sa.text("SELECT count(*) FROM subscription")).scalar()
        assert count == 0
    finally:
        db.dispose()


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_rows_past_the_retention_are_purged_on_a_later_write(database: Database) -> None:
    clock = FakeClock()
    settings = make_settings(database.url, audit_retention_days=1)
    operations = AdminOperations(database, settings, clock=clock)
    caller = Caller("acme", "acme:test", Origin("r", "10.0.0.1"))

    def add(pattern: str) -> None:
        operations.create(SubscriptionIn(subscriber="q", pattern=pattern), caller)

    def kept() -> list[tuple[str, ...]]:
        with database.read() as session:
            return [tuple(map(str, row.ids)) for row in AuditRepository(session).page()]

    add("a")
    clock.now += timedelta(hours=23)
    add("b")  # "a" is 23 hours old: kept
    assert len(kept()) == 2
    clock.now += timedelta(hours=2)
    add("c")  # "a" is 25 hours old: gone
    assert kept() == [("2",), ("3",)]
    clock.now += timedelta(minutes=30)
    add("d")  # purged half an hour ago: not again yet (at most once an hour)
    assert len(kept()) == 3
    clock.now += timedelta(days=2)
    add("e")
    assert kept() == [("5",)]

    forever = AdminOperations(
        database, make_settings(database.url, audit_retention_days=0), clock=clock
    )
    clock.now += timedelta(days=400)
    forever.create(SubscriptionIn(subscriber="q", pattern="f"), caller)
    assert len(kept()) == 2


def test_the_command_line_writes_and_lists_rows_on_the_store(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOPICSTORE_DATABASE_URL", store_url)
    get_settings.cache_clear()
    try:
        runner = CliRunner()
        added = runner.invoke(app, ["sub", "add", "q", "a.b", "--tenant", "acme"])
        assert added.exit_code == 0, added.output
        removed = runner.invoke(app, ["sub", "rm", "1"])
        assert removed.exit_code == 0, removed.output
        listed = runner.invoke(app, ["audit", "--json"])
        assert listed.exit_code == 0, listed.output
        newest = runner.invoke(app, ["audit", "--json", "--newest-first", "--limit", "1"])
        assert newest.exit_code == 0, newest.output
        human = runner.invoke(app, ["audit", "--action", "delete"])
        bad = runner.invoke(app, ["audit", "--action", "nope"])
        bad_time = runner.invoke(app, ["audit", "--from", "yesterday"])
    finally:
        get_settings.cache_clear()
    rows = json.loads(listed.output)
    assert [(r["action"], r["tenant"], r["ids"]) for r in rows] == [
        ("create", "acme", [1]),  # one subscription: as POST /v1/subscriptions audits it
        ("delete", "acme", [1]),
    ]
    for row in rows:
        assert row["caller_tenant"] is None
        assert row["caller_name"].startswith("cli:")
        assert row["address"] == "local"
        assert len(row["request_id"]) == 32
    assert rows[0]["request_id"] != rows[1]["request_id"]  # one per command
    assert json.loads(newest.output) == rows[-1:]
    assert human.exit_code == 0 and "delete" in human.output and "create" not in human.output
    assert bad.exit_code == 2 and "invalid_action" in bad.output
    assert bad_time.exit_code == 2 and "invalid_time" in bad_time.output


def test_a_store_of_an_older_release_is_named_outdated_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"duckdb:///{tmp_path / 'old.duckdb'}"
    upgrade(url, "0001")
    monkeypatch.setenv("TOPICSTORE_DATABASE_URL", url)
    get_settings.cache_clear()
    try:
        removed = CliRunner().invoke(app, ["sub", "rm", "1"])
    finally:
        get_settings.cache_clear()
    assert removed.exit_code == 2, removed.output
    outdated = (
        "error: schema_outdated: the store has no audit_log, subscription_stats, tenant_usage "
        "table yet"
    )
    assert outdated in removed.output


@pytest.mark.parametrize(
    ("low", "high"), [(YEARS.start, YEARS.stop - 1), (0, 9999), (5, 5), (999, 1000), (123, 4567)]
)
def test_the_year_pattern_matches_exactly_its_years(low: int, high: int) -> None:
    """The document states the audit's years as a regular expression built from ``YEARS``."""
    pattern = re.compile(f"^{digits_between(low, high, 4)}$")
    matched = [year for year in range(10_000) if pattern.match(f"{year:04d}")]
    assert matched == list(range(low, high + 1))
