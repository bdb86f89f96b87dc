"""A throwaway PostgreSQL database: created on entry, dropped (even with connections still
open) on exit. The one way the benchmarks and the tests get a database of their own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from migrations.runner import upgrade
from store import Database

#: The local server with trust auth, as the benchmarks and CI have it.
DEFAULT_ADMIN_URL: Final = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def libpq_dsn(url: str) -> str:
    """The libpq connection string of a SQLAlchemy URL (psycopg connects with it)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def postgres_reachable(admin_url: str = DEFAULT_ADMIN_URL) -> bool:
    try:
        with psycopg.connect(libpq_dsn(admin_url), connect_timeout=2):
            return True
    except psycopg.Error:
        return False


@contextmanager
def scratch_database(
    admin_url: str = DEFAULT_ADMIN_URL, prefix: str = "topicstore_scratch"
) -> Iterator[str]:
    """A new, empty database on the server of ``admin_url``; yields its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq_dsn(admin_url), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(libpq_dsn(admin_url), autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextmanager
def scratch_postgres(admin_url: str = DEFAULT_ADMIN_URL) -> Iterator[Database]:
    """A new database migrated to head, opened as the store."""
    with scratch_database(admin_url, prefix="topicstore_bench") as url:
        db = Database(url)
        try:
            upgrade(db.url)
            yield db
        finally:
            db.dispose()
