"""Fixtures shared by every test package: the real databases."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from migrations.runner import upgrade
from store import Database
from tests.services import fresh_postgres_database, reset_postgres


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, migrated to head."""
    with fresh_postgres_database() as url:
        db = Database(url)
        upgrade(db.url)
        db.dispose()
        yield url


@pytest.fixture(params=["postgres", "duckdb"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """An empty, migrated store on each backend: a reset PostgreSQL database, or a new
    DuckDB file."""
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        reset_postgres(url)
    else:
        url = f"duckdb:///{tmp_path / 'store.duckdb'}"
    db = Database(url)
    if request.param == "duckdb":
        upgrade(db.url)
    yield db
    db.dispose()
