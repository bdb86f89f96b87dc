"""Guarantees specific to ``native``: it is compiled code (no silent pure-Python stand-in),
its id -> pattern table lives in the native structure yet behaves as the dict the base
class expects, and its interned words, nodes and cached results follow every write. Its
matching is covered by the shared property, conformance and concurrency tests."""

from __future__ import annotations

import importlib.machinery
import inspect
import pickle
import random
import sys
import threading
from collections.abc import Callable, Set
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import matcher._native
from matcher import CapacityError, Limits, MatcherError, SubscriptionConflictError, create_matcher
from matcher._native import Ids, NativeMatcher
from matcher.base import Matcher
from matcher.grammar import AMQP, pattern_matches


def test_native_is_a_compiled_extension() -> None:
    path = matcher._native.__file__
    assert path is not None
    assert path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), path
    assert path.endswith(".so") or path.endswith(".pyd"), path
    assert isinstance(create_matcher("native"), NativeMatcher)


def test_match_keeps_the_interface_signature() -> None:
    """``match`` is a plain compiled method (the fastest call), yet takes ``topic`` by
    name as every engine does and tells ``inspect`` so."""
    m = NativeMatcher()
    m.subscribe(1, "a.*")
    assert list(inspect.signature(NativeMatcher.match).parameters) == ["self", "topic"]
    assert list(m.match(topic="a.b")) == [1] == list(m.match("a.b"))


def test_pattern_table_is_native_and_dict_like() -> None:
    m = NativeMatcher()
    m.subscribe(7, "a.#.#.b")  # canonical form indexed, text kept as written
    m.subscribe(8, "a.#.b")
    m.subscribe(9, "a.#.b")
    assert m.node_count() == 4  # root, a, #, b: 7, 8 and 9 share the node
    assert m.pattern_of(7) == "a.#.#.b" and m.pattern_of(8) == "a.#.b"
    assert m.pattern_of(10) is None and m.pattern_of(-1) is None and m.pattern_of("7") is None  # type: ignore[arg-type]
    assert sorted(m.subscriptions()) == [(7, "a.#.#.b"), (8, "a.#.b"), (9, "a.#.b")]
    table = m._patterns
    assert len(table) == 3 and 7 in table and 10 not in table and table.get(10) is None
    assert sorted(table) == [7, 8, 9] and table[9] == "a.#.b"
    assert table.pop(7) == "a.#.#.b" and table.pop(7) is None  # pop withdraws for real
    assert set(m.match("a.x.b")) == {8, 9}
    m.subscribe(7, "a.#.#.b")
    m._check()


def test_words_nodes_and_cached_results_follow_writes() -> None:
    m = NativeMatcher()
    for i in range(2_000):
        m.subscribe(i, f"w{i}.x")
    assert m.node_count() == 1 + 2_000  # 'w{i}' is a tail leaf holding 'x'
    for i in range(2_000):
        assert set(m.match(f"w{i}.x")) == {i}  # caches a frozenset on each leaf
    for i in range(2_000):
        assert m.unsubscribe(i)
    m._check()  # every word released, every node freed, no stale cache
    assert m.node_count() == 1 and len(m) == 0
    assert set(m.match("w5.x")) == set()
    m.subscribe(1, "w5.x")
    assert set(m.match("w5.x")) == {1}
    m.subscribe(2, "w5.x")
    assert set(m.match("w5.x")) == {1, 2}  # the cached {1} was dropped by the write
    m._check()


def test_non_ascii_long_and_other_dialect_topics() -> None:
    m = NativeMatcher()
    m.subscribe(1, "é.*.ß")
    m.subscribe(2, "#.ß")
    assert set(m.match("é.x.ß")) == {1, 2}
    assert set(m.match(b"\xc3\xa9.y.\xc3\x9f")) == {1, 2}  # type: ignore[arg-type]
    long_key = "." * 254  # 255 empty words: past the fast path's word bound
    words = AMQP.split_topic(long_key)
    m.subscribe(3, "#")
    m.subscribe(4, "*.#")
    expected = {
        i for i, p in [(3, "#"), (4, "*.#")] if pattern_matches(AMQP.parse_pattern(p), words)
    }
    assert set(m.match(long_key)) == expected
    mqtt = NativeMatcher("mqtt")
    mqtt.subscribe(1, "#")
    mqtt.subscribe(2, "$SYS/#")
    assert set(mqtt.match("$SYS/x")) == {2} and set(mqtt.match("a/b")) == {1}
    mqtt._check()


