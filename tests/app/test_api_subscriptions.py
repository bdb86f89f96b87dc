"""The admin API on both backends: create, read, list, count, delete, bulk, headers
subscriptions, snapshot and export. Expected values are written from the inputs by hand."""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from store import AuditRepository, Database, SubscriptionRepository
from tests.app.conftest import A_HEADERS, ADMIN_HEADERS, ClientFactory, create, match_ids


def test_create_then_the_same_again_returns_the_existing_row(client: TestClient) -> None:
    body = {"subscriber": "billing", "pattern": "stock.*.msft", "labels": {"team": "ops"}}
    first = client.post("/v1/subscriptions", json=body, headers=ADMIN_HEADERS)
    assert first.status_code == 201, first.text
    row = first.json()
    assert row["tenant"] == "default" and row["dialect"] == "amqp" and row["kind"] == "topic"
    assert row["subscriber"] == "billing" and row["pattern"] == "stock.*.msft"
    assert row["labels"] == {"team": "ops"}

    again = client.post("/v1/subscriptions", json=body, headers=ADMIN_HEADERS)
    assert again.status_code == 200, again.text
    assert again.json() == row

    # Another dialect or subscriber is another subscription.
    other = create(client, "billing", "stock.*.msft", dialect="nats")
    assert other["id"] != row["id"]
    assert create(client, "audit", "stock.*.msft")["id"] not in {row["id"], other["id"]}


def test_get_and_delete(client: TestClient) -> None:
    row = create(client, "q1", "a.#")
    got = client.get(f"/v1/subscriptions/{row['id']}", headers=ADMIN_HEADERS)
    assert got.status_code == 200 and got.json() == row

    deleted = client.delete(f"/v1/subscriptions/{row['id']}", headers=ADMIN_HEADERS)
    assert deleted.status_code == 204 and deleted.content == b""
    assert match_ids(client, "a.b") == []
    for method in ("GET", "DELETE"):
        gone = client.request(method, f"/v1/subscriptions/{row['id']}", headers=ADMIN_HEADERS)
        assert gone.status_code == 404, gone.text
        assert gone.json()["error"]["code"] == "not_found"


def test_list_filters_and_keyset_pagination(client: TestClient) -> None:
    made = []
    for i in range(23):
        subscriber = ("alpha", "beta", "gamma")[i % 3]
        dialect = "mqtt" if i % 4 == 0 else "amqp"
        pattern = f"orders/{i}/#" if dialect == "mqtt" else f"orders.{i}.*"
        made.append(create(client, subscriber, pattern, dialect=dialect))
    create(client, "alpha", "elsewhere", headers=A_HEADERS)  # tenant acme: never listed here

    def listing(**params: object) -> list[dict[str, object]]:
        """Every page, following next_after; each page at most ``limit`` long."""
        rows: list[dict[str, object]] = []
        after: object = None
        pages = 0
        while True:
            query = {**params, **({"after": after} if after is not None else {})}
            page = client.get("/v1/subscriptions", params=query, headers=ADMIN_HEADERS)
            assert page.status_code == 200, page.text
            body = page.json()
            assert len(body["items"]) <= int(str(params.get("limit", 100)))
            rows += body["items"]
            pages += 1
            after = body["next_after"]
            if after is None:
                return rows
            assert after == body["items"][-1]["id"]
            assert pages < 50

    everything = listing(limit=5)
    assert everything == made  # id order, nothing missed or repeated across 5 pages
    assert listing() == made
    assert listing(subscriber="beta", limit=3) == [r for r in made if r["subscriber"] == "beta"]
    assert listing(dialect="mqtt", limit=2) == [r for r in made if r["dialect"] == "mqtt"]
    by_prefix = [r for r in made if str(r["pattern"]).startswith("orders.1")]
    assert listing(pattern_prefix="orders.1", limit=4) == by_prefix
    assert {r["id"] for r in by_prefix} == {
        made[i]["id"] for i in (1, 10, 11, 13, 14, 15, 17, 18, 19)
    }
    assert listing(subscriber="alpha", dialect="mqtt") == [
        r for r in made if r["subscriber"] == "alpha" and r["dialect"] == "mqtt"
    ]
    assert listing(subscriber="nobody") == []
    assert listing(tenant="acme")[0]["pattern"] == "elsewhere"


