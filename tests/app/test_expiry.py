"""Subscriptions that end by themselves (``expires_at``, or a ``ttl`` at create).

On two real replicas (uvicorn, PostgreSQL) that do not sweep: a subscription expiring in
2 s is in every answer completed before its instant and in none asked after it, single and
batch, probed every 50 ms on both; a sweep then deletes it from the store with one audit
row, and both replicas drop it. On both
backends: a restart neither loads nor matches an expired row, and the next sweep deletes
it; an expiry is extended or cleared in one call; a key whose row expired is created anew;
bad expiries are refused with their own codes; the CLI takes and shows expiries."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.operations import AdminOperations
from harness.server import Server
from harness.services import reset_postgres
from store import Database
from tests.app.conftest import ADMIN_HEADERS, ServerFactory, create, make_settings, match_ids
from tests.app.test_api_server import settings_for
from tests.app.test_cli_errors import run_cli

#: Probes per second on each replica, and how long around the instant they run.
PROBE_EVERY_S = 0.05
#: Probes each replica must have answered before the instant (from when it first saw the
#: subscription: the other replica hears of it through the change log) and sent after it.
BEFORE, AFTER = 5, 10
#: How long a sweep may take to delete an expired row (it runs at the instant, then at
#: least every interval).
SWEEP_BOUND_S = 5.0


def _instant(row: dict[str, Any]) -> float:
    return datetime.fromisoformat(row["expires_at"]).timestamp()


def _probe(
    server: Server, stop: threading.Event, seen: list[tuple[float, float, bool, bool]]
) -> None:
    """Until ``stop``: every ``PROBE_EVERY_S`` a single and a batch match of ``exp.now``,
    recorded as (sent, answered, in the single answer, in the batch answer) of id 2."""
    with httpx.Client(base_url=server.url, headers=ADMIN_HEADERS, timeout=10) as client:
        while not stop.is_set():
            sent = time.time()
            single = client.post("/v1/match", json={"topic": "exp.now"})
            batch = client.post("/v1/match/batch", json={"topics": ["exp.now", "other"]})
            answered = time.time()
            assert single.status_code == 200 and batch.status_code == 200, single.text
            in_batch = 2 in batch.json()["results"][0]["subscriptions"]
            seen.append((sent, answered, 2 in single.json()["subscriptions"], in_batch))
            stop.wait(PROBE_EVERY_S)


def test_an_expiring_subscription_matches_before_its_instant_and_never_after_on_two_replicas(
    serve: ServerFactory, postgres_url: str
) -> None:
    reset_postgres(postgres_url)
    # No sweep while probing: what keeps the answers exact is each replica's own filter.
    settings = settings_for(postgres_url, expiry_sweep_interval="0")
    with ThreadPoolExecutor(2) as starting:  # both start at once: half the wait
        a, b = starting.map(lambda _: serve(**settings), range(2))
    a.wait_until("/readyz", 200), b.wait_until("/readyz", 200)
    with httpx.Client(base_url=a.url, headers=ADMIN_HEADERS) as client:
        kept = client.post("/v1/subscriptions", json={"subscriber": "k", "pattern": "exp.#"})
        made = client.post(
            "/v1/subscriptions", json={"subscriber": "e", "pattern": "exp.*", "ttl": 2}
        )
    assert kept.status_code == made.status_code == 201, made.text
    assert made.json()["id"] == 2
    instant = _instant(made.json())
    assert 1.0 < instant - time.time() <= 2.0
    seen: dict[str, list[tuple[float, float, bool, bool]]] = {"a": [], "b": []}
    stop = threading.Event()
    probes = [
        threading.Thread(target=_probe, args=(server, stop, seen[name]))
        for name, server in (("a", a), ("b", b))
    ]
    for probe in probes:
        probe.start()
    # Until each replica has answered AFTER probes sent after the instant (a loaded
    # machine answers fewer per second), within a bound.
    deadline = instant + 10.0
    while time.time() < deadline and any(
        sum(p[0] >= instant for p in list(probes_of)) < AFTER for probes_of in seen.values()
    ):
        time.sleep(0.1)
    stop.set()
    for probe in probes:
        probe.join()
    for name, probes_of in seen.items():
        # b heard of the create through the change log: probes from once it had.
        first = next(i for i, (_, _, single, _) in enumerate(probes_of) if single)
        before = [p for p in probes_of[first:] if p[1] < instant]
        after = [p for p in probes_of if p[0] >= instant]
        assert len(before) >= BEFORE and len(after) >= AFTER, (name, len(before), len(after))
        assert all(single and batch for _, _, single, batch in before), name
        assert not any(single or batch for _, _, single, batch in after), name
    # The sweep (as a replica's sweeping thread runs it: ``test_a_restart...`` runs the
    # thread itself) deletes it and audits it; the replicas apply its remove.
    db = Database(postgres_url)
    sweep = AdminOperations(db, make_settings(postgres_url)).sweep_expired
    assert sweep(1_000) == {"default": [2]}
    assert sweep(1_000) == {}  # again, or on another replica: nothing
    db.dispose()
    with httpx.Client(base_url=b.url, headers=ADMIN_HEADERS) as client:
        audit = client.get("/v1/audit", params={"action": "expire"}).json()["items"]
        assert [(e["ids"], e["caller_name"], e["tenant"]) for e in audit] == [
            ([2], "expiry", "default")
        ]
        assert client.get("/v1/subscriptions/2").status_code == 404
        assert client.get("/v1/subscriptions-count").json()["total"] == 1
    for server in (a, b):
        check = partial(_held, server, 1)
        deadline = time.monotonic() + SWEEP_BOUND_S
        while not check():
            assert time.monotonic() < deadline, "the sweep's remove did not arrive"
            time.sleep(0.05)


def _held(server: Server, count: int) -> bool:
    """Whether ``server``'s routing table holds ``count`` subscriptions."""
    ready = httpx.get(server.url + "/readyz", headers=ADMIN_HEADERS).json()
    return bool(ready["subscriptions"] == count)