def test_topic_words_of_every_length_around_the_packed_bound() -> None:
    """The fast path packs words of fewer than 8 bytes while it looks for dots (a longer
    word's packed bytes wrap around and must not pass for a short word): words of 0 to 17
    bytes that share their first bytes, alone and next to each other, match exactly as
    the rule says, through ``match`` and ``match_ids``."""
    words = ["abcdefghijklmnopq"[:n] for n in range(18)] + ["ibcdefgh", "i"]
    m = NativeMatcher()
    patterns = {}
    for i, a in enumerate(words):
        patterns[2 * i] = a
        patterns[2 * i + 1] = f"{a}.*.{words[-1 - i]}"
    for sub_id, pattern in patterns.items():
        m.subscribe(sub_id, pattern)
    rng = random.Random(7)
    topics = list(words) + [".".join(rng.choice(words) for _ in range(3)) for _ in range(400)]
    counts, ids, _ = m.match_ids(topics)
    at = 0
    for k, topic in enumerate(topics):
        split = AMQP.split_topic(topic)
        expected = sorted(
            i for i, p in patterns.items() if pattern_matches(AMQP.parse_pattern(p), split)
        )
        assert sorted(m.match(topic)) == expected, topic
        assert list(ids[at : at + counts[k]]) == expected, topic
        at += counts[k]
    m._check()