def test_count_per_dialect(client: TestClient) -> None:
    assert client.get("/v1/subscriptions-count", headers=ADMIN_HEADERS).json() == {
        "tenant": "default",
        "total": 0,
        "by_dialect": {},
    }
    create(client, "a", "x.*")
    create(client, "a", "x.#")
    create(client, "b", "x/+", dialect="mqtt")
    create(client, "b", "x.>", dialect="nats")
    create(client, "b", "", kind="headers", criteria={"k": "v"}, mode="all")
    create(client, "b", "x.y", headers=A_HEADERS)
    counts = client.get("/v1/subscriptions-count", headers=ADMIN_HEADERS)
    assert counts.json() == {
        "tenant": "default",
        "total": 5,
        "by_dialect": {"amqp": 2, "mqtt": 1, "nats": 1, "headers": 1},
    }
    acme = client.get("/v1/subscriptions-count", headers=A_HEADERS).json()
    assert acme == {"tenant": "acme", "total": 1, "by_dialect": {"amqp": 1}}


def test_delete_every_subscription_of_a_subscriber(client: TestClient) -> None:
    doomed = [create(client, "doomed", p)["id"] for p in ("t.#", "t.*", "#")]
    kept = create(client, "kept", "t.#")["id"]
    other_tenant = create(client, "doomed", "t.#", headers=A_HEADERS)["id"]

    response = client.delete("/v1/subscribers/doomed/subscriptions", headers=ADMIN_HEADERS)
    assert response.status_code == 200, response.text
    assert response.json() == {"deleted": sorted(doomed), "more": False}
    assert match_ids(client, "t.x") == [kept]
    assert match_ids(client, "t.x", A_HEADERS) == [other_tenant]

    again = client.delete("/v1/subscribers/doomed/subscriptions", headers=ADMIN_HEADERS)
    assert again.json() == {"deleted": [], "more": False}


