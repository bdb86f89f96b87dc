"""The pipeline benchmark: its naive comparison is right (the regexes agree with the naive
matcher), and the whole table runs at toy sizes. No timings asserted."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime

import pytest
from pyspark.sql import SparkSession

from bench.pipeline import (
    ENGINES,
    FIRST_RUN_WARM,
    NAIVE,
    amqp_regex,
    naive_deliveries,
    run_pipeline_bench,
)
from harness.workloads import dense_pattern, dense_topic
from matcher import create_matcher


def test_regexes_agree_with_the_naive_matcher() -> None:
    rng = random.Random(7)
    patterns = [dense_pattern(rng) for _ in range(300)] + ["", "#", "*", "a.b", "a..b", "#.a.#"]
    topics = [dense_topic(rng) for _ in range(300)] + ["", ".", "a", "a.b", "a..b", "x.a.y"]
    for pattern in patterns:
        naive = create_matcher("naive")
        naive.subscribe(1, pattern)
        regex = re.compile(amqp_regex(pattern))
        for topic in topics:
            dotted = "." + topic if topic else ""
            assert bool(regex.search(dotted)) == (1 in naive.match(topic)), (pattern, topic)


@pytest.mark.slow
def test_the_benchmark_runs_at_toy_sizes(spark: SparkSession) -> None:
    table = run_pipeline_bench(messages=3_000, subscriptions=200, naive_sample=150)
    # The tests' session was running already: its first run is not a cold JVM's.
    first = f"mapInArrow + {ENGINES[0]}, {FIRST_RUN_WARM}"
    labels = [*(f"mapInArrow + {e}" for e in ENGINES), first]
    assert [row[0] for row in table.rows] == [*labels, NAIVE]
    assert [row[1] for row in table.rows] == [3_000, 3_000, 3_000, 150]
    assert all(isinstance(row[3], float) and row[3] > 0 for row in table.rows)
    assert any(
        "identical to the pipeline's for those messages: yes" in note for note in table.notes
    )
    assert SparkSession.getActiveSession() is spark


def test_the_naive_plan_broadcasts_the_messages(
    spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    # Streaming the subscriptions keeps one regex for a run of rows: Spark compiles a
    # non-literal rlike pattern only when it changes, so each is compiled once per task.
    ts = datetime(2024, 1, 1, tzinfo=UTC)
    messages = spark.createDataFrame(
        [("m1", "a.b", ts), ("m2", "a", ts), ("m3", "", ts)],
        "message_id string, topic string, ts timestamp",
    )
    patterns = {1: "a.*", 2: "#", 3: "a"}
    subscriptions = spark.createDataFrame(
        [(i, "default", f"s{i}", p, amqp_regex(p)) for i, p in patterns.items()],
        "id long, tenant string, subscriber string, pattern string, regex string",
    )
    naive = naive_deliveries(messages, subscriptions)
    naive.explain()
    assert "BroadcastNestedLoopJoin BuildLeft" in capsys.readouterr().out
    pairs = {(row["message_id"], row["subscription_id"]) for row in naive.collect()}
    assert pairs == {("m1", 1), ("m1", 2), ("m2", 2), ("m2", 3), ("m3", 2)}
