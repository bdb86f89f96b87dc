"""``topicstore sub import`` as a user runs it: one CSV, the command in its own process
(its default batches of 10,000 items), into a fresh embedded DuckDB file and into a fresh
PostgreSQL database, side by side in the same run: directly (the command opens the store)
and through a running ``topicstore serve`` (``--api URL``). Goals at 1,000,000 lines:
directly PostgreSQL within 15 s and DuckDB within 20 s, through the service within 60 s,
the importing process within 300 MB.

Besides the wall time, the command's own CPU seconds and peak resident set: on a shared
machine the wall time says more about the neighbours than about the import, and the memory
goal is the process's. They come from the kernel's account of the child (``os.wait4``),
taken by a small launcher: a process started from this one inherits its peak resident set
(a ``vfork`` shares this process's memory until the ``exec``, and the kernel keeps that
peak as the child's), so the benchmark's own memory would be reported as the import's."""

from __future__ import annotations

import csv
import json
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final, NamedTuple

from bench.report import Column, Table
from harness.scratch_db import DEFAULT_ADMIN_URL, postgres_reachable, scratch_database
from harness.server import Server, running_server, service_environment, topicstore_command
from harness.workloads import market_subscriptions
from migrations.runner import upgrade

#: The command's own default: items per transaction (or request).
BATCH = 10_000
TIMEOUT_S = 3_600

#: Runs ``argv[2:]`` as its child and writes the child's CPU seconds and peak resident set
#: (KiB) to ``argv[1]`` as JSON; exits with the child's status. Small (a bare interpreter),
#: so what its child inherits is its few MB, not the benchmark's peak.
_MEASURED: Final = """
import json, os, sys
pid = os.fork()
if pid == 0:
    try:
        os.execv(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    json.dump([usage.ru_utime + usage.ru_stime, usage.ru_maxrss], out)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_import_load(counts: Sequence[int], seed: int, admin_url: str = DEFAULT_ADMIN_URL) -> Table:
    table = Table(
        name="import_load",
        title="topicstore sub import of one CSV: embedded DuckDB against PostgreSQL",
        columns=[
            Column("backend, mode, rows", "{}"),
            Column("seconds", "{:,.1f}"),
            Column("rows/s", chart=True),
            Column("x PostgreSQL time", "{:,.2f}"),
            Column("command CPU s", "{:,.1f}"),
            Column("peak RSS MB", "{:,.0f}"),
            Column("server CPU s", "{:,.1f}"),
        ],
        notes=[
            f"`topicstore sub import FILE` in its own process, {BATCH:,} items per "
            "transaction (COPY into a staging table on PostgreSQL, the Arrow batch itself on "
            "DuckDB, one INSERT ... SELECT of the new keys, change_log rows), into a fresh store "
            "each; wall time of the command. direct: the command opens the store; api: "
            f"`--api URL` through a running `topicstore serve` on that store, {BATCH:,} items "
            "per request (the x PostgreSQL column compares each mode with its own "
            "PostgreSQL row).",
            "goal at 1,000,000 rows: directly PostgreSQL within 15 s and DuckDB within 20 s, "
            "through the service within 60 s; peak RSS of the importing process within 300 MB.",
            "command CPU s and peak RSS MB: the importing process alone, from the kernel "
            "(os.wait4 in a small launcher); on PostgreSQL the server's backend works "
            "besides, on DuckDB direct the database is in the process. server CPU s: the "
            "`topicstore serve` process during the import (api rows).",
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
            for mode in ("direct", "api"):
                with scratch_database(admin_url, prefix="topicstore_bench_import") as url:
                    postgres = _run(directory, source, url, mode)
                duckdb_url = f"duckdb:///{directory / f'import-{count}-{mode}.duckdb'}"
                duckdb = _run(directory, source, duckdb_url, mode)
                table.rows.append(
                    [f"PostgreSQL, {mode}, {count:,}", *_cells(count, postgres, postgres)]
                )
                table.rows.append([f"DuckDB, {mode}, {count:,}", *_cells(count, duckdb, postgres)])
    return table


class Run(NamedTuple):
    """One import: wall seconds, the command's CPU seconds (user + system), its peak
    resident set in MB, and the server's CPU seconds (None: no server)."""

    seconds: float
    cpu_seconds: float
    peak_mb: float
    server_cpu_seconds: float | None = None


def _cells(count: int, run: Run, postgres: Run) -> list[float | None]:
    """A row's numbers: seconds, rows/s, times PostgreSQL's time, CPU seconds, peak MB,
    server CPU seconds."""
    ratio = run.seconds / postgres.seconds
    return [
        run.seconds,
        count / run.seconds,
        ratio,
        run.cpu_seconds,
        run.peak_mb,
        run.server_cpu_seconds,
    ]


def _run(directory: Path, source: Path, database_url: str, mode: str) -> Run:
    """One import of ``source`` into ``database_url``: directly, or (``api``) through a
    ``topicstore serve`` of it started for the import (and stopped after)."""
    if mode == "direct":
        return _import(directory, source, {"database_url": database_url})
    if not database_url.startswith("duckdb"):
        upgrade(database_url)  # an embedded store the service migrates itself
    token = secrets.token_hex(16)
    settings = {"database_url": database_url, "admin_token": token}
    with running_server(directory, settings) as server:
        server.wait_until("/readyz", 200)
        return _through(server, directory, source, token)


def _through(server: Server, directory: Path, source: Path, token: str) -> Run:
    """``_import`` with ``--api``, and the server's CPU seconds meanwhile."""
    before = server.cpu_seconds()
    run = _import(directory, source, {"admin_token": token}, ("--api", server.url))
    return run._replace(server_cpu_seconds=server.cpu_seconds() - before)


def _import(
    directory: Path, source: Path, settings: Mapping[str, str], options: Sequence[str] = ()
) -> Run:
    """``topicstore sub import [options] source`` with ``settings`` (``TOPICSTORE_*``),
    measured by the launcher (``_MEASURED``)."""
    log = directory / "import.log"
    usage = directory / "import-usage.json"
    command = [*topicstore_command(), "sub", "import", *options, "--batch", str(BATCH)]
    with log.open("w+b") as out:
        started = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-c", _MEASURED, str(usage), *command, str(source)],
            env=service_environment(settings),
            cwd=directory,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        timer = threading.Timer(TIMEOUT_S, process.kill)
        timer.start()
        try:
            returncode = process.wait()
        finally:
            timer.cancel()
        seconds = time.perf_counter() - started
        if returncode != 0:
            out.seek(0)
            tail = out.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"sub import failed ({returncode}):\n{tail}")
    cpu_seconds, peak_kib = json.loads(usage.read_text())
    # Linux counts ru_maxrss in KiB.
    return Run(seconds, cpu_seconds, peak_kib / 1024)
