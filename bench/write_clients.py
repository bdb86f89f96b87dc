"""The client processes of the write benchmarks (``write_load``, ``storm``), and how the
benchmark starts, releases and collects them.

A client is ``python -m bench.write_clients ROLE ...``: it imports the standard library
only (a client that imported the suite's Arrow, SQLAlchemy and httpx took 3.6 s to start,
on the same two cores as the server), prints ``ready``, waits for a line on stdin, runs
until its seconds pass, its work is done or the end of its stdin stops it, and writes its
samples as JSON to the file it was given. Every client of a phase is released at once, so
the prober measures the same seconds the writers write.
"""

from __future__ import annotations

import argparse
import http.client
import json
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

#: Matches per second the prober sends (a steady pace, so its latency is not its own load).
PROBE_RATE: Final = 100.0
#: How often the readiness prober asks each replica, as a load balancer would.
READY_EVERY_S: Final = 0.1
#: Seconds a readiness probe may take before it counts as failed (a load balancer's
#: timeout).
READY_TIMEOUT_S: Final = 2.0
#: How often the lag prober creates a subscription on one replica to find on the other.
LAG_EVERY_S: Final = 0.25
#: Seconds a lag probe waits for its subscription on the other replica before counting it
#: as lost.
LAG_TIMEOUT_S: Final = 10.0
#: Items per bulk request of a storm (a reconnecting client's subscriptions, or a
#: gateway's batch of reconnecting clients).
STORM_BULK: Final = 500
#: Seconds a client may take to finish after its duration.
GRACE_S: Final = 120.0

# -- the client side ------------------------------------------------------------------


def _connection(url: str, timeout_s: float = 30.0) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout_s)


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


class Run:
    """When a client stops: ``seconds`` after it was released, or when the benchmark
    closes its stdin (or exits)."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds
        self.stopped = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        sys.stdin.readline()
        self.stopped.set()

    def going(self) -> bool:
        return not self.stopped.is_set() and time.monotonic() < self.deadline

    def sleep_until(self, at: float) -> bool:
        """Sleep until ``time.monotonic()`` reaches ``at``; False if stopped meanwhile or
        ``at`` is past the deadline."""
        if at >= self.deadline:
            return False
        return not self.stopped.wait(max(0.0, at - time.monotonic()))


def _threads(count: int, work: Callable[[int, list[Any]], None]) -> list[Any]:
    """``work(i, out)`` in ``count`` threads; their outputs concatenated."""
    outs: list[list[Any]] = [[] for _ in range(count)]
    threads = [threading.Thread(target=work, args=(i, outs[i])) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [sample for out in outs for sample in out]


def churn(url: str, token: str, run: Run, clients: int) -> list[float | None]:
    """``clients`` threads each create a subscription and delete it again, one after the
    other; each write's seconds (a failed write as None). Client ``c`` writes as
    subscriber ``q{c}``, one of the stored ones (``bench.big_store``): a name outside the
    stored ones' range would let DuckDB's zone maps skip the whole table in the presence
    check, which a real subscriber's name does not."""

    def client(c: int, out: list[float | None]) -> None:
        conn = _connection(url)
        i = 0
        while run.going():
            body = {"subscriber": f"q{c}", "pattern": f"churn.{c}.*.{i}"}
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

    return _threads(clients, client)


def probe(url: str, token: str, run: Run, topics: Sequence[str]) -> list[float | None]:
    """``POST /v1/match`` at ``PROBE_RATE`` per second, cycling through ``topics``; each
    answer's seconds (a failed one as None)."""
    conn = _connection(url)
    out: list[float | None] = []
    next_at = time.monotonic()
    i = 0
    while run.sleep_until(next_at):
        started = time.perf_counter()
        status, _ = _request(conn, "POST", "/v1/match", token, {"topic": topics[i % len(topics)]})
        out.append(time.perf_counter() - started if status == 200 else None)
        next_at += 1.0 / PROBE_RATE
        i += 1
    conn.close()
    return out


def ready(url: str, run: Run) -> dict[str, Any]:
    """``GET /readyz`` every ``READY_EVERY_S``: the probes sent, the reasons of those not
    answered 200 within ``READY_TIMEOUT_S``, and the slowest answer's seconds."""
    conn = _connection(url, READY_TIMEOUT_S)
    probes, failed, slowest = 0, [], 0.0
    next_at = time.monotonic()
    while run.sleep_until(next_at):
        started = time.perf_counter()
        try:
            conn.request("GET", "/readyz")
            response = conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as e:
            failed.append(type(e).__name__)
            conn.close()
            conn = _connection(url, READY_TIMEOUT_S)
        else:
            if response.status != 200:
                answer = json.loads(data) if data else {}
                failed.append(f"{response.status} {answer.get('reason')}")
        slowest = max(slowest, time.perf_counter() - started)
        probes += 1
        next_at += READY_EVERY_S
    conn.close()
    return {"probes": probes, "failed": failed, "slowest": slowest}


def lag(writer: str, follower: str, token: str, run: Run) -> list[float | None]:
    """Every ``LAG_EVERY_S``: create a subscription on ``writer``, then poll ``follower``
    until a match finds it; the seconds from the 201 to that match (None: lost)."""
    write, read = _connection(writer), _connection(follower)
    out: list[float | None] = []
    while run.going():
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
        time.sleep(LAG_EVERY_S)
    write.close()
    read.close()
    return out