def _delete(client: TestClient, headers: dict[str, str] = ADMIN_HEADERS, **params: str) -> Any:
    response = client.delete("/v1/subscriptions", params=params, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def test_delete_a_selection_removes_what_the_listing_shows(make_client: ClientFactory) -> None:
    """``DELETE /v1/subscriptions`` with the listing's filters removes exactly what the
    listing shows with them, in the caller's tenant: a label, a group and prefix, a whole
    tenant; at most ``max_delete`` per request, the lowest ids first, ``more`` until
    none is left."""
    client = make_client(max_delete=2)
    pay = [create(client, f"p{i}", f"t.{i}.#", labels={"team": "pay"})["id"] for i in range(3)]
    ops = create(client, "o", "t.#", labels={"team": "ops"})["id"]
    workers = create(client, "w", "t.w.*", group="workers")["id"]
    acme = [create(client, "a", p, headers=A_HEADERS, labels={"team": "pay"})["id"] for p in "xy"]
    listed = client.get("/v1/subscriptions", params={"label": "team=pay"}, headers=ADMIN_HEADERS)
    assert [row["id"] for row in listed.json()["items"]] == pay

    assert _delete(client, label="team=pay") == {"deleted": pay[:2], "more": True}
    assert _delete(client, label="team=pay") == {"deleted": pay[2:], "more": False}
    assert _delete(client, label="team=pay") == {"deleted": [], "more": False}
    assert match_ids(client, "t.w.x") == [ops, workers]
    assert _delete(client, group="workers", pattern_prefix="t.w") == {
        "deleted": [workers],
        "more": False,
    }
    assert match_ids(client, "t.w.x") == [ops]
    assert match_ids(client, "x", A_HEADERS) == [acme[0]]  # another tenant's: untouched
    # A tenant's token removes its own rows (the whole tenant: tenant= alone), no other's.
    assert _delete(client, A_HEADERS, subscriber="o") == {"deleted": [], "more": False}
    assert _delete(client, A_HEADERS, tenant="acme") == {"deleted": acme, "more": False}
    wrong = client.delete("/v1/subscriptions", params={"tenant": "default"}, headers=A_HEADERS)
    assert wrong.status_code == 403 and wrong.json()["error"]["code"] == "wrong_tenant"
    assert match_ids(client, "t.x") == [ops]


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({}, (422, "selection_required")),
        ({"pattern_prefix": ""}, (422, "selection_required")),
        ({"tenant": "default", "lable": "team=ops"}, (400, "unknown_parameter")),
        ({"overlaps": "t.#"}, (400, "unknown_parameter")),
        ([("label", "team=ops"), ("label", "team=pay")], (400, "repeated_parameter")),
        ({"label": "nokey"}, (422, "invalid_request")),
    ],
    ids=["none", "an empty prefix", "a misspelt one", "a listing's search", "twice", "bad"],
)
def test_delete_a_selection_refuses_what_would_widen_it(
    client: TestClient, params: Any, code: tuple[int, str]
) -> None:
    """A removal without a filter, or with a parameter it would drop, deletes nothing."""
    kept = create(client, "o", "t.#", labels={"team": "ops"})["id"]
    for headers in (ADMIN_HEADERS, A_HEADERS):
        refused = client.delete("/v1/subscriptions", params=params, headers=headers)
        assert (refused.status_code, refused.json()["error"]["code"]) == code
    assert match_ids(client, "t.x") == [kept]


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("queue/with+plus%é", "queue%2Fwith%2Bplus%25%C3%A9"),
        ("queue?line=two#", "queue%3Fline%3Dtwo%23"),
    ],
    ids=["slash, plus, percent", "query and fragment marks"],
)
def test_deleting_a_subscriber_whose_name_needs_escaping(
    client: TestClient, name: str, path: str
) -> None:
    row = create(client, name, "r.#")
    kept = create(client, "queue", "r.#")  # what the name starts with
    response = client.delete(f"/v1/subscribers/{path}/subscriptions", headers=ADMIN_HEADERS)
    assert response.status_code == 200, response.text
    assert response.json() == {"deleted": [row["id"]], "more": False}
    assert match_ids(client, "r.x") == [kept["id"]]


def test_bulk_with_valid_and_invalid_items(client: TestClient) -> None:
    existing = create(client, "s", "bulk.existing")
    items = [
        {"subscriber": "s", "pattern": "bulk.*.one"},
        {"subscriber": "s", "pattern": "a/#/b", "dialect": "mqtt"},
        {"subscriber": "s", "pattern": "bulk.existing"},
        {"subscriber": "", "pattern": "bulk.#"},
        {"subscriber": "t", "pattern": "bulk.two.#", "labels": {"n": 2}},
        {"subscriber": "t", "pattern": "x" * 256},
        {"subscriber": "t", "pattern": "bulk/+/three", "dialect": "mqtt"},
        {"subscriber": "s", "pattern": "bulk.*.one"},  # a duplicate within the batch
        {"subscriber": "u", "pattern": "bulk\u0000"},
        {"subscriber": "u", "kind": "headers", "criteria": {"x-type": "order"}, "mode": "all"},
    ]
    response = client.post("/v1/subscriptions/bulk", json={"items": items}, headers=ADMIN_HEADERS)
    assert response.status_code == 207, response.text
    body = response.json()
    results = body["results"]
    assert [r["index"] for r in results] == list(range(len(items)))
    assert [r["status"] for r in results] == [
        "created",
        "error",
        "exists",
        "error",
        "created",
        "error",
        "created",
        "exists",
        "error",
        "created",
    ]
    errors = {r["index"]: r["error"]["code"] for r in results if r["status"] == "error"}
    assert errors == {
        1: "invalid_wildcard",
        3: "empty_subscriber",
        5: "pattern_too_long",
        8: "nul_byte",
    }
    assert all(r["error"]["message"] for r in results if r["status"] == "error")
    assert all(r["id"] is None for r in results if r["status"] == "error")
    assert results[2]["id"] == existing["id"]
    assert results[7]["id"] == results[0]["id"]
    assert (body["created"], body["exists"], body["failed"]) == (4, 2, 4)

    ids = {i: r["id"] for i, r in enumerate(results)}
    assert match_ids(client, "bulk.x.one") == [ids[0]]
    assert match_ids(client, "bulk.two.three.four") == [ids[4]]
    assert match_ids(client, "bulk/x/three", dialect="mqtt") == [ids[6]]
    assert match_ids(client, "bulk.existing") == [existing["id"]]
    headers_match = client.post(
        "/v1/match/headers", json={"headers": {"x-type": "order"}}, headers=ADMIN_HEADERS
    )
    assert headers_match.json()["subscriptions"] == [ids[9]]
    stored = client.get(f"/v1/subscriptions/{ids[4]}", headers=ADMIN_HEADERS).json()
    assert stored["labels"] == {"n": 2}
    total = client.get("/v1/subscriptions-count", headers=ADMIN_HEADERS).json()["total"]
    assert total == 5