def test_tuple_index_answers_short_star_patterns_and_steps_aside() -> None:
    """Patterns of at most five words without ``#`` are looked up in the tuple index (one
    probe per ``*`` shape); a ``#`` pattern or a longer one hands every length back to the
    walk, too many shapes for a length hands that length back, and removing them brings the
    index back. Results follow the rule throughout, and ``_check`` holds: the index mirrors
    every end node through subscribes, tail leaves unfolding and unsubscribes."""
    rng = random.Random(11)
    m = NativeMatcher()
    patterns: dict[int, str] = {}

    def pattern(words: int, stars: int) -> str:
        parts = [str(rng.randrange(4)) for _ in range(words)]
        for at in rng.sample(range(words), min(stars, words)):
            parts[at] = "*"
        return ".".join(parts)

    def agree() -> None:
        for _ in range(150):
            topic = ".".join(str(rng.randrange(5)) for _ in range(rng.randint(1, 6)))
            split = AMQP.split_topic(topic)
            expected = {
                i for i, p in patterns.items() if pattern_matches(AMQP.parse_pattern(p), split)
            }
            assert set(m.match(topic)) == expected, topic
        m._check()

    def sub(sub_id: int, text: str) -> None:
        m.subscribe(sub_id, text)
        patterns[sub_id] = text

    def unsub(sub_id: int) -> None:
        m.unsubscribe(sub_id)
        del patterns[sub_id]

    sub(1, "0.1.2.3")  # a tail leaf, unfolded by the next one
    sub(2, "0.1.9")
    for i in range(3, 300):
        sub(i, pattern(rng.choice((3, 5)), rng.choice((0, 0, 1))))
    assert m._answers_by_tuples(5) and m._answers_by_tuples(3)
    agree()
    sub(1000, "0.#.1")
    assert not m._answers_by_tuples(5) and not m._answers_by_tuples(3)
    agree()
    unsub(1000)
    sub(1001, "0.1.2.3.4.5")
    assert not m._answers_by_tuples(5)
    agree()
    unsub(1001)
    assert m._answers_by_tuples(5)
    for i, stars in enumerate(((0,), (1,), (2,), (3,), (0, 1), (0, 2), (0, 3), (1, 2), (1, 3))):
        sub(2000 + i, ".".join("*" if k in stars else "1" for k in range(4)))
    assert not m._answers_by_tuples(4) and m._answers_by_tuples(5)
    agree()
    for sub_id in rng.sample(sorted(patterns), len(patterns) // 2):
        unsub(sub_id)
    agree()
    for sub_id in list(patterns):
        unsub(sub_id)
    assert m._answers_by_tuples(4) and len(m) == 0
    agree()


def _sorted_match(m: NativeMatcher, topic: str) -> list[int]:
    return sorted(m.match(topic))


def _outcome(call: Callable[[], object]) -> object:
    try:
        return call()
    except MatcherError as e:
        return (type(e).__name__, e.code, str(e))


@pytest.mark.parametrize("dialect", ["amqp", "mqtt", "nats"])
def test_fast_subscribe_paths_follow_the_grammar(dialect: str) -> None:
    """Plainly valid AMQP patterns skip the Python grammar on the way in; every input must
    still get exactly ``trie``'s (the base class's) answer, error code and message."""
    limits = Limits(max_words=4, max_pattern_bytes=12, max_subscriptions=6)
    inputs: list[object] = [
        "a.b",
        "a.*.#.*",
        "#.#",
        "a.b.c.d",
        "a.b.c.d.e",
        "x" * 13,
        "",
        "é.x",
        b"a.b",
        5,
        "a\x00",
        "a.+",
        "a/#",
        "a/+/b",
        "a b",
        ">",
        "a.>",
        "$a",
    ]
    native = create_matcher("native", dialect=dialect, limits=limits)
    trie = create_matcher("trie", dialect=dialect, limits=limits)
    for sub_id, pattern in enumerate(inputs):
        for m in (native, trie):
            m.subscribe_many([])  # nothing: no error, no change
        got = _outcome(lambda: native.subscribe(sub_id, pattern))  # type: ignore[arg-type]  # noqa: B023
        want = _outcome(lambda: trie.subscribe(sub_id, pattern))  # type: ignore[arg-type]  # noqa: B023
        assert got == want, pattern
    # a conflict with the table
    assert _outcome(lambda: native.subscribe(0, "b")) == _outcome(lambda: trie.subscribe(0, "b"))
    assert dict(native.subscriptions()) == dict(trie.subscriptions())
    batches: list[list[tuple[object, object]]] = [
        [(100, "q.r"), (101, "é.*"), (100, "q.r")],  # a repeat inside the batch
        [(102, "q"), (102, "r")],  # a conflict inside the batch
        [(103, "q"), (104, "a.b.c.d.e")],  # one invalid item: nothing is stored
        [(105, "q"), (-1, "q")],
        [(106, "s"), (0, "a.b")],  # a no-op against the table
        [(107, "t"), (108, "u"), (109, "v"), (110, "w")],  # past the capacity
    ]
    for batch in batches:
        got = _outcome(lambda: native.subscribe_many(batch))  # type: ignore[arg-type]  # noqa: B023
        want = _outcome(lambda: trie.subscribe_many(batch))  # type: ignore[arg-type]  # noqa: B023
        assert got == want, batch
        assert dict(native.subscriptions()) == dict(trie.subscriptions()), batch
    native._check()


@pytest.mark.parametrize("alphabet", [["a", "b", ""], [f"w{k}" for k in range(20)]])
def test_long_topics_with_many_hashes_match_the_rule(alphabet: list[str]) -> None:
    """Long topics revisit the same words: the '#' walk keeps what the children of '#'
    nodes contribute per pair of words (up to 16 distinct words) and steps directly past
    that; both against the rule itself."""
    rng = random.Random(3)
    tokens = [*alphabet, *["*", "#"] * 3]
    patterns = [".".join(rng.choice(tokens) for _ in range(rng.randint(0, 7))) for _ in range(300)]
    m = NativeMatcher()
    m.subscribe_many(list(enumerate(patterns)))
    parsed = [AMQP.parse_pattern(p) for p in patterns]
    longest = 255 // (max(map(len, alphabet)) + 1)  # words that fit in a 255-byte key
    for _ in range(60):
        words = [
            rng.choice(alphabet[:4] if rng.random() < 0.8 else alphabet)
            for _ in range(rng.randint(0, longest))
        ]
        topic = ".".join(words)
        words = AMQP.split_topic(topic)  # [""] joins to "", which is no word at all
        expected = {i for i, tokens_ in enumerate(parsed) if pattern_matches(tokens_, words)}
        assert set(m.match(topic)) == expected


def test_pruned_walk_follows_writes() -> None:
    """While more words remain than any pattern has after its last '#', the walk carries
    only nodes with a '#' below them that is not active yet (the tag and the tail counts
    kept by every write; ``_check`` recounts both). Writes move the cut: the longest tail
    comes and goes, and '#' patterns leave nodes that fed them. Against the rule each round."""
    rng = random.Random(11)
    tokens = ["a", "b", "c", "*", "#", "#"]
    patterns = [".".join(rng.choice(tokens) for _ in range(rng.randint(1, 7))) for _ in range(200)]
    patterns += ["#.a.b.c.a.b.c.a.b", "a.#.b.#", "#"]
    parsed = {i: AMQP.parse_pattern(p) for i, p in enumerate(patterns)}
    m = NativeMatcher()
    m.subscribe_many(list(enumerate(patterns)))
    live = dict(parsed)
    for round_ in range(8):
        m._check()
        for _ in range(12):
            words = [rng.choice("abc") for _ in range(rng.randint(1, 60))]
            expected = {i for i, t in live.items() if pattern_matches(t, words)}
            assert set(m.match(".".join(words))) == expected, (round_, words)
        gone = rng.sample(sorted(live), 40)
        if round_ == 3:
            gone = sorted({*gone, len(patterns) - 3})  # the longest tail goes: the cut moves
        for i in gone:
            m.unsubscribe(i)
            del live[i]
        longest = len(patterns) - 3
        back = [i for i in parsed if i not in live and i != longest and rng.random() < 0.5]
        for i in back:
            m.subscribe(i, patterns[i])
            live[i] = parsed[i]
    m._check()


def test_pruned_walk_drops_a_node_once_every_hash_below_is_active() -> None:
    """Before the cut, a node is carried only while a '#' node below it is not active yet:
    ``a.a`` under the first '#' feeds the second '#', which the first ``a.a`` activates,
    and from then on the node is spent and dropped (each level counts the first '#''s
    ``a`` child, two active '#' nodes and the nodes carried). A second pattern puts a
    '#' below the same node that this topic never reaches, and the node is carried to the
    cut. Counted, never timed; both against the rule."""
    words = ["a"] * 100 + ["b"]
    sizes: dict[str, list[int]] = {}
    for name, patterns in {
        "spent": ["#.a.a.#.b"],
        "carried": ["#.a.a.#.b", "#.a.a.c.#.b"],
    }.items():
        m = NativeMatcher()
        m.subscribe_many(list(enumerate(patterns)))
        m._check()
        levels: list[int] = []
        m._walk(words, levels)
        sizes[name] = levels[10:90]
        expected = {
            i for i, p in enumerate(patterns) if pattern_matches(AMQP.parse_pattern(p), words)
        }
        assert set(m.match(".".join(words))) == expected == {0}
    assert set(sizes["spent"]) == {3}
    assert set(sizes["carried"]) == {4}


def test_readers_on_the_general_path_do_not_share_words() -> None:
    """Topics off the C fast path go through the dialect's (Python) splitter first, during
    which another thread may match: each reader must still walk its own words."""
    m = NativeMatcher("mqtt")
    m.subscribe(1, "a/b")
    m.subscribe(2, "c/d/e")
    m.subscribe(3, "+/é")
    cases = {"a/b": {1}, "c/d/e": {2}, "x/é": {3}, "a/b/c": set()}
    errors: list[BaseException] = []

    def reader(topic: str, expected: set[int]) -> None:
        try:
            for _ in range(3_000):
                assert set(m.match(topic)) == expected, topic
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=reader, args=item) for item in cases.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[0]


