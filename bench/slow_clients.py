"""Slow clients: many connections that send half a request and then hang (the slowloris
shape), against a running server, while health probes and matches are timed on fresh
connections. The test (a few hundred clients) and the ``slow_clients`` table (20,000)
both use it.

A slow client sends either part of its headers or all headers and part of a body, then
waits for the server to answer or close; it records how long it was held and the status
and error code it was answered with (None: closed without an answer)."""

from __future__ import annotations

import asyncio
import multiprocessing
import resource
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import httpx
import orjson

from bench.percentiles import percentile
from bench.report import Column, Table
from bench.server import running_server

#: Half a request: headers never finished, or a body announced and never sent whole.
PARTIAL_HEADERS: bytes = b"POST /v1/match HTTP/1.1\r\nHost: slow\r\nContent-Type: app"
PARTIAL_BODY: bytes = (
    b"POST /v1/match HTTP/1.1\r\nHost: slow\r\nContent-Type: application/json\r\n"
    b"Content-Length: 64\r\n\r\n" + b'{"topic": "slow.'
)


@dataclass(frozen=True, slots=True)
class Held:
    """One slow client: ``status``/``code`` it was answered with (None if closed without
    one, or never connected: ``error``), and seconds from connect to the server's close."""

    status: int | None
    code: str | None
    held_s: float | None
    error: str | None = None
    connect_s: float | None = None


def _answer(data: bytes) -> tuple[int | None, str | None]:
    if not data.startswith(b"HTTP/1.1 "):
        return None, None
    status = int(data[9:12])
    _, _, body = data.partition(b"\r\n\r\n")
    try:
        code = orjson.loads(body)["error"]["code"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        code = None
    return status, code


async def _hang(
    host: str, port: int, partial: bytes, give_up_s: float, connected: list[int]
) -> Held:
    began = time.monotonic()
    try:
        # As patient as the wait for the answer: a connect waits out SYN retries when
        # the listen queue overflows (20,000 arrive faster than one process accepts).
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), give_up_s)
    except (OSError, TimeoutError) as e:
        return Held(None, None, None, f"connect: {type(e).__name__}")
    started = time.monotonic()
    connect_s = started - began
    connected[0] += 1
    try:
        writer.write(partial)
        data = await asyncio.wait_for(reader.read(), give_up_s)
    except TimeoutError:
        return Held(None, None, None, "never_cut", connect_s)
    except OSError as e:
        return Held(None, None, time.monotonic() - started, type(e).__name__, connect_s)
    finally:
        writer.close()
    return Held(*_answer(data), time.monotonic() - started, None, connect_s)


async def hang_many(host: str, port: int, count: int, give_up_s: float) -> list[Held]:
    """``count`` slow clients at once, half of each shape; returns when all are done."""
    connected = [0]
    tasks = [
        _hang(host, port, PARTIAL_HEADERS if i % 2 else PARTIAL_BODY, give_up_s, connected)
        for i in range(count)
    ]
    return list(await asyncio.gather(*tasks))


def _run(args: tuple[str, int, int, float]) -> list[Held]:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return asyncio.run(hang_many(*args))


def hang_in_processes(
    host: str, port: int, count: int, give_up_s: float, processes: int
) -> list[Held]:
    """``hang_many`` split over ``processes`` (one process cannot hold more connections
    than its file-descriptor limit)."""
    share = [count // processes + (i < count % processes) for i in range(processes)]
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        parts = pool.map(_run, [(host, port, n, give_up_s) for n in share])
    return [held for part in parts for held in part]


@dataclass
class Probes:
    """Requests timed while the slow clients hang, each on a new connection (as a load
    balancer's health check makes them): latencies of the answered ones, the failures."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)


def probe_while(
    url: str,
    requests: Mapping[str, Callable[[httpx.Client], httpx.Response]],
    running: threading.Event,
    interval_s: float = 0.05,
) -> Probes:
    """Send each of ``requests`` in turn, on fresh connections, until ``running`` clears."""
    found = Probes({name: [] for name in requests}, {name: [] for name in requests})
    limits = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(base_url=url, timeout=5.0, limits=limits) as client:
        while running.is_set():
            for name, send in requests.items():
                started = time.perf_counter()
                try:
                    response = send(client)
                except httpx.HTTPError as e:
                    found.failures[name].append(type(e).__name__)
                    continue
                if response.status_code != 200:
                    found.failures[name].append(str(response.status_code))
                else:
                    found.latencies[name].append(time.perf_counter() - started)
            time.sleep(interval_s)
    return found


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
