"""One alembic history on both backends: up, down, up again, and no drift from the models."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.script import ScriptDirectory

from harness.fresh import fresh_interpreter
from harness.services import fresh_postgres_database
from migrations.runner import HEAD, alembic_config, downgrade, recorded_revisions, upgrade
from store import Database
from store.models import Base

TABLES = {"subscription", "change_log", "audit_log", "tenant_usage", "subscription_stats"}


def _tables(db: Database) -> set[str]:
    return set(sa.inspect(db.engine).get_table_names()) - {"alembic_version"}


def _columns(db: Database, table: str) -> dict[str, bool]:
    query = sa.text(
        "SELECT column_name, is_nullable FROM information_schema.columns "
        "WHERE table_name = :t AND table_schema IN ('public', 'main')"
    )
    with db.engine.connect() as conn:
        return {name: nullable == "YES" for name, nullable in conn.execute(query, {"t": table})}


@pytest.fixture(params=["postgres", "duckdb"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "duckdb":
        db = Database(f"duckdb:///{tmp_path / 'm.duckdb'}")
        yield db
        db.dispose()
        return
    with fresh_postgres_database() as url:
        db = Database(url)
        yield db
        db.dispose()


def test_upgrade_downgrade_upgrade(empty_database: Database) -> None:
    db = empty_database
    upgrade(db.url)
    assert _tables(db) == TABLES
    # The schema the migrations build is the schema the models describe.
    for table in Base.metadata.sorted_tables:
        expected = {c.name: bool(c.nullable) for c in table.columns}
        assert _columns(db, table.name) == expected, table.name
    upgrade(db.url)  # idempotent
    downgrade(db.url, "base")
    assert _tables(db) == set()
    upgrade(db.url)
    assert _tables(db) == TABLES


def test_alembic_check_finds_no_drift_on_postgres() -> None:
    # DuckDB's reflection is too thin for autogenerate (verified): the column check above
    # covers it; PostgreSQL gets alembic's own comparison.
    with fresh_postgres_database() as url:
        db = Database(url)
        upgrade(db.url)
        command.check(alembic_config(url))  # raises on any difference
        db.dispose()


def test_a_second_process_cannot_open_the_duckdb_file(tmp_path: Path) -> None:
    url = f"duckdb:///{tmp_path / 'owned.duckdb'}"
    owner = Database(url)
    upgrade(owner.url)
    script = (
        "import sys\n"
        "from store import Database, DatabaseLockedError\n"
        "try:\n"
        f"    Database({url!r})\n"
        "except DatabaseLockedError as e:\n"
        "    print(e.code); sys.exit(3)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.strip() == "database_locked"
    owner.dispose()


def test_a_duckdb_file_killed_right_after_migrating_still_opens(tmp_path: Path) -> None:
    """DuckDB cannot replay 0003's ADD COLUMN from its write-ahead log (the id column
    defaults to nextval): ``upgrade`` checkpoints, so a process that dies right after
    migrating (no clean close, no checkpoint of DuckDB's own) leaves a file that opens
    (without the checkpoint this file failed to open: "Failure while replaying WAL")."""
    url = f"duckdb:///{tmp_path / 'killed.duckdb'}"
    script = (
        "import os\n"
        "from migrations.runner import upgrade\n"
        "from store import Database\n"
        f"db = Database({url!r})\n"  # holds the file open, as the service does
        "upgrade(db.url)\n"
        "with db.engine.begin() as c:\n"
        '    c.exec_driver_sql("INSERT INTO subscription (tenant, subscriber, pattern, dialect, '
        "\\\"group\\\", group_policy) VALUES ('t', 's', 'a', 'amqp', 'g', 'hash')\")\n"
        "os._exit(0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    db = Database(url)
    with db.engine.connect() as conn:
        rows = conn.exec_driver_sql('SELECT "group", group_policy FROM subscription').all()
    assert [tuple(r) for r in rows] == [("g", "hash")]
    db.dispose()


def test_0003_groups_keeps_existing_rows_both_ways(empty_database: Database) -> None:
    """Rows stored before shared subscriptions existed are ungrouped after upgrading, and
    survive a downgrade to 0002_audit (the columns go, the rows stay)."""
    db = empty_database
    upgrade(db.url, "0002_audit")
    insert = (
        "INSERT INTO subscription (tenant, subscriber, pattern, dialect) "
        "VALUES ('t', 's', 'a.#', 'amqp')"
    )
    with db.engine.begin() as conn:
        conn.exec_driver_sql(insert)
    upgrade(db.url, "0003_groups")
    with db.engine.connect() as conn:
        rows = conn.exec_driver_sql('SELECT pattern, "group", group_policy FROM subscription')
        assert [tuple(r) for r in rows] == [("a.#", None, None)]
    downgrade(db.url, "0002_audit")
    assert "group" not in _columns(db, "subscription")
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT pattern FROM subscription").scalars().all() == ["a.#"]
    upgrade(db.url)


def test_head_is_the_history_head() -> None:
    """``upgrade`` skips a store that records ``HEAD``: it must name the newest revision
    (add a migration, move ``HEAD`` with it)."""
    script = ScriptDirectory.from_config(alembic_config("duckdb:///:memory:"))
    assert script.get_heads() == [HEAD]


def test_a_store_at_head_is_checked_without_alembic(tmp_path: Path) -> None:
    """A service's start checks the store without importing alembic once it is at head; a
    store one revision behind is still migrated (the check reads ``alembic_version``)."""
    url = f"duckdb:///{tmp_path / 'at-head.duckdb'}"
    upgrade(url, "0002_audit")
    script = (
        "import sys\n"
        "from migrations.runner import recorded_revisions, upgrade\n"
        f"upgrade({url!r})\n"
        f"print('alembic' in sys.modules, sorted(recorded_revisions({url!r})))\n"
    )

    assert fresh_interpreter(script, cwd=tmp_path) == [f"True ['{HEAD}']"]  # behind: migrated
    assert fresh_interpreter(script, cwd=tmp_path) == [f"False ['{HEAD}']"]  # at head: no alembic
    assert recorded_revisions(url) == {HEAD}


def test_0004_tenant_usage_counts_the_rows_already_stored(empty_database: Database) -> None:
    """The quota reads ``tenant_usage``: upgrading a store with rows fills it with each
    tenant's count (a tenant with none has no row: it holds 0)."""
    db = empty_database
    upgrade(db.url, "0003_groups")
    with db.engine.begin() as conn:
        for tenant, n in (("a", 3), ("b", 1)):
            for i in range(n):
                conn.exec_driver_sql(
                    "INSERT INTO subscription (tenant, subscriber, pattern, dialect) "
                    f"VALUES ('{tenant}', 's', 'p.{i}', 'amqp')"
                )
    upgrade(db.url)
    with db.engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT tenant, subscriptions FROM tenant_usage")
        assert sorted(tuple(r) for r in rows) == [("a", 3), ("b", 1)]
    downgrade(db.url, "0003_groups")
    assert "tenant_usage" not in _tables(db)


def _subscription_indexes(db: Database) -> dict[str, str]:
    """The subscription table's indexes (no constraint's): name -> definition."""
    if db.is_postgres:
        query = "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'subscription'"
    else:
        query = "SELECT index_name, sql FROM duckdb_indexes() WHERE table_name = 'subscription'"
    with db.engine.connect() as conn:
        found = {str(name): str(sql) for name, sql in conn.exec_driver_sql(query)}
    return {name: sql for name, sql in found.items() if name.startswith(("ix_", "uq_"))}


def test_0008_indexes_hold_only_what_reads_use(empty_database: Database) -> None:
    """Every write pays for each index: at 0008 PostgreSQL's unique key leads with the
    subscriber and its group and expiry indexes hold only rows that have a group or an
    expiry, and DuckDB (whose planner scans through no index on two columns) has neither
    composite index; the downgrade restores 0007's."""
    db = empty_database
    upgrade(db.url)
    indexes = _subscription_indexes(db)
    if db.is_postgres:
        key = "uq_subscription_subscriber_pattern_tenant_dialect"
        assert set(indexes) == {
            key,
            "ix_subscription_tenant_id",
            "ix_subscription_tenant_group",
            "ix_subscription_expires_at",
        }
        assert "(subscriber, pattern, tenant, dialect)" in indexes[key]
        assert 'WHERE ("group" IS NOT NULL)' in indexes["ix_subscription_tenant_group"]
        assert "WHERE (expires_at IS NOT NULL)" in indexes["ix_subscription_expires_at"]
        assert "WHERE" not in indexes["ix_subscription_tenant_id"]
    else:
        assert set(indexes) == {"ix_subscription_expires_at", "ix_subscription_pattern"}
    downgrade(db.url, "0007_duckdb_pattern_index")
    before = _subscription_indexes(db)
    assert {"ix_subscription_tenant_id", "ix_subscription_tenant_group"} <= set(before)
    if db.is_postgres:
        assert "uq_subscription_tenant_subscriber_dialect_pattern" in before
    assert not any("WHERE" in sql for sql in before.values())