@pytest.mark.parametrize(
    ("dialect", "topics"),
    [
        ("amqp", ["a.b", "", "é.b", "a." * 200, "a\x00b", "x.y.z", "a.b"]),
        ("mqtt", ["a/b", "a/#", "", "+", "$SYS/x", "a/b/c", "é/b"]),
        ("nats", ["a.b", "a.*", "", "a..b", ">", "c.d", "a.b.c"]),
    ],
)
def test_match_ids_answers_as_match_does(dialect: str, topics: list[str]) -> None:
    """Per topic, ``match_ids`` holds ``match``'s ids in order, or the very error it
    raises (same class, code and message), whichever path the topic takes."""
    m = NativeMatcher(dialect, Limits(max_topic_bytes=255, max_words=32))
    patterns = {"amqp": ["a.*", "#", "a.#.b", "x.*.z"], "mqtt": ["a/+", "#", "+/b/#"]}
    patterns["nats"] = ["a.*", ">", "c.d"]
    for sub_id, pattern in enumerate(patterns[dialect]):
        m.subscribe(sub_id, pattern)
    counts, ids, errors = m.match_ids(topics)
    at = 0
    for k, topic in enumerate(topics):
        expected = _outcome(partial(_sorted_match, m, topic))
        if k in errors:
            got: object = (type(errors[k]).__name__, errors[k].code, str(errors[k]))
            assert counts[k] == 0
        else:
            got = list(ids[at : at + counts[k]])
        at += counts[k]
        assert got == expected, (topic, got, expected)
    assert errors, "some topics must take the error path"
    assert at == len(ids)
    none, no_ids, no_errors = m.match_ids(())
    assert (len(none), len(no_ids), no_errors) == (0, 0, {})


def test_text_arena_compacts_and_keeps_every_pattern() -> None:
    """Texts other than the path's live in one arena; removing most of them compacts it
    (the core's own check verifies the accounting) and every remaining id keeps its exact
    text, including two non-canonical spellings sharing a node."""
    m = create_matcher("native", "amqp")
    # '#.#' is indexed as '#': each text differs from its path's, so each is stored.
    patterns = {i: f"w{i % 7}.#.#.{'x' * (i % 40)}.{i}" for i in range(1, 6_000)}
    m.subscribe_many(patterns.items())
    m.subscribe(10_000, "a.#.*")
    m.subscribe(10_001, "a.*.#")  # the same canonical node, another text
    m._check()
    for i in list(patterns)[: len(patterns) - 50]:
        assert m.unsubscribe(i)
        del patterns[i]
    m._check()
    assert dict(m.subscriptions()) == {**patterns, 10_000: "a.#.*", 10_001: "a.*.#"}
    assert sorted(m.match("a.b")) == [10_000, 10_001]
    assert m.unsubscribe(10_000)
    m._check()
    assert dict(m.subscriptions()) == {**patterns, 10_001: "a.*.#"}