def storm(
    url: str, token: str, run: Run, clients: int, items: Sequence[Any], bulk: int
) -> dict[str, Any]:
    """``clients`` threads send ``items`` (each thread every ``clients``-th one) as
    ``POST /v1/subscriptions`` one by one (``bulk`` 0) or as ``POST /v1/subscriptions/bulk``
    of ``bulk`` items: how many the server created, found present or refused, each
    request's seconds, and the seconds from the release to the last answer."""
    began = time.perf_counter()

    def client(c: int, out: list[tuple[int, int, int, float]]) -> None:
        """One (created, exists, failed, seconds) per request into ``out``."""
        conn = _connection(url)
        mine = items[c::clients]
        for start in range(0, len(mine), bulk or 1):
            if not run.going():
                break
            started = time.perf_counter()
            if bulk:
                body = {"items": list(mine[start : start + bulk])}
                status, answer = _request(conn, "POST", "/v1/subscriptions/bulk", token, body)
                seconds = time.perf_counter() - started
                if status in (200, 207):
                    out.append((answer["created"], answer["exists"], answer["failed"], seconds))
                else:
                    out.append((0, 0, len(body["items"]), seconds))
            else:
                status, _ = _request(conn, "POST", "/v1/subscriptions", token, mine[start])
                seconds = time.perf_counter() - started
                out.append((int(status == 201), int(status == 200), int(status > 201), seconds))
        conn.close()

    requests = _threads(clients, client)
    return {
        "created": sum(r[0] for r in requests),
        "exists": sum(r[1] for r in requests),
        "failed": sum(r[2] for r in requests),
        "seconds": time.perf_counter() - began,
        "latencies": [r[3] for r in requests],
    }


def client_main(argv: Sequence[str]) -> None:
    """One client process: ``ready``, wait for the release, run, write the samples."""
    parser = argparse.ArgumentParser(prog="python -m bench.write_clients")
    parser.add_argument("role", choices=("churn", "probe", "ready", "lag", "storm"))
    parser.add_argument("url")
    parser.add_argument("out", type=Path, help="where the samples go (JSON)")
    parser.add_argument("--token", default="")
    parser.add_argument("--seconds", type=float, default=3600.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--follower")
    parser.add_argument("--topics", type=Path, help="JSON list of topics to match")
    parser.add_argument("--items", type=Path, help="JSON list of subscriptions to create")
    parser.add_argument("--bulk", type=int, default=0, help="items per request (0: single)")
    args = parser.parse_args(argv)
    topics = [f"stock.nyse.t{i}.trade.x" for i in range(1_000)]
    if args.topics:
        topics = json.loads(args.topics.read_text(encoding="utf-8"))
    items = json.loads(args.items.read_text(encoding="utf-8")) if args.items else []
    print("ready", flush=True)
    sys.stdin.readline()
    run = Run(args.seconds)
    samples: Any
    if args.role == "churn":
        samples = churn(args.url, args.token, run, args.clients)
    elif args.role == "probe":
        samples = probe(args.url, args.token, run, topics)
    elif args.role == "ready":
        samples = ready(args.url, run)
    elif args.role == "lag":
        samples = lag(args.url, args.follower, args.token, run)
    else:
        samples = storm(args.url, args.token, run, args.clients, items, args.bulk)
    args.out.write_text(json.dumps(samples), encoding="utf-8")


# -- the benchmark's side -------------------------------------------------------------


class Client:
    """One client process, started and waiting for its release; its samples go to
    ``out``."""

    def __init__(self, out: Path, role: str, url: str, *args: str) -> None:
        self.out = out
        self.waited = False
        command = [sys.executable, "-m", "bench.write_clients", role, url, str(out), *args]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def wait_ready(self) -> None:
        if self.waited:
            return
        self.waited = True
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            self.kill()
            raise RuntimeError(f"client did not start: {line!r}")

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        """Stop it now (its stdin ends); it still writes what it measured."""
        assert self.process.stdin is not None
        self.process.stdin.close()

    def result(self, timeout_s: float) -> Any:
        """The samples, once it is done; killed if that takes longer than ``timeout_s``."""
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        if self.process.returncode != 0:
            raise RuntimeError(f"client failed ({self.process.returncode})")
        return json.loads(self.out.read_text(encoding="utf-8"))

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class Clients:
    """The client processes of one phase, in ``directory``: started one by one
    (``start``), released at once (``go``), collected (``result``) and killed on exit
    whatever happened."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[Client] = []

    def __enter__(self) -> Clients:
        return self

    def __exit__(self, *exc: object) -> None:
        for client in self.started:
            client.kill()

    def start(self, role: str, url: str, *args: str) -> Client:
        out = self.directory / f"{role}-{len(self.started)}.json"
        client = Client(out, role, url, *args)
        self.started.append(client)
        return client

    def wait_ready(self) -> None:
        """Wait until every client has started and waits for its release."""
        for client in self.started:
            client.wait_ready()

    def go(self) -> None:
        """Release every client at once, once all have started."""
        self.wait_ready()
        for client in self.started:
            client.go()


if __name__ == "__main__":
    client_main(sys.argv[1:])