def test_bulk_reports_schema_problems_per_item(client: TestClient) -> None:
    """An item that does not fit the schema is one more per-item error (it was a 422 for
    the whole batch); so is a field its kind does not use."""
    items: list[Any] = [
        {"subscriber": "s", "pattern": "schema.ok"},
        {"subscriber": "s", "pattern": "schema.a", "dialect": "kafka"},
        {"subscriber": 7, "pattern": "schema.b"},
        {"subscriber": "s", "pattern": "schema.c", "queue": "x"},
        "not an object",
        {"subscriber": "s", "pattern": "schema.d", "labels": {"k": float("nan")}},
        {
            "subscriber": "s",
            "kind": "headers",
            "criteria": {"k": None},
            "mode": "all",
            "pattern": "schema.e",
        },
        {
            "subscriber": "s",
            "kind": "headers",
            "criteria": {"k": None},
            "mode": "all",
            "dialect": "mqtt",
        },
        {"subscriber": "s", "pattern": "schema.f", "criteria": {"k": "v"}},
        {"subscriber": "s", "pattern": "schema.g", "mode": "any"},
        {"subscriber": "s", "pattern": "schema.ok.too"},
    ]
    response = client.post(
        "/v1/subscriptions/bulk",
        content=json.dumps({"items": items}),  # NaN as Python's json writes it
        headers={**ADMIN_HEADERS, "content-type": "application/json"},
    )
    assert response.status_code == 207, response.text
    results = response.json()["results"]
    codes = [r["error"]["code"] if r["status"] == "error" else r["status"] for r in results]
    assert codes == [
        "created",
        "invalid_request",
        "invalid_request",
        "invalid_request",
        "invalid_request",
        "invalid_number",
        "pattern_not_applicable",
        "dialect_not_applicable",
        "criteria_not_applicable",
        "mode_not_applicable",
        "created",
    ]
    assert results[1]["error"]["message"].startswith("dialect: ")
    assert results[3]["error"]["message"].startswith("queue: ")
    assert match_ids(client, "schema.ok") == [results[0]["id"]]
    assert match_ids(client, "schema.ok.too") == [results[10]["id"]]
    total = client.get("/v1/subscriptions-count", headers=ADMIN_HEADERS).json()["total"]
    assert total == 2


@pytest.mark.parametrize("body", [{"items": "a"}, {}, {"items": [], "more": 1}, ["x"]], ids=str)
def test_bulk_refuses_a_body_it_cannot_read_whole(client: TestClient, body: Any) -> None:
    response = client.post("/v1/subscriptions/bulk", json=body, headers=ADMIN_HEADERS)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_request"