def test_subscribe_arrays_in_c_is_all_or_nothing() -> None:
    """The columnar bulk path in C: indexed only when every item is plainly valid, new, and
    in increasing id order; otherwise -1 and nothing changed, and ``subscribe_arrays``
    takes the base class's path (``subscribe_many``'s rules)."""
    m = NativeMatcher("amqp")
    not_ascii = _columns([(1, "a.*"), (2, "é.b")])
    assert m._subscribe_arrays_in_c(*not_ascii) == -1
    assert m._subscribe_arrays_in_c(*_columns([(2, "a.*"), (1, "b")])) == -1  # not increasing
    assert m._subscribe_arrays_in_c(*_columns([(1, "a.b"), (2, "")])) == -1  # an empty pattern
    assert len(m) == 0
    assert m._subscribe_arrays_in_c(*_columns([(1, "a.*"), (5, "a.#")])) == 2
    assert m._subscribe_arrays_in_c(*_columns([(5, "a.#")])) == -1  # present already
    assert sorted(m.match("a.b")) == [1, 5]
    assert m.subscribe_arrays(*_columns([(5, "a.#")])) == 0
    assert m.subscribe_arrays(*not_ascii) == 1
    with pytest.raises(SubscriptionConflictError):
        m.subscribe_arrays(*_columns([(7, "c"), (5, "b")]))
    assert dict(m.subscriptions()) == {1: "a.*", 2: "é.b", 5: "a.#"}
    m._check()


@pytest.mark.parametrize(
    ("dialect", "patterns"),
    [
        ("amqp", ["a.b", "a.*.#", "a.#.*", "a.#.#.b", "a.#.b", "*", "#", "a..b", "a.", "é.ü"]),
        ("mqtt", ["a/b", "a/+/#", "a.b", "a.b/c", "+", "#", "a//b", "*", "a/*"]),
        ("nats", ["a.b", "a.*.>", "*", ">", "a.b.c"]),
    ],
)
def test_path_texts_are_rebuilt_exactly(dialect: str, patterns: list[str]) -> None:
    """A pattern written as its path (labels joined by '.', '*' and '#') stores no text
    and is rebuilt from the trie; any other spelling (another separator or wildcard, a
    non-canonical run of wildcards) is stored. Both read back exactly as written, also
    when they share a node (the core's check refuses a stored text equal to its path's)."""
    m = create_matcher("native", dialect)
    expected = {i: p for i, p in enumerate(patterns)}
    for i, p in expected.items():
        m.subscribe(i, p)
        m.subscribe(100 + i, p)  # two ids on one node: the pool's path
    expected |= {100 + i: p for i, p in enumerate(patterns)}
    m._check()
    assert dict(m.subscriptions()) == expected
    assert all(m.pattern_of(i) == p for i, p in expected.items())
    for i in range(0, len(patterns), 2):
        assert m.unsubscribe(i)
        del expected[i]
    m._check()
    assert dict(m.subscriptions()) == expected


def test_results_are_ids_that_behave_as_a_frozenset() -> None:
    """``match`` answers with ``Ids`` (a C array, not a frozenset of ints): it must still
    be what the ``MatchResult`` protocol and every caller expect of a frozenset."""
    m = NativeMatcher()
    for sub_id, pattern in [(5, "a.b"), (3, "a.*"), (9, "#"), (2**32 - 1, "a.#")]:
        m.subscribe(sub_id, pattern)
    got = m.match("a.b")
    want = frozenset({3, 5, 9, 2**32 - 1})
    assert type(got) is Ids and isinstance(got, Set)
    assert list(got) == sorted(want) and len(got) == 4 and bool(got)
    assert got == want and want == got and got == set(want)
    assert (got != want) is False and got != want - {9} and got != {3, 5, 9, 7} and got != [3]
    assert hash(got) == hash(want) and {got: 1}.get(want) == 1  # type: ignore[call-overload]
    assert all(i in got for i in want) and 4 not in got and -1 not in got
    assert 2**32 not in got and "3" not in got and None not in got  # type: ignore[comparison-overlap]
    assert got | {1} == want | {1} and {1} | got == want | {1}
    assert got & {3, 4} == {3} and {3, 4} & got == {3}
    assert got - {3} == want - {3} and {3, 4} - got == {4}
    assert got ^ {3, 4} == want ^ {3, 4} and {3, 4} ^ got == want ^ {3, 4}
    assert pickle.loads(pickle.dumps(got)) == want
    assert repr(got) == f"Ids([3, 5, 9, {2**32 - 1}])"
    it = iter(got)
    assert next(it) == 3 and list(it) == [5, 9, 2**32 - 1] and list(it) == []
    assert m.match("a.b") == got  # the kept result, or an equal one
    assert m.match("x.y") == {9} and m.match("") == {9}
    empty = NativeMatcher().match("a")
    assert type(empty) is Ids and len(empty) == 0 and not empty and empty == frozenset()


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(1, 300),
    span=st.sampled_from([300, 1_000, 16_384, 16_385, 40_000, 2**31]),
    base=st.integers(0, 2**31 - 1),
    seed=st.integers(0, 2**16),
)
def test_many_ids_come_out_sorted_and_distinct(size: int, span: int, base: int, seed: int) -> None:
    """Results of many ids over several end nodes are sorted (a bitmap for ids within a
    span of 16,384, a sort for the rest) with nothing lost or repeated, by ``match`` and
    ``match_ids`` alike."""
    rng = random.Random(seed)
    ids = {base + offset for offset in rng.sample(range(span), size)}
    m = NativeMatcher()
    for sub_id in ids:
        m.subscribe(sub_id, rng.choice(["a.b", "a.*", "#", "a.#", "*.b", "*.#.b"]))
    got = m.match("a.b")
    assert list(got) == sorted(ids) and got == ids
    counts, batch_ids, errors = m.match_ids(["a.b"])  # the same sort, without the GIL
    assert list(counts) == [len(ids)] and list(batch_ids) == sorted(ids) and not errors
    m._check()


