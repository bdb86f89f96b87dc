"""Durable single writes through the HTTP API under churn, as an operator sees them.

A real ``topicstore serve`` on a store already holding ``count`` subscriptions (PostgreSQL
database ``topicstore_<count>`` or a DuckDB file, made once by ``bench.big_store``) takes
``clients`` concurrent clients, each creating a subscription and deleting it again over
one keep-alive connection, for ``seconds``. Meanwhile another process sends
``POST /v1/match`` at a steady pace and times each answer; the same prober runs before the
churn too, so the match p99 with churn is judged against the same server without it. On
PostgreSQL a second replica serves the same database, and the prober also
times how long a subscription created on the first takes to match on the second.
``/readyz`` of every replica is probed every 100 ms during the churn, as a load balancer
would, and each replica's completed reconciliation passes are read from its ``/metrics``
before and after: the servers reconcile every ``seconds / RECONCILE_PASSES``, so that
passes are due within the churn.

Clients run in processes of their own (``bench.write_clients``), so the server's GIL is
not shared with them, and are released together; every phase has a fixed duration and
every process is stopped at the end, whatever happened.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import httpx
import psycopg
from sqlalchemy.engine import make_url

from bench.big_store import big_store
from bench.percentiles import percentile
from bench.report import Column, Table, format_table
from bench.write_clients import GRACE_S, LAG_EVERY_S, PROBE_RATE, READY_EVERY_S, Clients
from harness.scratch_db import DEFAULT_ADMIN_URL, postgres_reachable
from harness.server import Server, start_server

#: Concurrent writing clients and the seconds they write, as the write-path target states.
CLIENTS: Final = 8
SECONDS: Final = 60.0
#: Seconds of matching measured before the churn (the baseline of the match p99).
QUIET_S: Final = 10.0
#: Reconciliation passes due in the churn's seconds (the servers' interval follows).
RECONCILE_PASSES: Final = 6
READY_TIMEOUT_S: Final = 300.0
#: The replicas' names in the columns: A takes the writes, B follows.
REPLICAS: Final = ("A", "B")


def metric(server: Server, name: str) -> float:
    """One series of ``server``'s ``/metrics`` (unlabelled)."""
    text = httpx.get(server.url + "/metrics", timeout=30).text
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    if found is None:
        raise LookupError(f"/metrics has no {name}")
    return float(found.group(1))


def _passes(server: Server) -> float:
    return metric(server, "topicstore_reconcile_passes_total")


def _grouped(server: Server) -> tuple[float, float]:
    """Admin writes committed and the transactions that held them (group commit)."""
    return (
        metric(server, "topicstore_write_jobs_total"),
        metric(server, "topicstore_write_transactions_total"),
    )


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def _p(samples: Sequence[float], q: int) -> float:
    return _ms(percentile(samples, q))  # NaN for none


