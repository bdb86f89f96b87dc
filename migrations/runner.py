"""Running the packaged alembic history against a database URL.

This lives beside the history, not in ``store``: the history's ``env.py`` imports
``store.models``, so the store running alembic would make the two packages import each other.
"""

from __future__ import annotations

from importlib.resources import as_file, files

import sqlalchemy as sa
from alembic import command
from alembic.config import Config


def alembic_config(url: str) -> Config:
    """Alembic configuration for ``url``, pointing at the packaged history.

    The history ships inside the ``migrations`` package (a plain directory for a regular or
    editable install), so its location comes from ``importlib.resources``.
    """
    config = Config()
    with as_file(files("migrations")) as folder:
        config.set_main_option("script_location", str(folder))
    # '%' is alembic's interpolation character; escape it in passwords.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Run the history up to ``revision`` (idempotent)."""
    command.upgrade(alembic_config(url), revision)
    _checkpoint(url)


def downgrade(url: str, revision: str = "base") -> None:
    """Undo the history down to ``revision``."""
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
