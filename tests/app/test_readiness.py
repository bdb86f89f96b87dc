"""``/readyz`` with a bound, on a real uvicorn and PostgreSQL: it stays 200 under steady
writes from another writer (a change in flight is not "behind"; reconciliation completes
its passes meanwhile, counted in ``/metrics``), and turns 503 when the
replica really falls behind (its change listener cut off from the store), then 200 again;
a replica working through a long backlog stays ready, one that stops making progress or is
far behind does not. Per-tenant counts show only to the operator."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import make_url

from harness.scratch_db import libpq_dsn, scratch_database
from harness.server import Server, running_server
from harness.services import POSTGRES_ADMIN_URL, fresh_postgres_database
from loader import Loader
from loader.readiness import BACKLOG_GRACE, probe
from migrations.runner import upgrade
from store import Database, NewSubscription, SubscriptionRepository
from tests.app.conftest import A_HEADERS, ADMIN_HEADERS
from tests.app.test_api_server import settings_for

WRITES_PER_S = 25
#: Writes at most WRITES_PER_S (4 s on a quiet machine); counted, not timed, so a loaded
#: machine that writes slower still makes every write (CI once managed 35 in 4 s).
WRITES = 100


def _write(db: Database, pattern: str, tenant: str = "default") -> None:
    with db.write() as session:
        SubscriptionRepository(session).add_many([NewSubscription("w", pattern, tenant=tenant)])


@pytest.fixture
def own_database() -> Iterator[str]:
    """A database of this test's own (the second test takes it away from the server)."""
    with fresh_postgres_database() as url:
        db = Database(url)
        upgrade(db.url)
        db.dispose()
        yield url


def test_readyz_does_not_flap_under_steady_writes(tmp_path: Path, own_database: str) -> None:
    database = own_database
    db = Database(database)
    settings = settings_for(database, reconcile_interval="0.5")
    with running_server(tmp_path, settings) as server:
        server.wait_until("/readyz", 200)
        done = threading.Event()
        written: list[int] = []

        def writer() -> None:
            try:
                started = time.monotonic()
                for i in range(WRITES):
                    _write(db, f"steady.{i}", tenant="acme" if i % 2 else "default")
                    written.append(i)
                    time.sleep(max(0.0, started + (i + 1) / WRITES_PER_S - time.monotonic()))
            finally:
                done.set()

        thread = threading.Thread(target=writer)
        answers: list[tuple[int, dict[str, object]]] = []
        with httpx.Client(base_url=server.url, timeout=10) as client:
            thread.start()
            while not done.is_set():
                response = client.get("/readyz")
                answers.append((response.status_code, response.json()))
            thread.join()
            final = client.get("/readyz").json()
            operator = client.get("/readyz", headers=ADMIN_HEADERS).json()
            tenant = client.get("/readyz", headers=A_HEADERS).json()
            unknown = client.get("/readyz", headers={"Authorization": "Bearer " + "x" * 20})
            scraped = {
                who: client.get("/metrics", headers=headers).text
                for who, headers in (
                    ("anyone", {}),
                    ("tenant", A_HEADERS),
                    ("operator", ADMIN_HEADERS),
                )
            }
    db.dispose()

    statuses = [status for status, _ in answers]
    behind = sum(1 for _, body in answers if body["lag"])
    print(f"{len(answers)} probes, {len(written)} writes, {behind} probes saw lag > 0")
    assert len(written) == WRITES
    assert len(answers) >= 100
    assert statuses.count(503) == 0, [body for status, body in answers if status == 503][:3]
    # Per-tenant counts: the operator only.
    assert "tenants" not in final and "tenants" not in tenant
    assert operator["tenants"] == {
        "acme": len(written) // 2,
        "default": len(written) - len(written) // 2,
    }
    assert unknown.status_code == 401 and unknown.json()["error"]["code"] == "unauthorized"
    series = (
        f'topicstore_tenant_subscriptions{{dialect="amqp",tenant="acme"}} {len(written) // 2}.0'
    )
    assert series in scraped["operator"]
    assert "topicstore_tenant_subscriptions" not in scraped["anyone"] + scraped["tenant"]
    assert f"topicstore_subscriptions {len(written)}.0" in scraped["anyone"]
    # Reconciliation completes its passes under the writes (it needs no quiet moment).
    passes = re.search(r"^topicstore_reconcile_passes_total (\S+)$", scraped["anyone"], re.M)
    assert passes is not None and float(passes[1]) >= 1, scraped["anyone"]
    assert "topicstore_reconcile_repairs_total 0.0" in scraped["anyone"]


