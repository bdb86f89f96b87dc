"""The service at a million subscriptions: a real ``topicstore serve`` child started on a
store that already holds them (``bench.big_store``: PostgreSQL ``topicstore_1m``, and a
DuckDB file), timed from spawn to ``/readyz`` 200, its resident memory sampled from
``/proc`` the whole time (peak = the kernel's high-water mark), then ``/v1/match`` latency
measured with the periodic reconciliation off and with it running every few seconds; then
the server is killed (SIGKILL, no clean stop) and a new one timed from spawn to ready on
the store it left.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx
import orjson

from bench.big_store import big_duckdb, big_postgres, stored_pairs
from bench.percentiles import percentile
from bench.report import Column, Table
from harness.scratch_db import DEFAULT_ADMIN_URL, postgres_reachable
from harness.server import free_port, service_environment, topicstore_command
from harness.workloads import drawn_topics

READY_TIMEOUT_S: Final = 600.0
#: Idle seconds after ready before the steady figure is read (settling, the first poll).
SETTLE_S: Final = 3.0
#: Seconds of single /v1/match calls per latency phase.
MATCH_S: Final = 10.0
#: The reconciliation interval during the second latency phase.
RECONCILE_EVERY_S: Final = 2.0
SHAPE_NOTES: Final = {
    "market": "five-word patterns, 1,000 subscribers",
    "mixed": "3-6 words over 3,000, 1 in 7 with a *, 1 in 50 ending in #, 50,000 subscribers",
}
#: Targets (issue 13).
READY_TARGET_S: Final = 5.0
RSS_TARGET_MB: Final = 400.0
PEAK_RATIO_TARGET: Final = 1.5
P99_RATIO_TARGET: Final = 2.0


@dataclass(slots=True)
class Run:
    ready_s: float = 0.0
    restart_s: float | None = None
    cpu_s: float = 0.0
    steady_mb: float = 0.0
    peak_mb: float = 0.0
    p99_ms: float = 0.0
    p50_ms: float = 0.0
    subscriptions: int = 0
    export_s: float | None = None
    export_peak_mb: float | None = None


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (threads included)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _status_mb(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


@contextmanager
def _serve(
    workdir: Path, url: str, reconcile_s: float, token: str
) -> Iterator[tuple[subprocess.Popen[bytes], str, float]]:
    """A ``topicstore serve`` child; yields it, its URL and the seconds from spawn to
    ``/readyz`` 200."""
    port = free_port()
    settings = {
        "database_url": url,
        "admin_token": token,
        "reconcile_interval": str(reconcile_s),
    }
    log = workdir / f"server-{port}.log"
    with log.open("wb") as out:
        started = time.perf_counter()
        process = subprocess.Popen(
            [*topicstore_command(), "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=service_environment(settings),
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"server exited: {log.read_text()[-3_000:]}")
            try:
                if httpx.get(base + "/readyz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.perf_counter() - started > READY_TIMEOUT_S:
                raise RuntimeError(f"not ready in {READY_TIMEOUT_S} s: {log.read_text()[-3_000:]}")
            time.sleep(0.02)
        yield process, base, time.perf_counter() - started
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _latencies(base: str, token: str, topics: list[str], seconds: float) -> list[float]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    bodies = [orjson.dumps({"topic": t}) for t in topics]
    out: list[float] = []
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        deadline = time.perf_counter() + seconds
        i = 0
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            client.post("/v1/match", content=bodies[i % len(bodies)]).raise_for_status()
            out.append((time.perf_counter() - t0) * 1e3)
            i += 1
    return out


def _export(pid: int, base: str, token: str) -> tuple[float, float]:
    """Seconds of one ``GET /v1/subscriptions-export`` of every subscription, and the
    server's peak resident MB during it (its high-water mark reset first: ``clear_refs``)."""
    with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as clear:
        clear.write("5")
    started = time.perf_counter()
    response = httpx.get(
        base + "/v1/subscriptions-export",
        headers={"Authorization": f"Bearer {token}"},
        timeout=600,
    )
    response.raise_for_status()
    return time.perf_counter() - started, _status_mb(pid, "VmHWM")


def _measure(
    url: str,
    reconcile_s: float,
    topics: list[str],
    *,
    restart: bool,
    settle_s: float,
    match_s: float,
) -> Run:
    """One server's start, memory and match latency; with ``restart``, then a SIGKILL and
    a new server's start (``restart_s``; None without)."""
    token = secrets.token_hex(24)
    run = Run()
    with (
        tempfile.TemporaryDirectory(prefix="topicstore-startup-") as tmp,
        _serve(Path(tmp), url, reconcile_s, token) as (process, base, ready_s),
    ):
        run.ready_s = ready_s
        run.cpu_s = _cpu_s(process.pid)
        time.sleep(settle_s)
        run.steady_mb = _status_mb(process.pid, "VmRSS")
        run.subscriptions = httpx.get(base + "/readyz").json()["subscriptions"]
        lat = _latencies(base, token, topics, match_s)
        run.p50_ms, run.p99_ms = percentile(lat, 50), percentile(lat, 99)
        run.steady_mb = max(run.steady_mb, _status_mb(process.pid, "VmRSS"))
        run.peak_mb = _status_mb(process.pid, "VmHWM")
        if restart:  # once per store, as the restart
            run.export_s, run.export_peak_mb = _export(process.pid, base, token)
        process.kill()  # SIGKILL: no shutdown, a DuckDB file left with its write-ahead log
        process.wait()
    if not restart:
        return run
    with (
        tempfile.TemporaryDirectory(prefix="topicstore-restart-") as tmp,
        _serve(Path(tmp), url, reconcile_s, token) as (_, _, restart_s),
    ):
        run.restart_s = restart_s
    return run


