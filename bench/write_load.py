"""Durable single writes through the HTTP API under churn, as an operator sees them.

A real ``topicstore serve`` on a store already holding ``count`` subscriptions (PostgreSQL
database ``topicstore_<count>`` or a DuckDB file, made once by ``bench.big_store``) takes
``clients`` concurrent clients, each creating a subscription and deleting it again over
one keep-alive connection, for ``seconds``. Meanwhile another process sends
``POST /v1/match`` at a steady pace and times each answer; the same prober runs before the
churn too, so the match p99 with churn is judged against the same server without it. On
PostgreSQL a second replica (``--replica``) serves the same database, and the prober also
times how long a subscription created on the first takes to match on the second.

Clients run in processes of their own (``python -m bench.write_load client ...``), so the
server's GIL is not shared with them; every phase has a fixed duration and every process
is stopped at the end, whatever happened.
"""

from __future__ import annotations

import argparse
import http.client
import json
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from bench.big_store import big_duckdb, big_postgres
from bench.percentiles import percentile
from bench.report import Column, Table, format_table
from harness.scratch_db import DEFAULT_ADMIN_URL, postgres_reachable
from harness.server import Server, running_server

#: Concurrent writing clients and the seconds they write, as the write-path target states.
CLIENTS: Final = 8
SECONDS: Final = 60.0
#: Matches per second the prober sends (a steady pace, so its latency is not its own load).
PROBE_RATE: Final = 100.0
#: Seconds of matching measured before the churn (the baseline of the match p99).
QUIET_S: Final = 10.0
#: How often the lag prober creates a subscription on one replica to find on the other.
LAG_EVERY_S: Final = 0.25
#: Seconds a lag probe waits for its subscription on the other replica before counting it
#: as lost.
LAG_TIMEOUT_S: Final = 10.0
READY_TIMEOUT_S: Final = 300.0


def _connection(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)


def _request(
    conn: http.client.HTTPConnection, method: str, path: str, token: str, body: Any = None
) -> tuple[int, Any]:
    """One request; sent again once on a new connection if the server had closed the idle
    one (uvicorn drops keep-alive connections idle for 5 s)."""
    payload = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    for attempt in (1, 2):
        try:
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            data = response.read()
        except (http.client.RemoteDisconnected, ConnectionError):
            conn.close()
            if attempt == 2:
                raise
            continue
        return response.status, (json.loads(data) if data else None)
    raise AssertionError("unreachable")


def _churn(url: str, token: str, client: int, seconds: float, out: list[Any]) -> None:
    """Create and delete one subscription after the other until ``seconds`` pass; each
    write's latency in ``out`` (a failed write as None)."""
    conn = _connection(url)
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        body = {"subscriber": f"churn-{client}", "pattern": f"churn.{client}.*.{i}"}
        started = time.perf_counter()
        status, answer = _request(conn, "POST", "/v1/subscriptions", token, body)
        out.append(time.perf_counter() - started if status == 201 else None)
        if status != 201:
            continue
        started = time.perf_counter()
        status, _ = _request(conn, "DELETE", f"/v1/subscriptions/{answer['id']}", token)
        out.append(time.perf_counter() - started if status == 204 else None)
        i += 1
    conn.close()


def _probe(url: str, token: str, seconds: float, out: list[float]) -> None:
    """``POST /v1/match`` at ``PROBE_RATE`` per second; each answer's latency."""
    conn = _connection(url)
    deadline = time.monotonic() + seconds
    step = 1.0 / PROBE_RATE
    next_at = time.monotonic()
    i = 0
    while next_at < deadline:
        time.sleep(max(0.0, next_at - time.monotonic()))
        body = {"topic": f"stock.nyse.t{i % 1000}.trade.x"}
        started = time.perf_counter()
        status, _ = _request(conn, "POST", "/v1/match", token, body)
        if status == 200:
            out.append(time.perf_counter() - started)
        next_at += step
        i += 1
    conn.close()


def _lag(writer: str, follower: str, token: str, seconds: float, out: list[float | None]) -> None:
    """Every ``LAG_EVERY_S``: create a subscription on ``writer``, then poll ``follower``
    until a match finds it; the seconds from the 201 to that match (None: lost)."""
    write, read = _connection(writer), _connection(follower)
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        topic = f"lag.{secrets.token_hex(6)}"
        status, answer = _request(
            write, "POST", "/v1/subscriptions", token, {"subscriber": "lag", "pattern": topic}
        )
        if status != 201:
            out.append(None)
            continue
        written = time.perf_counter()
        found = None
        while time.perf_counter() - written < LAG_TIMEOUT_S:
            _, result = _request(read, "POST", "/v1/match", token, {"topic": topic})
            if result and answer["id"] in result.get("subscriptions", []):
                found = time.perf_counter() - written
                break
        out.append(found)
        _request(write, "DELETE", f"/v1/subscriptions/{answer['id']}", token)
        i += 1
        time.sleep(LAG_EVERY_S)
    write.close()
    read.close()