def _listener_backend(admin: psycopg.Connection[tuple[object, ...]], name: str) -> int | None:
    row = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND query LIKE 'LISTEN %%'",
        (name,),
    ).fetchone()
    return None if row is None else int(str(row[0]))


def _poll(server: Server, status: int, timeout_s: float) -> tuple[float, dict[str, object]]:
    started = time.monotonic()
    while True:
        response = httpx.get(server.url + "/readyz", timeout=10)
        if response.status_code == status:
            return time.monotonic() - started, response.json()
        assert time.monotonic() - started < timeout_s, response.text
        time.sleep(0.05)


def test_readyz_is_503_once_the_listener_falls_behind_the_bound(tmp_path: Path) -> None:
    bound_s = 1.0
    with scratch_database(POSTGRES_ADMIN_URL, prefix="topicstore_test_ready") as url:
        name = make_url(url).database
        assert name is not None
        db = Database(url)
        upgrade(db.url)
        _write(db, "before")  # the test's own connection stays open in its pool
        settings = settings_for(url, ready_max_lag_seconds=str(bound_s))
        with (
            running_server(tmp_path, settings) as server,
            psycopg.connect(libpq_dsn(POSTGRES_ADMIN_URL), autocommit=True) as admin,
        ):
            assert server.wait_until("/readyz", 200).json()["seq"] == 1
            allow = sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}")
            admin.execute(allow.format(sql.Identifier(name), sql.SQL("false")))
            try:
                # Cut the listener off: it cannot reconnect while the database refuses.
                pid = _listener_backend(admin, name)
                assert pid is not None
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                _write(db, "while.stalled")
                waited, body = _poll(server, 503, timeout_s=10)
                assert body["reason"] in {"listener_stalled", "behind"}, body
                assert body["seq"] == 1
                print(f"503 after {waited:.2f} s (bound {bound_s} s): {body}")
            finally:
                admin.execute(allow.format(sql.Identifier(name), sql.SQL("true")))
            waited, body = _poll(server, 200, timeout_s=15)
            assert body["seq"] == 2 and body["lag"] == 0
            print(f"200 again {waited:.2f} s after the database took connections again")
        db.dispose()


def _slow_write(db: Database, pattern: str, seconds: float) -> None:
    """A write whose transaction lasts ``seconds``: its change is that old when it commits
    (a change's age counts from its transaction's start)."""
    with db.write() as session:
        session.execute(sa.text("SELECT pg_sleep(:s)"), {"s": seconds})
        SubscriptionRepository(session).add_many([NewSubscription("w", pattern)])


def test_a_replica_making_progress_on_a_backlog_stays_ready(own_database: str) -> None:
    """The rules of ``loader.readiness`` on a live loader: holding the catch-up lock plays
    an applier in the middle of a long backlog (the listener waits for it meanwhile)."""
    bound_s = 0.2
    db, writer = Database(own_database), Database(own_database)  # another replica writes
    loader = Loader(db, poll_interval=0.5)
    loader.start()
    try:
        with loader._catch_up_lock:
            _slow_write(writer, "backlog.old", 2 * bound_s)  # older than the bound at once
            loader.listener_beat = time.monotonic() - 2 * bound_s  # waiting for the applier
            loader.progress_beat = time.monotonic()  # ... which just applied a slice
            verdict = probe(loader, bound_s)
            assert verdict.ready and verdict.lag == 1 and verdict.lag_seconds, verdict
            assert verdict.lag_seconds > bound_s, verdict

            loader.progress_beat = time.monotonic() - 2 * bound_s  # no slice for too long
            verdict = probe(loader, bound_s)
            assert (verdict.ready, verdict.reason) == (False, "listener_stalled"), verdict

            _slow_write(writer, "backlog.older", (BACKLOG_GRACE + 1) * bound_s)
            loader.progress_beat = time.monotonic()  # progressing, but far behind
            verdict = probe(loader, bound_s)
            assert (verdict.ready, verdict.reason) == (False, "behind"), verdict
        loader.catch_up()  # what the waiting listener does once the lock is free
        loader.listener_beat = time.monotonic()
        verdict = probe(loader, bound_s)
        assert verdict.ready and verdict.lag == 0 and len(loader.table) == 2, verdict

        # Not applying: a listener that stopped beating is stalled, whatever the last
        # slice was.
        loader.stop()
        loader.listener_beat = time.monotonic() - 2 * bound_s
        loader.progress_beat = time.monotonic()
        verdict = probe(loader, bound_s)
        assert (verdict.ready, verdict.reason) == (False, "listener_stalled"), verdict
    finally:
        loader.stop()
        db.dispose()
        writer.dispose()