def test_kept_results_are_bounded_and_follow_writes() -> None:
    """Results kept per end node live in a fixed table (more end nodes than slots evict
    each other): every match stays exact, and writes drop what they change."""
    m = NativeMatcher()
    count = 70_000  # above the table's 65,536 slots
    for i in range(count):
        m.subscribe(i, f"k{i}")
    for _ in range(2):
        for i in range(0, count, 7):
            assert m.match(f"k{i}") == frozenset({i})
    m._check()
    for i in range(0, count, 14):
        m.subscribe(count + i, f"k{i}")  # a second id on a node whose result is kept
        assert m.unsubscribe(i + 7)
    m._check()
    for i in range(0, count, 7):
        want = {i, count + i} if i % 14 == 0 else ({i} if i % 14 != 7 else set())
        assert set(m.match(f"k{i}")) == want
    m._check()


def test_kept_results_of_several_end_nodes_stay_exact_when_evicted() -> None:
    """Results of several end nodes are kept in a two-way table of 4,096 slots: with 10,000
    distinct end sets matched in turns (pairs that share a slot evict each other, the
    older moves aside), every match stays exact, and a write drops them all."""
    m = NativeMatcher()
    count = 10_000
    star, extra = count, count + 1
    m.subscribe(star, "*")
    for i in range(count):
        m.subscribe(i, f"k{i}")
    order = list(range(count)) + list(range(0, count, 2)) + list(range(count - 1, -1, -3))
    for i in order:
        assert m.match(f"k{i}") == {i, star}
    m.subscribe(extra, "*")
    for i in order:
        assert m.match(f"k{i}") == {i, star, extra}
    assert m.unsubscribe(star) and m.unsubscribe(3)
    assert m.match("k3") == {extra} and m.match("k4") == {4, extra}
    m._check()


def test_kept_results_are_passed_by_while_most_lookups_miss() -> None:
    """Many distinct topics, each matched once, close the kept results' gate (a result is
    then built on every match, a new object each time); a topic matched over and over
    reopens it at the next trial window (one object again), and every answer stays exact."""
    m = NativeMatcher()
    count = 20_000  # distinct end nodes: far more than a window of lookups
    for i in range(count):
        m.subscribe(i, f"k{i}")
    hot = "k0"
    assert m.match(hot) is m.match(hot)  # a fresh matcher keeps results
    for i in range(1, count):
        assert m.match(f"k{i}") == {i}  # each once: no lookup finds its result
    first, second = m.match(hot), m.match(hot)
    assert first == second == {0} and first is not second  # passed by: built each time
    window, bypass = matcher._native.RESULT_GATE_WINDOW, matcher._native.RESULT_GATE_BYPASS
    assert count < bypass
    for _ in range(bypass + window):
        m.match(hot)
    assert m.match(hot) is m.match(hot)  # tried again, and the hot topic hits
    m.subscribe(count, hot)  # a write still drops the kept result
    assert m.match(hot) == {0, count}
    m._check()


def test_results_too_big_to_keep_do_not_close_the_gate() -> None:
    """A result of more ids than are kept is never found, whatever the reuse: matches
    ending on it are not counted against the gate, so a hot topic matched between them
    stays kept (one object) past many windows."""
    m = NativeMatcher()
    for i in range(40):
        m.subscribe(i, "big")  # 40 ids on one node: built on every match
    m.subscribe(40, "small")
    for _ in range(3 * matcher._native.RESULT_GATE_WINDOW):
        assert len(m.match("big")) == 40
        m.match("small")
    assert m.match("small") is m.match("small") == {40}


