"""Every engine against real brokers for the ``mqtt`` (Mosquitto) and ``nats`` (nats-server)
dialects.

As ``test_rabbitmq_conformance`` does for AMQP: a seeded random corpus per dialect, routed
once through the broker, must be matched exactly by every engine; and a table of edge cases
is checked against the broker (the broker wins) and then against every engine.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import pytest

from matcher import ENGINES, create_matcher
from tests.brokers import require_mqtt, require_nats, route_with_mosquitto, route_with_nats
from tests.conformance import differences

pytestmark = pytest.mark.brokers

SEED: Final = 20241122
N_DISTINCT_PATTERNS: Final = 240
N_REPEATED_PATTERNS: Final = 20
N_TOPICS: Final = 600

Router = Callable[[list[str], list[str]], list[set[int]]]


@dataclass(frozen=True)
class Corpus:
    """Patterns, topics and the broker's verdict: ``routed[k]`` = indices of the patterns
    whose subscription received ``topics[k]``."""

    dialect: str
    patterns: tuple[str, ...]
    topics: tuple[str, ...]
    routed: tuple[frozenset[int], ...]


# ----------------------------------------------------------------------------- generation
# Tiny alphabets so that patterns and topics collide often.

_MQTT_LEVELS: Final = ("a", "b", "", "$x")
_MQTT_TOPIC_WEIGHTS: Final = (6, 5, 4, 2)
_MQTT_FILTER_LEVELS: Final = (*_MQTT_LEVELS, "+")
_MQTT_FILTER_WEIGHTS: Final = (5, 4, 3, 2, 5)
_MQTT_FIXED_FILTERS: Final = (
    "#",
    "+",
    "+/+",
    "+/#",
    "/#",
    "/",
    "a/#",
    "a/+",
    "+/a",
    "$x",
    "$x/#",
    "$x/+",
    "$x/a",
    "+/$x",
    "#",  # a repeat: several ids on one filter
)
_MQTT_FIXED_TOPICS: Final = ("a", "/", "//", "a/", "/a", "$x", "$x/", "$x/a", "a/$x", "$x/$x")

_NATS_TOKENS: Final = ("a", "b", "c", "a*")
_NATS_SUBJECT_WEIGHTS: Final = (6, 5, 4, 3)
_NATS_PATTERN_TOKENS: Final = (*_NATS_TOKENS, "*")
_NATS_PATTERN_WEIGHTS: Final = (5, 4, 3, 3, 5)
_NATS_FIXED_PATTERNS: Final = (">", "*", "*.>", "*.*", "a.>", "a*", "a*.>", "a.*.c", ">")
_NATS_FIXED_SUBJECTS: Final = ("a", "a*", "a.b", "a*.b", "a.a*", "a.b.c", "a*.a*.a*")


def _random_mqtt_filter(rng: random.Random) -> str:
    levels = rng.choices(_MQTT_FILTER_LEVELS, _MQTT_FILTER_WEIGHTS, k=rng.randint(1, 5))
    if rng.random() < 0.35:
        if rng.random() < 0.5:
            levels[-1] = "#"
        else:
            levels.append("#")
    return "/".join(levels)


def _random_mqtt_topic(rng: random.Random) -> str:
    return "/".join(rng.choices(_MQTT_LEVELS, _MQTT_TOPIC_WEIGHTS, k=rng.randint(1, 6)))


def _random_nats_pattern(rng: random.Random) -> str:
    tokens = rng.choices(_NATS_PATTERN_TOKENS, _NATS_PATTERN_WEIGHTS, k=rng.randint(1, 5))
    if rng.random() < 0.35:
        if rng.random() < 0.5:
            tokens[-1] = ">"
        else:
            tokens.append(">")
    return ".".join(tokens)


def _random_nats_subject(rng: random.Random) -> str:
    return ".".join(rng.choices(_NATS_TOKENS, _NATS_SUBJECT_WEIGHTS, k=rng.randint(1, 6)))


def _generate(
    rng: random.Random,
    fixed_patterns: Sequence[str],
    fixed_topics: Sequence[str],
    pattern: Callable[[random.Random], str],
    topic: Callable[[random.Random], str],
) -> tuple[list[str], list[str]]:
    """``N_DISTINCT_PATTERNS`` distinct patterns plus at least ``N_REPEATED_PATTERNS``
    repeats, and ``N_TOPICS`` distinct non-empty topics; fixed entries first."""
    patterns = list(fixed_patterns)
    distinct = set(patterns)
    repeats = len(patterns) - len(distinct)
    while len(distinct) < N_DISTINCT_PATTERNS or repeats < N_REPEATED_PATTERNS:
        candidate = pattern(rng)
        if not candidate:
            continue  # the empty pattern is invalid in both dialects
        if candidate in distinct:
            if repeats >= N_REPEATED_PATTERNS:
                continue
            repeats += 1
        elif len(distinct) >= N_DISTINCT_PATTERNS:
            continue
        distinct.add(candidate)
        patterns.append(candidate)
    topics = dict.fromkeys(fixed_topics)
    while len(topics) < N_TOPICS:
        if candidate := topic(rng):
            topics[candidate] = None
    return patterns, list(topics)


def generate_mqtt(seed: int = SEED) -> tuple[list[str], list[str]]:
    """Filters over levels {a, b, '', $x} with ``+`` anywhere and ``#`` last, and topics over
    the same levels (``$x`` first makes a ``$`` topic), reproducible from ``seed``."""
    rng = random.Random(f"mqtt-{seed}")
    return _generate(
        rng, _MQTT_FIXED_FILTERS, _MQTT_FIXED_TOPICS, _random_mqtt_filter, _random_mqtt_topic
    )


def generate_nats(seed: int = SEED) -> tuple[list[str], list[str]]:
    """Patterns over tokens {a, b, c, a*} with ``*`` anywhere and ``>`` last, and subjects
    over the same tokens, reproducible from ``seed``."""
    rng = random.Random(f"nats-{seed}")
    return _generate(
        rng, _NATS_FIXED_PATTERNS, _NATS_FIXED_SUBJECTS, _random_nats_pattern, _random_nats_subject
    )


def _corpus(dialect: str, patterns: list[str], topics: list[str], route: Router) -> Corpus:
    routed = route(patterns, topics)
    return Corpus(dialect, tuple(patterns), tuple(topics), tuple(frozenset(r) for r in routed))


@pytest.fixture(scope="module")
def mqtt_corpus() -> Corpus:
    """The seeded MQTT corpus, routed through Mosquitto once for the whole module."""
    require_mqtt()
    return _corpus("mqtt", *generate_mqtt(), route_with_mosquitto)


@pytest.fixture(scope="module")
def nats_corpus() -> Corpus:
    """The seeded NATS corpus, routed through nats-server once for the whole module."""
    require_nats()
    return _corpus("nats", *generate_nats(), route_with_nats)


# ------------------------------------------------------------------------------- reporting


def _assert_engine_matches_broker(engine: str, corpus: Corpus, broker: str) -> None:
    differing = differences(
        engine, corpus.dialect, corpus.patterns, corpus.topics, corpus.routed, "topic"
    )
    assert not differing, (
        f"{engine} ({corpus.dialect}): {len(differing)} of {len(corpus.topics)} topics matched "
        f"differently from {broker} (seed {SEED}); first few:\n" + "\n".join(differing[:5])
    )


def _assert_not_degenerate(corpus: Corpus) -> None:
    """Guards the generator: an oracle that routes everything or nothing proves little."""
    sizes = [len(ids) for ids in corpus.routed]
    pairs = len(corpus.patterns) * len(corpus.topics)
    assert 0.01 < sum(sizes) / pairs < 0.5, sum(sizes) / pairs
    assert len(set(sizes)) >= 10, "topics should fan out to many different numbers of patterns"
    reached = set().union(*corpus.routed)
    assert len(reached) > 0.6 * len(corpus.patterns), "most patterns should receive some topic"


# ------------------------------------------------------------------------------ MQTT corpus


def test_mqtt_corpus_is_not_degenerate(mqtt_corpus: Corpus) -> None:
    _assert_not_degenerate(mqtt_corpus)
    hash_ids = {i for i, p in enumerate(mqtt_corpus.patterns) if p == "#"}
    assert len(hash_ids) >= 2
    dollar = [k for k, t in enumerate(mqtt_corpus.topics) if t.startswith("$")]
    assert len(dollar) >= 20, "the corpus should hold plenty of $ topics"
    for k, ids in enumerate(mqtt_corpus.routed):
        assert (hash_ids <= ids) is (k not in dollar), f"'#' ~ {mqtt_corpus.topics[k]!r}"
    assert all(mqtt_corpus.routed[k] for k in dollar), "Mosquitto must deliver $x/... to $x/#"


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_routes_like_mosquitto(engine: str, mqtt_corpus: Corpus) -> None:
    """Filter i subscribed as id i; every topic must match exactly the ids Mosquitto hit."""
    _assert_engine_matches_broker(engine, mqtt_corpus, "Mosquitto")


# ------------------------------------------------------------------------------ NATS corpus


def test_nats_corpus_is_not_degenerate(nats_corpus: Corpus) -> None:
    _assert_not_degenerate(nats_corpus)
    gt_ids = {i for i, p in enumerate(nats_corpus.patterns) if p == ">"}
    assert len(gt_ids) >= 2
    assert all(gt_ids <= ids for ids in nats_corpus.routed), "'>' must receive every subject"


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_routes_like_nats_server(engine: str, nats_corpus: Corpus) -> None:
    """Pattern i subscribed as id i; every subject must match exactly the ids nats-server hit."""
    _assert_engine_matches_broker(engine, nats_corpus, "nats-server")


# ------------------------------------------------------------------------------ edge tables

# (filter, topic, does Mosquitto deliver topic to a subscription on filter?)
MQTT_EDGES: Final[tuple[tuple[str, str, bool], ...]] = (
    ("a/#", "a", True),  # '#' also matches the parent level
    ("#", "$x/a", False),  # a leading wildcard never matches a '$' topic
    ("+/a", "$x/a", False),
    ("$x/#", "$x/a", True),  # ... but a literal '$x' does
    ("+", "/", False),  # "/" is two (empty) levels
    ("+/+", "/", True),
    ("a/+", "a/", True),  # '+' matches an empty level
    ("#", "/", True),
    ("$x/#", "$x", True),
    ("+", "$x", False),
    ("#", "$x", False),
    ("+/#", "$x/a", False),
    ("#", "a/$x", True),  # '$' matters only at the start of a topic
    ("$x/+", "$x/", True),
    ("+", "$", False),  # a lone "$" is a '$' topic too
    ("$/#", "$", True),
    ("/#", "/", True),
    ("+/#", "a", True),
    ("a", "a/", False),
    ("a", "A", False),  # case-sensitive
)

# (pattern, subject, does nats-server deliver subject to a subscription on pattern?)
NATS_EDGES: Final[tuple[tuple[str, str, bool], ...]] = (
    ("a.>", "a", False),  # '>' needs at least one token
    ("a.>", "a.b.c", True),
    (">", "a", True),
    ("*", "a.b", False),
    ("a*.b", "a*.b", True),  # a token longer than one character is a literal
    ("a*", "ab", False),
    ("*", "a*", True),
    ("a*.>", "a*.b", True),
    ("*.>", "a", False),
    ("a.*.>", "a.b", False),
    ("a.*", "a.b.c", False),
    ("a>", "a>", True),
    ("a", "A", False),  # case-sensitive
)


def _edge_id(pattern: str, topic: str) -> str:
    return f"{pattern!r}~{topic!r}"


_MQTT_EDGE_PARAMS: Final = [pytest.param(*row, id=_edge_id(*row[:2])) for row in MQTT_EDGES]
_NATS_EDGE_PARAMS: Final = [pytest.param(*row, id=_edge_id(*row[:2])) for row in NATS_EDGES]


def _edge_routing(table: Sequence[tuple[str, str, bool]], route: Router) -> dict[str, bool]:
    """The broker's verdict for every row (keyed ``pattern~topic``), from one routing call."""
    patterns = [pattern for pattern, _, _ in table]
    topics = list(dict.fromkeys(topic for _, topic, _ in table))
    routed = route(patterns, topics)
    index = {topic: k for k, topic in enumerate(topics)}
    return {_edge_id(p, t): i in routed[index[t]] for i, (p, t, _) in enumerate(table)}


