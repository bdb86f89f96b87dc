"""``matcher.overlap`` against brute force: every pair of short patterns, every short topic.

Why the enumeration is a sound oracle (it must find a witness whenever one exists):

* Alphabet. Besides the patterns' literals it holds a *fresh* word no pattern names (``z``; for
  MQTT also ``$z``, since a first word starting with ``$`` behaves differently). If some topic
  is in P and not in Q (or in both), so is the topic with every word a wildcard of P took
  replaced by a fresh word of the same kind: a fresh word only feeds wildcards, and a wildcard
  takes any word.
* Length. Read a run of n fresh words from any set of Q's positions: for n > c (c = Q's tokens
  other than ``#``) every path has a ``#`` loop, so adding or removing one fresh word keeps
  the set: runs longer than c + 1 can be cut to c + 1. A shortest witness therefore has, per
  stretch of P's wildcards holding a ``#``, at most max(its ``*`` count, c + 1) words, plus
  one per other token. With at most 3 pattern words that is at most 7 words (``#.a.#``
  against a Q holding a ``#`` and 2 other tokens: 3 + 1 + 3); a Q without ``#`` fails a long
  P already at length |Q| + 1 <= 4. MQTT counts its marker (a non-``#`` token) and allows
  ``#`` only last, NATS's ``>`` is ``*`` then ``#``, ending the pattern: both stay within 6
  real words. The enumeration goes to 7 (AMQP) and 6 (MQTT, NATS).

Every pair of patterns of up to 3 words over each dialect's word set is checked (exhaustive,
no sampling), plus hypothesis on longer patterns for the directions brute force can still
refute.
"""

from __future__ import annotations

import itertools
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matcher import create_matcher
from matcher.budget import Budget, BudgetExceededError
from matcher.grammar import Tokens, get_dialect, pattern_matches
from matcher.optimized_inverted_bitmap import OptimizedInvertedBitmapMatcher
from matcher.overlap import (
    ContainmentTooComplexError,
    Relation,
    contains,
    intersects,
    redundant,
    search,
)
from tests.matcher.strategies import PATTERNS

_PATTERN_WORDS = {
    "amqp": ["a", "", "*", "#"],
    "mqtt": ["a", "$a", "+", "#"],
    "nats": ["a", "b", "*", ">"],
}
_TOPIC_WORDS = {"amqp": ["a", "", "z"], "mqtt": ["a", "$a", "z", "$z"], "nats": ["a", "b", "z"]}
_TOPIC_LENGTHS = {"amqp": range(0, 8), "mqtt": range(1, 7), "nats": range(1, 7)}


def _patterns(dialect: str) -> list[str]:
    grammar = get_dialect(dialect)
    out: list[str] = []
    for size in range(0 if dialect == "amqp" else 1, 4):
        for words in itertools.product(_PATTERN_WORDS[dialect], repeat=size):
            text = grammar.separator.join(words)
            try:
                grammar.parse_pattern(text)
            except ValueError:
                continue
            out.append(text)
    return out


@cache
def _topics(dialect: str) -> list[list[str]]:
    """Every topic in the universe, split as the dialect does (MQTT with its marker)."""
    grammar = get_dialect(dialect)
    return [
        grammar.split_topic(grammar.separator.join(words))
        for size in _TOPIC_LENGTHS[dialect]
        for words in itertools.product(_TOPIC_WORDS[dialect], repeat=size)
    ]


@cache
def _matched(dialect: str, pattern: str) -> frozenset[int]:
    tokens = get_dialect(dialect).parse_pattern(pattern)
    return frozenset(
        i for i, words in enumerate(_topics(dialect)) if pattern_matches(tokens, words)
    )


def _tokens(dialect: str, pattern: str) -> Tokens:
    return get_dialect(dialect).parse_pattern(pattern)


@pytest.mark.parametrize("dialect", ["amqp", "mqtt", "nats"])
def test_every_short_pair_against_brute_force(dialect: str) -> None:
    grammar = get_dialect(dialect)
    patterns = _patterns(dialect)
    for p, q in itertools.product(patterns, repeat=2):
        tp, tq = _tokens(dialect, p), _tokens(dialect, q)
        mp, mq = _matched(dialect, p), _matched(dialect, q)
        assert intersects(grammar, tp, tq) is bool(mp & mq), (p, q)
        assert contains(grammar, tq, tp) is (mp <= mq), (q, "covers", p)


