"""The pipeline benchmark: its naive comparison is right (the regexes agree with the naive
matcher), and the whole table runs at toy sizes. No timings asserted."""

from __future__ import annotations

import random
import re

from pyspark.sql import SparkSession

from bench.pipeline import ENGINES, FIRST_RUN, NAIVE, amqp_regex, run_pipeline_bench
from bench.workloads import dense_pattern, dense_topic
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


def test_the_benchmark_runs_at_toy_sizes(spark: SparkSession) -> None:
    table = run_pipeline_bench(messages=3_000, subscriptions=200, naive_sample=150)
    labels = [*(f"mapInArrow + {e}" for e in ENGINES), f"mapInArrow + {ENGINES[0]}, {FIRST_RUN}"]
    assert [row[0] for row in table.rows] == [*labels, NAIVE]
    assert [row[1] for row in table.rows] == [3_000, 3_000, 3_000, 150]
    assert all(isinstance(row[3], float) and row[3] > 0 for row in table.rows)
    assert any(
        "identical to the pipeline's for those messages: yes" in note for note in table.notes
    )
    assert SparkSession.getActiveSession() is spark