@pytest.fixture(scope="module")
def mqtt_edge_routing() -> dict[str, bool]:
    require_mqtt()
    return _edge_routing(MQTT_EDGES, route_with_mosquitto)


@pytest.fixture(scope="module")
def nats_edge_routing() -> dict[str, bool]:
    require_nats()
    return _edge_routing(NATS_EDGES, route_with_nats)


def test_edge_tables_are_distinct() -> None:
    for table in (MQTT_EDGES, NATS_EDGES):
        assert len({(p, t) for p, t, _ in table}) == len(table)


@pytest.mark.parametrize(("pattern", "topic", "expected"), _MQTT_EDGE_PARAMS)
def test_mqtt_edge_case_matches_broker(
    pattern: str, topic: str, expected: bool, mqtt_edge_routing: dict[str, bool]
) -> None:
    """The table is only worth testing engines against if Mosquitto agrees with it."""
    routed = mqtt_edge_routing[_edge_id(pattern, topic)]
    assert routed is expected, (
        f"Mosquitto delivers {topic!r} to {pattern!r}: {routed}, table says {expected}"
    )


@pytest.mark.parametrize(("pattern", "topic", "expected"), _NATS_EDGE_PARAMS)
def test_nats_edge_case_matches_broker(
    pattern: str, topic: str, expected: bool, nats_edge_routing: dict[str, bool]
) -> None:
    """The table is only worth testing engines against if nats-server agrees with it."""
    routed = nats_edge_routing[_edge_id(pattern, topic)]
    assert routed is expected, (
        f"nats-server delivers {topic!r} to {pattern!r}: {routed}, table says {expected}"
    )


