"""The loader against real databases: startup build, in-process and cross-replica changes,
out-of-order commits, a killed listener connection, restarts, reconciliation."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

import loader.loader as loader_module
from harness.scratch_db import libpq_dsn
from loader import Loader
from migrations.runner import upgrade
from store import Database, NewSubscription, SubscriptionRepository, validate
from store.selection import Selection
from tests.matcher.native_capacity import lower_capacity

Sub = NewSubscription


def _add(db: Database, *items: NewSubscription) -> list[int]:
    with db.write() as session:
        repo = SubscriptionRepository(session)
        return [repo.add(validate(item))[0].id for item in items]


def _remove(db: Database, sub_id: int) -> None:
    with db.write() as session:
        SubscriptionRepository(session).remove(sub_id)


def _store_ids(db: Database) -> dict[int, str]:
    with db.read() as session:
        return {c.subscription_id: c.pattern for c in SubscriptionRepository(session).stream_all()}


def _table_ids(loader: Loader) -> dict[int, str]:
    return {i: e.pattern for i, e in loader.table.snapshot().entries.items()}


def eventually(check: Callable[[], bool], timeout: float = 15.0) -> None:
    """Poll ``check`` until true; fails after ``timeout`` (a liveness bound, not a speed
    assertion)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail("condition not reached in time")
        time.sleep(0.02)


@pytest.fixture
def started() -> Iterator[Callable[[Database], Loader]]:
    loaders: list[Loader] = []

    def start(db: Database, **kwargs: object) -> Loader:
        loader = Loader(db, poll_interval=0.2, **kwargs)  # type: ignore[arg-type]
        loader.start()
        loaders.append(loader)
        return loader

    yield start
    for loader in loaders:
        loader.stop()


def test_startup_build_then_own_writes_apply_at_once(
    database: Database, started: Callable[[Database], Loader]
) -> None:
    ids = _add(
        database, Sub("q1", "stock.*.msft"), Sub("q2", "stock.#"), Sub("q3", "a/+", dialect="mqtt")
    )
    _add(database, Sub("q4", kind="headers", criteria=(("x", "1"),), mode="all"))
    loader = started(database)
    assert loader.ready.is_set()
    table = loader.table
    assert set(table.match("default", "amqp", "stock.nasdaq.msft")) == set(ids[:2])
    assert table.subscribers(table.match("default", "amqp", "stock.nasdaq.msft")) == ["q1", "q2"]
    assert set(table.match("default", "mqtt", "a/b")) == {ids[2]}
    assert len(table.match_headers("default", {"x": "1"})) == 1
    assert set(table.match("other-tenant", "amqp", "stock.x.msft")) == set()
    # Writes through this process are matched as soon as the write returns.
    new = _add(database, Sub("q5", "stock.nyse.*"))[0]
    assert new in loader.table.match("default", "amqp", "stock.nyse.ibm")
    _remove(database, ids[1])
    assert ids[1] not in loader.table.match("default", "amqp", "stock.nyse.ibm")
    assert loader.lag() == 0
    loader.table._check()
    assert _table_ids(loader) == _store_ids(database)


def test_replicas_converge_through_notifications(
    postgres_url: str, started: Callable[[Database], Loader]
) -> None:
    a, b = Database(postgres_url), Database(postgres_url)
    with a.engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE subscription, subscription_stats, change_log, tenant_usage"))
    replica_a, replica_b = started(a), started(b)
    new = _add(a, Sub("q", "orders.#"))[0]
    eventually(lambda: new in replica_b.table.match("default", "amqp", "orders.eu.1"))
    _remove(a, new)
    eventually(lambda: new not in replica_b.table.match("default", "amqp", "orders.eu.1"))
    assert _table_ids(replica_a) == _table_ids(replica_b) == _store_ids(a)
    a.dispose()
    b.dispose()


#: The mass removals: (what the heavy rows hold, the selection, rows per removal).
MASS_REMOVALS: dict[str, tuple[dict[str, Any], Selection, int | None]] = {
    "subscriber": ({}, Selection("default", "heavy"), None),
    "label, bounded": ({"labels": {"batch": "h"}}, Selection(label=("batch", "h")), 1_000),
    "tenant, bounded": ({"tenant": "acme"}, Selection("acme"), 2_000),
}