def backend_cpu_seconds(url: str | None) -> dict[int, float]:
    """User + system CPU seconds of each PostgreSQL backend serving the database at ``url``
    (its pid from ``pg_stat_activity``, its CPU from ``/proc``: only when PostgreSQL runs on
    this machine; empty otherwise, and for DuckDB)."""
    if url is None or not url.startswith("postgresql"):
        return {}
    plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(plain, autocommit=True) as connection:
        pids = [
            pid
            for (pid,) in connection.execute(
                "SELECT pid FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        ]
    spent = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # not on this machine, or gone meanwhile
            continue
        spent[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return spent


def measure(
    servers: Sequence[Server],
    token: str,
    clients: int,
    seconds: float,
    directory: Path,
    database_url: str | None = None,
) -> tuple[dict[str, float], list[str]]:
    """The figures of one store (the quiet match p99, then the churn with its probes), and
    what a figure alone does not say (why a /readyz probe failed)."""
    url = servers[0].url
    quiet_s = min(QUIET_S, seconds)
    with Clients(directory) as phase:
        alone = phase.start("probe", url, "--token", token, "--seconds", str(quiet_s))
        phase.go()
        quiet = [s for s in alone.result(quiet_s + GRACE_S) if s is not None]
    timed = ("--token", token, "--seconds", str(seconds))
    with Clients(directory) as phase:
        probe = phase.start("probe", url, *timed)
        readies = [
            phase.start("ready", server.url, "--seconds", str(seconds)) for server in servers
        ]
        lag = None
        if len(servers) > 1:
            lag = phase.start("lag", url, *timed, "--follower", servers[1].url)
        churn = phase.start("churn", url, *timed, "--clients", str(clients))
        phase.wait_ready()
        before = [_passes(server) for server in servers]
        grouped = _grouped(servers[0])
        cpu_before = [s.cpu_seconds() for s in servers], backend_cpu_seconds(database_url)
        phase.go()
        writes = churn.result(seconds + GRACE_S)
        cpu_after = [s.cpu_seconds() for s in servers], backend_cpu_seconds(database_url)
        busy = probe.result(seconds + GRACE_S)
        lags = lag.result(seconds + GRACE_S) if lag is not None else []
        ready = [r.result(seconds + GRACE_S) for r in readies]
        after = [_passes(server) for server in servers]
        jobs, transactions = (b - a for a, b in zip(grouped, _grouped(servers[0]), strict=True))
    done = [w for w in writes if w is not None]
    answered = [b for b in busy if b is not None]
    found = [x for x in lags if x is not None]
    figures = {
        "writes/s": len(done) / seconds,
        "failed": float(len(writes) - len(done)),
        "write p50 ms": _p(done, 50),
        "write p99 ms": _p(done, 99),
        "write max ms": _ms(max(done)) if done else float("nan"),
        "match p99 quiet ms": _p(quiet, 99),
        "match p99 churn ms": _p(answered, 99),
        "writes/commit": jobs / transactions if transactions else float("nan"),
    }
    per_write = 1000 / max(1, len(done))
    for name, spent, was in zip(REPLICAS, cpu_after[0], cpu_before[0], strict=False):
        figures[f"{name} CPU ms/write"] = (spent - was) * per_write
    if cpu_after[1]:  # PostgreSQL on this machine
        backends = sum(t - cpu_before[1].get(pid, 0.0) for pid, t in cpu_after[1].items())
        figures["PG CPU ms/write"] = backends * per_write
    if lag is not None:
        figures["lag p99 ms"] = _p(found, 99)
        figures["lag lost"] = float(len(lags) - len(found))
    notes = []
    for name, probes, passes, was in zip(REPLICAS, ready, after, before, strict=False):
        figures[f"{name} /readyz"] = float(probes["probes"])
        figures[f"{name} not 200"] = float(len(probes["failed"]))
        figures[f"{name} passes"] = passes - was
        if probes["failed"]:
            reasons = sorted(set(probes["failed"]), key=probes["failed"].index)
            notes.append(f"replica {name} /readyz not 200: {', '.join(reasons)}")
    return figures, notes


@contextmanager
def running_replicas(directory: Path, env: dict[str, str], count: int) -> Iterator[list[Server]]:
    """``count`` servers on one store, started side by side (each takes seconds to import
    and build its table), ready, and stopped on exit whatever happened."""
    with ThreadPoolExecutor(count) as pool:
        starting = [
            pool.submit(start_server, directory, env, READY_TIMEOUT_S) for _ in range(count)
        ]
    try:
        servers = [future.result() for future in starting]
        for server in servers:
            server.wait_until("/readyz", 200, READY_TIMEOUT_S)
        yield servers
    finally:
        for future in starting:
            if future.exception() is None:
                future.result().stop()


def server_settings(url: str, token: str, count: int) -> dict[str, str]:
    """The servers' settings: the defaults, except a quota above the table (it is one
    tenant's, so the writes are not refused)."""
    return {
        "database_url": url,
        "admin_token": token,
        "tenant_quota": str(10 * max(count, 1_000_000)),
    }


def run_write_load(
    counts: Sequence[int] = (10_000, 1_000_000),
    seed: int = 0,
    *,
    backends: Sequence[str] = ("postgresql", "duckdb"),
    clients: int = CLIENTS,
    seconds: float = SECONDS,
    settings: dict[str, str] | None = None,
    admin_url: str = DEFAULT_ADMIN_URL,
) -> Table:
    """One row per backend and store size."""
    ready_columns = [
        Column(f"{name} {figure}", "{:,.0f}")
        for name in REPLICAS
        for figure in ("/readyz", "not 200", "passes")
    ]
    table = Table(
        name="write_load",
        title=f"Durable single writes through the API: {clients} clients creating and "
        f"deleting for {seconds:.0f} s",
        columns=[
            Column("store"),
            Column("subscriptions", "{:,}"),
            Column("writes/s", "{:,.0f}", chart=True),
            Column("failed", "{:,.0f}"),
            Column("write p50 ms", "{:,.1f}"),
            Column("write p99 ms", "{:,.1f}"),
            Column("write max ms", "{:,.0f}"),
            Column("match p99 quiet ms", "{:,.1f}"),
            Column("match p99 churn ms", "{:,.1f}"),
            Column("lag p99 ms", "{:,.1f}"),
            Column("lag lost", "{:,.0f}"),
            *ready_columns,
            *(Column(f"{name} CPU ms/write", "{:,.2f}") for name in REPLICAS),
            Column("PG CPU ms/write", "{:,.2f}"),
            Column("writes/commit", "{:,.1f}"),
        ],
        notes=[
            "writes: POST /v1/subscriptions then DELETE of it, each client as one of the "
            "stored subscribers (q0, q1, ...) on one keep-alive connection in a process of its "
            "own; p50/p99 per write (create or delete).",
            f"match: POST /v1/match at {PROBE_RATE:.0f}/s from another process, "
            f"{min(QUIET_S, seconds):.0f} s before the churn (quiet) and during it (churn).",
            "lag (PostgreSQL, two replicas): 201 on replica A -> a match on replica B "
            f"finds it; a probe every {LAG_EVERY_S} s during the churn.",
            f"/readyz: GET on each replica every {READY_EVERY_S * 1000:.0f} ms during the "
            "churn, and how many did not answer 200 (within 2 s); passes: reconciliation "
            "passes the replica completed during the churn (topicstore_reconcile_passes_total "
            "in /metrics), with TOPICSTORE_RECONCILE_INTERVAL="
            f"{seconds / RECONCILE_PASSES:.3g} s (default 300).",
            "writes/commit: replica A's admin writes per write transaction during the churn "
            "(group commit: topicstore_write_jobs_total / topicstore_write_transactions_total).",
            "CPU ms/write: user + system CPU during the churn, per write answered, of each "
            "replica's process and of the PostgreSQL backends serving its database (when "
            "PostgreSQL runs on this machine; not its WAL writer or checkpointer), which the "
            "machine's load does not inflate; the clients' own CPU is not counted.",
        ],
    )
    token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="topicstore-write-") as tmp:
        directory = Path(tmp)
        for backend in backends:
            if backend == "postgresql" and not postgres_reachable(admin_url):
                table.notes.append(f"PostgreSQL skipped: not reachable at {admin_url}")
                continue
            for count in counts:
                with big_store(backend, count, seed, directory, admin_url) as url:
                    env = {
                        **server_settings(url, token, count),
                        # passes due within the churn
                        "reconcile_interval": f"{seconds / RECONCILE_PASSES:.3g}",
                        **(settings or {}),
                    }
                    replicas = 2 if backend == "postgresql" else 1
                    with running_replicas(directory, env, replicas) as servers:
                        figures, notes = measure(servers, token, clients, seconds, directory, url)
                table.rows.append(
                    [
                        backend,
                        count,
                        *(figures.get(c.title, float("nan")) for c in table.columns[2:]),
                    ]
                )
                table.notes += [f"{backend}, {count:,}: {note}" for note in notes]
    return table


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--backends", nargs="+", default=["postgresql", "duckdb"])
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn workers per replica")
    args = parser.parse_args(argv)
    settings = {"workers": str(args.workers)} if args.workers != 1 else {}
    table = run_write_load(
        args.counts,
        backends=args.backends,
        clients=args.clients,
        seconds=args.seconds,
        settings=settings,
    )
    print(format_table(table))


if __name__ == "__main__":
    main()