def run_startup(
    count: int,
    seed: int = 0,
    admin_url: str = DEFAULT_ADMIN_URL,
    shape: str = "mixed",
    *,
    settle_s: float = SETTLE_S,
    match_s: float = MATCH_S,
) -> Table:
    """Startup to ready, memory and match latency with/without reconciliation, at ``count``
    subscriptions of ``shape`` (``bench.big_store.SHAPES``), on PostgreSQL and on DuckDB;
    ``settle_s`` idle after ready and ``match_s`` of matches per row (the quick sizes' are
    short: the smoke test checks the rows, not the figures)."""
    table = Table(
        name="startup",
        title=f"The service at {count:,} subscriptions: startup, memory, reconciliation",
        columns=[
            Column("store", "{}"),
            Column("reconcile", "{}"),
            Column("ready s", "{:,.2f}", chart=True),
            Column("ready after kill -9 s", "{:,.2f}", chart=True),
            Column("CPU s", "{:,.2f}"),
            Column("steady MB", "{:,.0f}"),
            Column("peak MB", "{:,.0f}"),
            Column("peak/steady", "{:,.2f}"),
            Column("export s", "{:,.2f}"),
            Column("export peak/steady", "{:,.2f}"),
            Column("match p50 ms", "{:,.2f}"),
            Column("match p99 ms", "{:,.2f}"),
        ],
        unit="seconds",
    )
    topics = drawn_topics([p for _, p in stored_pairs(min(count, 10_000), seed, shape)], 64, seed)
    stores: list[tuple[str, str]] = []
    if postgres_reachable(admin_url):
        stores.append(("postgresql", big_postgres(count, seed, admin_url, shape)))
    else:
        table.notes.append(f"PostgreSQL skipped: not reachable at {admin_url}")
    # Kept between runs like the PostgreSQL database: made once, reused.
    duck = Path(tempfile.gettempdir()) / f"topicstore-big-{count}-{shape}.duckdb"
    stores.append(("duckdb", big_duckdb(duck, count, seed, shape)))
    for store, url in stores:
        for reconcile_s, label in (
            (86_400.0, "off"),
            (RECONCILE_EVERY_S, f"every {RECONCILE_EVERY_S:g} s"),
        ):
            # A restart once per store (the off row): each start at 1M is seconds of both cores.
            run = _measure(
                url,
                reconcile_s,
                topics,
                restart=label == "off",
                settle_s=settle_s,
                match_s=match_s,
            )
            table.rows.append(
                [
                    store,
                    label,
                    run.ready_s,
                    run.restart_s,
                    run.cpu_s,
                    run.steady_mb,
                    run.peak_mb,
                    run.peak_mb / run.steady_mb if run.steady_mb else None,
                    run.export_s,
                    run.export_peak_mb / run.steady_mb
                    if run.export_peak_mb is not None and run.steady_mb
                    else None,
                    run.p50_ms,
                    run.p99_ms,
                ]
            )
    table.notes += [
        f"targets: ready <= {READY_TARGET_S:g} s, steady RSS <= {RSS_TARGET_MB:g} MB, "
        f"peak <= {PEAK_RATIO_TARGET:g}x steady, match p99 with reconciliation <= "
        f"{P99_RATIO_TARGET:g}x without.",
        f"{count:,} {shape} subscriptions (one tenant, AMQP; {SHAPE_NOTES[shape]}) already in "
        "the store; ready = spawn to /readyz 200 (Python start and imports included); ready after "
        "kill -9 = the same for a new server once the first was SIGKILLed; CPU = the "
        "server's user + system seconds until then (what a calm machine's wall time would "
        "approach: this box is shared); steady = "
        f"VmRSS {settle_s:g} s after ready and after the match phase (the larger); peak = "
        f"VmHWM; match = single POST /v1/match calls, one client, {match_s:g} s per row; "
        "export = GET /v1/subscriptions-export of all of them (Parquet) after the match "
        "phase, its peak = VmHWM after resetting it (/proc/<pid>/clear_refs), once per store.",
        f"load average {os.getloadavg()[0]:.1f} at the end (2 cores, shared).",
    ]
    return table
