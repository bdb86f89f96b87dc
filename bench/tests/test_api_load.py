"""The API load benchmark runs end to end at tiny sizes with each load client, and its
topics really match the patterns they were drawn from. No timings asserted."""

from __future__ import annotations

import random

import pytest

from bench.api_load import (
    BATCH,
    FAN_OUTS,
    HEALTHZ,
    MATCH,
    batch_fan_out_label,
    fan_out_batches,
    fan_out_label,
    run_api_load,
)
from bench.report import Table
from harness.workloads import market_workload, topic_for
from matcher import create_matcher


def assert_measured(table: Table, client: str, batch_topics: int) -> None:
    """Every row of an ``api_load`` table measured by ``client``: a rate, ordered
    percentiles and the server's CPU per request, the batches' topics per second."""
    assert all(len(row) == len(table.columns) for row in table.rows)
    for row in table.rows:
        requests_per_s, p50, p99, cpu_us = row[1:5]
        assert isinstance(requests_per_s, float) and requests_per_s > 0, row
        assert isinstance(p50, float) and isinstance(p99, float) and 0 < p50 <= p99, row
        assert isinstance(cpu_us, float) and cpu_us > 0, row  # the server works per request
    for row in table.rows[-3:]:
        batch_requests, measured_topics = row[1], row[5]
        assert isinstance(batch_requests, float)
        assert measured_topics == pytest.approx(batch_requests * batch_topics)
    assert table.rows[1][7] and table.rows[1][8] in ("yes", "no")
    assert table.rows[2][8] in ("yes", "no")  # 14 matches: the stated target
    assert any(f"client: {client}" in note for note in table.notes)


@pytest.mark.slow
def test_tiny_run_has_every_row() -> None:
    """With the Python load client; wrk, the default where installed (and required on CI),
    drives the quick suite's run (``test_bench_smoke``), checked the same way."""
    # A third of a second a row: the rows are checked, not the figures.
    table = run_api_load(1_000, 0.3, batch_topics=50, rounds=1, connections=2, client="python")
    fan_outs = [fan_out_label(n) for n in FAN_OUTS]
    batch_fan_outs = [batch_fan_out_label(n, 50) for n in FAN_OUTS]
    assert [row[0] for row in table.rows] == [
        HEALTHZ,
        MATCH,
        *fan_outs,
        f"{BATCH} (50)",
        *batch_fan_outs,
    ]
    assert_measured(table, "python", 50)
    assert any("1,000 subscriptions" in note for note in table.notes)


def test_fan_out_batches_rotate_over_the_fan_out_topics() -> None:
    batches = fan_out_batches(14, 50)
    assert len(batches) == 8 and all(len(b) == 50 for b in batches)
    assert batches[0][:2] == ["fan14.0.x", "fan14.1.x"] and batches[1][0] == "fan14.50.x"
    assert {t for b in batches for t in b} == {f"fan14.{k}.x" for k in range(64)}


def test_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="rounds"):
        run_api_load(10, 1.0, rounds=0)
    with pytest.raises(ValueError, match="batch_topics"):
        run_api_load(10, 1.0, batch_topics=10_001)


@pytest.mark.parametrize(
    ("pattern", "filler", "expected"),
    [
        ("a.b.c", ["x", "y", "z"], "a.b.c"),
        ("a.*.c", ["x", "y", "z"], "a.y.c"),
        ("*.*", ["x", "y"], "x.y"),
    ],
)
def test_topic_for_fills_stars_from_the_filler(
    pattern: str, filler: list[str], expected: str
) -> None:
    assert topic_for(pattern, filler, random.Random(0)) == expected


def test_every_drawn_topic_matches_its_source_by_the_naive_matcher() -> None:
    work = market_workload(2_000, 3_000, seed=3)
    assert len(work.subscriptions) == 2_000 and len(work.topics) == 3_000
    assert any("#" in pattern for _, pattern in work.subscriptions)
    assert any("*" in pattern for _, pattern in work.subscriptions)
    naive = create_matcher("naive")
    for topic, source in zip(work.topics, work.sources, strict=True):
        naive.subscribe(0, work.subscriptions[source][1])
        assert 0 in naive.match(topic), (topic, work.subscriptions[source][1])
        naive.unsubscribe(0)
