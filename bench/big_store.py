"""A store with a million subscriptions, made once and reused: PostgreSQL database
``topicstore_1m`` on the local server, or a DuckDB file. Rows go in with one COPY (or one
Arrow insert), not through the API: the startup bench measures reading them, not writing.

Rows are distinct pairs of one shape of ``harness.workloads`` (``market``: five-word AMQP
patterns, 1,000 subscribers; ``mixed``: 3 to 6 words over 3,000, 50,000 subscribers), tenant
``default``, with ids 1..count; the change log is left empty (seq 0), as after a bulk import
whose log was compacted.

A benchmark that writes (churn, storms) holds its PostgreSQL database for its run
(``big_store``): the database of one size is shared by every process on the server, and
two benchmarks at once (two test workers) would each count the other's rows, rebuild the
store under the other's servers, or write its usage row twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import psycopg
import pyarrow as pa
from psycopg import sql
from sqlalchemy.engine import make_url

from harness.scratch_db import DEFAULT_ADMIN_URL, libpq_dsn
from harness.workloads import market_subscriptions, mixed_subscriptions
from migrations.runner import upgrade

BIG_DATABASE: Final = "topicstore_1m"
SHAPES: Final = {"market": market_subscriptions, "mixed": mixed_subscriptions}
BIG_COUNT: Final = 1_000_000
#: The first key of the advisory locks that hold a big database (the second: the hash of
#: its name, ``hashtext``).
LOCK_CLASS: Final = 0x7B16
#: Rows written here bypass the repository, which keeps ``tenant_usage``: count them.
_RECOUNT: Final = (
    "INSERT INTO tenant_usage (tenant, subscriptions) "
    "SELECT tenant, count(*) FROM subscription GROUP BY tenant"
)


def stored_pairs(count: int, seed: int, shape: str = "market") -> list[tuple[str, str]]:
    """The ``(subscriber, pattern)`` of the store's rows, in id order."""
    # A few pairs repeat (the unique key would refuse them): draw a little more, keep firsts.
    return list(dict.fromkeys(SHAPES[shape](count + count // 50 + 100, seed)))[:count]


def _columns(count: int, seed: int, shape: str) -> pa.Table:
    pairs = stored_pairs(count, seed, shape)
    return pa.table(
        {
            "id": pa.array(range(1, count + 1), pa.int64()),
            "tenant": pa.array(["default"] * count),
            "subscriber": pa.array([s for s, _ in pairs]),
            "pattern": pa.array([p for _, p in pairs]),
            "dialect": pa.array(["amqp"] * count),
            "kind": pa.array(["topic"] * count),
        }
    )


def big_postgres(
    count: int = BIG_COUNT, seed: int = 0, admin_url: str = DEFAULT_ADMIN_URL, shape: str = "market"
) -> str:
    """The URL of ``topicstore_1m`` (``topicstore_<count>`` for another count, with a
    ``_mixed`` suffix for that shape) holding exactly ``count`` rows (made if missing or of
    another size), by one process at a time."""
    with _held_postgres(count, seed, admin_url, shape) as url:
        return url


@contextmanager
def _held_postgres(count: int, seed: int, admin_url: str, shape: str) -> Iterator[str]:
    """``big_postgres``'s database, this process's alone while the block runs: a session
    advisory lock, taken on the admin database so that every process takes it on the same
    one (the lock goes with the connection, whatever ends the block)."""
    name = BIG_DATABASE if count == BIG_COUNT else f"topicstore_{count}"
    name += "" if shape == "market" else f"_{shape}"
    with psycopg.connect(libpq_dsn(admin_url), autocommit=True) as admin:
        admin.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (LOCK_CLASS, name))
        yield _make_postgres(name, count, seed, admin_url, shape)


def _make_postgres(name: str, count: int, seed: int, admin_url: str, shape: str) -> str:
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(libpq_dsn(admin_url), autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    upgrade(url)
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM subscription").fetchone()
        if row is not None and row[0] == count:
            return url
        conn.execute("TRUNCATE subscription, subscription_stats, change_log, tenant_usage")
        table = _columns(count, seed, shape)
        names = table.column_names
        with (
            conn.cursor() as cursor,
            cursor.copy(
                sql.SQL("COPY subscription ({}) FROM STDIN").format(
                    sql.SQL(", ").join(map(sql.Identifier, names))
                )
            ) as copy,
        ):
            for row_ in zip(*(table.column(n).to_pylist() for n in names), strict=True):
                copy.write_row(row_)
        conn.execute("SELECT setval('subscription_id_seq', %s)", (count,))
        conn.execute(_RECOUNT)
        conn.execute("VACUUM ANALYZE subscription")
    return url


def big_duckdb(path: Path, count: int = BIG_COUNT, seed: int = 0, shape: str = "market") -> str:
    """The URL of a DuckDB file at ``path`` holding exactly ``count`` rows."""
    import duckdb

    url = f"duckdb:///{path}"
    upgrade(url)
    conn = duckdb.connect(str(path))
    try:
        row = conn.execute("SELECT count(*) FROM subscription").fetchone()
        if row is not None and row[0] == count:
            return url
        conn.execute("DELETE FROM subscription")
        rows = _columns(count, seed, shape).drop_columns(["id"])  # the sequence numbers them
        conn.register("big_rows", rows)
        names = ", ".join(rows.column_names)
        conn.execute(f"INSERT INTO subscription ({names}) SELECT {names} FROM big_rows")
        conn.unregister("big_rows")
        conn.execute("DELETE FROM tenant_usage")
        conn.execute(_RECOUNT)
        conn.execute("CHECKPOINT")
    finally:
        conn.close()
    return url


@contextmanager
def big_store(
    backend: str, count: int, seed: int, directory: Path, admin_url: str = DEFAULT_ADMIN_URL
) -> Iterator[str]:
    """The URL of a store of ``count`` rows on ``backend``, this process's alone while the
    block runs (``postgresql``: the shared database made once, held; ``duckdb``: a file in
    ``directory``, which is the caller's)."""
    if backend != "postgresql":
        yield big_duckdb(directory / f"big-{count}.duckdb", count, seed)
        return
    with _held_postgres(count, seed, admin_url, "market") as url:
        yield url
