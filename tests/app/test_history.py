"""The metrics history behind the console's Health graphs (``app.history``,
``GET /v1/metrics/history``): readings of a real prometheus registry, the quantile estimate
against values worked out by hand, the ring buffer's bound, and a real app sampling its own
match requests."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, Gauge, Histogram

from app.history import History, Reading, between, quantile, read
from app.main import create_app
from tests.app.conftest import A_HEADERS, ADMIN_HEADERS, make_settings

INF = math.inf


def test_quantile_interpolates_within_the_bucket_as_prometheus_does() -> None:
    # 2 observations <= 1 ms, 4 more <= 5 ms, 2 more <= 10 ms, 2 above.
    buckets = [(0.001, 2.0), (0.005, 6.0), (0.01, 8.0), (INF, 10.0)]
    assert quantile(0.1, buckets) == pytest.approx(0.0005)  # rank 1 of 2 in [0, 1 ms]
    assert quantile(0.5, buckets) == pytest.approx(0.004)  # rank 5: 3 of 4 into (1, 5] ms
    assert quantile(0.8, buckets) == pytest.approx(0.01)  # rank 8: the top of (5, 10] ms
    assert quantile(0.99, buckets) == 0.01  # in +Inf: the highest finite bound
    assert quantile(0.5, [(0.001, 0.0), (INF, 0.0)]) is None
    assert quantile(0.5, []) is None


def test_a_reading_sums_the_match_routes_only() -> None:
    registry = CollectorRegistry()
    latency = Histogram(
        "topicstore_http_request_seconds",
        "latency",
        ["method", "route"],
        registry=registry,
        buckets=(0.001, 0.01),
    )
    lag = Gauge("topicstore_change_lag", "lag", registry=registry)
    for route, seconds in [
        ("/v1/match", 0.0005),
        ("/v1/match", 0.005),
        ("/v1/match/batch", 0.02),
        ("/v1/subscriptions", 0.0001),  # not a match
        ("/v1/matchmaker", 0.0001),  # nor this
    ]:
        latency.labels("POST", route).observe(seconds)
    lag.set(3)
    reading = read(registry.collect(), at=100.0)
    assert (reading.at, reading.count, reading.lag) == (100.0, 3.0, 3.0)
    assert reading.total == pytest.approx(0.0255)
    assert reading.buckets == ((0.001, 1.0), (0.01, 2.0), (INF, 3.0))


def test_a_sample_is_the_difference_of_two_readings() -> None:
    before = Reading(10.0, 4.0, 0.004, ((0.001, 4.0), (0.01, 4.0), (INF, 4.0)), None)
    now = Reading(20.0, 14.0, 0.024, ((0.001, 8.0), (0.01, 14.0), (INF, 14.0)), 2.0)
    sample = between(before, now)
    # 10 requests in 10 s taking 20 ms: 4 <= 1 ms, 6 in (1, 10] ms.
    assert (sample.at, sample.seconds, sample.matches, sample.rate) == (20.0, 10.0, 10, 1.0)
    assert sample.mean_ms == pytest.approx(2.0)
    assert sample.p50_ms == pytest.approx(1.0 + 9.0 * (5 - 4) / 6)
    assert sample.p99_ms == pytest.approx(1.0 + 9.0 * (9.9 - 4) / 6)
    assert sample.lag == 2
    idle = between(now, Reading(30.0, 14.0, 0.024, now.buckets, 0.0))
    assert (idle.matches, idle.rate, idle.mean_ms, idle.p50_ms, idle.lag) == (0, 0.0, None, None, 0)


def test_the_history_keeps_its_last_points() -> None:
    history = History(points=3)
    empty = ((INF, 0.0),)
    for second in range(6):
        history.record(Reading(float(second), float(second), 0.0, empty, None))
    # Five intervals, the last three kept, oldest first.
    assert [(s.at, s.matches) for s in history.samples()] == [(3.0, 1), (4.0, 1), (5.0, 1)]


def test_the_service_samples_its_own_matches(tmp_path: Path) -> None:
    """A real app sampling every 50 ms: the matches sent show up in the samples, counted
    once; any token reads them, none is refused."""
    settings = make_settings(f"duckdb:///{tmp_path / 'history.duckdb'}").model_copy(
        update={"history_interval": 0.05}
    )
    with TestClient(create_app(settings, wait_until_ready=True)) as client:
        body = {"subscriber": "q", "pattern": "a.#"}
        assert client.post("/v1/subscriptions", json=body, headers=A_HEADERS).status_code == 201
        for _ in range(20):
            assert client.post("/v1/match", json={"topic": "a.b"}, headers=A_HEADERS).is_success
        deadline = time.monotonic() + 30
        while True:
            answer = client.get("/v1/metrics/history", headers=A_HEADERS)
            assert answer.status_code == 200, answer.text
            history = answer.json()
            if sum(s["matches"] for s in history["samples"]) == 20:
                break
            assert time.monotonic() < deadline, history
            time.sleep(0.05)
        assert (history["interval_seconds"], history["points"]) == (0.05, 360)
        busy = [s for s in history["samples"] if s["matches"]]
        assert busy and all(s["rate"] > 0 and s["p50_ms"] <= s["p99_ms"] for s in busy)
        assert history["samples"][-1]["lag"] == 0
        assert client.get("/v1/metrics/history", headers=ADMIN_HEADERS).status_code == 200
        refused = client.get("/v1/metrics/history")
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
