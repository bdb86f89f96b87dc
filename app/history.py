"""The Health page's last hour: figures sampled from the service's own metrics registry every
``history_interval`` seconds into a ring buffer of ``HISTORY_POINTS`` samples (one hour at
the default 10 s), served by ``GET /v1/metrics/history``.

A sample reads what ``/metrics`` reads (one ``collect()`` of the registry: the request
histogram's counters, the change lag), from a task of its own in a worker thread; the match
path does no work for it. Each sample is what happened since the one before: match requests
per second, their mean latency and the 50th and 99th percentiles estimated from the latency
histogram's buckets as Prometheus' ``histogram_quantile`` does (linear within a bucket), and
the change lag at that instant. Memory and the answer are bounded by ``HISTORY_POINTS``.

Per process: with ``--workers N`` each worker keeps its own history, as it keeps its own
``/metrics``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

log = logging.getLogger(__name__)

#: Samples kept: an hour at the default interval of 10 s.
HISTORY_POINTS: Final = 360
#: The request histogram (``app.middleware.Metrics``) and the lag gauge (``app.routers.ops``).
LATENCY: Final = "topicstore_http_request_seconds"
LAG: Final = "topicstore_change_lag"


def is_match_route(route: str) -> bool:
    """``/v1/match`` and the routes under it (batch, explain, headers): what the Health page
    calls matches."""
    return route == "/v1/match" or route.startswith("/v1/match/")


@dataclass(frozen=True, slots=True)
class Reading:
    """The cumulative figures at one instant: match requests, their seconds in total, the
    histogram's cumulative counts per upper bound (ascending, ``+Inf`` last), the lag."""

    at: float
    count: float
    total: float
    buckets: tuple[tuple[float, float], ...]
    lag: float | None


def read(families: Iterable[Metric], at: float) -> Reading:
    """The match routes' histogram summed over routes and methods, and the lag gauge (absent
    while the table builds), from one collection of the registry."""
    count = total = 0.0
    buckets: dict[float, float] = {}
    lag: float | None = None
    for family in families:
        if family.name == LAG:
            lag = sum(s.value for s in family.samples)
        elif family.name == LATENCY:
            for s in family.samples:
                if not is_match_route(s.labels.get("route", "")):
                    continue
                if s.name.endswith("_bucket"):
                    le = float(s.labels["le"])
                    buckets[le] = buckets.get(le, 0.0) + s.value
                elif s.name.endswith("_count"):
                    count += s.value
                elif s.name.endswith("_sum"):
                    total += s.value
    return Reading(at, count, total, tuple(sorted(buckets.items())), lag)


def quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The ``q``-quantile of cumulative ``buckets`` as ``histogram_quantile`` estimates it:
    linear within the bucket that holds it (from 0 in the first), the highest finite bound
    when it falls in ``+Inf``; None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank and count > below:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


@dataclass(frozen=True, slots=True)
class Sample:
    """What happened between two readings (``seconds`` apart, ending at ``at``, Unix time)."""

    at: float
    seconds: float
    matches: int
    rate: float
    mean_ms: float | None
    p50_ms: float | None
    p99_ms: float | None
    lag: int | None


def between(before: Reading, now: Reading) -> Sample:
    """The sample of the interval from ``before`` to ``now`` (counters only grow within a
    process; a bucket the earlier reading lacked counts from 0)."""
    seconds = max(now.at - before.at, 1e-9)
    matches = max(0.0, now.count - before.count)
    earlier = dict(before.buckets)
    delta = [(le, max(0.0, n - earlier.get(le, 0.0))) for le, n in now.buckets]

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 4)

    return Sample(
        at=now.at,
        seconds=round(seconds, 3),
        matches=int(matches),
        rate=round(matches / seconds, 3),
        mean_ms=ms((now.total - before.total) / matches) if matches else None,
        p50_ms=ms(quantile(0.5, delta)),
        p99_ms=ms(quantile(0.99, delta)),
        lag=None if now.lag is None else int(now.lag),
    )


class History:
    """The last ``points`` samples, oldest first. ``record`` runs in the sampling thread,
    ``samples`` on the event loop: a lock keeps the two apart (held for a copy, no I/O)."""

    def __init__(self, points: int = HISTORY_POINTS) -> None:
        self._samples: deque[Sample] = deque(maxlen=points)
        self._last: Reading | None = None
        self._lock = threading.Lock()
        self.points = points

    def record(self, reading: Reading) -> None:
        """Add the sample since the previous reading (the first reading only starts)."""
        with self._lock:
            if self._last is not None:
                self._samples.append(between(self._last, reading))
            self._last = reading

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)


async def sample_every(history: History, registry: CollectorRegistry, interval: float) -> None:
    """Read ``registry`` into ``history`` now and then every ``interval`` seconds, until
    cancelled. The collection runs in a worker thread (the lag gauge asks the store). A
    collection that fails (the store away) is skipped: the next sample spans both
    intervals."""
    failing = False

    def sample() -> None:
        nonlocal failing
        try:
            reading = read(registry.collect(), time.time())
        except Exception as e:  # entry point of the sampler: say so once, try again later
            if not failing:
                log.warning("sampling the metrics for the history failed: %s", e)
            failing = True
            return
        if failing:
            log.info("sampling the metrics for the history works again")
        failing = False
        history.record(reading)

    loop = asyncio.get_running_loop()
    due = loop.time()
    while True:
        await asyncio.to_thread(sample)
        due = max(due + interval, loop.time())  # on the beat; none made up after a stall
        await asyncio.sleep(due - loop.time())
