"""Live match statistics: what the service delivers is counted (single and batch matches,
a group's chosen member; not explains), flushed to the store, summed over replicas, kept
across restarts, and shown by get, list (``sort=matches``, ``unmatched_since``) and the
operator's ``/metrics``. Expected counts are written from the requests by hand."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from fastapi.testclient import TestClient

from harness.server import Server
from harness.services import reset_postgres
from store import Database
from tests.app.conftest import ADMIN_HEADERS, ClientFactory, ServerFactory
from tests.app.test_api_server import settings_for

#: How long a test waits for a periodic flush (at TOPICSTORE_STATS_FLUSH_INTERVAL=0.2).
FLUSH_BOUND_S = 20.0


def _deliver(http: TestClient | httpx.Client) -> None:
    """The deliveries every test makes: hot ``st.*`` 6, warm ``st.x`` 4, the group's two
    members (round robin) 2 each, cold none; explains count nothing."""
    for _ in range(2):
        assert http.post("/v1/match", json={"topic": "st.x"}, headers=ADMIN_HEADERS).is_success
        explain = http.get("/v1/match/explain", params={"topic": "st.x"}, headers=ADMIN_HEADERS)
        assert explain.status_code == 200, explain.text
    assert http.get("/v1/match", params={"topic": "st.y"}, headers=ADMIN_HEADERS).is_success
    batch = http.post(
        "/v1/match/batch", json={"topics": ["st.x", "st.z", "st.\0", "st.x"]}, headers=ADMIN_HEADERS
    )
    assert batch.status_code == 200, batch.text
    for _ in range(4):
        chosen = http.post("/v1/match", json={"topic": "grp.a"}, headers=ADMIN_HEADERS)
        assert len(chosen.json()["subscriptions"]) == 1, chosen.text


def _subscriptions(http: TestClient | httpx.Client) -> dict[str, int]:
    """hot, warm, cold and the group's members m1, m2: their ids by name."""
    made = {
        "hot": {"pattern": "st.*"},
        "warm": {"pattern": "st.x"},
        "cold": {"pattern": "cold.#"},
        "m1": {"pattern": "grp.*", "group": "g", "group_policy": "round_robin"},
        "m2": {"pattern": "grp.*", "group": "g"},
    }
    ids = {}
    for name, fields in made.items():
        body = {"subscriber": name, **fields}
        response = http.post("/v1/subscriptions", json=body, headers=ADMIN_HEADERS)
        assert response.status_code == 201, response.text
        ids[name] = int(response.json()["id"])
    return ids


EXPECTED = {"hot": 6, "warm": 4, "cold": 0, "m1": 2, "m2": 2}


def _get(http: TestClient | httpx.Client, sub_id: int) -> dict[str, Any]:
    response = http.get(f"/v1/subscriptions/{sub_id}", headers=ADMIN_HEADERS)
    assert response.status_code == 200, response.text
    row: dict[str, Any] = response.json()
    return row


def _list(http: TestClient | httpx.Client, **query: Any) -> dict[str, Any]:
    response = http.get("/v1/subscriptions", params=query, headers=ADMIN_HEADERS)
    assert response.status_code == 200, response.text
    page: dict[str, Any] = response.json()
    return page


def test_deliveries_are_counted_sorted_and_filtered(make_client: ClientFactory) -> None:
    client = make_client(stats_top=2)
    ids = _subscriptions(client)
    started = datetime.now(UTC).replace(microsecond=0)  # the store keeps seconds
    _deliver(client)
    ended = datetime.now(UTC)
    stats = client.app.state.services.stats  # type: ignore[attr-defined]
    assert _get(client, ids["hot"])["matches"] == 0  # counted in memory, not flushed yet
    assert stats.flush() == 4  # hot, warm, m1, m2
    for name, sub_id in ids.items():
        row = _get(client, sub_id)
        assert row["matches"] == EXPECTED[name], name
        if EXPECTED[name]:
            last = datetime.fromisoformat(row["last_matched_at"])
            assert started <= last <= ended, (name, last)
        else:
            assert row["last_matched_at"] is None

    # Most matched first, ties by id, paged by (matches, id).
    first = _list(client, sort="matches", limit=2)
    assert [r["id"] for r in first["items"]] == [ids["hot"], ids["warm"]]
    assert (first["next_after"], first["next_after_matches"]) == (ids["warm"], 4)
    second = _list(client, sort="matches", limit=2, after=ids["warm"], after_matches=4)
    assert [r["id"] for r in second["items"]] == [ids["m1"], ids["m2"]]
    third = _list(client, sort="matches", limit=2, after=ids["m2"], after_matches=2)
    assert [r["id"] for r in third["items"]] == [ids["cold"]]
    assert third["next_after"] is None and third["next_after_matches"] is None
    by_id = _list(client)
    assert [r["id"] for r in by_id["items"]] == sorted(ids.values())
    assert by_id["next_after_matches"] is None

    quiet = _list(client, unmatched_since=started.isoformat())
    assert [r["id"] for r in quiet["items"]] == [ids["cold"]]
    later = (ended + timedelta(hours=1)).isoformat()
    assert len(_list(client, unmatched_since=later)["items"]) == 5

    # The operator's /metrics: the top two by count, nobody else's.
    metrics = client.get("/metrics", headers=ADMIN_HEADERS).text
    series = re.findall(r"^topicstore_subscription_matches\{(.*)\} (\S+)$", metrics, re.M)
    assert series == [
        (f'id="{ids["hot"]}",subscriber="hot",tenant="default"', "6.0"),
        (f'id="{ids["warm"]}",subscriber="warm",tenant="default"', "4.0"),
    ]
    assert "topicstore_subscription_matches{" not in client.get("/metrics").text
    assert re.search(r"^topicstore_stats_flushes_total 1\.0$", metrics, re.M), metrics


