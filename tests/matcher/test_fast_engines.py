"""Guarantees specific to cs_trie (snapshots, path copying), dfa (bounded, lazy) and the
result cache; their matching itself is covered by the shared property tests."""

from __future__ import annotations

import random

import pytest

from harness.workloads import adversarial_workload
from matcher import (
    CapacityError,
    InvalidPatternError,
    Limits,
    SubscriptionConflictError,
    create_matcher,
)
from matcher.cache import CachedMatcher
from matcher.cs_trie import CsTrieMatcher
from matcher.dfa import _RESULT, BUILD_BUDGET, DfaMatcher
from matcher.grammar import AMQP, pattern_matches
from matcher.trie import TrieMatcher


def test_snapshot_is_frozen_in_time() -> None:
    m = CsTrieMatcher()
    m.subscribe(1, "a.*")
    m.subscribe(2, "a.#")
    snap = m.snapshot()
    m.subscribe(3, "a.b")
    m.unsubscribe(1)
    assert set(snap.match("a.b")) == {1, 2}
    assert sorted(snap) == [(1, "a.*"), (2, "a.#")]
    assert len(snap) == 2 and snap.pattern_of(1) == "a.*" and snap.pattern_of(3) is None
    assert set(m.match("a.b")) == {2, 3}
    assert sorted(m.snapshot()) == [(2, "a.#"), (3, "a.b")]


def test_cs_trie_insert_copies_only_the_path() -> None:
    """Path copying: an insert shares every untouched subtree with the previous version, so
    its cost does not grow with the fan-out of the nodes it passes (the "Fast Topic Matching"
    Go cs-trie copied whole levels)."""
    m = CsTrieMatcher()
    for i in range(2_000):
        m.subscribe(i, f"w{i}.x.y")
    before = m.snapshot()._root
    m.subscribe(99_999, "w5.x.z")
    after = m.snapshot()._root
    shared = sum(before.children[k] is after.children[k] for k in before.children)
    assert shared == len(before.children) - 1  # only the "w5" branch was copied
    assert before.children["w5"] is not after.children["w5"]
    assert (
        before.children["w5"].children["x"].children["y"]
        is (after.children["w5"].children["x"].children["y"])
    )


def test_dfa_reuses_states_and_shares_the_default_transition() -> None:
    m = DfaMatcher()
    m.subscribe(1, "a.*.c")
    m.subscribe(2, "#.c")
    for k in range(500):
        assert set(m.match(f"a.n{k}.c")) == {1, 2}
        assert set(m.match(f"n{k}")) == set()
    # Words no pattern names all take the one default transition (one target state).
    start = m._dfa.start.trans
    assert len({id(start[f"n{k}"]) for k in range(500)}) == 1
    assert _RESULT not in start  # never ended on: its result is computed on first use
    assert m._dfa.start.result() == frozenset() and start["a"] is not start["n1"]
    assert m.state_count() < 10


def test_dfa_states_are_bounded() -> None:
    m = DfaMatcher(limits=Limits(max_dfa_states=4))
    patterns = ["a.#.b", "#.a.#.a", "*.b.#", "a.*.*", "#.c"]
    for i, p in enumerate(patterns):
        m.subscribe(i, p)
    reference = TrieMatcher()
    for i, p in enumerate(patterns):
        reference.subscribe(i, p)
    words = ["a", "b", "c"]
    for n in range(300):
        topic = ".".join(words[(n >> k) % 3] for k in range(n % 7))
        assert set(m.match(topic)) == set(reference.match(topic)), topic
        assert m.state_count() <= 4


def test_cache_is_bounded_and_optional() -> None:
    m = create_matcher("trie", cache_size=8)
    assert isinstance(m, CachedMatcher) and isinstance(m.engine, TrieMatcher)
    m.subscribe(1, "#")
    for k in range(100):
        assert set(m.match(f"t.{k}")) == {1}
        assert m.cached_topics() <= 8
    m.subscribe(2, "t.5")
    assert m.cached_topics() == 0  # a write starts a fresh cache
    assert set(m.match("t.5")) == {1, 2}
    assert len(m) == 2 and m.pattern_of(2) == "t.5"
    assert not isinstance(create_matcher("trie", cache_size=0), CachedMatcher)
    with pytest.raises(ValueError, match="cache_size"):
        create_matcher("trie", cache_size=-1)


