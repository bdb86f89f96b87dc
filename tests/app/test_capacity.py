"""An engine's fixed capacity refuses admin writes before they are stored: the serving
process asks its routing table (``RoutingTable.check_room``) inside the write, so a full
engine answers 403 naming the capacity instead of storing a subscription it would not
serve. Only new rows count: retrying a write that was stored still answers as before."""

from __future__ import annotations

import time
from typing import Any

from fastapi.testclient import TestClient

from loader import RoutingTable
from matcher import Matcher
from tests.app.conftest import ADMIN_HEADERS, create
from tests.matcher.native_capacity import lower_capacity


def _native(table: RoutingTable) -> Matcher:
    deadline = time.monotonic() + 15  # a liveness bound: the write is applied at once
    while ("default", "amqp") not in table._topic:
        assert time.monotonic() < deadline, "the first write was never applied"
        time.sleep(0.01)
    return table._topic[("default", "amqp")]["native"]


def test_a_full_engine_refuses_new_subscriptions_with_403(client: TestClient) -> None:
    first = create(client, "q", "w0.#")
    table = client.app.state.services.loader.table  # type: ignore[attr-defined]
    # The root, w0 and its '#': 3 nodes; room for one more such pattern.
    lower_capacity(_native(table), 5)
    create(client, "q", "w1.#")

    def post(pattern: str) -> tuple[int, Any]:
        response = client.post(
            "/v1/subscriptions", json={"subscriber": "q", "pattern": pattern}, headers=ADMIN_HEADERS
        )
        return response.status_code, response.json()

    def bulk(*patterns: str) -> tuple[int, Any]:
        items = [{"subscriber": "q", "pattern": p} for p in patterns]
        response = client.post(
            "/v1/subscriptions/bulk", json={"items": items}, headers=ADMIN_HEADERS
        )
        return response.status_code, response.json()

    def stored() -> list[str]:
        page = client.get("/v1/subscriptions", headers=ADMIN_HEADERS).json()
        return sorted(item["pattern"] for item in page["items"])

    status, body = post("w2.#")
    assert status == 403 and body["error"]["code"] == "too_many_trie_nodes", body
    assert "trie nodes" in body["error"]["message"]
    status, body = bulk("w1.#", "w3.#")
    assert status == 403 and body["error"]["code"] == "too_many_trie_nodes", body
    assert stored() == ["w0.#", "w1.#"]
    assert post("w1.#")[0] == 200  # a retry of a stored write
    status, body = bulk("w0.#", "w1.#")
    assert status == 200 and [r["status"] for r in body["results"]] == ["exists", "exists"]
    # Room made by a removal, once applied: the refused write goes in.
    assert (
        client.delete(f"/v1/subscriptions/{first['id']}", headers=ADMIN_HEADERS).status_code == 204
    )
    deadline = time.monotonic() + 15
    while first["id"] in table.snapshot().entries:
        assert time.monotonic() < deadline, "the removal was never applied"
        time.sleep(0.01)
    assert post("w2.#")[0] == 201
    assert stored() == ["w1.#", "w2.#"]
