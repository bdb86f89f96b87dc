"""A throwaway PostgreSQL database for benchmarks that need the real store."""

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

#: Where benchmarks create their scratch database (the local server, trust auth).
DEFAULT_ADMIN_URL: Final = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def postgres_reachable(admin_url: str = DEFAULT_ADMIN_URL) -> bool:
    try:
        with psycopg.connect(_dsn(admin_url), connect_timeout=2):
            return True
    except psycopg.Error:
        return False


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@contextmanager
def scratch_postgres(admin_url: str = DEFAULT_ADMIN_URL) -> Iterator[Database]:
    """A new, migrated database, dropped afterwards."""
    name = f"topicstore_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_dsn(admin_url), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    db = Database(url)
    try:
        upgrade(db.url)
        yield db
    finally:
        db.dispose()
        with psycopg.connect(_dsn(admin_url), autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
