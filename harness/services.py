"""Real services the tests (``tests/`` and ``bench/tests/``) talk to, and the one rule for
when one is missing: on CI (``CI`` set to a truthy value, see ``on_ci``) that fails the run;
locally the test is skipped with the reason. Every test that needs a service or a tool goes
through ``require``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import pytest
import sqlalchemy as sa

from harness.scratch_db import postgres_reachable, scratch_database
from store import Database

POSTGRES_HOST = os.environ.get("TOPICSTORE_TEST_PG_HOST", "127.0.0.1")
POSTGRES_PORT = int(os.environ.get("TOPICSTORE_TEST_PG_PORT", "5432"))
POSTGRES_USER = os.environ.get("TOPICSTORE_TEST_PG_USER", "postgres")
#: Where the tests create their databases.
POSTGRES_ADMIN_URL = (
    f"postgresql+psycopg://{POSTGRES_USER}@{POSTGRES_HOST}:{POSTGRES_PORT}/postgres"
)


#: Values of ``CI`` that mean "this is CI", in any case: runners set ``true`` (GitHub,
#: GitLab) or ``1`` (others), and people type ``yes``.
CI_TRUTHY: Final = frozenset({"1", "true", "yes", "on"})


def on_ci() -> bool:
    """Whether this run is CI, where a missing service is a failure, not a skip."""
    return os.environ.get("CI", "").strip().lower() in CI_TRUTHY


def require(available: bool, what: str, hint: str = "start it to run this test") -> None:
    """Fail on CI, skip locally (saying ``hint``), when ``what`` is not available."""
    if available:
        return
    if on_ci():
        pytest.fail(f"{what} is required on CI but is not available")
    pytest.skip(f"{what} is not available; {hint}")


@contextmanager
def fresh_postgres_database() -> Iterator[str]:
    """A new, empty database for one test session (dropped afterwards); yields its URL. Its
    name carries the xdist worker (``gw0``, ...) running it, so a database left behind by a
    killed run says whose it was."""
    require(
        postgres_reachable(POSTGRES_ADMIN_URL), f"PostgreSQL on {POSTGRES_HOST}:{POSTGRES_PORT}"
    )
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with scratch_database(POSTGRES_ADMIN_URL, prefix=f"topicstore_test_{worker}") as url:
        yield url


def reset_postgres(url: str) -> None:
    """Empty a migrated PostgreSQL database (tables and id sequences), so a test sharing the
    session's database starts from nothing."""
    db = Database(url)
    with db.engine.begin() as conn:
        conn.execute(
            sa.text(
                "TRUNCATE subscription, subscription_stats, change_log, audit_log, tenant_usage"
            )
        )
        conn.execute(sa.text("ALTER SEQUENCE subscription_id_seq RESTART"))
        conn.execute(sa.text("ALTER SEQUENCE change_log_seq RESTART"))
        conn.execute(sa.text("ALTER SEQUENCE audit_log_seq RESTART"))
    db.dispose()
