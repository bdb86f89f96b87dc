"""Alembic environment: runs against the URL the caller configured (``migrations.runner``) or
``TOPICSTORE_DATABASE_URL`` when started from the alembic CLI."""

from __future__ import annotations

import os

from alembic import context
from alembic.ddl.impl import DefaultImpl
from sqlalchemy import create_engine, pool

from store.models import Base


class AlembicDuckDBImpl(DefaultImpl):
    """duckdb-engine ships no alembic implementation; the default one works for DuckDB."""

    __dialect__ = "duckdb"


config = context.config
url = config.get_main_option("sqlalchemy.url") or os.environ.get("TOPICSTORE_DATABASE_URL")
if not url:
    raise SystemExit("set sqlalchemy.url or TOPICSTORE_DATABASE_URL to migrate")

connectable = config.attributes.get("connection")
if connectable is None:
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=Base.metadata)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()
else:
    context.configure(connection=connectable, target_metadata=Base.metadata)
    with context.begin_transaction():
        context.run_migrations()
