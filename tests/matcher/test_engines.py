"""The shared interface, on every engine and dialect; engine-specific guarantees below."""

from __future__ import annotations

import random
from functools import partial
from typing import TypeAlias

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matcher import (
    ENGINES,
    CapacityError,
    InvalidPatternError,
    InvalidSubscriptionIdError,
    InvalidTopicError,
    Limits,
    Matcher,
    SubscriptionConflictError,
    create_matcher,
)
from matcher._native import NativeMatcher
from matcher.grammar import AMQP, pattern_matches
from matcher.inverted_bitmap import InvertedBitmapMatcher
from matcher.trie import TrieMatcher
from tests.matcher.strategies import PATTERNS, TOPICS


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_readme_example(engine: str) -> None:
    m = create_matcher(engine)
    m.subscribe(1, "forex.usd")
    m.subscribe(2, "forex.*")
    m.subscribe(3, "stock.nasdaq.msft")
    m.subscribe(4, "stock.#")
    assert set(m.match("forex.usd")) == {1, 2}
    assert set(m.match("forex.gbp")) == {2}
    assert set(m.match("stock.nasdaq.msft")) == {3, 4}
    assert set(m.match("stock")) == {4}
    assert set(m.match("bonds")) == set()
    assert len(m) == 4


def test_ids_idempotence_and_conflicts(engine: str) -> None:
    m = create_matcher(engine)
    m.subscribe(0, "a.*")
    m.subscribe(2**32 - 1, "a.*")
    m.subscribe(0, "a.*")  # same (id, pattern): no-op
    assert len(m) == 2
    with pytest.raises(SubscriptionConflictError) as info:
        m.subscribe(0, "b")
    assert info.value.code == "id_conflict"
    assert set(m.match("a.x")) == {0, 2**32 - 1}
    for bad in (-1, 2**32, 1.0, "1", True, None):
        with pytest.raises(InvalidSubscriptionIdError):
            m.subscribe(bad, "a")  # type: ignore[arg-type]
    assert m.unsubscribe(0) is True
    assert m.unsubscribe(0) is False
    assert m.unsubscribe(12345) is False
    assert set(m.match("a.x")) == {2**32 - 1}
    assert m.pattern_of(2**32 - 1) == "a.*"
    assert list(m.subscriptions()) == [(2**32 - 1, "a.*")]


def test_invalid_input_changes_nothing(engine: str) -> None:
    m = create_matcher(engine)
    m.subscribe(1, "#")
    with pytest.raises(InvalidPatternError):
        m.subscribe(2, "a\x00")
    with pytest.raises(InvalidTopicError):
        m.match("x" * 300)
    with pytest.raises(InvalidTopicError):
        m.match("a\ud800")
    assert len(m) == 1
    assert set(m.match("a")) == {1}


def test_results_are_immutable_snapshots(engine: str) -> None:
    m = create_matcher(engine)
    m.subscribe(1, "a.#")
    first = m.match("a.b")
    assert not hasattr(first, "add") and not hasattr(first, "discard")
    m.subscribe(2, "a.b")
    m.unsubscribe(1)
    assert set(first) == {1}  # a result never changes after it is returned
    assert set(m.match("a.b")) == {2}


def test_capacity_limit(engine: str) -> None:
    m = create_matcher(engine, limits=Limits(max_subscriptions=2))
    m.subscribe(1, "a")
    m.subscribe(2, "b")
    m.subscribe(2, "b")  # a no-op does not need room
    with pytest.raises(CapacityError) as info:
        m.subscribe(3, "c")
    assert info.value.code == "too_many_subscriptions"
    m.unsubscribe(1)
    m.subscribe(3, "c")


@pytest.mark.parametrize("cache_size", [0, 4])
def test_check_room_refuses_what_subscribe_would(engine: str, cache_size: int) -> None:
    """``check_room`` (an admin write's early refusal) refuses patterns past
    ``max_subscriptions`` as subscribing would, with the same code and the same message
    from the base class as from ``native``'s override; behind a result cache too."""
    m = create_matcher(engine, limits=Limits(max_subscriptions=3), cache_size=cache_size)
    m.subscribe(1, "a")
    m.check_room([])
    m.check_room(["b", "c"])
    refusals = []
    for check in (m.check_room, partial(Matcher.check_room, m)):
        for patterns in (["b", "c", "d"], iter(["b", "c", "d"])):
            with pytest.raises(CapacityError) as info:
                check(patterns)
            refusals.append((info.value.code, info.value.message))
    m.subscribe_many([(2, "b"), (3, "c")])
    for check in (m.check_room, partial(Matcher.check_room, m)):
        with pytest.raises(CapacityError) as info:
            check(["d"])
        refusals.append((info.value.code, info.value.message))
    assert refusals == [
        *[("too_many_subscriptions", "3 more subscriptions would exceed the limit of 3")] * 4,
        *[("too_many_subscriptions", "the matcher holds 3 subscriptions, its limit")] * 2,
    ]
    with pytest.raises(CapacityError):
        m.subscribe(4, "d")