@pytest.mark.parametrize("removal", MASS_REMOVALS)
def test_a_mass_removal_is_read_by_its_writer_and_reaches_another_replica(
    database: Database, started: Callable[[Database], Loader], removal: str
) -> None:
    """One write removing thousands of subscriptions (a subscriber's, a label's, a
    tenant's; a bounded one repeated while it says ``more``; each several apply slices and
    read windows): the writing process's table holds none of them once the write returns
    (read-your-writes), the others stay, and on PostgreSQL another replica converges to
    the store."""
    fields, selection, limit = MASS_REMOVALS[removal]
    heavy = [Sub("heavy", f"h.{i}.*", **fields) for i in range(2_500)]
    with database.write() as session:
        SubscriptionRepository(session).add_many([validate(sub) for sub in heavy])
    kept = _add(database, Sub("light", "h.1.*"), Sub("light", "l.#"))
    other = Database(database.url) if database.is_postgres else None
    writer = started(database)
    follower = started(other) if other is not None else None
    before = writer.progress_beat
    removed: list[int] = []
    more = True
    while more:
        with database.write() as session:
            by_tenant, more = SubscriptionRepository(session).remove_selection(selection, limit)
        removed += by_tenant.get(heavy[0].tenant, [])
    assert len(removed) == 2_500
    assert sorted(_table_ids(writer)) == kept
    assert set(writer.table.match("default", "amqp", "h.1.x")) == {kept[0]}
    assert writer.table.subscribers(removed) == []
    assert before is not None and writer.progress_beat is not None
    assert writer.progress_beat > before
    writer.table._check()
    if follower is not None and other is not None:
        eventually(lambda: sorted(_table_ids(follower)) == kept)
        follower.table._check()
        follower.stop()
        other.dispose()