def _check_edge_engine(
    engine: str, dialect: str, table: Sequence[tuple[str, str, bool]], row: tuple[str, str, bool]
) -> None:
    """The row alone, and again with every other row's pattern subscribed alongside it."""
    pattern, topic, expected = row
    alone = create_matcher(engine, dialect=dialect)
    alone.subscribe(0, pattern)
    assert (0 in set(alone.match(topic))) is expected, f"{engine}: {pattern!r} ~ {topic!r} alone"
    together = create_matcher(engine, dialect=dialect)
    for sub_id, (other, _, _) in enumerate(table):
        together.subscribe(sub_id, other)
    assert (table.index(row) in set(together.match(topic))) is expected, (
        f"{engine}: {pattern!r} ~ {topic!r} among all edge patterns"
    )


@pytest.mark.parametrize(("pattern", "topic", "expected"), _MQTT_EDGE_PARAMS)
@pytest.mark.parametrize("engine", ENGINES)
def test_mqtt_edge_case_engine(engine: str, pattern: str, topic: str, expected: bool) -> None:
    _check_edge_engine(engine, "mqtt", MQTT_EDGES, (pattern, topic, expected))


@pytest.mark.parametrize(("pattern", "topic", "expected"), _NATS_EDGE_PARAMS)
@pytest.mark.parametrize("engine", ENGINES)
def test_nats_edge_case_engine(engine: str, pattern: str, topic: str, expected: bool) -> None:
    _check_edge_engine(engine, "nats", NATS_EDGES, (pattern, topic, expected))