@pytest.mark.parametrize(
    "engine", ["cs_trie", "dfa", "trie", "native", "optimized_inverted_bitmap"]
)
def test_bulk_load_equals_one_by_one(engine: str) -> None:
    """Large batches take the bulk path (cs_trie builds mutable and freezes); the result
    must be the same matcher as subscribing one by one, and stay writable afterwards."""
    rng = random.Random(5)
    alphabet = ["a", "b", "", "*", "#"]

    def pattern() -> str:
        return ".".join(rng.choice(alphabet) for _ in range(rng.randint(0, 5)))

    first = [(i, pattern()) for i in range(3_000)]
    second = [(i, pattern()) for i in range(3_000, 4_000)]
    bulk = create_matcher(engine)
    assert bulk.subscribe_many(first) == 3_000
    assert bulk.subscribe_many([*second, *first[:10]]) == 1_000  # repeats are no-ops
    bulk.subscribe(9_999, "a.#")
    bulk.unsubscribe(0)
    bulk._check()
    reference = create_matcher("naive")
    reference.subscribe_many([*first[1:], *second, (9_999, "a.#")])
    for _ in range(300):
        topic = ".".join(rng.choice(["a", "b", ""]) for _ in range(rng.randint(0, 6)))
        assert set(bulk.match(topic)) == set(reference.match(topic)), topic
    assert dict(bulk.subscriptions()) == dict(reference.subscriptions())


def test_bulk_load_is_all_or_nothing() -> None:
    m = create_matcher("cs_trie")
    m.subscribe(1, "a")
    items = [(i, "x.*") for i in range(2, 200)]
    with pytest.raises(SubscriptionConflictError):
        m.subscribe_many([*items, (1, "b")])
    with pytest.raises(InvalidPatternError):
        m.subscribe_many([*items, (500, "bad\x00")])
    with pytest.raises(SubscriptionConflictError):
        m.subscribe_many([*items, (500, "p"), (500, "q")])
    assert len(m) == 1 and set(m.match("x.y")) == set()
    with pytest.raises(CapacityError):
        create_matcher("trie", limits=Limits(max_subscriptions=10)).subscribe_many(items)


def test_dfa_cold_topic_builds_within_budget_then_warms_up() -> None:
    """A 128-word key against '#'-heavy patterns would need a new, large state per word:
    one match builds its first missing state and at most BUILD_BUDGET nodes' worth more, then
    finishes on the trie walk (same answer); matching the topic again extends the cached path
    until it is all DFA."""
    patterns = adversarial_workload(300, 4, seed=3).patterns
    topics = adversarial_workload(300, 4, seed=3).messages
    m = DfaMatcher()
    reference = create_matcher("naive")
    for i, p in enumerate(patterns):
        m.subscribe(i, p)
        reference.subscribe(i, p)
    for topic in topics:
        states = m.state_count()
        assert set(m.match(topic)) == set(reference.match(topic))
        assert m.state_count() - states <= 1 + BUILD_BUDGET
    topic = topics[0]
    for _ in range(len(topic.split(".")) + 1):
        before = m.state_count()
        assert set(m.match(topic)) == set(reference.match(topic))
    assert m.state_count() == before  # fully cached: the last match built nothing


def test_long_topics_prune_the_walk_exactly() -> None:
    """Before the last max_tail words only nodes that lead to a '#' not yet reached are
    kept; the answer stays the rule's, and the walk's levels stay far below the full
    frontier (counted, never timed)."""
    workload = adversarial_workload(1_000, 20, seed=1)
    m = TrieMatcher()
    for i, p in enumerate(workload.patterns):
        m.subscribe(i, p)
    m._check()
    for topic in workload.messages:
        words = AMQP.split_topic(topic)
        sizes: list[int] = []
        m._walk(words, sizes)
        assert len(sizes) == len(words) + 1
        assert max(sizes) <= m.node_count()
        expected = {
            i
            for i, p in enumerate(workload.patterns)
            if pattern_matches(AMQP.parse_pattern(p), words)
        }
        assert set(m.match(topic)) == expected