def test_end_ids_read_from_edges_follow_every_count_change() -> None:
    """A walk reads a literal end node's ids (one id, or its id vector's index) from the
    edge it probed, not from the node: every write that moves a node between none, one and
    several ids must rewrite that copy. Ends reached by a literal edge, a '*' edge, a tail
    leaf and a '#' walk, each taken up to three ids and back down, in both kinds of walk;
    the results are checked against the ids subscribed, and _check compares every edge's
    copy with its node."""
    for extra in ([], ["#.never"]):  # without and with '#' (the plain and the '#' walk)
        m = NativeMatcher()
        for sub_id, pattern in enumerate(extra, start=1_000):
            m.subscribe(sub_id, pattern)
        ends = {"a.b": "a.b", "s.*": "s.z", "t.u.v.w": "t.u.v.w", "h.#": "h.q.r"}
        held: dict[str, set[int]] = {pattern: set() for pattern in ends}
        next_id = 0
        steps = [1, 1, 1, -1, -1, -1, 1, -1]  # 0 -> 1 -> 2 -> 3 -> 2 -> 1 -> 0 -> 1 -> 0
        for step in steps:
            for pattern in ends:
                if step > 0:
                    m.subscribe(next_id, pattern)
                    held[pattern].add(next_id)
                    next_id += 1
                else:
                    assert m.unsubscribe(min(held[pattern]))
                    held[pattern].discard(min(held[pattern]))
                m._check()
                for other, other_topic in ends.items():
                    assert m.match(other_topic) == held[other], (step, other)
                    assert list(m.match_ids([other_topic])[1]) == sorted(held[other])


def test_tail_leaves_unfold_prune_and_compact() -> None:
    """Chains of literal words that end a pattern are one tail leaf: patterns through,
    beside, above or below a chain unfold it into nodes, removals free tails (the tail
    arena compacts), and every match equals the naive rule's. Words repeat so chains
    share prefixes; '*' and '#' patterns sit beside them."""
    rng = random.Random(7)
    words = ["a", "b", "c", ""]
    m = create_matcher("native", "amqp")
    naive = create_matcher("naive", "amqp")
    live: dict[int, str] = {}
    for step in range(6_000):
        if live and rng.random() < 0.4:
            sub_id = rng.choice(list(live))
            assert m.unsubscribe(sub_id) and naive.unsubscribe(sub_id)
            del live[sub_id]
        else:
            parts = [rng.choice(words) for _ in range(rng.randint(1, 6))]
            if rng.random() < 0.1:
                parts[rng.randrange(len(parts))] = rng.choice(["*", "#"])
            pattern = ".".join(parts)
            m.subscribe(step, pattern)
            naive.subscribe(step, pattern)
            live[step] = pattern
        if step % 1_000 == 0:
            m._check()
    m._check()
    assert dict(m.subscriptions()) == live
    for _ in range(500):
        topic = ".".join(rng.choice(words[:3]) for _ in range(rng.randint(0, 7)))
        assert m.match(topic) == naive.match(topic), topic
    many = create_matcher("native", "amqp")
    many.subscribe_many((i, f"t{i}.x.y.z") for i in range(5_000))
    for i in range(4_000):
        assert many.unsubscribe(i)
    many._check()  # the tail arena compacted; its accounting holds
    assert sorted(many.match("t4500.x.y.z")) == [4500] and not many.match("t4500.x.y")


def _columns(items: list[tuple[int, str]]) -> tuple[object, object, object]:
    """``subscribe_arrays``'s arguments for ``items``."""
    import numpy as np

    data = "".join(p for _, p in items).encode()
    offsets = np.cumsum([0, *(len(p.encode()) for _, p in items)]).astype(np.int32)
    return np.array([i for i, _ in items], np.int64), offsets, np.frombuffer(data, np.uint8)


