"""Per-tenant token buckets for admin requests, match requests and batch topics.

A bucket holds up to ``burst`` tokens and refills at ``per_second``; a request takes its
cost (1, or a batch's topic count) or is refused with the seconds until it would fit. Work
measured only once done (an explain's steps, a large match's ids) is ``debit``ed: taken
without refusing, the bucket going down to minus its burst, so the tenant's next requests
wait until it refills. The
clock is a parameter (tests drive it by hand, never sleep), and nothing here knows HTTP:
``app.dependencies`` charges the buckets, ``app.errors`` renders the refusal as a 429.

Buckets are keyed by (kind, tenant): tenants come from configured tokens only, so the
number of buckets, and of metric labels, is bounded by the configuration. The operator
(tenant None) is unlimited unless ``limit_operator``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from app.refusals import RateLimitedError

#: What a bucket counts: admin requests (a bulk request is one), single match requests,
#: and topics of batch match requests.
ADMIN: Final = "admin"
MATCH: Final = "match"
BATCH_TOPICS: Final = "batch_topics"
KINDS: Final = (ADMIN, MATCH, BATCH_TOPICS)
#: The label and key of the operator's buckets.
OPERATOR_KEY: Final = "(operator)"

Clock = Callable[[], float]
#: Tokens of tolerance for float rounding: a refill of exactly one token computed from two
#: large clock readings comes out a hair short of 1.
_SLACK: Final = 1e-9


@dataclass(frozen=True, slots=True)
class Rate:
    """``per_second`` tokens refill a bucket holding at most ``burst``."""

    per_second: float
    burst: int


class TokenBucket:
    """One bucket; starts full. O(1) per call."""

    __slots__ = ("rate", "tokens", "updated")

    def __init__(self, rate: Rate, now: float) -> None:
        self.rate = rate
        self.tokens = float(rate.burst)
        self.updated = now

    def take(self, cost: float, now: float) -> float:
        """Take ``cost`` tokens and return 0.0, or take none and return the seconds until
        ``cost`` would fit. A cost above the burst is charged as the burst (a full bucket
        always admits one request: a batch larger than the burst is slowed, not barred)."""
        rate = self.rate
        cost = min(cost, rate.burst)
        self._refill(now)
        if self.tokens + _SLACK >= cost:
            self.tokens = max(0.0, self.tokens - cost)
            return 0.0
        return (cost - self.tokens) / rate.per_second

    def debit(self, cost: float, now: float) -> None:
        """Take ``cost`` tokens whatever the bucket holds, down to minus the burst."""
        self._refill(now)
        self.tokens = max(-float(self.rate.burst), self.tokens - cost)

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self.updated)  # a clock that steps back refills nothing
        self.tokens = min(float(self.rate.burst), self.tokens + elapsed * self.rate.per_second)
        self.updated = now


class RateLimiter:
    """The buckets of every (kind, tenant), created on first use; thread-safe."""

    def __init__(
        self,
        rates: Mapping[str, Rate | None],
        *,
        limit_operator: bool = False,
        clock: Clock = time.monotonic,
    ) -> None:
        """``rates``: per kind, None (or absent) is unlimited."""
        self.rates = dict(rates)
        self.limit_operator = limit_operator
        self.clock = clock
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._refused: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def charge(self, kind: str, tenant: str | None, cost: int = 1) -> None:
        """Take ``cost`` from the tenant's ``kind`` bucket, or raise ``RateLimitedError``
        with the whole seconds to wait (at least 1: what ``Retry-After`` can say)."""
        rate = self.rates.get(kind)
        if rate is None or (tenant is None and not self.limit_operator):
            return
        key = (kind, OPERATOR_KEY if tenant is None else tenant)
        with self._lock:
            now = self.clock()
            wait = self._bucket(key, rate, now).take(cost, now)
            if wait:
                self._refused[key] = self._refused.get(key, 0) + 1
        if wait:
            seconds = max(1, math.ceil(wait))
            raise RateLimitedError(
                f"over the {kind} rate of {rate.per_second:g}/s (burst {rate.burst}); "
                f"retry in {seconds} s",
                retry_after=seconds,
            )

    def debit(self, kind: str, tenant: str | None, cost: float) -> None:
        """Take ``cost`` from the tenant's ``kind`` bucket without refusing anything: work
        counted after it was done, paid for by the tenant's next requests."""
        rate = self.rates.get(kind)
        if rate is None or cost <= 0 or (tenant is None and not self.limit_operator):
            return
        key = (kind, OPERATOR_KEY if tenant is None else tenant)
        with self._lock:
            now = self.clock()
            self._bucket(key, rate, now).debit(cost, now)

    def _bucket(self, key: tuple[str, str], rate: Rate, now: float) -> TokenBucket:
        """The bucket of (kind, tenant), made full at its first use (under ``_lock``)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(rate, now)
        return bucket

    def refused(self) -> dict[tuple[str, str], int]:
        """Refusals so far per (kind, tenant)."""
        with self._lock:
            return dict(self._refused)


class RateLimitCollector(Collector):
    """``topicstore_rate_limited_total{kind, tenant}`` for Prometheus, read at scrape time."""

    def __init__(self, limiter: RateLimiter) -> None:
        self.limiter = limiter

    def collect(self) -> Iterable[CounterMetricFamily]:
        family = CounterMetricFamily(
            "topicstore_rate_limited",
            "Requests refused with 429, per bucket kind and tenant",
            labels=["kind", "tenant"],
        )
        for (kind, tenant), count in sorted(self.limiter.refused().items()):
            family.add_metric([kind, tenant], count)
        yield family
