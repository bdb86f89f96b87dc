"""Shared subscriptions through the API on both backends: the group field and MQTT
``$share/``, one member per group in single, query-string, batch and headers matches, the
policies, the conflict rule, bulk items, replicas and restarts (the loader)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.app.conftest import A_HEADERS, ADMIN_HEADERS, ClientFactory, create


def _match(client: TestClient, topic: str, **fields: Any) -> dict[str, Any]:
    response = client.post("/v1/match", json={"topic": topic, **fields}, headers=ADMIN_HEADERS)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_one_member_per_group_and_every_ungrouped_subscription(client: TestClient) -> None:
    audit = create(client, "audit", "orders.#")["id"]
    w = [
        create(client, f"w{i}", "orders.*", group="workers", group_policy="round_robin")["id"]
        for i in range(3)
    ]
    eu_only = create(client, "w3", "orders.eu", group="workers")
    assert eu_only["group"] == "workers" and eu_only["group_policy"] == "round_robin"  # inherited
    members = [*w, eu_only["id"]]
    seen: list[int] = []
    for _ in range(8):
        body = _match(client, "orders.eu")
        (choice,) = body["groups"]
        assert choice["group"] == "workers" and choice["policy"] == "round_robin"
        assert choice["candidates"] == 4
        assert body["subscriptions"] == sorted([audit, choice["subscription"]])
        assert body["subscribers"] == sorted(["audit", f"w{members.index(choice['subscription'])}"])
        assert choice["subscriber"] == f"w{members.index(choice['subscription'])}"
        seen.append(choice["subscription"])
    assert Counter(seen) == dict.fromkeys(members, 2)  # round robin: each twice in 8
    # Only matching members are candidates: orders.us does not match orders.eu.
    for _ in range(4):
        body = _match(client, "orders.us")
        assert body["groups"][0]["candidates"] == 3
        assert body["groups"][0]["subscription"] in w
    # No group matched: the plain shape.
    assert _match(client, "orders") == {
        "subscriptions": [audit],
        "subscribers": ["audit"],
        "groups": [],
    }


def test_hash_policy_is_sticky_by_key_and_defaults_to_the_topic(client: TestClient) -> None:
    ids = [create(client, f"c{i}", "t.#", group="g", group_policy="hash")["id"] for i in range(4)]
    by_key = {k: _match(client, "t.x", key=k)["subscriptions"] for k in ("a", "b", "c", "order-9")}
    for key, chosen in by_key.items():
        assert len(chosen) == 1 and chosen[0] in ids
        for _ in range(3):
            assert _match(client, "t.y", key=key)["subscriptions"] == chosen  # sticky
        got = client.get("/v1/match", params={"topic": "t.z", "key": key}, headers=ADMIN_HEADERS)
        assert got.json()["subscriptions"] == chosen
    # Without a key, the topic is the key.
    assert _match(client, "t.q") == _match(client, "t.q", key="t.q")
    # A key given is bounded (tests/app/test_group_bounds.py: on every route, matched or not).
    refused = client.post(
        "/v1/match", json={"topic": "t.x", "key": "k" * 1025}, headers=ADMIN_HEADERS
    )
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "key_too_long"


def test_random_reaches_every_member(client: TestClient) -> None:
    ids = [create(client, f"r{i}", "r", group="rg")["id"] for i in range(3)]
    assert (
        client.get(f"/v1/subscriptions/{ids[0]}", headers=ADMIN_HEADERS).json()["group_policy"]
        == "random"
    )  # the default
    counts = Counter(_match(client, "r")["subscriptions"][0] for _ in range(300))
    assert set(counts) == set(ids) and all(60 <= n <= 140 for n in counts.values()), counts


def test_mqtt_share_filters_and_the_group_field_are_one_thing(client: TestClient) -> None:
    shared = create(client, "client-1", "$share/dash/sensors/+/temp", dialect="mqtt")
    assert (shared["pattern"], shared["group"]) == ("sensors/+/temp", "dash")
    same = create(client, "client-2", "sensors/+/temp", dialect="mqtt", group="dash")
    plain = create(client, "client-3", "sensors/#", dialect="mqtt")
    body = _match(client, "sensors/k/temp", dialect="mqtt")
    assert len(body["subscriptions"]) == 2 and plain["id"] in body["subscriptions"]
    assert body["groups"][0]["subscription"] in {shared["id"], same["id"]}
    # Repeating the $share filter is the same subscription.
    again = client.post(
        "/v1/subscriptions",
        json={"subscriber": "client-1", "pattern": "$share/dash/sensors/+/temp", "dialect": "mqtt"},
        headers=ADMIN_HEADERS,
    )
    assert again.status_code == 200 and again.json()["id"] == shared["id"]


@pytest.mark.parametrize(
    ("fields", "status", "code"),
    [
        ({"pattern": "$share/+/a", "dialect": "mqtt"}, 400, "invalid_group"),
        ({"pattern": "$share//a", "dialect": "mqtt"}, 400, "empty_group"),
        ({"pattern": "$share/g/", "dialect": "mqtt"}, 400, "invalid_shared_subscription"),
        ({"pattern": "$share/g", "dialect": "mqtt"}, 400, "invalid_shared_subscription"),
        ({"pattern": "$share/g/a/#/b", "dialect": "mqtt"}, 400, "invalid_wildcard"),
        ({"pattern": "$share/g/a", "dialect": "mqtt", "group": "h"}, 400, "group_mismatch"),
        ({"pattern": "a", "group": ""}, 400, "empty_group"),
        ({"pattern": "a", "group": "a b"}, 400, "invalid_group"),
        ({"pattern": "a", "group": "g" * 129}, 400, "group_too_long"),
        ({"pattern": "a", "group_policy": "hash"}, 400, "policy_without_group"),
        ({"pattern": "a", "group": "g", "group_policy": "sticky"}, 422, "invalid_request"),
    ],
)
def test_bad_groups_are_refused(
    client: TestClient, fields: dict[str, Any], status: int, code: str
) -> None:
    response = client.post(
        "/v1/subscriptions", json={"subscriber": "s", **fields}, headers=ADMIN_HEADERS
    )
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


def test_conflicts_are_refused_and_bulk_items_get_their_own_errors(client: TestClient) -> None:
    create(client, "a", "x.*", group="g", group_policy="hash")
    plain = create(client, "b", "x.*")
    conflict = client.post(
        "/v1/subscriptions",
        json={"subscriber": "c", "pattern": "x.*", "group": "g", "group_policy": "random"},
        headers=ADMIN_HEADERS,
    )
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "group_policy_conflict"
    moved = client.post(
        "/v1/subscriptions",
        json={"subscriber": "b", "pattern": "x.*", "group": "g"},
        headers=ADMIN_HEADERS,
    )
    assert moved.status_code == 409
    assert moved.json()["error"]["code"] == "subscription_in_other_group"
    bulk = client.post(
        "/v1/subscriptions/bulk",
        json={
            "items": [
                {"subscriber": "d", "pattern": "x.*", "group": "g"},  # inherits hash
                {"subscriber": "e", "pattern": "x.*", "group": "g", "group_policy": "random"},
                {"subscriber": "b", "pattern": "x.*", "group": "h"},  # b holds x.* ungrouped
                {
                    "subscriber": "f",
                    "pattern": "x.*",
                    "group": "new",
                    "group_policy": "round_robin",
                },
                {"subscriber": "g", "pattern": "x.*", "group": "new", "group_policy": "hash"},
                {"subscriber": "b", "pattern": "x.*"},  # exactly the stored one
            ]
        },
        headers=ADMIN_HEADERS,
    )
    assert bulk.status_code == 207
    results = bulk.json()["results"]
    assert [r["status"] for r in results] == [
        "created",
        "error",
        "error",
        "created",
        "error",
        "exists",
    ]
    assert [r["error"]["code"] for r in results if r["error"]] == [
        "group_policy_conflict",
        "subscription_in_other_group",
        "group_policy_conflict",
    ]
    assert results[5]["id"] == plain["id"]
    d = client.get(f"/v1/subscriptions/{results[0]['id']}", headers=ADMIN_HEADERS).json()
    assert (d["group"], d["group_policy"]) == ("g", "hash")
    # x.a: b (ungrouped) + one of g + one of new.
    body = _match(client, "x.a")
    assert [c["group"] for c in body["groups"]] == ["g", "new"]
    assert len(body["subscriptions"]) == 3 and plain["id"] in body["subscriptions"]


def test_batch_and_headers_matches(client: TestClient) -> None:
    ids = [create(client, f"q{i}", "job.#", group="q", group_policy="hash")["id"] for i in range(3)]
    lone = create(client, "lone", "job.x")["id"]
    response = client.post(
        "/v1/match/batch",
        json={"topics": ["job.x", "job.y", "job\x00", "none"], "keys": ["k1", "k1", "k", "k"]},
        headers=ADMIN_HEADERS,
    )
    results = response.json()["results"]
    first, second = results[0], results[1]
    assert lone in first["subscriptions"] and len(first["subscriptions"]) == 2
    assert second["groups"][0]["subscription"] == first["groups"][0]["subscription"]  # key k1
    assert first["groups"][0]["subscription"] in ids
    assert results[2]["error"]["code"] == "nul_byte"
    assert results[3] == {"subscriptions": [], "subscribers": [], "groups": []}
    mismatch = client.post(
        "/v1/match/batch", json={"topics": ["a", "b"], "keys": ["k"]}, headers=ADMIN_HEADERS
    )
    assert mismatch.status_code == 422 and mismatch.json()["error"]["code"] == "keys_mismatch"

    h = [
        client.post(
            "/v1/subscriptions",
            json={
                "subscriber": f"h{i}",
                "kind": "headers",
                "criteria": {"t": "x"},
                "mode": "all",
                "group": "hg",
            },
            headers=ADMIN_HEADERS,
        ).json()["id"]
        for i in range(2)
    ]
    got = client.post("/v1/match/headers", json={"headers": {"t": "x"}}, headers=ADMIN_HEADERS)
    assert len(got.json()["subscriptions"]) == 1 and got.json()["subscriptions"][0] in h


def test_tenants_have_their_own_groups(client: TestClient) -> None:
    mine = create(client, "w", "a", headers=A_HEADERS, group="g")["id"]
    create(client, "w", "a", group="g")  # the default tenant's group "g"
    body = client.post("/v1/match", json={"topic": "a"}, headers=A_HEADERS).json()
    assert body["subscriptions"] == [mine] and body["groups"][0]["candidates"] == 1


def test_removals_and_a_rebuilt_table_keep_the_groups(make_client: ClientFactory) -> None:
    client = make_client()
    ids = [
        create(client, f"w{i}", "a", group="g", group_policy="round_robin")["id"] for i in range(3)
    ]
    assert client.delete(f"/v1/subscriptions/{ids[0]}", headers=ADMIN_HEADERS).status_code == 204
    chosen = {_match(client, "a")["subscriptions"][0] for _ in range(4)}
    assert chosen == {ids[1], ids[2]}
    client.__exit__(None, None, None)
    restarted = make_client()  # builds the table from the store (Loader.build)
    body = _match(restarted, "a")
    assert body["groups"][0]["policy"] == "round_robin" and body["groups"][0]["candidates"] == 2
    for sub_id in ids[1:]:
        restarted.delete(f"/v1/subscriptions/{sub_id}", headers=ADMIN_HEADERS)
    assert _match(restarted, "a") == {"subscriptions": [], "subscribers": [], "groups": []}
    # The group is gone: a new member may set another policy.
    create(restarted, "z", "a", group="g", group_policy="hash")