@pytest.mark.parametrize("path", ["subscribe", "general", "many", "mixed", "arrays"])
@pytest.mark.parametrize(
    ("capacity", "code", "pattern"),
    [
        # 12 literal words each: one node and a tail of 12 entries (11 words and a count);
        # a batch of these fails the batch bound (every token a node) long before the
        # node capacity, and is indexed checking item by item.
        ("trie_nodes", "too_many_trie_nodes", "{i}.*.a.b.c.d.e.f.g.h.i.j"),
        ("tail_words", "too_many_tail_words", "{i}.a.b.c.d.e.f.g.h.i.j.k"),
        # '#.#' is indexed as '#': the text differs from its path's and is stored.
        ("text_bytes", "too_much_pattern_text", "{i}.#.#.{i}"),
    ],
)
def test_fixed_capacities_refuse_a_write_whole(
    path: str, capacity: str, code: str, pattern: str
) -> None:
    """Past a fixed capacity of the structure (trie nodes, tail words, stored text; lowered
    here so that thousands of patterns reach it) every write path refuses with a
    CapacityError naming the capacity; a refused write, a batch included, leaves every
    subscription as it was, the structure checks out, and writes that fit still go in."""
    m = NativeMatcher("amqp")
    lowered = {"trie_nodes": 3_000, "tail_words": 10_000, "text_bytes": 10_000}
    big = 1 << 40
    m._lower_capacity(*(lowered[name] if name == capacity else big for name in m.capacity()))
    naive = create_matcher("naive", "amqp")

    def write(items: list[tuple[int, str]]) -> list[tuple[int, str]]:
        """Write ``items`` down ``path``; returns them as written."""
        if path == "subscribe":
            for sub_id, text in items:
                m.subscribe(sub_id, text)
        elif path == "general":  # the validating path: a non-canonical spelling
            for sub_id, text in items:
                Matcher.subscribe(m, sub_id, text)
        elif path == "many":
            m.subscribe_many(items)
        elif path == "mixed":  # one item on the general path (not ASCII) beside the rest
            items = [*items[:-1], (items[-1][0], items[-1][1] + ".é")]
            m.subscribe_many(items)
        else:
            assert m.subscribe_arrays(*_columns(items)) == len(items)
        return items

    size = 1 if path in ("subscribe", "general") else 50  # items per write
    sub_id = 0
    refused = None
    while refused is None:
        batch = [(sub_id + k, pattern.format(i=sub_id + k)) for k in range(size)]
        try:
            naive.subscribe_many(write(batch))
        except CapacityError as e:
            refused = e
        else:
            sub_id += len(batch)
        assert sub_id < 100_000, "never refused"
    assert refused.code == code and capacity.replace("_", " ") in str(refused), refused
    used, limit = m.capacity()[capacity]
    assert used <= limit == lowered[capacity]
    assert sub_id >= 50 and dict(m.subscriptions()) == dict(naive.subscriptions())
    assert sub_id not in m
    m._check()
    for k in range(0, sub_id, 7):
        topic = pattern.format(i=k).replace("*", "x").replace("#.#", "y.z")
        assert m.match(topic) == naive.match(topic), topic
    # Space freed counts again: half gone, the refused batch goes in.
    for k in range(0, sub_id, 2):
        assert m.unsubscribe(k) and naive.unsubscribe(k)
    naive.subscribe_many(write([(sub_id + k, pattern.format(i=sub_id + k)) for k in range(size)]))
    assert dict(m.subscriptions()) == dict(naive.subscriptions())
    m._check()


def test_a_new_tail_or_text_compacts_its_arena_when_it_would_not_fit() -> None:
    """Removed tails and texts leave garbage that is compacted lazily (once it is half the
    arena and over 4 KiB): a write that would not fit beside the garbage compacts first,
    as the capacity check counted the garbage as free."""
    m = NativeMatcher("amqp")
    m._lower_capacity(1 << 40, 5_000, 5_000)
    m.subscribe_many((i, f"t{i}.x.y.z") for i in range(1_200))  # 4 tail entries each
    m.subscribe_many((10_000 + i, f"s{i}.#.#") for i in range(600))  # 4,690 text bytes
    for i in range(1_000):
        assert m.unsubscribe(i)
    for i in range(500):
        assert m.unsubscribe(10_000 + i)
    assert m.capacity()["tail_words"][0] == 800 and m.capacity()["text_bytes"][0] == 800
    m.subscribe_many((2_000 + i, f"u{i}.x.y.z") for i in range(1_000))
    m.subscribe_many((20_000 + i, f"v{i}.#.#") for i in range(500))
    m._check()
    assert sorted(m.match("u999.x.y.z")) == [2_999] and sorted(m.match("v5.a")) == [20_005]


def test_long_tails_reach_past_a_node_reference_index() -> None:
    """Tail leaves hold a pattern's literal words after its last branch: 270,000 patterns
    of 125 words fill 33.75M tail entries, more than a node reference can index (2**25).
    Tail offsets have 27 bits: all of them are indexed (before, a RuntimeError left a
    half-applied batch behind)."""
    m = NativeMatcher("amqp")
    words = ".".join(["w"] * 124)
    n = 270_000
    m.subscribe_many((i, f"u{i}.{words}") for i in range(n))
    used, limit = m.capacity()["tail_words"]
    assert used == n * 125 > 2**25 and limit == 2**27 - 1
    assert m.capacity()["trie_nodes"][0] == n + 1
    for i in (0, 1, n // 2, n - 1):
        assert list(m.match(f"u{i}.{words}")) == [i]
    assert not m.match(f"u{n - 1}.{words[2:]}.x") and not m.match(f"u{n - 1}")
    m._check()
