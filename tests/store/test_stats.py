"""The match statistics in the store on both backends: a flush adds deltas (repeated ids
summed, the later last time kept, removed subscriptions skipped), listings read them, and a
subscription's row goes with it (its removal deletes it: at the commit on PostgreSQL, at once
on DuckDB)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from harness.services import reset_postgres
from store import Database, NewSubscription, SubscriptionRepository
from store.selection import Selection
from store.stats import add_counts, most_matched

T0 = 1_790_000_000  # seconds since the Unix epoch


def _stats(db: Database) -> dict[int, tuple[int, datetime]]:
    with db.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT subscription_id, matches, last_matched_at FROM subscription_stats"
        )
        return {int(i): (int(m), last.astimezone(UTC)) for i, m, last in rows}


def _at(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def test_a_flush_adds_deltas_and_skips_removed_subscriptions(database: Database) -> None:
    db = database
    with db.write() as session:
        repo = SubscriptionRepository(session)
        added = repo.add_many([NewSubscription(f"s{i}", f"a.{i}") for i in range(4)])
    one, two, three, four = added.created["default"]
    postgres = db.is_postgres
    with db.aside() as session:
        # ``one`` twice in one flush (a process's map and arrays); 999 was never stored.
        add_counts(
            session, [one, two, one, 999], [3, 1, 2, 5], [T0, T0 + 5, T0 + 9, T0], postgres=postgres
        )
    with db.aside() as session:  # a second replica's deltas
        add_counts(session, [two, three], [4, 1], [T0 + 1, T0 + 2], postgres=postgres)
    assert _stats(db) == {one: (5, _at(T0 + 9)), two: (5, _at(T0 + 5)), three: (1, _at(T0 + 2))}

    with db.read() as session:
        repo = SubscriptionRepository(session)
        hot = most_matched(session, 2)
        assert [(h.id, h.subscriber, h.matches) for h in hot] == [(one, "s0", 5), (two, "s1", 5)]
        got = repo.get(one)
        assert got is not None and (got.matches, got.last_matched_at) == (5, _at(T0 + 9))
        never = repo.get(four)
        assert never is not None and (never.matches, never.last_matched_at) == (0, None)
        by_matches = repo.page(by_matches=True, limit=10)
        assert [r.id for r in by_matches] == [one, two, three, four]
        rest = repo.page(by_matches=True, after_id=two, after_matches=5, limit=10)
        assert [r.id for r in rest] == [three, four]
        quiet = repo.page(unmatched_since=_at(T0 + 5))
        assert [r.id for r in quiet] == [three, four]  # last before T0+5, or never

    # A removal takes its statistics with it, one by id and a subscriber's all at once.
    with db.write() as session:
        repo = SubscriptionRepository(session)
        assert repo.remove(one) is not None
        assert repo.remove_selection(Selection("default", "s1")) == ({"default": [two]}, False)
    assert _stats(db) == {three: (1, _at(T0 + 2))}
    with db.aside() as session:  # a replica still flushing counts of a removed one
        add_counts(session, [one, three], [1, 1], [T0, T0 + 3], postgres=postgres)
    assert _stats(db) == {three: (2, _at(T0 + 3))}


def test_statistics_take_no_writer_lock_on_postgres(postgres_url: str) -> None:
    """A flush is not an admin write: it neither waits for the writers' advisory lock
    nor writes the change log."""
    db = Database(postgres_url)
    try:
        with db.write() as session:
            sub = SubscriptionRepository(session).insert(NewSubscription("s", "lock.free"))
        seq = _last_seq(db)
        # The first holds the writers' lock until the flush in the second has committed.
        with db.write(), db.aside() as session:
            add_counts(session, [sub.id], [1], [T0], postgres=True)
        assert _stats(db)[sub.id] == (1, _at(T0))
        assert _last_seq(db) == seq
    finally:
        db.dispose()


def _last_seq(db: Database) -> int:
    with db.engine.connect() as conn:
        return int(
            conn.execute(sa.text("SELECT coalesce(max(seq), 0) FROM change_log")).scalar_one()
        )


@pytest.mark.parametrize("many", [False, True], ids=["one", "a subscriber's"])
def test_a_removal_waits_out_a_flush_that_holds_its_rows_on_postgres(
    postgres_url: str, many: bool
) -> None:
    """A flush that key-share locked a subscription and wrote its first statistics row
    before a removal of it: the removal waits for that flush to commit and then deletes the
    row too (its statistics go at its commit, in a statement that sees the flush's row),
    so no statistics row outlives its subscription (there is no foreign key to cascade)."""
    reset_postgres(postgres_url)
    db = Database(postgres_url)
    try:
        with db.write() as session:
            sub = SubscriptionRepository(session).insert(NewSubscription("racer", "race.#"))
        flushing = db.sessions()
        flushing.begin()
        add_counts(flushing, [sub.id], [1], [T0], postgres=True)  # not committed yet

        def remove() -> list[int]:
            with db.write() as session:
                repo = SubscriptionRepository(session)
                if many:
                    removed, _ = repo.remove_selection(Selection("default", "racer"))
                    return removed.get("default", [])
                return [] if repo.remove(sub.id) is None else [sub.id]

        with ThreadPoolExecutor(1) as pool:
            removed = pool.submit(remove)
            with pytest.raises(FutureTimeoutError):
                removed.result(timeout=0.5)  # held by the flush's lock
            flushing.commit()
            flushing.close()
            assert removed.result(timeout=30) == [sub.id]
        assert _stats(db) == {}
    finally:
        db.dispose()