def test_bulk_all_valid_is_200(client: TestClient) -> None:
    items = [{"subscriber": f"s{i}", "pattern": f"all.{i}"} for i in range(50)]
    response = client.post("/v1/subscriptions/bulk", json={"items": items}, headers=ADMIN_HEADERS)
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["created"], body["exists"], body["failed"]) == (50, 0, 0)
    for i in (0, 17, 49):
        assert match_ids(client, f"all.{i}") == [body["results"][i]["id"]]
    empty = client.post("/v1/subscriptions/bulk", json={"items": []}, headers=ADMIN_HEADERS)
    assert empty.status_code == 200
    assert empty.json() == {"created": 0, "exists": 0, "failed": 0, "results": []}


def test_headers_subscriptions_and_match(client: TestClient) -> None:
    all_of = create(
        client, "orders", "", kind="headers", criteria={"type": "order", "region": "eu"}, mode="all"
    )
    any_of = create(
        client, "audit", "", kind="headers", criteria={"type": "refund", "vip": None}, mode="any"
    )
    present = create(client, "tracing", "", kind="headers", criteria={"trace": None}, mode="all")
    assert all_of["kind"] == "headers" and all_of["dialect"] == "headers"
    assert all_of["criteria"] == {"type": "order", "region": "eu"} and all_of["mode"] == "all"
    # Same criteria in another order: the same subscription.
    again = client.post(
        "/v1/subscriptions",
        json={
            "subscriber": "orders",
            "kind": "headers",
            "criteria": {"region": "eu", "type": "order"},
            "mode": "all",
        },
        headers=ADMIN_HEADERS,
    )
    assert again.status_code == 200 and again.json()["id"] == all_of["id"]

    def matched(headers: dict[str, str]) -> dict[str, list[object]]:
        response = client.post(
            "/v1/match/headers", json={"headers": headers}, headers=ADMIN_HEADERS
        )
        assert response.status_code == 200, response.text
        body: dict[str, list[object]] = response.json()
        return body

    assert matched({"type": "order", "region": "eu"}) == {
        "subscriptions": [all_of["id"]],
        "subscribers": ["orders"],
        "groups": [],
    }
    assert matched({"type": "order", "region": "us"})["subscriptions"] == []
    assert matched({"type": "refund"})["subscriptions"] == [any_of["id"]]
    assert matched({"vip": "", "trace": "1"}) == {
        "subscriptions": sorted([any_of["id"], present["id"]]),
        "subscribers": ["audit", "tracing"],
        "groups": [],
    }
    assert matched({})["subscriptions"] == []
    # Headers subscriptions never answer topic matches.
    assert match_ids(client, "order") == []


def test_snapshot_equals_the_listing_at_the_ready_seq(client: TestClient) -> None:
    rows = [create(client, f"s{i % 4}", f"snap.{i}.#") for i in range(12)]
    rows.append(create(client, "h", "", kind="headers", criteria={"k": None}, mode="any"))
    client.delete(f"/v1/subscriptions/{rows[3]['id']}", headers=ADMIN_HEADERS)
    create(client, "other", "snap.#", headers=A_HEADERS)

    snapshot = client.get("/v1/snapshot", headers=ADMIN_HEADERS)
    assert snapshot.status_code == 200, snapshot.text
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["lag"] == 0
    # 13 adds and 1 remove in the default tenant, 1 add in acme: 15 changes.
    assert snapshot.json()["seq"] == ready.json()["seq"] == 15
    listing = client.get("/v1/subscriptions", headers=ADMIN_HEADERS).json()["items"]
    assert snapshot.json()["subscriptions"] == [
        {k: row[k] for k in ("id", "subscriber", "dialect", "pattern")} for row in listing
    ]
    assert len(listing) == 12 and rows[3]["id"] not in {row["id"] for row in listing}

    acme = client.get("/v1/snapshot", headers=A_HEADERS).json()
    assert [e["pattern"] for e in acme["subscriptions"]] == ["snap.#"]


