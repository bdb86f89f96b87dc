"""``topicstore sub import`` as a user runs it: one CSV, the command in its own process
(direct mode, its default batches of 10,000 items), into a fresh embedded DuckDB file and
into a fresh PostgreSQL database, side by side in the same run. Goals at 1,000,000 lines:
PostgreSQL within 15 s, DuckDB within 20 s, the importing process within 300 MB.

Besides the wall time, the command's own CPU seconds and peak resident set (from the
kernel's account of the child, ``os.wait4``): on a shared machine the wall time says more
about the neighbours than about the import, and the memory goal is the process's."""

from __future__ import annotations

import csv
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

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
            Column("command CPU s", "{:,.1f}"),
            Column("peak RSS MB", "{:,.0f}"),
        ],
        notes=[
            f"`topicstore sub import FILE` in its own process, direct mode, {BATCH:,} items "
            "per transaction (COPY into a staging table on PostgreSQL, the Arrow batch itself on "
            "DuckDB, one INSERT ... SELECT of the new keys, change_log rows), into a fresh store "
            "each; wall time of the command.",
            "goal at 1,000,000 rows: PostgreSQL within 15 s, DuckDB within 20 s, peak RSS of "
            "the importing process within 300 MB.",
            "command CPU s: user + system seconds of the importing process alone (on "
            "PostgreSQL the server's backend works besides; on DuckDB the database is in "
            "the process).",
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
            table.rows.append([f"PostgreSQL, {count:,}", *_cells(count, postgres, postgres)])
            table.rows.append([f"DuckDB, {count:,}", *_cells(count, duckdb, postgres)])
    return table


class Run(NamedTuple):
    """One import: wall seconds, the command's CPU seconds (user + system) and its peak
    resident set in MB."""

    seconds: float
    cpu_seconds: float
    peak_mb: float


def _cells(count: int, run: Run, postgres: Run) -> list[float]:
    """A row's numbers: seconds, rows/s, times PostgreSQL's time, CPU seconds, peak MB."""
    ratio = run.seconds / postgres.seconds
    return [run.seconds, count / run.seconds, ratio, run.cpu_seconds, run.peak_mb]


def _import(directory: Path, source: Path, database_url: str) -> Run:
    """``topicstore sub import source`` into ``database_url``, measured. The child is
    reaped with ``os.wait4``, whose resource usage is that one process's (the
    ``RUSAGE_CHILDREN`` total would mix in every earlier child's peak)."""
    log = directory / "import.log"
    with log.open("w+b") as out:
        started = time.perf_counter()
        process = subprocess.Popen(
            [*topicstore_command(), "sub", "import", "--batch", str(BATCH), str(source)],
            env=service_environment({"database_url": database_url}),
            cwd=directory,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        timer = threading.Timer(TIMEOUT_S, process.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            timer.cancel()
        seconds = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        if process.returncode != 0:
            out.seek(0)
            tail = out.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"sub import failed ({process.returncode}):\n{tail}")
    # Linux counts ru_maxrss in KiB.
    return Run(seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)
