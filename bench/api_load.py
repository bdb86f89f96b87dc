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
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx
import orjson

from bench.loadgen import LoadResult, Target, run_load
from bench.report import Column, Table
from bench.store_load import subscriptions as generated_subscriptions

#: The issue's targets: /v1/match at least this share of the trivial endpoint's rate...
MATCH_RATIO_TARGET: Final = 0.7
#: ... and /v1/match/batch at least this many topics per second.
BATCH_TOPICS_TARGET: Final = 200_000
#: Items per bulk request while loading (the service's default max batch).
LOAD_BATCH: Final = 10_000
#: Distinct request bodies the load client rotates through, per endpoint.
BODIES: Final = 64
BATCH_BODIES: Final = 8
#: Keep-alive connections of the load client.
CONNECTIONS: Final = 8
WARMUP_S: Final = 1.0
START_TIMEOUT_S: Final = 120.0
READY_TIMEOUT_S: Final = 300.0
STOP_TIMEOUT_S: Final = 20.0
#: Drift checks rebuild the whole table; not during a measurement.
RECONCILE_INTERVAL_S: Final = 86_400

HEALTHZ: Final = "GET /healthz"
MATCH: Final = "POST /v1/match"
BATCH: Final = "POST /v1/match/batch"


def free_port() -> int:
    """A port on 127.0.0.1 nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class Server:
    """A running ``topicstore serve``."""

    url: str
    token: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def _serve_argv(port: int) -> list[str]:
    script = Path(sys.executable).with_name("topicstore")
    entry = [str(script)] if script.exists() else [sys.executable, "-c", _ENTRY]
    return [*entry, "serve", "--host", "127.0.0.1", "--port", str(port)]


_ENTRY: Final = "from app.cli import main; main()"


@contextmanager
def serve(workdir: Path, engines: Sequence[str] | None = None) -> Iterator[Server]:
    """``topicstore serve`` on a free loopback port with a DuckDB file under ``workdir``
    (and ``engines`` when given, else the service's default); returns once it answers
    ``/healthz``, stops it on exit."""
    port = free_port()
    token = secrets.token_hex(24)
    env = {name: value for name, value in os.environ.items() if not name.startswith("TOPICSTORE_")}
    env |= {
        "TOPICSTORE_DATABASE_URL": f"duckdb:///{workdir / 'topicstore.duckdb'}",
        "TOPICSTORE_ADMIN_TOKEN": token,
        "TOPICSTORE_RECONCILE_INTERVAL": str(RECONCILE_INTERVAL_S),
    }
    if engines:
        env["TOPICSTORE_ENGINES"] = orjson.dumps(list(engines)).decode()
    log = workdir / "server.log"
    with log.open("wb") as out:
        # cwd: no stray .env file of the caller's is read
        process = subprocess.Popen(
            _serve_argv(port), cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    server = Server(f"http://127.0.0.1:{port}", token, process, log)
    try:
        _wait_for(server, "/healthz", START_TIMEOUT_S)
        yield server
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)  # uvicorn's graceful shutdown
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_TIMEOUT_S)


def _wait_for(server: Server, path: str, timeout_s: float) -> None:
    """Poll ``path`` until it answers 200; fail if the server exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(base_url=server.url, timeout=5) as client:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                raise RuntimeError(f"the server exited; see {server.log}: {_tail(server.log)}")
            try:
                if client.get(path).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
    raise RuntimeError(f"{path} not 200 after {timeout_s:.0f} s; see {server.log}")


def _tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def load_subscriptions(server: Server, patterns: Sequence[tuple[str, str]]) -> list[int]:
    """Store ``(subscriber, pattern)`` pairs through ``POST /v1/subscriptions/bulk`` in
    batches of ``LOAD_BATCH``; returns their ids in order."""
    ids: list[int] = []
    headers = {**server.auth, "Content-Type": "application/json"}
    with httpx.Client(base_url=server.url, timeout=300) as client:
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
                    f"see {server.log}"
                )
            ids.extend(result["id"] for result in response.json()["results"])
    return ids


def topic_for(pattern: str, filler: Sequence[str], rng: random.Random) -> str:
    """A topic ``pattern`` matches: each ``*`` takes the word of ``filler`` at its position,
    each ``#`` zero to two of ``filler``'s words from there."""
    words: list[str] = []
    for position, word in enumerate(pattern.split(".")):
        if word == "*":
            words.append(filler[position % len(filler)])
        elif word == "#":
            words.extend(filler[position : position + rng.randrange(3)])
        else:
            words.append(word)
    return ".".join(words)


@dataclass(frozen=True, slots=True)
class Workload:
    """Subscriptions to load and topics drawn from them (``sources[k]`` is the index of the
    subscription ``topics[k]`` was drawn from, so it must be among the matches)."""

    subscriptions: list[tuple[str, str]]
    topics: list[str]
    sources: list[int]


def workload(count: int, topics: int, seed: int = 0) -> Workload:
    """``count`` five-word AMQP patterns (the store benchmark's: 1,000 subscribers, a ``*``
    or a trailing ``#`` now and then) and ``topics`` topics drawn from random ones."""
    subs = [(new.subscriber, new.pattern) for new in generated_subscriptions(count, seed)]
    rng = random.Random(seed + 1)
    concrete = [p for _, p in subs if "*" not in p and "#" not in p] or ["a.b.c.d.e"]
    sources = [rng.randrange(count) for _ in range(topics)]
    drawn = [topic_for(subs[k][1], rng.choice(concrete).split("."), rng) for k in sources]
    return Workload(subs, drawn, sources)


