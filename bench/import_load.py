"""``topicstore sub import`` as a user runs it: one CSV, the command in its own process
(direct mode, its default batches of 10,000 items), into a fresh embedded DuckDB file and
into a fresh PostgreSQL database, side by side in the same run. Goals at 1,000,000 lines:
PostgreSQL within 15 s, DuckDB within 20 s."""

from __future__ import annotations

import csv
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.report import Column, Table
from harness.scratch_db import DEFAULT_ADMIN_URL, postgres_reachable, scratch_database
from harness.server import service_environment, topicstore_command
from harness.workloads import market_subscriptions

#: The command's own default: items per transaction.
BATCH = 10_000
TIMEOUT_S = 3_600


def run_import_load(counts: Sequence[int], seed: int, admin_url: str = DEFAULT_ADMIN_URL) -> Table:
    table = Table(
        name="import_load",
        title="topicstore sub import of one CSV: embedded DuckDB against PostgreSQL",
        columns=[
            Column("backend, rows", "{}"),
            Column("seconds", "{:,.1f}"),
            Column("rows/s", chart=True),
            Column("x PostgreSQL time", "{:,.2f}"),
        ],
        notes=[
            f"`topicstore sub import FILE` in its own process, direct mode, {BATCH:,} items "
            "per transaction (COPY into a staging table on PostgreSQL, the Arrow batch itself on "
            "DuckDB, one INSERT ... SELECT of the new keys, change_log rows), into a fresh store "
            "each; wall time of the command.",
            "goal at 1,000,000 rows: PostgreSQL within 15 s, DuckDB within 20 s.",
        ],
    )
    if not postgres_reachable(admin_url):
        table.notes.append(f"skipped: PostgreSQL not reachable at {admin_url}")
        return table
    with tempfile.TemporaryDirectory(prefix="topicstore-import-") as scratch:
        directory = Path(scratch)
        for count in counts:
            source = directory / f"subscriptions-{count}.csv"
            with source.open("w", newline="", encoding="utf-8") as out:
                csv.writer(out).writerows(market_subscriptions(count, seed))
            with scratch_database(admin_url, prefix="topicstore_bench_import") as url:
                postgres = _import(directory, source, url)
            duckdb = _import(directory, source, f"duckdb:///{directory / f'import-{count}.duckdb'}")
            table.rows.append([f"PostgreSQL, {count:,}", postgres, count / postgres, 1.0])
            table.rows.append([f"DuckDB, {count:,}", duckdb, count / duckdb, duckdb / postgres])
    return table


def _import(directory: Path, source: Path, database_url: str) -> float:
    """Wall seconds of ``topicstore sub import source`` into ``database_url``."""
    started = time.perf_counter()
    result = subprocess.run(
        [*topicstore_command(), "sub", "import", "--batch", str(BATCH), str(source)],
        env=service_environment({"database_url": database_url}),
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"sub import failed ({result.returncode}):\n{result.stderr[-2000:]}")
    return seconds
