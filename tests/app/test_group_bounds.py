"""What a group's choice may cost a request, over a real server on both backends: a big
``hash`` group answers a batch with one member per topic, spread over the members, and the
batch bound counts the candidates the choices examined; a request's ``key`` is bounded
whether or not a group matches, on every route that takes one."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.app.conftest import A_HEADERS, ADMIN, TENANTS, ServerFactory

#: Counted per topic into one hash group: the chosen id plus the ring's 21 probes.
HASH_TOPIC_COUNT = 22


def _settings(store_url: str, **more: str) -> dict[str, str]:
    return {
        "database_url": store_url,
        "admin_token": ADMIN,
        "tenant_tokens": json.dumps(TENANTS),
        "poll_interval": "0.1",
        **more,
    }


def _code(response: httpx.Response) -> tuple[int, str]:
    body: dict[str, Any] = response.json()
    return response.status_code, body.get("error", {}).get("code", "")


def test_a_big_hash_group_answers_a_batch_and_its_choices_count(
    serve: ServerFactory, store_url: str
) -> None:
    members = 5_000
    server = serve(**_settings(store_url, max_batch_matches=str(900 * HASH_TOPIC_COUNT)))
    server.wait_until("/readyz", 200)
    with server.client(A_HEADERS, timeout_s=120) as http:
        items = [
            {"subscriber": f"w{i}", "pattern": "hot.#", "group": "g", "group_policy": "hash"}
            for i in range(members)
        ]
        created = http.post("/v1/subscriptions/bulk", json={"items": items})
        assert created.status_code == 200 and created.json()["created"] == members
        ids = {r["id"] for r in created.json()["results"]}

        topics = ["hot.x"] * 900
        keys = [f"order-{i}" for i in range(900)]
        answer = http.post("/v1/match/batch", json={"topics": topics, "keys": keys})
        assert answer.status_code == 200, answer.text
        chosen = []
        for result in answer.json()["results"]:
            (member,) = result["subscriptions"]
            (group,) = result["groups"]
            assert group["candidates"] == members and group["subscription"] == member
            chosen.append(member)
        assert set(chosen) <= ids and len(set(chosen)) > 800  # 900 keys over 5,000 members
        # Sticky: the same keys choose the same members again, one by one too.
        again = http.post("/v1/match/batch", json={"topics": topics[:50], "keys": keys[:50]})
        assert [r["subscriptions"][0] for r in again.json()["results"]] == chosen[:50]
        single = http.post("/v1/match", json={"topic": "hot.y", "key": keys[7]})
        assert single.json()["subscriptions"] == [chosen[7]]

        # 1,000 topics into the group count 22,000 (900 x 22 is the bound): refused, though
        # the answer would hold only 1,000 ids.
        refused = http.post(
            "/v1/match/batch", json={"topics": ["hot.x"] * 1_000, "keys": ["k"] * 1_000}
        )
        assert _code(refused) == (413, "batch_answer_too_large")
        # Ungrouped matches count one each: 1,000 of them fit.
        http.post("/v1/subscriptions", json={"subscriber": "audit", "pattern": "cold"})
        plain = http.post("/v1/match/batch", json={"topics": ["cold"] * 1_000})
        assert plain.status_code == 200


def test_a_key_is_bounded_whether_or_not_a_group_matches(
    serve: ServerFactory, store_url: str
) -> None:
    server = serve(**_settings(store_url))
    server.wait_until("/readyz", 200)
    long_key = "k" * 1_025
    with server.client(A_HEADERS) as http:
        for grouped in (False, True):
            if grouped:  # a group now, that the topic still does not reach
                http.post(
                    "/v1/subscriptions", json={"subscriber": "w", "pattern": "a", "group": "g"}
                )
            assert _code(http.post("/v1/match", json={"topic": "nomatch", "key": long_key})) == (
                400,
                "key_too_long",
            )
            got = http.get("/v1/match", params={"topic": "nomatch", "key": long_key})
            assert _code(got) == (400, "key_too_long")
            headers = http.post("/v1/match/headers", json={"headers": {}, "key": long_key})
            assert _code(headers) == (400, "key_too_long")
            batch = http.post(
                "/v1/match/batch", json={"topics": ["a", "nomatch"], "keys": ["k", long_key]}
            )
            assert _code(batch) == (400, "key_too_long")
            assert "keys[1]" in batch.json()["error"]["message"]
            nul = http.post("/v1/match", json={"topic": "nomatch", "key": "k\u0000"})
            assert _code(nul) == (400, "nul_byte")
            # At the bound: served.
            fits = http.post("/v1/match", json={"topic": "a", "key": "k" * 1_024})
            assert fits.status_code == 200
            assert len(fits.json()["subscriptions"]) == int(grouped)
