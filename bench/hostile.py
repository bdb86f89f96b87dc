"""The ``hostile`` table: what a tenant token can make one real ``topicstore serve`` do.
The requests of issue 32, at its sizes: explain against 20 named subscribers of 10,000
patterns each on a topic of 127 dots, explain of long topics against one 10,000-pattern
subscriber, overlap and containment listings with costly query patterns, a redundancy
check of 10,000 mutually overlapping patterns, a batch of topics into a 20,000-member
``hash`` group, and one tenant's match p50 while another floods single matches into that
group. Each row: the answer's status and code, and its seconds on the client (the slowest
of ``repeats``). The target of each: an answer within 1 s, 200 within the request's budget
or the budget's 4xx."""

from __future__ import annotations

import multiprocessing
import tempfile
import time
from collections.abc import Callable
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any, Final

import httpx
import orjson

from bench.percentiles import percentile
from bench.report import Cell, Column, Table
from harness.scratch_db import postgres_reachable, scratch_database
from harness.server import Server, running_server

OPERATOR: Final = "hostile-bench-operator-token"
TOKEN_A: Final = "hostile-bench-tenant-a-token"
TOKEN_B: Final = "hostile-bench-tenant-b-token"
#: Named subscribers of the explain row, each with ``patterns`` patterns.
NAMED: Final = 20
#: The overlap and containment query patterns of the issue.
QUERIES: Final = {
    "#.#.#.a.#.b.#": "#.#.#.a.#.b.#",
    "128 stars": ".".join(["*"] * 128),
    "#.a.* x14": ".".join(["#.a.*"] * 14),
    "(#.a) x60": ".".join(["#.a"] * 60),
}
FLOOD_CLIENTS: Final = 4
#: Matches a second tenant b's clients send together, at most (the issue's ~50/s).
FLOOD_RATE: Final = 50
#: Seconds the flood runs before and after tenant a's probe.
FLOOD_SETTLE_S: Final = 0.3
TIMEOUT_S: Final = 180.0
BULK: Final = 10_000
LONG_TOPICS: Final = {
    "127 dots": "." * 127,
    "85 words": ".".join(["w1"] * 85),
    "128 words": ".".join(["w"] * 128),
}
IDLE: Final = "tenant a match p50, idle"
FLOODED: Final = f"tenant a match p50, b floods hot.x ({FLOOD_CLIENTS} clients)"


def row_labels(patterns: int, topics: int) -> list[str]:
    """The table's rows, in order, for ``patterns`` per subscriber and ``topics`` a batch."""
    return [
        f"explain, 127 dots, {NAMED} x {patterns:,} patterns named",
        *(
            f"explain, {label}, 1 x {patterns:,} patterns named"
            for label in LONG_TOPICS
            if label != "127 dots"
        ),
        *(f"?{relation}={label}" for label in QUERIES for relation in ("overlaps", "covered_by")),
        f"redundant, {patterns:,} #.rN.#",
        f"batch of {topics:,} hot.x, hash group",
        IDLE,
        FLOODED,
    ]


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _store(client: httpx.Client, tenant: str, items: list[dict[str, Any]]) -> None:
    for start in range(0, len(items), BULK):
        chunk = [{**item, "tenant": tenant} for item in items[start : start + BULK]]
        response = client.post("/v1/subscriptions/bulk", json={"items": chunk})
        if response.status_code != 200:
            raise RuntimeError(f"loading failed: {response.status_code} {response.text[:300]}")


def _fill(server: Server, patterns: int, members: int) -> None:
    """Tenant a: ``NAMED`` subscribers ``w0..`` of ``patterns`` ``#.wJ.#.wK.#.xI`` patterns
    each, and ``r`` with ``patterns`` ``#.rN.#``; tenant b: a ``hash`` group of
    ``members`` ``hot.#`` subscriptions."""
    with server.client(_headers(OPERATOR), timeout_s=TIMEOUT_S) as client:
        explained = [
            {"subscriber": f"w{s}", "pattern": f"#.w{i % 7}.#.w{i % 11}.#.x{i}"}
            for s in range(NAMED)
            for i in range(patterns)
        ]
        _store(client, "a", explained)
        _store(client, "a", [{"subscriber": "r", "pattern": f"#.r{n}.#"} for n in range(patterns)])
        group = [
            {"subscriber": f"m{n}", "pattern": "hot.#", "group": "hot", "group_policy": "hash"}
            for n in range(members)
        ]
        _store(client, "b", group)


