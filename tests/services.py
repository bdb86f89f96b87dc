"""Real services the tests talk to, and the one rule for when one is missing: on CI
(``CI=true``) that fails the run; locally the test is skipped with the reason."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from psycopg import sql

POSTGRES_HOST = os.environ.get("TOPICSTORE_TEST_PG_HOST", "127.0.0.1")
POSTGRES_PORT = int(os.environ.get("TOPICSTORE_TEST_PG_PORT", "5432"))
POSTGRES_USER = os.environ.get("TOPICSTORE_TEST_PG_USER", "postgres")


def on_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def require(available: bool, what: str) -> None:
    """Fail on CI, skip locally, when ``what`` is not reachable."""
    if available:
        return
    if on_ci():
        pytest.fail(f"{what} is required on CI but is not reachable")
    pytest.skip(f"{what} is not reachable; start it to run this test")


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def postgres_dsn(database: str) -> str:
    return f"host={POSTGRES_HOST} port={POSTGRES_PORT} user={POSTGRES_USER} dbname={database}"


def postgres_url(database: str) -> str:
    return f"postgresql+psycopg://{POSTGRES_USER}@{POSTGRES_HOST}:{POSTGRES_PORT}/{database}"


@contextmanager
def fresh_postgres_database() -> Iterator[str]:
    """A new, empty database for one test session (dropped afterwards); yields its URL."""
    require(
        _port_open(POSTGRES_HOST, POSTGRES_PORT), f"PostgreSQL on {POSTGRES_HOST}:{POSTGRES_PORT}"
    )
    name = f"topicstore_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn("postgres"), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield postgres_url(name)
    finally:
        with psycopg.connect(postgres_dsn("postgres"), autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