def test_catch_up_crosses_gaps_in_the_seqs_wider_than_a_window(
    database: Database, started: Callable[[Database], Loader], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The change log is read in windows of ``PAGE`` seqs; a write rolled back after drawing
    seqs leaves a gap wider than a window, and the changes past it are still applied (the
    newest seq says there is more), both a few and more than a window's worth."""
    monkeypatch.setattr(loader_module, "PAGE", 4)
    first = _add(database, Sub("q", "a.#"))
    loader = started(database)
    with pytest.raises(RuntimeError), database.sessions.begin() as session:
        repo = SubscriptionRepository(session)
        for i in range(11):  # draws 11 change seqs, then rolls back
            repo.add(validate(Sub("gone", f"gone.{i}")))
        raise RuntimeError("rolled back")
    later = _add(database, *(Sub("q", f"b.{i}") for i in range(9)))
    assert sorted(_table_ids(loader)) == sorted(first + later)
    assert loader.table.seq == _last_seq(database)
    loader.table._check()


def _last_seq(db: Database) -> int:
    with db.read() as session:
        return SubscriptionRepository(session).last_seq()


def test_writers_commit_in_sequence_order(postgres_url: str) -> None:
    """Sequence values can commit out of order; a reader of ``seq > last`` would then skip
    the slower one forever. First shown on raw connections, then shown impossible through
    ``Database.write()``, whose writers hold an advisory lock until they commit."""
    db = Database(postgres_url)
    with db.engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE subscription, subscription_stats, change_log, tenant_usage"))
    dsn = libpq_dsn(postgres_url)
    insert = (
        "INSERT INTO change_log (op, subscription_id, tenant, subscriber, pattern, dialect, kind)"
        " VALUES ('add', 0, 't', 's', 'p', 'amqp', 'topic') RETURNING seq"
    )
    with psycopg.connect(dsn) as slow, psycopg.connect(dsn, autocommit=True) as fast:
        first = slow.execute(insert).fetchone()
        second = fast.execute(insert).fetchone()
        assert first and second and first[0] < second[0]
        with db.read() as session:
            visible = [c.seq for c in SubscriptionRepository(session).changes_since(0)]
        assert visible == [second[0]]  # the smaller seq is not visible yet: the hazard
        slow.rollback()
    with db.engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE change_log"))

    in_first = threading.Event()
    release = threading.Event()
    second_done = threading.Event()

    def slow_writer() -> None:
        with db.write() as session:
            SubscriptionRepository(session).add(validate(Sub("slow", "a")))
            in_first.set()
            release.wait(10)

    def fast_writer() -> None:
        in_first.wait(10)
        _add(db, Sub("fast", "b"))
        second_done.set()

    threads = [threading.Thread(target=slow_writer), threading.Thread(target=fast_writer)]
    for t in threads:
        t.start()
    in_first.wait(10)
    # While the first writer is open, the second cannot commit: nothing to skip.
    assert not second_done.wait(0.5)
    with db.read() as session:
        assert SubscriptionRepository(session).changes_since(0) == []
    release.set()
    for t in threads:
        t.join(10)
    with db.read() as session:
        changes = SubscriptionRepository(session).changes_since(0)
    assert [c.subscriber for c in changes] == ["slow", "fast"]
    assert [c.seq for c in changes] == sorted(c.seq for c in changes)
    db.dispose()


def test_listener_reconnects_and_catches_up(
    postgres_url: str, started: Callable[[Database], Loader]
) -> None:
    local, remote = Database(postgres_url), Database(postgres_url)
    with local.engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE subscription, subscription_stats, change_log, tenant_usage"))
    loader = started(local)
    stop = threading.Event()
    written: list[int] = []

    def writer() -> None:  # another replica writing all along
        n = 0
        while not stop.is_set() and n < 300:
            written.append(_add(remote, Sub("w", f"k.{n}"))[0])
            n += 1

    thread = threading.Thread(target=writer)
    thread.start()
    for _ in range(3):
        eventually(lambda: loader.listener_pid is not None)
        pid = loader.listener_pid
        loader.listener_pid = None
        with remote.engine.begin() as conn:
            assert conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar()
        time.sleep(0.1)
    stop.set()
    thread.join(30)
    eventually(lambda: loader.listener_connects >= 4)
    eventually(lambda: _table_ids(loader) == _store_ids(remote))
    assert len(loader.table) == len(set(written))  # nothing lost, nothing doubled
    loader.table._check()
    local.dispose()
    remote.dispose()


def test_restart_while_writes_are_in_flight(
    database: Database, started: Callable[[Database], Loader]
) -> None:
    first = started(database)
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set() and n < 400:
            ids = _add(database, Sub("w", f"r.{n}"))
            if n % 3 == 0:
                _remove(database, ids[0])
            n += 1

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(0.2)
    first.stop()
    second = started(database)
    stop.set()
    thread.join(30)
    second.catch_up()
    assert _table_ids(second) == _store_ids(database)
    second.table._check()


def test_acknowledged_writes_survive_a_restart(tmp_path: Path) -> None:
    url = f"duckdb:///{tmp_path / 'restart.duckdb'}"
    db = Database(url)
    upgrade(db.url)
    ids = _add(db, *(Sub("q", f"t.{i}.#") for i in range(50)))
    db.dispose()  # the process goes away
    reopened = Database(url)
    loader = Loader(reopened)
    loader.start()
    assert set(loader.table.match("default", "amqp", "t.7.x")) == {ids[7]}
    assert len(loader.table) == 50
    loader.stop()
    reopened.dispose()


def test_reconcile_repairs_drift(database: Database, started: Callable[[Database], Loader]) -> None:
    ids = _add(database, Sub("q", "a.#"), Sub("q", "b.#"))
    loader = started(database)
    assert not loader.reconcile()
    # Drift: the live matcher loses a subscription behind the store's back.
    matchers = loader.table._topic[("default", "amqp")]
    for matcher in matchers.values():
        matcher.unsubscribe(ids[0])
    assert not loader.table.consistent()
    assert loader.reconcile()
    assert set(loader.table.match("default", "amqp", "a.1")) == {ids[0]}
    loader.table._check()
    assert not loader.reconcile()


def test_a_refused_subscription_goes_in_once_removals_make_room(
    database: Database, started: Callable[[Database], Loader]
) -> None:
    """A stored subscription the native engine refuses (its trie capacity lowered here):
    the loader keeps applying the changes after it, and reconciliation offers it again on
    every pass until removals make room."""
    first = _add(database, Sub("q", "a.#"))
    loader = started(database)
    # The root and 2 nodes a pattern: 3 fit.
    lower_capacity(loader.table._topic[("default", "amqp")]["native"], 7)
    ids = _add(database, Sub("q", "b.#"), Sub("q", "c.#"), Sub("q", "d.#"))
    later = _add(database, Sub("q", "e.#", tenant="other"))
    eventually(lambda: later[0] in _table_ids(loader))
    assert set(_table_ids(loader)) == {first[0], ids[0], ids[1], later[0]}
    assert loader.table.refused == 1 and not loader.table.match("default", "amqp", "d.x")
    assert loader.reconcile()  # offered again, refused again
    assert loader.table.refused == 2 and ids[2] not in _table_ids(loader)
    _remove(database, first[0])
    eventually(lambda: first[0] not in _table_ids(loader))
    assert loader.reconcile()
    assert _table_ids(loader) == _store_ids(database)
    assert list(loader.table.match("default", "amqp", "d.x")) == [ids[2]]
    loader.table._check()
    assert not loader.reconcile()


def test_reconcile_repairs_only_the_ranges_that_differ(
    database: Database, started: Callable[[Database], Loader]
) -> None:
    """Rows changed behind the change log's back (a restore, a manual fix): the per-range
    checksums differ, those ranges are read and repaired in place; an unchanged store is
    left alone."""
    ids = _add(database, Sub("q", "a.#"), Sub("q", "b.#"), Sub("r", "c.*"))
    loader = started(database)
    table = loader.table
    with database.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE subscription SET pattern = 'd.#' WHERE id = :i"), {"i": ids[1]}
        )
        conn.execute(
            sa.text("UPDATE subscription SET subscriber = 'z' WHERE id = :i"), {"i": ids[2]}
        )
        conn.execute(sa.text("DELETE FROM subscription WHERE id = :i"), {"i": ids[0]})
        conn.execute(
            sa.text(
                "INSERT INTO subscription (id, tenant, subscriber, pattern, dialect, kind) "
                "VALUES (:i, 'default', 'n', 'e.*', 'amqp', 'topic')"
            ),
            {"i": 200_000},
        )
    assert loader.reconcile()
    assert loader.table is table  # repaired in place, not rebuilt
    assert _table_ids(loader) == _store_ids(database)
    assert set(table.match("default", "amqp", "a.x")) == set()
    assert set(table.match("default", "amqp", "d.x")) == {ids[1]}
    assert table.subscribers(table.match("default", "amqp", "c.x")) == ["z"]
    assert table.subscribers(table.match("default", "amqp", "e.x")) == ["n"]
    table._check()
    assert not loader.reconcile()


