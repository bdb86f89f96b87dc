"""The route_scale benchmark: its workload has the shape it claims (checked with a
matcher), and the whole table runs at toy sizes, each row from real ``topicstore``
processes. No timings asserted."""

from __future__ import annotations

import pytest

from bench.route_scale import LATENCY_RATE, ROWS, run_route_scale
from harness.workloads import (
    ROUTE_SUBSCRIPTIONS,
    ROUTE_TOPIC_WORDS,
    route_patterns,
    route_topics,
)
from matcher import create_matcher


def test_the_workload_has_the_issues_shape() -> None:
    patterns = route_patterns()
    assert len(patterns) == ROUTE_SUBSCRIPTIONS
    assert patterns == route_patterns()  # seeded
    words = [p.split(".") for p in patterns]
    assert all(2 <= len(w) <= 5 for w in words)
    stars = sum("*" in w for w in words) / len(words)
    hashes = sum("#" in w for w in words) / len(words)
    assert 0.28 < stars < 0.32 and 0.13 < hashes < 0.17, (stars, hashes)
    topics = route_topics(20_000).to_pylist()
    assert topics == route_topics(20_000).to_pylist()
    vocabulary = {f"w{i}" for i in range(ROUTE_TOPIC_WORDS)}
    assert all(2 <= len(t.split(".")) <= 5 and set(t.split(".")) <= vocabulary for t in topics)
    trie = create_matcher("trie")  # held to naive's answers by tests/matcher
    trie.subscribe_many(list(enumerate(patterns)))
    fanout = [len(trie.match(topic)) for topic in topics]
    per_message = sum(fanout) / len(fanout)
    unmatched = fanout.count(0) / len(fanout)
    assert 1.8 < per_message < 2.0 and 0.22 < unmatched < 0.26, (per_message, unmatched)


@pytest.mark.slow
def test_the_table_runs_at_toy_sizes() -> None:
    # The smallest run of every row: one file of messages landing, one landing a second.
    table = run_route_scale(messages=10_000, per_file=10_000, latency_s=1)
    assert [row[0] for row in table.rows] == list(ROWS)
    batch, stream, latency, files = table.rows
    assert batch[1] == stream[1] == 10_000
    assert latency[1] == LATENCY_RATE
    assert all(isinstance(row[3], float) and row[3] > 0 for row in (batch, stream))
    assert all(isinstance(row[4], float) and row[4] > 0 for row in (batch, stream))
    assert "after one compaction" in str(files[5])