def _app(url: str, **settings: Any) -> TestClient:
    app = create_app(make_settings(url, **settings), wait_until_ready=True)
    return TestClient(app)


def test_a_restart_neither_loads_nor_matches_an_expired_row_and_the_next_sweep_deletes_it(
    store_url: str,
) -> None:
    store = store_url
    with _app(store, expiry_sweep_interval=0) as client:
        live = create(client, "k", "r.#")
        doomed = create(client, "e", "r.*", ttl=1)
        assert match_ids(client, "r.x") == [live["id"], doomed["id"]]
    time.sleep(max(0.0, _instant(doomed) - time.time()) + 0.05)
    with _app(store, expiry_sweep_interval=0) as client:
        assert match_ids(client, "r.x") == [live["id"]]
        assert client.get("/readyz").json()["subscriptions"] == 1
        # Stored until a sweep, and shown with its (past) expiry.
        stored = client.get(f"/v1/subscriptions/{doomed['id']}", headers=ADMIN_HEADERS).json()
        assert stored["expires_at"] == doomed["expires_at"]
    with _app(store, expiry_sweep_interval=60) as client:  # sweeps once it is ready
        deadline = time.monotonic() + SWEEP_BOUND_S
        while (
            client.get(f"/v1/subscriptions/{doomed['id']}", headers=ADMIN_HEADERS).status_code
            != 404
        ):
            assert time.monotonic() < deadline, "not swept"
            time.sleep(0.05)
        audit = client.get("/v1/audit", params={"action": "expire"}, headers=ADMIN_HEADERS)
        assert [e["ids"] for e in audit.json()["items"]] == [[doomed["id"]]]
        counts = client.get("/v1/subscriptions-count", headers=ADMIN_HEADERS).json()
        assert counts["total"] == 1
        assert match_ids(client, "r.x") == [live["id"]]
        assert "topicstore_expiry_swept_total 1.0" in client.get("/metrics").text


