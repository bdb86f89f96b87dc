"""The ``slow_clients`` table: a real ``topicstore serve`` while 20,000 slow clients hang
on it (``harness.slow_clients`` drives them), health probes and matches timed on fresh
connections before and while they do, and what became of each client."""

from __future__ import annotations

import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import httpx

from bench.percentiles import percentile
from bench.report import Column, Table
from harness.server import running_server
from harness.slow_clients import Held, hang_in_processes, probe_while

#: Connections one client process opens at most (its descriptor limit here is 20,000).
PER_PROCESS: Final = 6_000
BASELINE_S: Final = 3.0


def _peak_rss_mib(pid: int) -> float | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


def _ms(values: list[float], q: int) -> float | None:
    return percentile([v * 1000 for v in values], q) if values else None


def run_slow_clients(count: int, timeout_s: float) -> Iterator[Table]:
    """A real ``topicstore serve`` (defaults but ``TOPICSTORE_REQUEST_TIMEOUT``), ``count``
    slow clients at once from several processes, probes before and while they hang."""
    probes_table = Table(
        name="slow_clients",
        title=f"/healthz and /v1/match on new connections while {count:,} clients hang",
        columns=[
            Column("probe", "{}"),
            Column("answered"),
            Column("failed"),
            Column("p50 (ms)", "{:,.1f}", chart=True),
            Column("p99 (ms)", "{:,.1f}", chart=True),
            Column("max (ms)", "{:,.1f}"),
        ],
    )
    fate = Table(
        name="slow_clients_cut",
        title=f"What became of {count:,} slow clients (request timeout {timeout_s:g} s)",
        columns=[
            Column("outcome", "{}"),
            Column("clients", chart=True),
            Column("held p50 (s)", "{:,.2f}"),
            Column("held max (s)", "{:,.2f}"),
            Column("connect p50 (s)", "{:,.2f}"),
            Column("connect max (s)", "{:,.2f}"),
        ],
    )
    directory = Path(tempfile.mkdtemp(prefix="topicstore-slow-"))
    settings = {
        "database_url": f"duckdb:///{directory / 'slow.duckdb'}",
        "admin_token": "slow-clients-bench-token",
        "match_auth": "false",
        "request_timeout": str(timeout_s),
    }
    requests: dict[str, Callable[[httpx.Client], httpx.Response]] = {
        "/healthz": lambda c: c.get("/healthz"),
        "/v1/match": lambda c: c.post("/v1/match", json={"topic": "slow.x"}),
    }
    with running_server(directory, settings) as server:
        server.wait_until("/readyz", 200)
        headers = {"Authorization": "Bearer slow-clients-bench-token"}
        httpx.post(
            server.url + "/v1/subscriptions",
            json={"subscriber": "q", "pattern": "slow.#"},
            headers=headers,
        ).raise_for_status()
        running = threading.Event()
        running.set()
        threading.Timer(BASELINE_S, running.clear).start()
        before = probe_while(server.url, requests, running)
        held: list[Held] = []
        processes = -(-count // PER_PROCESS)
        hanging = threading.Thread(
            target=lambda: held.extend(
                hang_in_processes("127.0.0.1", server.port, count, timeout_s + 60, processes)
            )
        )
        running.set()
        hanging.start()

        def stop_probing() -> None:
            hanging.join()
            running.clear()

        threading.Thread(target=stop_probing, daemon=True).start()
        during = probe_while(server.url, requests, running)
        peak = _peak_rss_mib(server.process.pid)
        log_lines = len(server.output().splitlines())
    for phase, probes in (("before", before), ("while hanging", during)):
        for name in requests:
            latencies = probes.latencies[name]
            probes_table.rows.append(
                [
                    f"{name}, {phase}",
                    len(latencies),
                    len(probes.failures[name]),
                    _ms(latencies, 50),
                    _ms(latencies, 99),
                    max(latencies) * 1000 if latencies else None,
                ]
            )
    outcomes: dict[str, list[Held]] = {}
    for h in held:
        if h.status is not None:
            label = f"answered {h.status} {h.code}"
        else:
            label = h.error or "closed without an answer"
        outcomes.setdefault(label, []).append(h)
    for label, group in sorted(outcomes.items(), key=lambda item: -len(item[1])):
        times = [h.held_s for h in group if h.held_s is not None]
        connects = [h.connect_s for h in group if h.connect_s is not None]
        fate.rows.append(
            [
                label,
                len(group),
                percentile(times, 50) if times else None,
                max(times, default=None),
                percentile(connects, 50) if connects else None,
                max(connects, default=None),
            ]
        )
    failures = {name: dict(Counter(f)) for name, f in during.failures.items() if f}
    probes_table.notes.append(
        f"One server process (uvicorn, default settings but TOPICSTORE_REQUEST_TIMEOUT="
        f"{timeout_s:g}); each probe on a new connection, as a load balancer's; the slow "
        f"clients from {processes} processes, half stopping mid-headers, half mid-body. "
        f"Server peak RSS {peak if peak is None else round(peak)} MiB; "
        f"{log_lines} lines of server output. Failures while hanging: {failures or 'none'}."
    )
    fate.notes.append(
        "408: held until the request deadline, then answered and closed; 503 "
        "too_many_connections: shed when a newer connection arrived at the cap "
        "(TOPICSTORE_MAX_CONNECTIONS, at most the descriptor limit - 256)."
    )
    yield probes_table
    yield fate