def test_a_pass_in_slices_covers_every_range(
    database: Database, started: Callable[[Database], Loader]
) -> None:
    """The periodic loop checks a few ranges at a time: a slice repairs only its own
    ranges, and a pass's last slice is open-ended, so a stored row above the table's
    highest id is found too."""
    insert = sa.text(
        "INSERT INTO subscription (id, tenant, subscriber, pattern, dialect, kind) "
        "VALUES (:i, 'default', :s, :p, 'amqp', 'topic')"
    )
    ids = _add(database, Sub("q", "a.#"))
    with database.engine.begin() as conn:
        conn.execute(insert, {"i": 200_000, "s": "m", "p": "f.*"})  # range 3
    loader = started(database)
    first, last = loader.reconcile_slices()
    assert (first.start, first.stop, last.start, last.stop) == (0, 2, 2, sys.maxsize)
    assert not loader.reconcile(first) and not loader.reconcile(last)

    with database.engine.begin() as conn:  # behind the change log's back
        conn.execute(sa.text("DELETE FROM subscription WHERE id = :i"), {"i": ids[0]})
        conn.execute(insert, {"i": 900_000, "s": "o", "p": "g.*"})  # range 13
    table = loader.table
    assert loader.reconcile(first)
    assert set(table.match("default", "amqp", "a.x")) == set()
    assert set(table.match("default", "amqp", "g.x")) == set()  # not this slice's
    assert loader.reconcile(last)
    assert set(table.match("default", "amqp", "g.x")) == {900_000}
    assert _table_ids(loader) == _store_ids(database)
    table._check()
    assert not loader.reconcile()


def test_groups_survive_the_startup_build_and_drift_is_repaired(
    database: Database, started: Callable[[Database], Loader]
) -> None:
    """Shared subscriptions already stored when a replica starts: the columnar build reads
    their groups too (``SubscriptionRepository.members``), so a match delivers one member;
    a group index that drifts from the store (a group changed behind the change log's
    back) is found and replaced by reconciliation."""
    ids = _add(
        database,
        Sub("w1", "jobs.#", group="workers", group_policy="round_robin"),
        Sub("w2", "jobs.#", group="workers", group_policy="round_robin"),
        Sub("audit", "jobs.#"),
    )
    loader = started(database)
    table = loader.table
    expected = {
        ids[0]: (("default", "workers"), "round_robin"),
        ids[1]: (("default", "workers"), "round_robin"),
    }
    assert dict(table.groups.state()) == expected
    delivered = table.deliver("default", table.match("default", "amqp", "jobs.1"), "k")
    assert len(delivered.ids) == 2 and ids[2] in delivered.ids
    assert not loader.reconcile()

    with database.engine.begin() as conn:  # w2 leaves the group, outside the change log
        conn.execute(
            sa.text('UPDATE subscription SET "group" = NULL, group_policy = NULL WHERE id = :i'),
            {"i": ids[1]},
        )
    assert loader.reconcile()
    assert dict(loader.table.groups.state()) == {ids[0]: expected[ids[0]]}
    delivered = table.deliver("default", table.match("default", "amqp", "jobs.1"), "k")
    assert sorted(delivered.ids) == sorted(ids)
    assert not loader.reconcile()