def _timed(
    server: Server, send: Callable[[], httpx.Response], repeats: int
) -> tuple[int, str, float, float]:
    """Status, error code (``-`` for a 2xx), and the most seconds on the client and CPU
    seconds of the server among ``repeats`` sends."""
    slowest = most_cpu = 0.0
    status, code = 0, ""
    for _ in range(repeats):
        cpu = server.cpu_seconds()
        started = time.perf_counter()
        try:
            response = send()
        except httpx.TimeoutException:
            took = time.perf_counter() - started
            return 0, f"client gave up after {TIMEOUT_S:g} s", took, server.cpu_seconds() - cpu
        slowest = max(slowest, time.perf_counter() - started)
        most_cpu = max(most_cpu, server.cpu_seconds() - cpu)
        status = response.status_code
        code = "-" if status < 300 else orjson.loads(response.content)["error"]["code"]
    return status, code, slowest, most_cpu


def _match_p50(server: Server, seconds: float) -> tuple[float, int]:
    """Tenant a's single-match p50 (s) over ``seconds`` of back-to-back matches, and how
    many it made."""
    latencies: list[float] = []
    with server.client(_headers(TOKEN_A)) as client:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            started = time.perf_counter()
            response = client.post("/v1/match", json={"topic": "w1.x5"})
            if response.status_code == 200:
                latencies.append(time.perf_counter() - started)
    return percentile(latencies, 50), len(latencies)


def _flood_client(url: str, ready: Barrier, seconds: float, answered: Queue[int]) -> None:
    """One of tenant b's clients, in a process of its own (clients in the measuring process
    would take its GIL from tenant a's probe): once every client is ready, single matches
    into b's group for ``seconds``, at ``FLOOD_RATE / FLOOD_CLIENTS`` a second or as fast
    as they are answered; puts how many were answered 200. Paced like the issue's clients,
    so the flood's own CPU stays small and the figure is the server's."""
    count = 0
    gap = FLOOD_CLIENTS / FLOOD_RATE
    with httpx.Client(base_url=url, headers=_headers(TOKEN_B), timeout=TIMEOUT_S) as client:
        client.get("/healthz")  # connected before the clock starts
        ready.wait(TIMEOUT_S)
        now = time.monotonic()
        end, due = now + seconds, now
        while now < end:
            time.sleep(max(0.0, due - now))
            count += client.post("/v1/match", json={"topic": "hot.x"}).status_code == 200
            due += gap
            now = time.monotonic()
    answered.put(count)


def _flooded_p50(server: Server, seconds: float) -> tuple[float, float]:
    """Tenant a's single-match p50 (s) while ``FLOOD_CLIENTS`` processes of tenant b match
    into its group, and b's rate (matches/s)."""
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(FLOOD_CLIENTS + 1)
    answered: Queue[int] = context.Queue()
    flood_s = seconds + 2 * FLOOD_SETTLE_S
    clients = [
        context.Process(target=_flood_client, args=(server.url, ready, flood_s, answered))
        for _ in range(FLOOD_CLIENTS)
    ]
    for client in clients:
        client.start()
    try:
        ready.wait(TIMEOUT_S)
        time.sleep(FLOOD_SETTLE_S)
        busy, _ = _match_p50(server, seconds)
        total = sum(answered.get(timeout=TIMEOUT_S) for _ in clients)
    finally:
        for client in clients:
            client.join(TIMEOUT_S)
    return busy, total / flood_s


