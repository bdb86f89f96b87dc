"""The match API on both backends: single, query-string and batch matching, write order
(a 201 means matchable now), and tenant isolation. Expected ids are written by hand."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.app.conftest import (
    A_HEADERS,
    ADMIN_HEADERS,
    B_HEADERS,
    ClientFactory,
    create,
    match_ids,
)


def test_post_and_get_match_with_distinct_subscribers(client: TestClient) -> None:
    exact = create(client, "billing", "stock.nasdaq.msft")["id"]
    star = create(client, "billing", "stock.*.msft")["id"]
    hash_ = create(client, "audit", "stock.#")["id"]
    create(client, "other", "stock.*.aapl")
    create(client, "mqtt-client", "stock/+/msft", dialect="mqtt")

    expected = {
        "subscriptions": sorted([exact, star, hash_]),
        "subscribers": ["audit", "billing"],
        "groups": [],
    }
    posted = client.post("/v1/match", json={"topic": "stock.nasdaq.msft"}, headers=ADMIN_HEADERS)
    assert posted.status_code == 200 and posted.json() == expected
    got = client.get("/v1/match", params={"topic": "stock.nasdaq.msft"}, headers=ADMIN_HEADERS)
    assert got.status_code == 200 and got.json() == expected

    assert match_ids(client, "stock") == [hash_]  # '#' matches zero words
    assert match_ids(client, "stock..msft") == sorted([star, hash_])  # '*' matches an empty word
    assert match_ids(client, "STOCK.nasdaq.msft") == []
    assert match_ids(client, "") == []
    nothing = client.get("/v1/match", params={"topic": "nowhere"}, headers=ADMIN_HEADERS)
    assert nothing.json() == {"subscriptions": [], "subscribers": [], "groups": []}


def test_dialects_match_their_own_subscriptions(client: TestClient) -> None:
    mqtt = create(client, "m", "home/+/temp", dialect="mqtt")["id"]
    mqtt_all = create(client, "m", "home/#", dialect="mqtt")["id"]
    nats = create(client, "n", "home.>", dialect="nats")["id"]
    amqp = create(client, "a", "home.#")["id"]

    assert match_ids(client, "home/kitchen/temp", dialect="mqtt") == sorted([mqtt, mqtt_all])
    assert match_ids(client, "home", dialect="mqtt") == [mqtt_all]  # '#' matches the parent
    assert match_ids(client, "home", dialect="nats") == []  # '>' needs one token or more
    assert match_ids(client, "home.kitchen", dialect="nats") == [nats]
    assert match_ids(client, "home") == [amqp]
    got = client.get(
        "/v1/match", params={"topic": "home/x/temp", "dialect": "mqtt"}, headers=ADMIN_HEADERS
    )
    assert got.json()["subscriptions"] == sorted([mqtt, mqtt_all])


def test_batch_gives_an_error_entry_for_an_invalid_topic(client: TestClient) -> None:
    one = create(client, "q1", "a.*")["id"]
    two = create(client, "q2", "a.#")["id"]
    also_q2 = create(client, "q2", "#.z")["id"]
    topics = ["a.b", "a.b.c", "x" * 256, "nothing.here", "a.\u0000", "a.z", ""]
    response = client.post("/v1/match/batch", json={"topics": topics}, headers=ADMIN_HEADERS)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert len(results) == len(topics)
    assert results[0] == {
        "subscriptions": sorted([one, two]),
        "subscribers": ["q1", "q2"],
        "groups": [],
    }
    assert results[1] == {"subscriptions": [two], "subscribers": ["q2"], "groups": []}
    assert set(results[2]) == {"error"} and results[2]["error"]["code"] == "topic_too_long"
    assert results[3] == {"subscriptions": [], "subscribers": [], "groups": []}
    assert set(results[4]) == {"error"} and results[4]["error"]["code"] == "nul_byte"
    assert results[5] == {
        "subscriptions": sorted([one, two, also_q2]),
        "subscribers": ["q1", "q2"],
        "groups": [],
    }
    assert results[6] == {
        "subscriptions": [],
        "subscribers": [],
        "groups": [],
    }  # '#.z' needs the 'z'

    empty = client.post("/v1/match/batch", json={"topics": []}, headers=ADMIN_HEADERS)
    assert empty.status_code == 200 and empty.json() == {"results": []}
    mqtt = client.post(
        "/v1/match/batch", json={"topics": ["a/b", "a/#"], "dialect": "mqtt"}, headers=ADMIN_HEADERS
    )
    codes = [r.get("error", {}) for r in mqtt.json()["results"]]
    assert codes[0] == {} and codes[1]["code"] == "wildcard_in_topic"


def test_a_subscription_is_matchable_in_the_response_cycle_after_its_201(
    client: TestClient,
) -> None:
    """Write order: commit, apply to the matchers, then respond; so the very next request
    sees the write (no waiting, no retry)."""
    for i in range(30):
        row = create(client, f"w{i}", f"write.{i}.#")
        assert match_ids(client, f"write.{i}.now") == [row["id"]]
        deleted = client.delete(f"/v1/subscriptions/{row['id']}", headers=ADMIN_HEADERS)
        assert deleted.status_code == 204
        assert match_ids(client, f"write.{i}.now") == []
    bulk = client.post(
        "/v1/subscriptions/bulk",
        json={"items": [{"subscriber": "b", "pattern": f"bulkwrite.{i}"} for i in range(100)]},
        headers=ADMIN_HEADERS,
    )
    ids = [r["id"] for r in bulk.json()["results"]]
    batch = client.post(
        "/v1/match/batch",
        json={"topics": [f"bulkwrite.{i}" for i in range(100)]},
        headers=ADMIN_HEADERS,
    )
    assert [r["subscriptions"] for r in batch.json()["results"]] == [[i] for i in ids]
    gone = client.delete("/v1/subscribers/b/subscriptions", headers=ADMIN_HEADERS)
    assert gone.json()["deleted"] == sorted(ids)
    assert match_ids(client, "bulkwrite.7") == []


def test_tenants_never_see_or_match_each_other(client: TestClient) -> None:
    a = create(client, "shared-name", "iso.#", headers=A_HEADERS)
    b = create(client, "shared-name", "iso.#", headers=B_HEADERS)
    b_only = create(client, "b-queue", "iso.*", headers=B_HEADERS)
    default = create(client, "d", "iso.#")
    assert a["tenant"] == "acme" and b["tenant"] == "globex" and default["tenant"] == "default"
    assert len({a["id"], b["id"], default["id"]}) == 3

    assert match_ids(client, "iso.x", A_HEADERS) == [a["id"]]
    assert match_ids(client, "iso.x", B_HEADERS) == sorted([b["id"], b_only["id"]])
    assert match_ids(client, "iso.x") == [default["id"]]
    get_a = client.get("/v1/match", params={"topic": "iso.x"}, headers=A_HEADERS)
    assert get_a.json() == {
        "subscriptions": [a["id"]],
        "subscribers": ["shared-name"],
        "groups": [],
    }
    batch_a = client.post("/v1/match/batch", json={"topics": ["iso.x"]}, headers=A_HEADERS)
    assert batch_a.json()["results"][0]["subscriptions"] == [a["id"]]

    # A cannot read, delete, list, count, snapshot or export B's subscriptions.
    assert client.get(f"/v1/subscriptions/{b['id']}", headers=A_HEADERS).status_code == 404
    assert client.delete(f"/v1/subscriptions/{b['id']}", headers=A_HEADERS).status_code == 404
    assert match_ids(client, "iso.x", B_HEADERS) == sorted([b["id"], b_only["id"]])
    listed = client.get("/v1/subscriptions", headers=A_HEADERS).json()["items"]
    assert [row["id"] for row in listed] == [a["id"]]
    assert client.get("/v1/subscriptions-count", headers=A_HEADERS).json()["total"] == 1
    snapshot = client.get("/v1/snapshot", headers=A_HEADERS).json()["subscriptions"]
    assert [entry["id"] for entry in snapshot] == [a["id"]]
    removed = client.delete("/v1/subscribers/b-queue/subscriptions", headers=A_HEADERS)
    assert removed.json() == {"deleted": [], "more": False}
    removed = client.delete("/v1/subscriptions?pattern_prefix=iso", headers=A_HEADERS)
    assert removed.json() == {"deleted": [a["id"]], "more": False}
    a = create(client, "shared-name", "iso.#", headers=A_HEADERS)
    assert match_ids(client, "iso.x", B_HEADERS) == sorted([b["id"], b_only["id"]])

    # The same (subscriber, pattern) in two tenants are two subscriptions; deleting one
    # leaves the other.
    assert client.delete(f"/v1/subscriptions/{a['id']}", headers=A_HEADERS).status_code == 204
    assert match_ids(client, "iso.x", A_HEADERS) == []
    assert match_ids(client, "iso.x", B_HEADERS) == sorted([b["id"], b_only["id"]])


def test_headers_matching_is_per_tenant(client: TestClient) -> None:
    criteria: dict[str, Any] = {"kind": "headers", "criteria": {"t": "x"}, "mode": "all"}
    a = create(client, "q", "", A_HEADERS, **criteria)
    b = create(client, "q", "", B_HEADERS, **criteria)
    for headers, expected in ((A_HEADERS, a), (B_HEADERS, b)):
        response = client.post("/v1/match/headers", json={"headers": {"t": "x"}}, headers=headers)
        assert response.json()["subscriptions"] == [expected["id"]]


REQUESTS_NAMING_A_TENANT: list[tuple[str, str, dict[str, Any]]] = [
    (
        "POST",
        "/v1/subscriptions",
        {"json": {"subscriber": "s", "pattern": "p", "tenant": "globex"}},
    ),
    ("GET", "/v1/subscriptions", {"params": {"tenant": "globex"}}),
    ("GET", "/v1/subscriptions-count", {"params": {"tenant": "globex"}}),
    ("GET", "/v1/subscriptions-export", {"params": {"tenant": "globex"}}),
    ("GET", "/v1/snapshot", {"params": {"tenant": "globex"}}),
    ("DELETE", "/v1/subscribers/b-queue/subscriptions", {"params": {"tenant": "globex"}}),
    ("DELETE", "/v1/subscriptions", {"params": {"tenant": "globex", "pattern_prefix": "iso"}}),
    ("POST", "/v1/match", {"json": {"topic": "iso.x", "tenant": "globex"}}),
    ("GET", "/v1/match", {"params": {"topic": "iso.x", "tenant": "globex"}}),
    ("POST", "/v1/match/batch", {"json": {"topics": ["iso.x"], "tenant": "globex"}}),
    ("POST", "/v1/match/headers", {"json": {"headers": {"t": "x"}, "tenant": "globex"}}),
]


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    REQUESTS_NAMING_A_TENANT,
    ids=[f"{m} {p}" for m, p, _ in REQUESTS_NAMING_A_TENANT],
)
def test_a_tenant_token_cannot_name_another_tenant_but_the_admin_can(
    client: TestClient, method: str, path: str, kwargs: dict[str, Any]
) -> None:
    b = create(client, "b-queue", "iso.x", headers=B_HEADERS)
    refused = client.request(method, path, headers=A_HEADERS, **kwargs)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "wrong_tenant"
    assert match_ids(client, "iso.x", B_HEADERS) == [b["id"]]  # nothing happened to B

    # Naming its own tenant is fine.
    own = _renamed(kwargs, "acme")
    assert client.request(method, path, headers=A_HEADERS, **own).status_code < 300

    # The admin token acts on the tenant it names.
    response = client.request(method, path, headers=ADMIN_HEADERS, **kwargs)
    assert response.status_code < 300, response.text
    if path == "/v1/match":
        assert response.json()["subscriptions"] == [b["id"]]
    if method == "DELETE":
        assert response.json() == {"deleted": [b["id"]], "more": False}
        assert match_ids(client, "iso.x", B_HEADERS) == []


def _renamed(kwargs: dict[str, Any], tenant: str) -> dict[str, Any]:
    return {key: {**value, "tenant": tenant} for key, value in kwargs.items()}


def test_admin_names_tenants_on_writes_and_reads(client: TestClient) -> None:
    row = create(client, "q", "adm.#", tenant="acme")
    assert row["tenant"] == "acme"
    assert match_ids(client, "adm.x", A_HEADERS) == [row["id"]]
    assert match_ids(client, "adm.x", tenant="acme") == [row["id"]]
    assert match_ids(client, "adm.x") == []  # the admin's default tenant is "default"
    assert client.get(f"/v1/subscriptions/{row['id']}", headers=ADMIN_HEADERS).json() == row
    bulk = client.post(
        "/v1/subscriptions/bulk",
        json={"items": [{"subscriber": "q", "pattern": "adm.y", "tenant": "globex"}]},
        headers=ADMIN_HEADERS,
    )
    assert match_ids(client, "adm.y", B_HEADERS) == [bulk.json()["results"][0]["id"]]
    # A tenant token naming another tenant inside a bulk item: that item fails, alone.
    mixed = client.post(
        "/v1/subscriptions/bulk",
        json={
            "items": [
                {"subscriber": "q", "pattern": "mix.z", "tenant": "globex"},
                {"subscriber": "q", "pattern": "mix.z"},
            ]
        },
        headers=A_HEADERS,
    )
    assert mixed.status_code == 207
    results = mixed.json()["results"]
    assert results[0]["error"]["code"] == "wrong_tenant" and results[1]["status"] == "created"
    assert match_ids(client, "mix.z", A_HEADERS) == [results[1]["id"]]
    assert match_ids(client, "mix.z", B_HEADERS) == []


def test_match_auth_can_be_turned_off_for_matches_only(make_client: ClientFactory) -> None:
    client = make_client(match_auth=False)
    row = create(client, "q", "open.*")
    assert client.post("/v1/match", json={"topic": "open.x"}).json()["subscriptions"] == [row["id"]]
    assert client.get("/v1/match", params={"topic": "open.x"}).status_code == 200
    assert client.post("/v1/match/batch", json={"topics": ["open.x"]}).status_code == 200
    refused = client.get("/v1/subscriptions")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"


def test_a_batch_answer_past_max_batch_matches_is_refused(make_client: ClientFactory) -> None:
    """The answer's size is bounded: matches are counted slice by slice (``BATCH_SLICE``
    topics), and a batch whose answer would pass ``max_batch_matches`` is a 413 naming the
    setting, however few topics it has; at the bound it is answered."""
    client = make_client(max_batch_matches=2_500)
    body = [{"subscriber": f"s{i}", "pattern": "wide.#"} for i in range(2)]
    stored = client.post("/v1/subscriptions/bulk", json={"items": body}, headers=ADMIN_HEADERS)
    assert stored.status_code == 200, stored.text
    exactly = ["wide.x"] * 1_250  # two slices, 2 matches each: 2,500 matches
    answered = client.post("/v1/match/batch", json={"topics": exactly}, headers=ADMIN_HEADERS)
    assert answered.status_code == 200, answered.text
    assert len(answered.json()["results"]) == 1_250
    over = client.post(
        "/v1/match/batch", json={"topics": [*exactly, "wide.y"]}, headers=ADMIN_HEADERS
    )
    assert over.status_code == 413, over.text
    error = over.json()["error"]
    assert error["code"] == "batch_answer_too_large" and "max_batch_matches" in error["message"]


def test_work_past_its_deadline_is_stopped(make_client: ClientFactory) -> None:
    """``work_deadline`` stops a batch and an explain with 503 ``deadline_exceeded`` (a
    microsecond: past before either starts its work); a single match has no deadline."""
    client = make_client(work_deadline=1e-6)
    create(client, "s", "late.#")
    batch = client.post("/v1/match/batch", json={"topics": ["late.x"]}, headers=ADMIN_HEADERS)
    assert batch.status_code == 503, batch.text
    error = batch.json()["error"]
    assert error["code"] == "deadline_exceeded" and "fewer topics" in error["message"]
    explained = client.get("/v1/match/explain", params={"topic": "late.x"}, headers=ADMIN_HEADERS)
    assert explained.status_code == 503, explained.text
    assert explained.json()["error"]["code"] == "deadline_exceeded"
    assert match_ids(client, "late.x") == [1]