def test_an_expiry_is_extended_cleared_or_shortened_in_one_call(make_client: Any) -> None:
    client = make_client(expiry_sweep_interval=0)  # the expired row stays: see below
    kept = create(client, "a", "p.*", ttl=1)
    shortened = create(client, "b", "p.#")
    assert shortened["expires_at"] is None
    patch = client.patch(
        f"/v1/subscriptions/{kept['id']}", json={"expires_at": None}, headers=ADMIN_HEADERS
    )
    assert patch.status_code == 200 and patch.json()["expires_at"] is None, patch.text
    patch = client.patch(
        f"/v1/subscriptions/{shortened['id']}", json={"ttl": 1}, headers=ADMIN_HEADERS
    )
    assert patch.status_code == 200, patch.text
    instant = _instant(patch.json())
    assert match_ids(client, "p.x") == [kept["id"], shortened["id"]]
    time.sleep(max(0.0, max(instant, _instant(kept)) - time.time()) + 0.05)
    assert match_ids(client, "p.x") == [kept["id"]]
    # Expired: not extended (it stopped matching; create it again).
    late = client.patch(
        f"/v1/subscriptions/{shortened['id']}", json={"ttl": 60}, headers=ADMIN_HEADERS
    )
    assert late.status_code == 409, late.text
    assert late.json()["error"]["code"] == "subscription_expired"
    listed = client.get("/v1/subscriptions", headers=ADMIN_HEADERS).json()["items"]
    assert {r["id"]: r["expires_at"] for r in listed}[kept["id"]] is None
    audit = client.get("/v1/audit", params={"action": "update"}, headers=ADMIN_HEADERS)
    assert [e["ids"] for e in audit.json()["items"]] == [[kept["id"]], [shortened["id"]]]


def test_a_key_whose_row_expired_is_created_anew(make_client: Any) -> None:
    client = make_client(expiry_sweep_interval=0)
    old = create(client, "s", "k.*", ttl=1)
    time.sleep(max(0.0, _instant(old) - time.time()) + 0.05)
    again = client.post(
        "/v1/subscriptions", json={"subscriber": "s", "pattern": "k.*"}, headers=ADMIN_HEADERS
    )
    assert again.status_code == 201, again.text
    new = again.json()
    assert new["id"] != old["id"] and new["expires_at"] is None
    assert match_ids(client, "k.x") == [new["id"]]
    # A bulk create does the same for an expired row of its key.
    bulk_old = create(client, "s", "b.*", ttl=1)
    time.sleep(max(0.0, _instant(bulk_old) - time.time()) + 0.05)
    items = [
        {"subscriber": "s", "pattern": "b.*"},
        {"subscriber": "t", "pattern": "b.#", "ttl": 60},
    ]
    bulk = client.post("/v1/subscriptions/bulk", json={"items": items}, headers=ADMIN_HEADERS)
    assert bulk.status_code == 200, bulk.text
    assert [r["status"] for r in bulk.json()["results"]] == ["created", "created"]
    assert bulk_old["id"] not in match_ids(client, "b.x")
    audit = client.get("/v1/audit", params={"action": "expire"}, headers=ADMIN_HEADERS)
    assert [e["ids"] for e in audit.json()["items"]] == [[old["id"]], [bulk_old["id"]]]
    counts = client.get("/v1/subscriptions-count", headers=ADMIN_HEADERS).json()
    assert counts["total"] == 3


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"expires_at": "2001-01-01T00:00:00Z"}, "expiry_in_past"),
        ({"expires_at": "2990-01-01T00:00:00Z"}, "expiry_too_far"),
        ({"expires_at": "2990-01-01T00:00:00Z", "ttl": 5}, "expiry_conflict"),
        ({"ttl": 0}, "invalid_request"),
        ({"ttl": True}, "invalid_request"),  # the schema's integer: not a bool read as 1
        ({"ttl": "60"}, "invalid_request"),
        ({"ttl": 1.5}, "invalid_request"),
        ({"ttl": 315_619_201}, "invalid_request"),
        ({"expires_at": "2030-01-01T00:00:00"}, "invalid_request"),  # no offset
        ({"expires_at": 1893456000}, "invalid_request"),  # a number is not a time
    ],
)
def test_a_bad_expiry_is_refused_with_its_code(
    client: TestClient, fields: dict[str, Any], code: str
) -> None:
    body = {"subscriber": "s", "pattern": "a.b", **fields}
    response = client.post("/v1/subscriptions", json=body, headers=ADMIN_HEADERS)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == code
    bulk = client.post("/v1/subscriptions/bulk", json={"items": [body]}, headers=ADMIN_HEADERS)
    assert bulk.status_code == 207
    assert bulk.json()["results"][0]["error"]["code"] == code
    row = create(client, "s", "ok.b")
    patch = client.patch(f"/v1/subscriptions/{row['id']}", json=fields, headers=ADMIN_HEADERS)
    assert patch.status_code == 422 and patch.json()["error"]["code"] == code