def _rows(
    server: Server, patterns: int, topics: int, repeats: int, probe_s: float
) -> tuple[list[list[Cell]], float]:
    """The rows of ``row_labels``, and tenant b's flood rate (matches/s)."""
    rows: list[list[Cell]] = []
    with (
        server.client(_headers(TOKEN_A), timeout_s=TIMEOUT_S) as a,
        server.client(_headers(TOKEN_B), timeout_s=TIMEOUT_S) as b,
    ):
        named = [("subscriber", f"w{s}") for s in range(NAMED)]

        def explain(topic: str, who: list[tuple[str, str]]) -> Callable[[], httpx.Response]:
            return lambda: a.get("/v1/match/explain", params=[("topic", topic), *who])

        sends: list[Callable[[], httpx.Response]] = [
            explain(LONG_TOPICS["127 dots"], named),
            *(explain(t, named[:1]) for label, t in LONG_TOPICS.items() if label != "127 dots"),
            *(
                lambda r=relation, q=query: a.get("/v1/subscriptions", params={r: q})
                for query in QUERIES.values()
                for relation in ("overlaps", "covered_by")
            ),
            lambda: a.get("/v1/subscribers/r/redundant"),
            lambda: b.post("/v1/match/batch", json={"topics": ["hot.x"] * topics}),
        ]
        for label, send in zip(row_labels(patterns, topics), sends, strict=False):
            rows.append([label, *_timed(server, send, repeats)])
    idle, _ = _match_p50(server, probe_s)
    busy, rate = _flooded_p50(server, probe_s)
    rows.append([IDLE, 200, "-", idle, None])
    rows.append([FLOODED, 200, "-", busy, None])
    return rows, rate


def run_hostile(
    patterns: int,
    members: int,
    topics: int,
    repeats: int,
    probe_s: float,
    *,
    postgres: bool = True,
) -> Table:
    """A real server on PostgreSQL (DuckDB when it is not reachable or not ``postgres``)
    with the hostile tenants' subscriptions; every hostile request of the module docstring,
    timed from a client (single matches for ``probe_s`` seconds, idle and flooded)."""
    table = Table(
        name="hostile",
        title="Hostile requests of one tenant token: answer and seconds on the client",
        columns=[
            Column("request", "{}"),
            Column("status"),
            Column("code", "{}"),
            Column("seconds", "{:,.4f}", chart=True),
            Column("server CPU (s)", "{:,.3f}"),
        ],
        unit="s",
    )
    directory = Path(tempfile.mkdtemp(prefix="topicstore-hostile-"))
    settings = {
        "admin_token": OPERATOR,
        "tenant_tokens": orjson.dumps({TOKEN_A: "a", TOKEN_B: "b"}).decode(),
        "reconcile_interval": "86400",
    }
    use_postgres = postgres and postgres_reachable()
    flood: list[float] = []

    def measure(url: str) -> None:
        with running_server(directory, {**settings, "database_url": url}) as server:
            server.wait_until("/readyz", 200, TIMEOUT_S)
            _fill(server, patterns, members)
            server.wait_until("/readyz", 200, TIMEOUT_S)
            rows, rate = _rows(server, patterns, topics, repeats, probe_s)
            table.rows.extend(rows)
            flood.append(rate)

    if use_postgres:
        with scratch_database(prefix="topicstore_hostile") as url:
            measure(url)
    else:
        measure(f"duckdb:///{directory / 'hostile.duckdb'}")
    table.notes.append(
        f"One server process (uvicorn, default settings) on "
        f"{'PostgreSQL' if use_postgres else 'DuckDB'}; tenant a holds {NAMED} subscribers "
        f"of {patterns:,} patterns #.wJ.#.wK.#.xI and {patterns:,} #.rN.#, tenant b a hash "
        f"group of {members:,} hot.# members. Seconds: the slowest of {repeats} on the "
        f"client; server CPU: the most the server process spent on one of them, all threads "
        f"(what the machine's load does not inflate). The match rows: the p50 of tenant a's "
        f"single matches over {probe_s:g} s, idle and while tenant b's {FLOOD_CLIENTS} "
        f"clients (at most {FLOOD_RATE}/s together) matched {flood[0]:,.0f}/s into its "
        f"group. Target: every answer within 1 s, the flooded p50 within 2x the idle one."
    )
    return table
