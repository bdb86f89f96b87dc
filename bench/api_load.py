"""The service under HTTP load: a real ``topicstore serve`` (one uvicorn worker, DuckDB in a
temporary directory) loaded with subscriptions through the bulk API, then driven from a
separate process (``bench.loadgen``: wrk when installed) on 127.0.0.1.

In one run it measures a trivial endpoint (``GET /healthz``), ``POST /v1/match`` and
``POST /v1/match/batch``, so the match rate is judged against what the same server, client
and machine do for a request that does no work. Every phase has a fixed duration or count
and the server is stopped at the end, whatever happened.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx
import orjson

from bench.loadgen import LoadResult, Target, run_load
from bench.report import Cell, Column, Table
from harness.server import Server, running_server
from harness.workloads import MarketWorkload, market_workload

#: The service's targets: /v1/match at least this share of the trivial endpoint's rate...
MATCH_RATIO_TARGET: Final = 0.7
#: ... and /v1/match/batch at least this many topics per second.
BATCH_TOPICS_TARGET: Final = 400_000
#: Items per bulk request while loading (the service's default max batch).
LOAD_BATCH: Final = 10_000
#: Distinct request bodies the load client rotates through, per endpoint.
BODIES: Final = 64
BATCH_BODIES: Final = 8
#: Keep-alive connections of the load client.
CONNECTIONS: Final = 8
WARMUP_S: Final = 1.0
READY_TIMEOUT_S: Final = 300.0
#: Drift checks rebuild the whole table; not during a measurement.
RECONCILE_INTERVAL_S: Final = 86_400

HEALTHZ: Final = "GET /healthz"
MATCH: Final = "POST /v1/match"
BATCH: Final = "POST /v1/match/batch"
#: Realistic fan-outs for /v1/match besides the market workload's ~1 match per topic: extra
#: subscriptions ``fan{n}.{k}.#`` (n subscribers per k), topics ``fan{n}.{k}.x``. The 0.7x
#: target is stated at 14 matches per topic; 131 is reported.
FAN_OUTS: Final = (14, 131)
FAN_OUT_TARGET: Final = 14


def fan_out_label(n: int) -> str:
    return f"{MATCH} ({n} matches)"


def batch_fan_out_label(n: int, batch_topics: int) -> str:
    return f"{BATCH} ({batch_topics:,}, {n} matches)"


def fan_out_batches(n: int, batch_topics: int) -> list[list[str]]:
    """``BATCH_BODIES`` batches of ``fan{n}.{k}.x`` topics (n matches each), k rotating."""
    return [
        [f"fan{n}.{(b * batch_topics + i) % BODIES}.x" for i in range(batch_topics)]
        for b in range(BATCH_BODIES)
    ]


def fan_out_subscriptions() -> list[tuple[str, str]]:
    """(subscriber, pattern) pairs giving each ``fan{n}.{k}.x`` topic exactly n matches."""
    return [
        (f"fan{n}-s{j}", f"fan{n}.{k}.#") for n in FAN_OUTS for k in range(BODIES) for j in range(n)
    ]


@dataclass(frozen=True, slots=True)
class Service:
    """The running server and the admin token it was started with."""

    server: Server
    token: str

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@contextmanager
def serve(
    workdir: Path,
    engines: Sequence[str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> Iterator[Service]:
    """``topicstore serve`` with a DuckDB file under ``workdir`` (and ``engines`` when given,
    else the service's default; ``extra`` settings, named without the prefix); returns once
    it answers ``/healthz``, stops it on exit."""
    token = secrets.token_hex(24)
    settings = {
        "database_url": f"duckdb:///{workdir / 'topicstore.duckdb'}",
        "admin_token": token,
        "reconcile_interval": str(RECONCILE_INTERVAL_S),
        **(extra or {}),
    }
    if engines:
        settings["engines"] = orjson.dumps(list(engines)).decode()
    with running_server(workdir, settings) as server:
        yield Service(server, token)


def load_subscriptions(service: Service, patterns: Sequence[tuple[str, str]]) -> list[int]:
    """Store ``(subscriber, pattern)`` pairs through ``POST /v1/subscriptions/bulk`` in
    batches of ``LOAD_BATCH``; returns their ids in order."""
    ids: list[int] = []
    headers = {**service.auth, "Content-Type": "application/json"}
    with httpx.Client(base_url=service.url, timeout=300) as client:
        for start in range(0, len(patterns), LOAD_BATCH):
            items = [
                {"subscriber": s, "pattern": p} for s, p in patterns[start : start + LOAD_BATCH]
            ]
            response = client.post(
                "/v1/subscriptions/bulk", content=orjson.dumps({"items": items}), headers=headers
            )
            if response.status_code != 200 or response.json()["failed"]:
                raise RuntimeError(
                    f"bulk load failed ({response.status_code}): {response.text[:2_000]}; "
                    f"see {service.server.log}"
                )
            ids.extend(result["id"] for result in response.json()["results"])
    return ids


def _check_matches(service: Service, work: MarketWorkload, ids: list[int], sample: int) -> float:
    """Each sampled topic must match the subscription it was drawn from (a fast wrong
    answer is worthless); returns the mean number of matches per topic."""
    topics, sources = work.topics[:sample], work.sources[:sample]
    headers = {**service.auth, "Content-Type": "application/json"}
    with httpx.Client(base_url=service.url, timeout=60) as client:
        response = client.post(
            "/v1/match/batch", content=orjson.dumps({"topics": topics}), headers=headers
        )
    response.raise_for_status()
    results = response.json()["results"]
    for topic, source, result in zip(topics, sources, results, strict=True):
        if ids[source] not in result["subscriptions"]:
            raise RuntimeError(f"{topic!r} did not match subscription {ids[source]}: {result}")
    return sum(len(result["subscriptions"]) for result in results) / max(1, len(results))


def _check_fan_outs(service: Service) -> None:
    """Every fan-out topic matches exactly its n subscriptions."""
    headers = {**service.auth, "Content-Type": "application/json"}
    with httpx.Client(base_url=service.url, timeout=60) as client:
        for n in FAN_OUTS:
            topics = [f"fan{n}.{k}.x" for k in range(BODIES)]
            response = client.post(
                "/v1/match/batch", content=orjson.dumps({"topics": topics}), headers=headers
            )
            response.raise_for_status()
            counts = {len(r["subscriptions"]) for r in response.json()["results"]}
            if counts != {n}:
                raise RuntimeError(f"fan{n} topics matched {sorted(counts)} subscriptions")


def _fan_out_row(n: int, result: LoadResult, cpu_us: float, base: float) -> list[Cell]:
    ratio = result.rate / base if base else 0.0
    target = n == FAN_OUT_TARGET
    return [
        fan_out_label(n),
        result.rate,
        result.p50_ms,
        result.p99_ms,
        cpu_us,
        result.rate,
        ratio,
        f">= {MATCH_RATIO_TARGET}x /healthz" if target else "(reported)",
        ("yes" if ratio >= MATCH_RATIO_TARGET else "no") if target else "",
    ]


def _measure(
    target: Target, seconds: float, connections: int, workdir: Path, client: str
) -> LoadResult:
    result = run_load(target, seconds, connections, workdir, client=client)
    if result.failed:
        raise RuntimeError(f"{result.failed} of {result.requests} requests to {target.url} failed")
    return result


def run_api_load(
    subscriptions: int = 100_000,
    seconds: float = 5.0,
    batch_topics: int = 1_000,
    *,
    rounds: int = 3,
    connections: int = CONNECTIONS,
    client: str = "auto",
    engines: Sequence[str] | None = None,
    seed: int = 0,
    settings: Mapping[str, str] | None = None,
) -> Table:
    """Start the service, load ``subscriptions`` through the bulk API, then measure
    ``/healthz``, ``/v1/match`` and ``/v1/match/batch`` (``batch_topics`` per request) for
    ``seconds`` each from a separate load process (``client``: wrk, python or auto).

    The endpoints take turns, ``rounds`` times after a warm-up round, and each keeps its
    fastest round, so a burst of other work on the machine hits all three alike and a
    ratio compares like with like. ``engines`` sets ``TOPICSTORE_ENGINES`` (default: the
    service's own default); ``settings``, other settings of the service (``{"tracing":
    "true"}``: its cost, docs/operations.md#tracing)."""
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    if not 1 <= batch_topics <= LOAD_BATCH:
        raise ValueError(f"batch_topics must be 1 to {LOAD_BATCH:,} (the service's max batch)")
    table = Table(
        name="api_load",
        title=f"HTTP API under load: {subscriptions:,} subscriptions, one uvicorn worker",
        columns=[
            Column("endpoint", "{}"),
            Column("requests/s", chart=True),
            Column("p50 ms", "{:,.2f}"),
            Column("p99 ms", "{:,.2f}"),
            Column("server CPU µs", "{:,.0f}"),
            Column("topics/s"),
            Column("x /healthz", "{:,.2f}"),
            Column("target", "{}"),
            Column("met", "{}"),
        ],
        unit="requests/s",
        reference=HEALTHZ,
    )
    work = market_workload(subscriptions, BODIES + BATCH_BODIES * batch_topics, seed)
    single, batched = work.topics[:BODIES], work.topics[BODIES:]
    with tempfile.TemporaryDirectory(prefix="topicstore-api-load-") as tmp:
        workdir = Path(tmp)
        with serve(workdir, engines, settings) as service:
            started = time.perf_counter()
            ids = load_subscriptions(service, work.subscriptions)
            load_s = time.perf_counter() - started
            load_subscriptions(service, fan_out_subscriptions())
            service.server.wait_until("/readyz", 200, READY_TIMEOUT_S)
            fan_out = _check_matches(service, work, ids, min(len(work.topics), 1_000))
            _check_fan_outs(service)
            post = {**service.auth, "Content-Type": "application/json"}
            targets = {
                HEALTHZ: Target(f"{service.url}/healthz"),
                MATCH: Target(
                    f"{service.url}/v1/match",
                    "POST",
                    post,
                    [orjson.dumps({"topic": topic}) for topic in single],
                ),
                **{
                    fan_out_label(n): Target(
                        f"{service.url}/v1/match",
                        "POST",
                        post,
                        [orjson.dumps({"topic": f"fan{n}.{k}.x"}) for k in range(BODIES)],
                    )
                    for n in FAN_OUTS
                },
                BATCH: Target(
                    f"{service.url}/v1/match/batch",
                    "POST",
                    post,
                    [
                        orjson.dumps({"topics": batched[i : i + batch_topics]})
                        for i in range(0, len(batched), batch_topics)
                    ],
                ),
                **{
                    batch_fan_out_label(n, batch_topics): Target(
                        f"{service.url}/v1/match/batch",
                        "POST",
                        post,
                        [orjson.dumps({"topics": t}) for t in fan_out_batches(n, batch_topics)],
                    )
                    for n in FAN_OUTS
                },
            }
            for target in targets.values():
                run_load(target, WARMUP_S, connections, workdir / "warmup", client=client)
            load_avg = os.getloadavg()[0]
            results: dict[str, LoadResult] = {}
            cpu: dict[str, float] = {}  # the server's CPU µs per request in the kept round
            for round_ in range(rounds):
                for name, target in targets.items():
                    before = service.server.cpu_seconds()
                    result = _measure(target, seconds, connections, workdir / f"r{round_}", client)
                    spent = service.server.cpu_seconds() - before
                    if name not in results or result.rate > results[name].rate:
                        results[name] = result
                        cpu[name] = 1e6 * spent / max(1, result.requests)
    engines_note = ", ".join(engines) if engines else "the service default"
    base = results[HEALTHZ].rate
    match, batch = results[MATCH], results[BATCH]
    match_ratio = match.rate / base if base else 0.0
    batch_rate = batch.rate * batch_topics
    table.rows = [
        [
            HEALTHZ,
            base,
            results[HEALTHZ].p50_ms,
            results[HEALTHZ].p99_ms,
            cpu[HEALTHZ],
            None,
            1.0,
            "",
            "",
        ],
        [
            MATCH,
            match.rate,
            match.p50_ms,
            match.p99_ms,
            cpu[MATCH],
            match.rate,
            match_ratio,
            f">= {MATCH_RATIO_TARGET}x /healthz",
            "yes" if match_ratio >= MATCH_RATIO_TARGET else "no",
        ],
        *(
            _fan_out_row(n, results[fan_out_label(n)], cpu[fan_out_label(n)], base)
            for n in FAN_OUTS
        ),
        [
            f"{BATCH} ({batch_topics:,})",
            batch.rate,
            batch.p50_ms,
            batch.p99_ms,
            cpu[BATCH],
            batch_rate,
            None,
            f">= {BATCH_TOPICS_TARGET:,} topics/s",
            "yes" if batch_rate >= BATCH_TOPICS_TARGET else "no",
        ],
        *(
            [
                label := batch_fan_out_label(n, batch_topics),
                results[label].rate,
                results[label].p50_ms,
                results[label].p99_ms,
                cpu[label],
                results[label].rate * batch_topics,
                None,
                "(reported)",
                "",
            ]
            for n in FAN_OUTS
        ),
    ]
    table.notes += [
        f"client: {results[HEALTHZ].client}, a separate process on 127.0.0.1, closed loop over "
        f"{connections} keep-alive connections; the endpoints take turns, {rounds} x "
        f"{seconds:g} s after a {WARMUP_S:g} s warm-up, best round kept (its p50/p99, per "
        f"request at that concurrency); load average {load_avg:.1f} when measuring began.",
        "server CPU µs: the server process's user and system CPU (all its threads) per "
        "request answered in the kept round, a figure the machine's other load inflates "
        "far less than the rates.",
        f"server: `topicstore serve` as shipped, one uvicorn worker (one process; the box has "
        f"{os.cpu_count()} cores, shared with the client), DuckDB in a temporary directory, "
        f"engines {engines_note}, access log off (the default), match auth on (bearer token).",
        f"loaded {subscriptions:,} subscriptions through POST /v1/subscriptions/bulk in "
        f"batches of {LOAD_BATCH:,}: {load_s:.1f} s ({subscriptions / load_s:,.0f}/s); "
        f"mean fan-out {fan_out:.2f} matches per topic, each topic checked to match its source.",
        f"bodies: {BODIES} distinct /v1/match topics and {BATCH_BODIES} distinct batches, "
        "rotated; topics drawn from the loaded patterns.",
        f"fan-out rows: {len(fan_out_subscriptions()):,} more subscriptions `fan{{n}}.{{k}}.#` "
        f"(n subscribers for each of {BODIES} k), topics `fan{{n}}.{{k}}.x`, each checked to "
        f"match exactly n; the 0.7x target is stated at {FAN_OUT_TARGET} matches per topic.",
    ]
    if settings:
        table.notes.append(
            "settings: " + ", ".join(f"TOPICSTORE_{k.upper()}={v}" for k, v in settings.items())
        )
    return table
