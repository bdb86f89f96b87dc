"""Two real ``topicstore serve`` replicas (uvicorn, each its own process, loader and LISTEN
listener) on one PostgreSQL, as ``docker-compose.yml`` runs them: a write through either is
matchable on the other within the propagation bound, and a replica killed with SIGKILL in
the middle of writes loses nothing it acknowledged: the survivor matches every acknowledged
write, and the killed replica, started again, does too."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import httpx

from harness.server import Server
from tests.app.conftest import ADMIN_HEADERS, ServerFactory, kill_mid_writes
from tests.app.test_api_server import settings_for
from tests.services import reset_postgres

#: How long a change committed through one replica may take to be matchable on another
#: (LISTEN/NOTIFY wakes the listener at once; polling every 0.1 s is the fallback).
PROPAGATION_BOUND_S = 5.0


def _match(server: Server, topic: str) -> list[int]:
    response = httpx.post(
        server.url + "/v1/match", json={"topic": topic}, headers=ADMIN_HEADERS, timeout=30
    )
    assert response.status_code == 200, response.text
    ids: list[int] = response.json()["subscriptions"]
    return ids


def _matches(server: Server, topic: str, expected: list[int]) -> bool:
    return _match(server, topic) == expected


def _within_bound(check: Callable[[], bool], what: str) -> float:
    """Seconds until ``check()`` holds; fails past ``PROPAGATION_BOUND_S``."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < PROPAGATION_BOUND_S, what
        time.sleep(0.01)
    return time.monotonic() - start


def _create(server: Server, pattern: str) -> int:
    response = httpx.post(
        server.url + "/v1/subscriptions",
        json={"subscriber": "r", "pattern": pattern},
        headers=ADMIN_HEADERS,
        timeout=30,
    )
    assert response.status_code == 201, response.text
    sub_id: int = response.json()["id"]
    return sub_id


def test_writes_on_one_replica_match_on_the_other(serve: ServerFactory, postgres_url: str) -> None:
    reset_postgres(postgres_url)
    a, b = serve(**settings_for(postgres_url)), serve(**settings_for(postgres_url))
    a.wait_until("/readyz", 200), b.wait_until("/readyz", 200)

    for i, (writer, reader) in enumerate([(a, b), (b, a)] * 5):
        sub_id = _create(writer, f"both.{i}.*")
        assert _match(writer, f"both.{i}.x") == [sub_id]  # read-your-write on the writer
        _within_bound(partial(_matches, reader, f"both.{i}.x", [sub_id]), f"add {i}")

    doomed = _create(a, "gone.#")
    _within_bound(lambda: _match(b, "gone.now") == [doomed], "add before delete")
    deleted = httpx.delete(f"{a.url}/v1/subscriptions/{doomed}", headers=ADMIN_HEADERS)
    assert deleted.status_code == 204, deleted.text
    assert _match(a, "gone.now") == []
    _within_bound(lambda: _match(b, "gone.now") == [], "delete")
    ready_a, ready_b = httpx.get(a.url + "/readyz").json(), httpx.get(b.url + "/readyz").json()
    assert ready_a["subscriptions"] == ready_b["subscriptions"] == 10


def test_a_replica_killed_mid_writes_loses_nothing(serve: ServerFactory, postgres_url: str) -> None:
    reset_postgres(postgres_url)
    a, b = serve(**settings_for(postgres_url)), serve(**settings_for(postgres_url))
    a.wait_until("/readyz", 200), b.wait_until("/readyz", 200)
    acknowledged = kill_mid_writes(a, enough=80)
    assert len(acknowledged) >= 80

    attempted = max(i for i, _ in acknowledged) + 2  # one more may have been in flight
    topics = [f"kill.{i}" for i in range(attempted)]

    def matched_on(server: Server) -> list[list[int]]:
        response = httpx.post(
            server.url + "/v1/match/batch", json={"topics": topics}, headers=ADMIN_HEADERS
        )
        assert response.status_code == 200, response.text
        return [result["subscriptions"] for result in response.json()["results"]]

    def survivor_has_all() -> bool:
        on_b = matched_on(b)
        return all(on_b[i] == [sub_id] for i, sub_id in acknowledged)

    _within_bound(survivor_has_all, "the survivor matches every acknowledged write")
    again = serve(**settings_for(postgres_url))
    again.wait_until("/readyz", 200)
    on_b, on_again = matched_on(b), matched_on(again)
    assert on_again == on_b  # the restarted replica and the survivor agree, id for id
    unacknowledged = [ids for i, ids in enumerate(on_b) if i >= len(acknowledged)]
    assert sum(map(len, unacknowledged)) <= 1
