"""Slow clients: many connections that send half a request and then hang (the slowloris
shape), against a running server, while health probes and matches are timed on fresh
connections. The slow-clients test (a few hundred clients) and the bench's ``slow_clients``
table (20,000) both drive a server with it.

A slow client sends either part of its headers or all headers and part of a body, then
waits for the server to answer or close; it records how long it was held and the status
and error code it was answered with (None: closed without an answer)."""

from __future__ import annotations

import asyncio
import multiprocessing
import resource
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import httpx
import orjson

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
