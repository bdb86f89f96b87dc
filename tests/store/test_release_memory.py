"""``Database.release_memory``: what the loader calls after a build to hand back the store
client's buffers; on DuckDB it must leave the memory limit as it found it and the store
fully usable, on PostgreSQL it does nothing."""

from __future__ import annotations

from datetime import UTC, datetime

from store import Database, NewSubscription, SubscriptionRepository

_UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def _memory_limit(db: Database) -> float | None:
    """DuckDB's memory limit in bytes, as it shows it (to one decimal of its unit)."""
    if db.is_postgres:
        return None
    with db.engine.connect() as conn:
        shown = str(conn.exec_driver_sql("SELECT current_setting('memory_limit')").scalar_one())
    number, unit = shown.split()
    return float(number) * _UNITS[unit]


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
    after = _memory_limit(db)
    # set back (to within the shown decimal), not left at the low value
    if before is None or after is None:
        assert before is after  # PostgreSQL: no limit of ours
    else:
        assert abs(after - before) <= before / 100
    with db.write() as session:
        SubscriptionRepository(session).add_many([NewSubscription("s", "rel.after")])
    with db.read() as session:
        assert len(SubscriptionRepository(session).columns(datetime.now(UTC))) == 2_001