def test_an_update_names_what_it_sets(client: TestClient) -> None:
    row = create(client, "s", "a.b")
    empty = client.patch(f"/v1/subscriptions/{row['id']}", json={}, headers=ADMIN_HEADERS)
    assert empty.status_code == 422 and empty.json()["error"]["code"] == "expiry_missing"
    absent = client.patch("/v1/subscriptions/999", json={"ttl": 5}, headers=ADMIN_HEADERS)
    assert absent.status_code == 404
    later = datetime.now(UTC) + timedelta(days=1)
    set_at = client.patch(
        f"/v1/subscriptions/{row['id']}",
        json={"expires_at": later.isoformat()},
        headers=ADMIN_HEADERS,
    )
    assert set_at.status_code == 200
    assert datetime.fromisoformat(set_at.json()["expires_at"]) == later


def test_the_command_line_takes_and_shows_expiries(tmp_path: Path) -> None:
    added = run_cli(tmp_path, "sub", "add", "s", "c.*", "--expires-in", "2h", "--json")
    assert added.returncode == 0, added.stderr
    row = json.loads(added.stdout)
    ahead = datetime.fromisoformat(row["expires_at"]) - datetime.now(UTC)
    assert timedelta(hours=1, minutes=59) < ahead <= timedelta(hours=2)
    listed = run_cli(tmp_path, "sub", "ls")
    assert "EXPIRES" in listed.stdout.splitlines()[0] and row["expires_at"] in listed.stdout
    cleared = run_cli(tmp_path, "sub", "expire", str(row["id"]), "--never")
    assert cleared.returncode == 0 and "expires never" in cleared.stdout, cleared.stderr
    at = run_cli(tmp_path, "sub", "expire", str(row["id"]), "--at", "2001-01-01T00:00:00Z")
    assert at.returncode != 0 and "expiry_in_past" in at.stderr
    both = run_cli(tmp_path, "sub", "expire", str(row["id"]), "--in", "5", "--never")
    assert both.returncode == 2 and "expiry_options" in both.stderr
    (tmp_path / "subs.csv").write_text(
        "subscriber,pattern,dialect,tenant,group,group_policy,expires_at\n"
        "i,c.i,,,,,2990-01-01T00:00:00Z\n"
        f"j,c.j,,,,,{(datetime.now(UTC) + timedelta(days=3)).isoformat()}\n",
        encoding="utf-8",
    )
    imported = run_cli(tmp_path, "sub", "import", "subs.csv")
    assert imported.returncode == 1
    assert "created 1" in imported.stdout and "line 2: expiry_too_far" in imported.stdout
    rows = json.loads(run_cli(tmp_path, "sub", "ls", "--json").stdout)
    assert {r["subscriber"]: r["expires_at"] is not None for r in rows} == {"s": False, "j": True}