def _check_matches(server: Server, work: Workload, ids: list[int], sample: int) -> float:
    """Each sampled topic must match the subscription it was drawn from (a fast wrong
    answer is worthless); returns the mean number of matches per topic."""
    topics, sources = work.topics[:sample], work.sources[:sample]
    headers = {**server.auth, "Content-Type": "application/json"}
    with httpx.Client(base_url=server.url, timeout=60) as client:
        response = client.post(
            "/v1/match/batch", content=orjson.dumps({"topics": topics}), headers=headers
        )
    response.raise_for_status()
    results = response.json()["results"]
    for topic, source, result in zip(topics, sources, results, strict=True):
        if ids[source] not in result["subscriptions"]:
            raise RuntimeError(f"{topic!r} did not match subscription {ids[source]}: {result}")
    return sum(len(result["subscriptions"]) for result in results) / max(1, len(results))


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
) -> Table:
    """Start the service, load ``subscriptions`` through the bulk API, then measure
    ``/healthz``, ``/v1/match`` and ``/v1/match/batch`` (``batch_topics`` per request) for
    ``seconds`` each from a separate load process (``client``: wrk, python or auto).

    The endpoints take turns, ``rounds`` times after a warm-up round, and each keeps its
    fastest round, so a burst of other work on the machine hits all three alike and a
    ratio compares like with like. ``engines`` sets ``TOPICSTORE_ENGINES`` (default: the
    service's own default)."""
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
            Column("topics/s"),
            Column("x /healthz", "{:,.2f}"),
            Column("target", "{}"),
            Column("met", "{}"),
        ],
        unit="requests/s",
        reference=HEALTHZ,
    )
    work = workload(subscriptions, BODIES + BATCH_BODIES * batch_topics, seed)
    single, batched = work.topics[:BODIES], work.topics[BODIES:]
    with tempfile.TemporaryDirectory(prefix="topicstore-api-load-") as tmp:
        workdir = Path(tmp)
        with serve(workdir, engines) as server:
            started = time.perf_counter()
            ids = load_subscriptions(server, work.subscriptions)
            load_s = time.perf_counter() - started
            _wait_for(server, "/readyz", READY_TIMEOUT_S)
            fan_out = _check_matches(server, work, ids, min(len(work.topics), 1_000))
            post = {**server.auth, "Content-Type": "application/json"}
            targets = {
                HEALTHZ: Target(f"{server.url}/healthz"),
                MATCH: Target(
                    f"{server.url}/v1/match",
                    "POST",
                    post,
                    [orjson.dumps({"topic": topic}) for topic in single],
                ),
                BATCH: Target(
                    f"{server.url}/v1/match/batch",
                    "POST",
                    post,
                    [
                        orjson.dumps({"topics": batched[i : i + batch_topics]})
                        for i in range(0, len(batched), batch_topics)
                    ],
                ),
            }
            for target in targets.values():
                run_load(target, WARMUP_S, connections, workdir / "warmup", client=client)
            load_avg = os.getloadavg()[0]
            results: dict[str, LoadResult] = {}
            for round_ in range(rounds):
                for name, target in targets.items():
                    result = _measure(target, seconds, connections, workdir / f"r{round_}", client)
                    if name not in results or result.rate > results[name].rate:
                        results[name] = result
    engines_note = ", ".join(engines) if engines else "the service default"
    base = results[HEALTHZ].rate
    match, batch = results[MATCH], results[BATCH]
    match_ratio = match.rate / base if base else 0.0
    batch_rate = batch.rate * batch_topics
    table.rows = [
        [HEALTHZ, base, results[HEALTHZ].p50_ms, results[HEALTHZ].p99_ms, None, 1.0, "", ""],
        [
            MATCH,
            match.rate,
            match.p50_ms,
            match.p99_ms,
            match.rate,
            match_ratio,
            f">= {MATCH_RATIO_TARGET}x /healthz",
            "yes" if match_ratio >= MATCH_RATIO_TARGET else "no",
        ],
        [
            f"{BATCH} ({batch_topics:,})",
            batch.rate,
            batch.p50_ms,
            batch.p99_ms,
            batch_rate,
            None,
            f">= {BATCH_TOPICS_TARGET:,} topics/s",
            "yes" if batch_rate >= BATCH_TOPICS_TARGET else "no",
        ],
    ]
    table.notes += [
        f"client: {results[HEALTHZ].client}, a separate process on 127.0.0.1, closed loop over "
        f"{connections} keep-alive connections; the endpoints take turns, {rounds} x "
        f"{seconds:g} s after a {WARMUP_S:g} s warm-up, best round kept (its p50/p99, per "
        f"request at that concurrency); load average {load_avg:.1f} when measuring began.",
        f"server: `topicstore serve` as shipped, one uvicorn worker (one process; the box has "
        f"{os.cpu_count()} cores, shared with the client), DuckDB in a temporary directory, "
        f"engines {engines_note}, access log off (the default), match auth on (bearer token).",
        f"loaded {subscriptions:,} subscriptions through POST /v1/subscriptions/bulk in "
        f"batches of {LOAD_BATCH:,}: {load_s:.1f} s ({subscriptions / load_s:,.0f}/s); "
        f"mean fan-out {fan_out:.2f} matches per topic, each topic checked to match its source.",
        f"bodies: {BODIES} distinct /v1/match topics and {BATCH_BODIES} distinct batches, "
        "rotated; topics drawn from the loaded patterns.",
    ]
    return table