def test_export_is_parquet_with_every_row_of_the_tenant(
    client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every row of the tenant; the file the answer is streamed from is removed once sent."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ids = [create(client, f"e{i}", f"exp.{i}")["id"] for i in range(7)]
    create(client, "x", "exp.acme", headers=A_HEADERS)

    response = client.get("/v1/subscriptions-export", headers=ADMIN_HEADERS)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/vnd.apache.parquet"
    assert response.content[:4] == b"PAR1"
    table = pq.read_table(io.BytesIO(response.content))
    assert response.headers["x-row-count"] == "7" and table.num_rows == 7
    assert table.column("id").to_pylist() == ids
    assert set(table.column("tenant").to_pylist()) == {"default"}

    acme = pq.read_table(
        io.BytesIO(client.get("/v1/subscriptions-export", headers=A_HEADERS).content)
    )
    assert acme.column("pattern").to_pylist() == ["exp.acme"]

    empty = client.get(
        "/v1/subscriptions-export", params={"tenant": "nobody"}, headers=ADMIN_HEADERS
    )
    assert empty.headers["x-row-count"] == "0"
    assert pq.read_table(io.BytesIO(empty.content)).num_rows == 0
    assert not list(tmp_path.glob("topicstore-export-*"))


def test_list_by_group_and_label(client: TestClient) -> None:
    """``group`` lists a shared-subscription group's members; ``label=KEY=VALUE`` the
    subscriptions whose labels hold it (the value compared as text), on both backends."""
    w1 = create(client, "w1", "jobs.#", group="workers", group_policy="round_robin")
    w2 = create(client, "w2", "jobs.#", group="workers", labels={"team": "pay", "tier": 1})
    create(client, "solo", "jobs.#", labels={"team": "ops"})
    numbered = create(client, "n", "other.#", labels={"tier": "1"})

    def ids(**params: str) -> list[int]:
        page = client.get("/v1/subscriptions", params=params, headers=ADMIN_HEADERS)
        assert page.status_code == 200, page.text
        return [row["id"] for row in page.json()["items"]]

    assert ids(group="workers") == [w1["id"], w2["id"]]
    assert ids(group="nobody") == []
    assert ids(label="team=pay") == [w2["id"]]
    assert ids(label="tier=1") == [w2["id"], numbered["id"]]
    assert ids(label="team=pay", group="workers") == [w2["id"]]
    assert ids(label="absent=x") == []
    refused = client.get("/v1/subscriptions", params={"label": "nokey"}, headers=ADMIN_HEADERS)
    assert refused.status_code == 422, refused.text


def test_a_reconnect_storm_of_present_subscriptions_writes_nothing(client: TestClient) -> None:
    """Clients that reconnect re-create what they had: already-present subscriptions, one
    by one and in bulk, answer with the stored rows and add no change-log or audit row
    (followers have nothing to apply, the quota nothing to count)."""
    items = [{"subscriber": f"c{i % 7}", "pattern": f"storm.{i}.*"} for i in range(300)]
    first = client.post("/v1/subscriptions/bulk", json={"items": items}, headers=ADMIN_HEADERS)
    assert first.status_code == 200 and first.json()["created"] == 300
    ids = [r["id"] for r in first.json()["results"]]

    db: Database = client.app.state.services.db  # type: ignore[attr-defined]

    def logged() -> tuple[int, int, int]:
        with db.read() as session:
            repo = SubscriptionRepository(session)
            changes = len(repo.changes_since(0, 100_000))
            audits = len(AuditRepository(session).page(limit=1_000))
            return changes, audits, repo.usage("default")

    before = logged()
    for item, sub_id in zip(items[:50], ids, strict=False):
        again = client.post("/v1/subscriptions", json=item, headers=ADMIN_HEADERS)
        assert again.status_code == 200 and again.json()["id"] == sub_id
    bulk = client.post("/v1/subscriptions/bulk", json={"items": items}, headers=ADMIN_HEADERS)
    assert bulk.json()["exists"] == 300 and [r["id"] for r in bulk.json()["results"]] == ids
    assert logged() == before == (300, 1, 300)