def test_fixed_capacities_are_native_only(engine: str) -> None:
    """``capacity()`` names the fixed capacities beyond ``max_subscriptions``: ``native``'s
    three (also through a result cache), none for the others."""
    for m in (create_matcher(engine), create_matcher(engine, cache_size=4)):
        m.subscribe(1, "a.b")
        capacity = m.capacity()
        if engine != "native":
            assert capacity == {}
            continue
        assert sorted(capacity) == ["tail_words", "text_bytes", "trie_nodes"]
        assert 2 <= capacity["trie_nodes"][0] < capacity["trie_nodes"][1]  # the root and more


def test_unknown_names() -> None:
    with pytest.raises(ValueError, match="unknown engine"):
        create_matcher("nope")
    with pytest.raises(ValueError, match="unknown dialect"):
        create_matcher("trie", dialect="stomp")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("dialect", ["amqp", "mqtt", "nats"])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_bulk_sets_match_the_rule(engine: str, dialect: str, data: st.DataObject) -> None:
    """Many patterns at once, every engine against the rule applied to each pattern."""
    patterns = data.draw(st.lists(PATTERNS[dialect], min_size=1, max_size=60))
    topics = data.draw(st.lists(TOPICS[dialect], min_size=1, max_size=20))
    m = create_matcher(engine, dialect=dialect)
    d = m.dialect
    for i, pattern in enumerate(patterns):
        m.subscribe(i, pattern)
    for topic in topics:
        words = d.split_topic(topic)
        expected = {i for i, p in enumerate(patterns) if pattern_matches(d.parse_pattern(p), words)}
        assert set(m.match(topic)) == expected, topic


#: The engines that walk a trie breadth-first and count the walk's steps (``_walk``).
Walker: TypeAlias = type[TrieMatcher] | type[NativeMatcher]
WALKERS: list[Walker] = [TrieMatcher, NativeMatcher]


@pytest.mark.parametrize("walker", WALKERS)
def test_walk_is_bounded_by_nodes_times_words(walker: Walker) -> None:
    """Adversarial: many '#' against a 128-word key. Counts steps, never time."""
    m = walker()
    adversarial = ["#.#.#.#.#.a", "#.a.#.a.#.a.#", "#.*.#.*.#.b", "a.#.#.#.#.#.#.#.#", "#"]
    for i, pattern in enumerate(adversarial):
        m.subscribe(i, pattern)
    for topic in ("a." * 127 + "a", "a.b." * 63 + "a.b", "." * 127):
        words = AMQP.split_topic(topic)
        sizes: list[int] = []
        m._walk(words, sizes)
        assert len(sizes) == len(words) + 1
        assert max(sizes) <= m.node_count()
        assert sum(sizes) <= m.node_count() * (len(words) + 1)
        expected = {
            i for i, p in enumerate(adversarial) if pattern_matches(AMQP.parse_pattern(p), words)
        }
        assert set(m.match(topic)) == expected


@pytest.mark.parametrize("walker", WALKERS)
def test_walk_bound_on_random_tries(walker: Walker) -> None:
    rng = random.Random(7)
    words = ["a", "b", "", "*", "#"]
    m = walker()
    for i in range(400):
        m.subscribe(i, ".".join(rng.choice(words) for _ in range(rng.randint(0, 8))))
    for _ in range(200):
        topic_words = [rng.choice(["a", "b", ""]) for _ in range(rng.randint(0, 128))]
        sizes: list[int] = []
        m._walk(topic_words, sizes)
        assert max(sizes) <= m.node_count()


def test_inverted_bitmap_table_is_bounded_lru() -> None:
    m = InvertedBitmapMatcher(limits=Limits(max_compiled_topics=3))
    m.subscribe(1, "t.*")
    m.subscribe(2, "t.#")
    for k in range(10):
        assert set(m.match(f"t.{k}")) == {1, 2}
        assert m.compiled_topics() <= 3
    m.match("t.7")  # most recently used: survives the next two compiles
    m.match("t.a")
    m.match("t.b")
    assert "t.7" in m._topics
    m.subscribe(3, "t.7")  # compiled topics stay current on writes
    assert set(m.match("t.7")) == {1, 2, 3}
    m.unsubscribe(1)
    assert set(m.match("t.7")) == {2, 3}
    m._check()