def client_main(argv: Sequence[str]) -> None:
    """``python -m bench.write_load client ROLE ...``: one client process; prints its
    samples as one JSON line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=("churn", "probe", "lag"))
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("seconds", type=float)
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--follower")
    args = parser.parse_args(argv)
    samples: list[Any] = []
    if args.role == "probe":
        _probe(args.url, args.token, args.seconds, samples)
    elif args.role == "lag":
        _lag(args.url, args.follower, args.token, args.seconds, samples)
    else:
        outs: list[list[Any]] = [[] for _ in range(args.clients)]
        threads = [
            threading.Thread(target=_churn, args=(args.url, args.token, c, args.seconds, outs[c]))
            for c in range(args.clients)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        samples = [s for out in outs for s in out]
    print(json.dumps(samples))


def _spawn(*args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "bench.write_load", "client", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def _collect(process: subprocess.Popen[str], timeout_s: float) -> list[Any]:
    try:
        out, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    samples: list[Any] = json.loads(out.strip().splitlines()[-1])
    return samples


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def measure(
    servers: Sequence[Server], token: str, clients: int, seconds: float
) -> dict[str, float]:
    """The figures of one store: the quiet match p99, then the churn with its probes."""
    url = servers[0].url
    quiet_s = min(QUIET_S, seconds)
    quiet = _collect(_spawn("probe", url, token, str(quiet_s)), quiet_s + 60)
    probe = _spawn("probe", url, token, str(seconds))
    lag = None
    if len(servers) > 1:
        lag = _spawn("lag", url, token, str(seconds), "--follower", servers[1].url)
    churn = _spawn("churn", url, token, str(seconds), "--clients", str(clients))
    writes = _collect(churn, seconds + 120)
    busy = _collect(probe, seconds + 120)
    lags = _collect(lag, seconds + 120) if lag is not None else []
    done = [w for w in writes if w is not None]
    found = [x for x in lags if x is not None]
    figures = {
        "writes/s": len(done) / seconds,
        "failed": float(len(writes) - len(done)),
        "write p50 ms": _ms(percentile(done, 50)) if done else float("nan"),
        "write p99 ms": _ms(percentile(done, 99)) if done else float("nan"),
        "write max ms": _ms(max(done)) if done else float("nan"),
        "match p99 quiet ms": _ms(percentile(quiet, 99)),
        "match p99 churn ms": _ms(percentile(busy, 99)),
    }
    if lag is not None:
        figures["lag p99 ms"] = _ms(percentile(found, 99)) if found else float("nan")
        figures["lag lost"] = float(len(lags) - len(found))
    return figures


def _store_url(backend: str, count: int, seed: int, directory: Path, admin_url: str) -> str:
    if backend == "postgresql":
        return big_postgres(count, seed, admin_url)
    return big_duckdb(directory / f"write-{count}.duckdb", count, seed)


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
        ],
        notes=[
            "writes: POST /v1/subscriptions then DELETE of it, each client on one keep-alive "
            "connection in a process of its own; p50/p99 per write (create or delete).",
            f"match: POST /v1/match at {PROBE_RATE:.0f}/s from another process, "
            f"{min(QUIET_S, seconds):.0f} s before the churn (quiet) and during it (churn).",
            "lag (PostgreSQL, two replicas): 201 on the first replica -> a match on the second "
            f"finds it; a probe every {LAG_EVERY_S} s during the churn.",
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
                url = _store_url(backend, count, seed, directory, admin_url)
                # The table is one tenant's: a quota above it, so the churn is not refused.
                env = {
                    "database_url": url,
                    "admin_token": token,
                    "tenant_quota": str(10 * max(count, 1_000_000)),
                    **(settings or {}),
                }
                replicas = 2 if backend == "postgresql" else 1
                with running_server(directory, env, READY_TIMEOUT_S) as first:
                    first.wait_until("/readyz", 200, READY_TIMEOUT_S)
                    servers = [first]
                    if replicas == 2:
                        with running_server(directory, env, READY_TIMEOUT_S) as second:
                            second.wait_until("/readyz", 200, READY_TIMEOUT_S)
                            figures = measure([first, second], token, clients, seconds)
                    else:
                        figures = measure(servers, token, clients, seconds)
                table.rows.append(
                    [
                        backend,
                        count,
                        *(figures.get(c.title, float("nan")) for c in table.columns[2:]),
                    ]
                )
    return table


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "client":
        client_main(argv[1:])
        return
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