def test_reconcile_completes_and_repairs_under_sustained_writes(
    database: Database, started: Callable[[Database], Loader]
) -> None:
    """A writer thread commits adds and removes without pause while reconciliation runs:
    every call completes a pass (it compares at one change-log position, so it needs no
    quiet moment) and repairs drift injected meanwhile, in the store behind the change
    log's back and in the engines, while the writer's own changes are left to the change
    log. Once the writer stops, the table equals the store."""
    ids = _add(database, Sub("q", "a.#"), Sub("q", "b.#"), Sub("q", "c.#"))
    loader = started(database)
    stop = threading.Event()
    written: list[int] = []
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            while not stop.is_set():
                sub_id = _add(database, Sub("w", f"churn.{len(written)}"))[0]
                if len(written) % 2:
                    _remove(database, sub_id)
                written.append(sub_id)
        except BaseException as e:
            failures.append(e)
            raise

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        eventually(lambda: len(written) >= 10)
        assert not loader.reconcile() and loader.reconcile_passes == 1
        with database.engine.begin() as conn:  # behind the change log's back
            conn.execute(
                sa.text("UPDATE subscription SET pattern = 'dd.#' WHERE id = :i"), {"i": ids[1]}
            )
        for matcher in loader.table._topic[("default", "amqp")].values():
            matcher.unsubscribe(ids[0])  # and in the engines
        assert loader.reconcile()
        # one subscription re-read and replaced, one (tenant, dialect)'s engines rebuilt
        assert loader.reconcile_passes == 2 and loader.reconcile_repairs == 2
        assert set(loader.table.match("default", "amqp", "a.x")) == {ids[0]}
        assert set(loader.table.match("default", "amqp", "dd.x")) == {ids[1]}
        assert not loader.table.match("default", "amqp", "b.x")
        for _ in range(3):
            assert not loader.reconcile()
        assert loader.reconcile_passes == 5
        eventually(lambda: len(written) >= 30)
    finally:
        stop.set()
        thread.join()
    assert not failures
    loader.catch_up()
    assert _table_ids(loader) == _store_ids(database)
    loader.table._check()


def _add_unannounced(db: Database, *items: NewSubscription) -> list[int]:
    """``_add`` without this process's after-commit hooks: as another replica's write,
    which this process's loader learns of from the change log only."""
    with db.sessions.begin() as session:
        repo = SubscriptionRepository(session)
        return [repo.add(validate(item))[0].id for item in items]


def test_reconcile_compares_a_table_behind_the_store_at_the_store_s_seq(
    database: Database, started: Callable[[Database], Loader]
) -> None:
    """Changes committed but not yet applied when the store's snapshot is read (another
    replica's, while this one's applier is busy): they are replayed on a copy of the
    catalog, so the comparison finds no drift and completes without waiting for the
    applier; drift found later is repaired once the table has caught up."""
    ids = _add(database, Sub("q", "a.#"), Sub("q", "b.#"))
    loader = started(database)
    outcome: list[bool] = []
    every_range = range(0, sys.maxsize)  # the ranges, not the groups (see Loader.reconcile)
    check = threading.Thread(target=lambda: outcome.append(loader.reconcile(every_range)))
    with loader._catch_up_lock:  # an applier is busy: the table cannot move
        late = _add_unannounced(database, Sub("r", "e.#"), Sub("r", "f.#"))
        check.start()
        check.join(timeout=60)  # returns at once unless it waits for the lock (a failure)
        assert outcome == [False]
        assert late[0] not in _table_ids(loader)  # still behind
    check.join()
    with database.engine.begin() as conn:  # behind the change log's back
        conn.execute(sa.text("DELETE FROM subscription WHERE id = :i"), {"i": ids[1]})
    _add_unannounced(database, Sub("r", "g.#"))
    assert loader.reconcile() and loader.reconcile_repairs == 1
    assert _table_ids(loader) == _store_ids(database)
    assert set(loader.table.match("default", "amqp", "e.x")) == {late[0]}
    assert not loader.table.match("default", "amqp", "b.x")
    loader.table._check()
    assert not loader.reconcile() and loader.reconcile_passes == 2
