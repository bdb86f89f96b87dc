"""Two real ``topicstore serve`` replicas (uvicorn, each its own process, loader and LISTEN
listener) on one PostgreSQL, as ``docker-compose.yml`` runs them: a write through either is
matchable on the other within the propagation bound, and a replica killed with SIGKILL in
the middle of writes loses nothing it acknowledged: the survivor matches every acknowledged
write, and the killed replica, started again, does too."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial

import httpx

from harness.server import Server
from harness.services import reset_postgres
from store import Database, SubscriptionRepository
from tests.app.conftest import ADMIN_HEADERS, ServerFactory, kill_mid_writes
from tests.app.test_api_server import settings_for

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
    settings = settings_for(postgres_url, max_delete="2")
    a, b = serve(**settings), serve(**settings)
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

    # A selection's removal through B, bounded (max_delete 2): A follows each request.
    items = [{"subscriber": f"s{i}", "pattern": "sel.#", "labels": {"k": "v"}} for i in range(3)]
    bulk = httpx.post(
        f"{a.url}/v1/subscriptions/bulk", json={"items": items}, headers=ADMIN_HEADERS
    )
    selected = [r["id"] for r in bulk.json()["results"]]
    _within_bound(lambda: _match(b, "sel.x") == selected, "add before the selection's delete")
    removed: list[int] = []
    for more in (True, False):
        answer = httpx.delete(f"{b.url}/v1/subscriptions?label=k=v", headers=ADMIN_HEADERS)
        assert answer.status_code == 200 and answer.json()["more"] is more, answer.text
        removed += answer.json()["deleted"]
    assert removed == selected and _match(b, "sel.x") == []
    _within_bound(lambda: _match(a, "sel.x") == [], "the selection's delete")
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


def _writers(jobs: list[Callable[[], None]]) -> None:
    """Run ``jobs`` at once, one thread each; re-raise the first failure."""
    failures: list[BaseException] = []

    def run(job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as e:  # reported below, in the test's thread
            failures.append(e)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures


def test_concurrent_writers_on_two_replicas_converge(
    serve: ServerFactory, postgres_url: str
) -> None:
    """Eight writers, four through each replica, create and delete at once, so both
    replicas' writes share transactions (group commit) and interleave in the change log.
    Each replica applies the log in its order and ends equal to the store, id for id."""
    reset_postgres(postgres_url)
    a, b = serve(**settings_for(postgres_url)), serve(**settings_for(postgres_url))
    a.wait_until("/readyz", 200), b.wait_until("/readyz", 200)
    kept: dict[str, int] = {}

    def churn(server: Server, writer: int) -> Callable[[], None]:
        def job() -> None:
            with server.client(ADMIN_HEADERS) as client:
                for i in range(25):
                    body = {"subscriber": f"w{writer}", "pattern": f"conv.{writer}.{i}"}
                    created = client.post("/v1/subscriptions", json=body)
                    assert created.status_code == 201, created.text
                    if i % 3:  # two in three go again, one stays
                        gone = client.delete(f"/v1/subscriptions/{created.json()['id']}")
                        assert gone.status_code == 204, gone.text
                    else:
                        kept[f"conv.{writer}.{i}"] = created.json()["id"]

        return job

    _writers([churn(a if w % 2 else b, w) for w in range(8)])
    topics = [f"conv.{w}.{i}" for w in range(8) for i in range(25)]
    expected = [[kept[t]] if t in kept else [] for t in topics]

    def matched_on(server: Server) -> list[list[int]]:
        response = httpx.post(
            server.url + "/v1/match/batch", json={"topics": topics}, headers=ADMIN_HEADERS
        )
        assert response.status_code == 200, response.text
        return [result["subscriptions"] for result in response.json()["results"]]

    def converged(server: Server) -> bool:
        return matched_on(server) == expected

    for server in (a, b):
        _within_bound(partial(converged, server), f"converged on {server.url}")
        assert httpx.get(server.url + "/readyz").json()["subscriptions"] == len(kept)
    db = Database(postgres_url)
    with db.read() as session:
        changes = SubscriptionRepository(session).changes_since(0, 10_000)
        assert SubscriptionRepository(session).usage("default") == len(kept)
    db.dispose()
    assert [c.seq for c in changes] == sorted(c.seq for c in changes)
    ops: dict[int, list[str]] = {}
    for change in changes:
        ops.setdefault(change.subscription_id, []).append(change.op)
    assert all(o in (["add"], ["add", "remove"]) for o in ops.values())  # add, then remove


def test_the_quota_is_exact_under_concurrent_writers_on_two_replicas(
    serve: ServerFactory, postgres_url: str
) -> None:
    """Eighty distinct creates at once through two replicas for a tenant whose quota is 40:
    exactly 40 are stored, the other 40 refused, never one over."""
    reset_postgres(postgres_url)
    quota = 40
    a = serve(**settings_for(postgres_url, tenant_quota=str(quota)))
    b = serve(**settings_for(postgres_url, tenant_quota=str(quota)))
    a.wait_until("/readyz", 200), b.wait_until("/readyz", 200)
    statuses: list[int] = []

    def create(server: Server, writer: int) -> Callable[[], None]:
        def job() -> None:
            with server.client(ADMIN_HEADERS) as client:
                for i in range(10):
                    body = {"subscriber": f"q{writer}", "pattern": f"quota.{writer}.{i}"}
                    response = client.post("/v1/subscriptions", json=body)
                    statuses.append(response.status_code)
                    if response.status_code == 403:
                        assert response.json()["error"]["code"] == "quota_exceeded"

        return job

    _writers([create(a if w % 2 else b, w) for w in range(8)])
    assert sorted(statuses) == [201] * quota + [403] * quota
    db = Database(postgres_url)
    with db.read() as session:
        repo = SubscriptionRepository(session)
        assert sum(repo.count("default").values()) == repo.usage("default") == quota
    db.dispose()


def test_a_replica_killed_mid_group_loses_nothing_it_acknowledged(
    serve: ServerFactory, postgres_url: str
) -> None:
    """Eight writers at once (so writes share transactions) through one replica, killed
    with SIGKILL while they write: every acknowledged write is in the store and matches on
    the other replica."""
    reset_postgres(postgres_url)
    a, b = serve(**settings_for(postgres_url)), serve(**settings_for(postgres_url))
    a.wait_until("/readyz", 200), b.wait_until("/readyz", 200)
    acknowledged: dict[str, int] = {}
    enough = threading.Event()

    def write(writer: int) -> Callable[[], None]:
        def job() -> None:
            with a.client(ADMIN_HEADERS) as client:
                for i in range(10_000):
                    pattern = f"group.{writer}.{i}"
                    try:
                        response = client.post(
                            "/v1/subscriptions", json={"subscriber": "g", "pattern": pattern}
                        )
                    except httpx.TransportError:
                        return
                    if response.status_code != 201:
                        return
                    acknowledged[pattern] = response.json()["id"]
                    if len(acknowledged) >= 160:
                        enough.set()

        return job

    def killer() -> None:
        assert enough.wait(timeout=120), a.output()
        a.stop(kill=True)

    _writers([*(write(w) for w in range(8)), killer])
    topics = sorted(acknowledged)

    def survivor_has_all() -> bool:
        response = httpx.post(
            b.url + "/v1/match/batch", json={"topics": topics}, headers=ADMIN_HEADERS
        )
        results = [r["subscriptions"] for r in response.json()["results"]]
        return results == [[acknowledged[t]] for t in topics]

    _within_bound(survivor_has_all, "the survivor matches every acknowledged write")
