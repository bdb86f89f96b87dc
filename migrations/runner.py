"""Running the packaged alembic history against a database URL.

This lives beside the history, not in ``store``: the history's ``env.py`` imports
``store.models``, so the store running alembic would make the two packages import each other.

Alembic is imported only when a migration runs: every ``topicstore serve`` checks the store
at startup, and importing alembic (with mako and pygments) to learn that the store is
already at head cost about a tenth of a second of a service's start (``HEAD``).
"""

from __future__ import annotations

from importlib.resources import as_file, files
from typing import TYPE_CHECKING, Final

import sqlalchemy as sa

if TYPE_CHECKING:
    from alembic.config import Config

#: The newest revision of the history in ``versions/`` (tests/store/test_migrations.py
#: keeps it equal to alembic's own head): a store that records it needs no migration.
HEAD: Final = "0009_stats_without_cascade"


def alembic_config(url: str) -> Config:
    """Alembic configuration for ``url``, pointing at the packaged history.

    The history ships inside the ``migrations`` package (a plain directory for a regular or
    editable install), so its location comes from ``importlib.resources``.
    """
    from alembic.config import Config

    config = Config()
    with as_file(files("migrations")) as folder:
        config.set_main_option("script_location", str(folder))
    # '%' is alembic's interpolation character; escape it in passwords.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def recorded_revisions(url: str) -> set[str]:
    """The revisions the store's ``alembic_version`` records (empty: never migrated)."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            if not sa.inspect(connection).has_table("alembic_version"):
                return set()
            rows = connection.exec_driver_sql("SELECT version_num FROM alembic_version")
            return {str(row[0]) for row in rows}
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    """Run the history up to ``revision`` (idempotent; a store already at ``HEAD`` is left
    alone without importing alembic)."""
    if revision == "head" and recorded_revisions(url) == {HEAD}:
        return
    from alembic import command

    command.upgrade(alembic_config(url), revision)
    _checkpoint(url)


def downgrade(url: str, revision: str = "base") -> None:
    """Undo the history down to ``revision``."""
    from alembic import command

    command.downgrade(alembic_config(url), revision)
    _checkpoint(url)


def _checkpoint(url: str) -> None:
    """On DuckDB, write the migrated schema into the file: DuckDB 1.5 cannot replay an
    ``ALTER TABLE ... ADD COLUMN`` from its write-ahead log on a table whose id defaults
    to ``nextval`` (an internal error on opening), so a process killed after migrating,
    before DuckDB's own checkpoint, would leave a file nothing can open."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        if engine.dialect.name == "duckdb":
            with engine.connect() as connection:
                connection.exec_driver_sql("CHECKPOINT")
    finally:
        engine.dispose()