def test_listing_refuses_an_incomplete_cursor_and_a_search_by_matches(
    client: TestClient,
) -> None:
    for query, code in [
        ({"sort": "matches", "after": 3}, "incomplete_cursor"),
        ({"after_matches": 3}, "incomplete_cursor"),
        ({"sort": "matches", "overlaps": "a.#"}, "conflicting_filters"),
    ]:
        response = client.get("/v1/subscriptions", params=query, headers=ADMIN_HEADERS)
        assert response.status_code == 422, (query, response.text)
        assert response.json()["error"]["code"] == code, query
    bad = client.get("/v1/subscriptions", params={"sort": "hot"}, headers=ADMIN_HEADERS)
    assert bad.status_code == 422, bad.text


def test_a_removed_subscription_takes_its_counts_along(make_client: ClientFactory) -> None:
    client = make_client()
    ids = _subscriptions(client)
    _deliver(client)
    services = client.app.state.services  # type: ignore[attr-defined]
    services.stats.flush()
    _deliver(client)  # counted, then the subscription goes before the flush
    assert client.delete(f"/v1/subscriptions/{ids['hot']}", headers=ADMIN_HEADERS).is_success
    services.stats.flush()
    db: Database = services.db
    with db.engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT subscription_id, matches FROM subscription_stats")
        stored: dict[int, int] = dict(rows.all())
    assert ids["hot"] not in stored
    assert stored[ids["warm"]] == 2 * EXPECTED["warm"]


def _wait_for(server: Server, sub_id: int, matches: int) -> None:
    deadline = time.monotonic() + FLUSH_BOUND_S
    with server.client(ADMIN_HEADERS) as http:
        while _get(http, sub_id)["matches"] != matches:
            assert time.monotonic() < deadline, f"{sub_id} never showed {matches} matches"
            time.sleep(0.05)


def test_counts_add_up_over_two_replicas_and_survive_their_restart(
    serve: ServerFactory, postgres_url: str
) -> None:
    """A flushes every 0.2 s; B would flush every 240 s, so its counts reach the store
    only by the flush of its graceful stop (SIGTERM). Both restarted, the counts are the
    sum of what each delivered."""
    reset_postgres(postgres_url)
    a = serve(**settings_for(postgres_url, stats_flush_interval="0.2"))
    b = serve(**settings_for(postgres_url, stats_flush_interval="240"))
    a.wait_until("/readyz", 200), b.wait_until("/readyz", 200)
    with a.client(ADMIN_HEADERS) as http:
        ids = _subscriptions(http)
    b_ready = time.monotonic() + FLUSH_BOUND_S
    with b.client(ADMIN_HEADERS) as http:
        while http.post("/v1/match", json={"topic": "cold.x"}).json()["subscriptions"] == []:
            assert time.monotonic() < b_ready, "B never saw the subscriptions"
            time.sleep(0.05)
    for server in (a, b):
        with server.client(ADMIN_HEADERS) as http:
            _deliver(http)
    # B's one match of cold.x above is a delivery too.
    expected = {**{name: 2 * n for name, n in EXPECTED.items()}, "cold": 1}
    _wait_for(a, ids["hot"], EXPECTED["hot"])  # A's share, by its periodic flush
    for server in (a, b):
        assert server.stop() in (0, -15), server.tail()
    # Both stopped; one started again reads the sum (a second would read the same rows).
    again = serve(**settings_for(postgres_url))
    again.wait_until("/readyz", 200)
    with again.client(ADMIN_HEADERS) as http:
        got = {name: _get(http, sub_id)["matches"] for name, sub_id in ids.items()}
    assert got == expected


def test_the_embedded_store_keeps_what_was_counted_before_a_stop(
    serve: ServerFactory, tmp_path: Any
) -> None:
    """DuckDB: the stop's flush binds its arrays with pandas kept out of the process, and
    the counts are in the file afterwards."""
    url = f"duckdb:///{tmp_path / 'stats.duckdb'}"
    server = serve(**settings_for(url, stats_flush_interval="240"))
    server.wait_until("/readyz", 200)
    with server.client(ADMIN_HEADERS) as http:
        ids = _subscriptions(http)
        _deliver(http)
    assert server.stop() in (0, -15), server.tail()
    db = Database(url)
    try:
        with db.engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT subscription_id, matches FROM subscription_stats")
            stored: dict[int, int] = dict(rows.all())
    finally:
        db.dispose()
    assert stored == {ids[name]: n for name, n in EXPECTED.items() if n}