@pytest.mark.parametrize(
    ("dialect", "p", "q", "shared", "q_covers_p"),
    [
        ("amqp", "a.#.b", "#.b.#", True, True),
        ("amqp", "#.a.#", "#.b.#", True, False),
        ("amqp", "*.#", "#.*", True, True),
        ("amqp", "a", "a.#", True, True),
        ("amqp", "a.#", "a", True, False),
        ("amqp", "", "#", True, True),
        ("amqp", "*", "", False, False),
        ("amqp", "a..b", "a.*.b", True, True),
        ("amqp", "#.#.a.#.#", "#.a.#", True, True),
        ("mqtt", "+/b", "$SYS/b", False, False),
        ("mqtt", "#", "$SYS/#", False, False),
        ("mqtt", "a/#", "a", True, False),
        ("mqtt", "a", "a/#", True, True),
        ("mqtt", "$SYS/+", "+/+", False, False),
        ("nats", "a.>", "a.*", True, False),
        ("nats", "a.*", "a.>", True, True),
        ("nats", "a", "a.>", False, False),
    ],
)
def test_examples(dialect: str, p: str, q: str, shared: bool, q_covers_p: bool) -> None:
    grammar = get_dialect(dialect)
    tp, tq = _tokens(dialect, p), _tokens(dialect, q)
    assert intersects(grammar, tp, tq) is shared
    assert intersects(grammar, tq, tp) is shared
    assert contains(grammar, tq, tp) is q_covers_p


def test_state_budget_refuses_instead_of_running_away() -> None:
    """Q must remember where the last a's were (the classic exponential determinization);
    P lets them fall anywhere, so the search meets thousands of sets."""
    amqp = get_dialect("amqp")
    q = amqp.parse_pattern("#.a." + ".".join(["*"] * 12))
    p = amqp.parse_pattern(".".join(["#.a"] * 5) + "." + ".".join(["*"] * 12))
    assert contains(amqp, q, p)
    with pytest.raises(ContainmentTooComplexError):
        contains(amqp, q, p, max_states=1_000)


@settings(max_examples=100, deadline=None)
@given(PATTERNS["amqp"], PATTERNS["amqp"])
def test_longer_amqp_patterns_never_contradict_brute_force(p: str, q: str) -> None:
    """Longer patterns: whatever short topic brute force finds must agree (a shared topic
    means ``intersects``; a topic of P outside Q means not ``contains``)."""
    amqp = get_dialect("amqp")
    tp, tq = _tokens("amqp", p), _tokens("amqp", q)
    shared, covered = intersects(amqp, tp, tq), contains(amqp, tq, tp)
    assert not covered or shared  # every pattern matches some topic
    for words in _topics("amqp")[:364]:  # up to 5 words
        in_p, in_q = pattern_matches(tp, words), pattern_matches(tq, words)
        assert not (in_p and in_q) or shared
        assert not (in_p and not in_q) or not covered


@st.composite
def _tables(draw: st.DrawFn) -> tuple[str, list[str], str]:
    dialect = draw(st.sampled_from(["amqp", "mqtt", "nats"]))
    patterns = draw(st.lists(PATTERNS[dialect], min_size=1, max_size=15, unique=True))
    return dialect, patterns, draw(PATTERNS[dialect])


@settings(max_examples=60, deadline=None)
@given(_tables())
def test_search_equals_deciding_every_pattern(case: tuple[str, list[str], str]) -> None:
    """The pruned search finds exactly what deciding every pattern finds, for both
    relations and with either engine; the pruning keeps a superset."""
    dialect, patterns, query = case
    grammar = get_dialect(dialect)
    items = list(enumerate(patterns))
    fast = create_matcher("optimized_inverted_bitmap", dialect)
    slow = create_matcher("naive", dialect)
    for engine in (fast, slow):
        engine.subscribe_many(items)
    q = _tokens(dialect, query)
    overlapping = [i for i, p in items if intersects(grammar, q, _tokens(dialect, p))]
    covered = [i for i, p in items if contains(grammar, q, _tokens(dialect, p))]
    assert isinstance(fast, OptimizedInvertedBitmapMatcher)
    assert set(overlapping) <= set(fast.overlap_candidates(query))
    for engine in (fast, slow):
        assert search(engine, query, "overlaps", limit=1000) == (overlapping, None)
        assert search(engine, query, "covered_by", limit=1000).ids == covered
        # keyset: pages of 2, or pages cut short after 3 decisions, add up to the answer
        for limit, decisions in ((2, 1000), (1000, 3)):
            pages: list[int] = []
            after: int | None = None
            while True:
                page = search(engine, query, "overlaps", after, limit, decisions)
                pages += page.ids
                if page.resume is None:
                    break
                assert after is None or page.resume > after
                after = page.resume
            assert pages == overlapping


