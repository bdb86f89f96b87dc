"""``Database.release_memory``: what the loader calls after a build to hand back the store
client's buffers; on DuckDB it must leave the memory limit as it found it and the store
fully usable, on PostgreSQL it does nothing."""

from __future__ import annotations

from datetime import UTC, datetime

from store import Database, NewSubscription, SubscriptionRepository


def _memory_limit(db: Database) -> str | None:
    if db.is_postgres:
        return None
    with db.engine.connect() as conn:
        return str(conn.exec_driver_sql("SELECT current_setting('memory_limit')").scalar_one())


def test_release_memory_keeps_the_store_usable(database: Database) -> None:
    db = database
    with db.write() as session:
        SubscriptionRepository(session).add_many(
            [NewSubscription("s", f"rel.{i}") for i in range(2_000)]
        )
    before = _memory_limit(db)
    with db.read() as session:
        assert len(SubscriptionRepository(session).columns(datetime.now(UTC))) == 2_000
    db.release_memory()
    assert _memory_limit(db) == before  # reset, not left at the low value
    with db.write() as session:
        SubscriptionRepository(session).add_many([NewSubscription("s", "rel.after")])
    with db.read() as session:
        assert len(SubscriptionRepository(session).columns(datetime.now(UTC))) == 2_001