@pytest.mark.parametrize("relation", ["overlaps", "covered_by"])
def test_a_step_budget_ends_a_page_early_and_the_pages_add_up(relation: Relation) -> None:
    """Pages cut by a small step budget resume where the budget ran out and add up to the
    unbounded answer; a budget too small for the first candidate alone is refused, naming
    that subscription (the only case without progress)."""
    engine = create_matcher("optimized_inverted_bitmap")
    engine.subscribe_many([(i, f"#.w{i % 5}.#.x{i % 3}") for i in range(60)])
    query = "#.w1.#.x1.#"
    whole = search(engine, query, relation, limit=1000)
    assert whole.resume is None and whole.ids
    pages: list[int] = []
    after: int | None = None
    calls = 0
    while True:
        budget = Budget("overlap_budget", 400)
        page = search(engine, query, relation, after, 1000, budget=budget)
        calls += 1
        assert budget.spent <= 400 + 200  # the last decision stops within its own step
        pages += page.ids
        if page.resume is None:
            break
        assert after is None or page.resume > after
        after = page.resume
    assert pages == whole.ids and calls > 2
    with pytest.raises(BudgetExceededError, match="subscription 0 alone") as refused:
        search(engine, query, relation, budget=Budget("overlap_budget", 5))
    assert refused.value.code == "overlap_budget_exceeded"


def test_pruning_skips_what_cannot_overlap() -> None:
    """Of 1,000 patterns naming 1,000 different first words, the query names one: the
    positional rows leave that one and the patterns whose words there are wildcards."""
    engine = OptimizedInvertedBitmapMatcher("amqp")
    engine.subscribe_many([(i, f"w{i}.#") for i in range(1000)])
    engine.subscribe_many([(1000, "*.x"), (1001, "#.y"), (1002, "w7.*.z")])
    assert set(engine.overlap_candidates("w7.x")) == {7, 1000}  # '#.y' ends in another word
    assert search(engine, "w7.x", "overlaps").ids == [7, 1000]
    assert search(engine, "w7.#", "covered_by").ids == [7, 1002]


@pytest.mark.parametrize(
    ("dialect", "patterns", "expected"),
    [
        ("amqp", ["a.#", "a.b", "a.*", "c"], {1: 0, 2: 0}),
        ("amqp", ["*.#", "#.*", "#.*.#"], {1: 0, 2: 0}),  # three spellings of one set
        ("amqp", ["#.a.#", "#.b.#"], {}),
        ("amqp", ["#", ""], {1: 0}),
        ("mqtt", ["#", "$SYS/a"], {}),  # '#' never matches '$' topics
        ("mqtt", ["+/#", "a/b", "a"], {1: 0, 2: 0}),
        ("nats", ["a.>", "a.*", "a"], {1: 0}),
    ],
)
def test_redundant(dialect: str, patterns: list[str], expected: dict[int, int]) -> None:
    assert redundant(get_dialect(dialect), enumerate(patterns)) == expected


def test_redundant_bounds_its_work() -> None:
    """Steps are counted, not time: the same work takes the same steps, and a budget one
    step short of them refuses it, naming the budget."""
    amqp = get_dialect("amqp")
    items = list(enumerate(f"#.x{i}.#" for i in range(30)))  # all candidates of each other
    enough = Budget("redundancy_budget", 1_000_000)
    assert redundant(amqp, items, budget=enough) == {}
    needed = enough.spent
    assert needed > 30 * 29  # a step per candidate pair at least
    assert redundant(amqp, items, budget=Budget("redundancy_budget", needed)) == {}
    short = Budget("redundancy_budget", needed - 1, "split them")
    with pytest.raises(BudgetExceededError, match="more than") as refused:
        redundant(amqp, items, budget=short)
    assert refused.value.code == "redundancy_budget_exceeded"
    assert "split them" in refused.value.message


@settings(max_examples=60, deadline=None)
@given(_tables())
def test_redundant_leaves_the_same_topics(case: tuple[str, list[str], str]) -> None:
    """Dropping the redundant patterns keeps every topic the subscriber received (each
    dropped one is covered by a kept one, checked on the brute-force universe) and keeps no
    two equivalent patterns."""
    dialect, patterns, _ = case
    grammar = get_dialect(dialect)
    dropped = redundant(grammar, enumerate(patterns))
    kept = [p for i, p in enumerate(patterns) if i not in dropped]
    assert kept
    for i, covering in dropped.items():
        assert contains(
            grammar, _tokens(dialect, patterns[covering]), _tokens(dialect, patterns[i])
        )
    for a, b in itertools.combinations(kept, 2):
        ta, tb = _tokens(dialect, a), _tokens(dialect, b)
        assert not contains(grammar, ta, tb) and not contains(grammar, tb, ta), (a, b)
