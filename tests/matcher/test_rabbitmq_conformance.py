"""Every engine against the real RabbitMQ topic exchange (the ``amqp`` dialect's definition).

``test_engines_stateful`` only proves the engines agree with ``naive``; this proves ``naive``
and the rest agree with the broker they imitate: a seeded random corpus routed once through
RabbitMQ, a table of edge cases whose expectations the broker confirms, and the binding keys
around RabbitMQ 4.3.5's limit of two ``#`` words (refused alike under the RabbitMQ 4.3
profile, ``max_hash_wildcards=2``, where the broker has the limit; routed alike where it
has none). Whichever RabbitMQ answers is named in the run's summary (``conftest.py``).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import pytest

from matcher import ENGINES, Limits, MatcherError, create_matcher
from store import NewSubscription, validate
from tests.conformance import differences
from tests.rabbitmq import Broker, broker, refused_bindings, require_broker, route_with_rabbitmq

pytestmark = pytest.mark.rabbitmq

SEED: Final = 20240917
# Same size locally and on CI: routing it through the broker takes a few seconds.
N_DISTINCT_PATTERNS: Final = 320
N_REPEATED_PATTERNS: Final = 40
N_KEYS: Final = 1_000

# A tiny alphabet (with the empty word) so that keys and patterns collide often.
_WORDS: Final = ("a", "b", "c", "")
# Keys may carry '*' and '#' as plain words; the broker must treat them literally.
_KEY_WORDS: Final = (*_WORDS, "*", "#")
_KEY_WEIGHTS: Final = (6, 6, 4, 5, 1, 1)
_PATTERN_WORDS: Final = (*_WORDS, "*")
_PATTERN_WEIGHTS: Final = (5, 4, 3, 4, 4)
# At most two '#': RabbitMQ before 4.3.5 backtracks exponentially on more, and 4.3.5
# refuses more (the limit's own tests are at the end).
_HASH_COUNTS: Final = (0, 1, 1, 2)

# Always in the corpus, whatever the seed draws: the empty pattern/key and empty-word shapes.
_FIXED_PATTERNS: Final = (
    "",
    "#",
    "*",
    "#.#",
    "*.#",
    "#.*",
    "*.*",
    ".",
    "a.",
    ".a",
    "a.#",
    "#.a",
    "#.a.#",
    "a.*.b",
    "a.#.b",
    "*.#.*",
    "#.",
    ".#",
)
_FIXED_KEYS: Final = ("", ".", "..", "a", "a.", ".a", "a.b", "a..b", "*", "#", "a.*", "#.a")


@dataclass(frozen=True)
class Corpus:
    """Patterns, keys and the broker's verdict: ``routed[k]`` = indices of the patterns
    whose queue received ``keys[k]``."""

    patterns: tuple[str, ...]
    keys: tuple[str, ...]
    routed: tuple[frozenset[int], ...]
    broker: Broker


def _random_pattern(rng: random.Random) -> str:
    size = rng.randint(0, 5)
    words = rng.choices(_PATTERN_WORDS, _PATTERN_WEIGHTS, k=size)
    for position in rng.sample(range(size), min(rng.choice(_HASH_COUNTS), size)):
        words[position] = "#"
    return ".".join(words)


def _random_key(rng: random.Random) -> str:
    return ".".join(rng.choices(_KEY_WORDS, _KEY_WEIGHTS, k=rng.randint(0, 6)))


def generate_corpus(seed: int = SEED) -> tuple[list[str], list[str]]:
    """``N_DISTINCT_PATTERNS`` distinct patterns plus ``N_REPEATED_PATTERNS`` repeats (several
    ids on one pattern is a case the engines must handle), and ``N_KEYS`` distinct keys,
    reproducible from ``seed``."""
    rng = random.Random(seed)
    patterns = list(_FIXED_PATTERNS)
    distinct = set(patterns)
    repeats = 0
    while len(distinct) < N_DISTINCT_PATTERNS or repeats < N_REPEATED_PATTERNS:
        pattern = _random_pattern(rng)
        if pattern in distinct:
            if repeats >= N_REPEATED_PATTERNS:
                continue
            repeats += 1
        elif len(distinct) >= N_DISTINCT_PATTERNS:
            continue
        distinct.add(pattern)
        patterns.append(pattern)
    keys = dict.fromkeys(_FIXED_KEYS)
    while len(keys) < N_KEYS:
        keys[_random_key(rng)] = None
    return patterns, list(keys)


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    """The seeded corpus, routed through RabbitMQ once for the whole module."""
    require_broker()
    patterns, keys = generate_corpus()
    routed = route_with_rabbitmq(patterns, keys)
    return Corpus(tuple(patterns), tuple(keys), tuple(frozenset(ids) for ids in routed), broker())


def test_corpus_is_not_degenerate(corpus: Corpus) -> None:
    """Guards the generator: an oracle that routes everything or nothing proves little."""
    sizes = [len(ids) for ids in corpus.routed]
    pairs = len(corpus.patterns) * len(corpus.keys)
    assert 0.05 < sum(sizes) / pairs < 0.5, sum(sizes) / pairs
    assert len(set(sizes)) >= 10, "keys should fan out to many different numbers of queues"
    reached = set().union(*corpus.routed)
    assert len(reached) > 0.8 * len(corpus.patterns), "most patterns should receive some key"
    hash_ids = {i for i, pattern in enumerate(corpus.patterns) if pattern == "#"}
    assert all(hash_ids <= ids for ids in corpus.routed), "'#' must receive every key"


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_routes_like_rabbitmq(engine: str, corpus: Corpus) -> None:
    """Pattern i subscribed as id i; every key must match exactly the ids the broker routed."""
    differing = differences(engine, "amqp", corpus.patterns, corpus.keys, corpus.routed, "key")
    assert not differing, (
        f"{engine}: {len(differing)} of {len(corpus.keys)} keys routed differently from "
        f"{corpus.broker} (seed {SEED}); first few:\n" + "\n".join(differing[:5])
    )


# (pattern, key, does RabbitMQ route key to a queue bound with pattern?)
EDGE_CASES: Final[tuple[tuple[str, str, bool], ...]] = (
    ("#", "", True),
    ("*", "", False),
    ("a.#", "a", True),
    ("#.a.#", "a", True),
    ("a.*.b", "a..b", True),
    ("a.*", "a.", True),
    ("a.#.#.b", "a.b", True),
    ("a", "A", False),  # case-sensitive
    ("", "", True),
    ("", ".", False),  # "." is two empty words, "" is none
    ("*", ".", False),
    ("*.*", ".", True),
    ("#", ".", True),
    ("a.#", "a.", True),
    ("#.#", "", True),
    ("a*", "ab", False),  # '*' inside a word is literal
    ("a*", "a*", True),
    ("*", "*", True),
    ("#", "#", True),
    ("#.b", "b", True),
    ("a.#.b", "a..b", True),
    ("*.#.*", "a", False),
    ("*.#", "", False),  # '*' needs a word even next to '#'
    ("#.", "", False),  # ... and so does a trailing empty literal word
    ("#.", "a.", True),
    (".#", ".a", True),
    (".", ".", True),
    (".", "", False),
    ("a.", "a", False),  # a trailing '.' adds an empty word
    ("a.b", "a.b.", False),
    ("é", "é", True),
    ("é", "e\u0301", False),  # bytes compared, no Unicode normalization
    (" a", "a", False),  # whitespace is part of the word
)


def _edge_id(pattern: str, key: str) -> str:
    return f"{pattern!r}~{key!r}"


_EDGE_PARAMS: Final = [
    pytest.param(pattern, key, expected, id=_edge_id(pattern, key))
    for pattern, key, expected in EDGE_CASES
]


@pytest.fixture(scope="module")
def edge_routing() -> dict[tuple[str, str], bool]:
    """The broker's verdict for every edge row, from a single exchange (one queue per row)."""
    require_broker()
    patterns = [pattern for pattern, _, _ in EDGE_CASES]
    keys = list(dict.fromkeys(key for _, key, _ in EDGE_CASES))
    routed = route_with_rabbitmq(patterns, keys)
    index = {key: k for k, key in enumerate(keys)}
    return {
        (pattern, key): i in routed[index[key]] for i, (pattern, key, _) in enumerate(EDGE_CASES)
    }


def test_edge_cases_are_distinct() -> None:
    assert len({(p, k) for p, k, _ in EDGE_CASES}) == len(EDGE_CASES)


@pytest.mark.parametrize(("pattern", "key", "expected"), _EDGE_PARAMS)
def test_edge_case_matches_broker(
    pattern: str, key: str, expected: bool, edge_routing: dict[tuple[str, str], bool]
) -> None:
    """The table is only worth testing engines against if the broker agrees with it."""
    routed = edge_routing[pattern, key]
    assert routed is expected, (
        f"RabbitMQ routes {key!r} to {pattern!r}: {routed}, table says {expected}"
    )


@pytest.mark.parametrize(("pattern", "key", "expected"), _EDGE_PARAMS)
@pytest.mark.parametrize("engine", ENGINES)
def test_edge_case_engine(engine: str, pattern: str, key: str, expected: bool) -> None:
    """Each row alone, and again with every other row's pattern subscribed alongside it."""
    alone = create_matcher(engine, dialect="amqp")
    alone.subscribe(0, pattern)
    assert (0 in set(alone.match(key))) is expected, f"{engine}: {pattern!r} ~ {key!r} alone"

    together = create_matcher(engine, dialect="amqp")
    for sub_id, (other, _, _) in enumerate(EDGE_CASES):
        together.subscribe(sub_id, other)
    row = EDGE_CASES.index((pattern, key, expected))
    assert (row in set(together.match(key))) is expected, (
        f"{engine}: {pattern!r} ~ {key!r} among all edge patterns"
    )


# -- the limit on '#' words (RabbitMQ 4.3.5) ---------------------------------------------

#: The first release with the limit (``rabbit_exchange_type_topic:validate_binding/2``, in
#: 4.3.5, later 4.3 releases and the main branch; not in 4.3.0-4.3.4 nor 4.2): what
#: docs/matching.md says.
LIMITED_SINCE: Final = (4, 3, 5)
#: Binding keys around the limit of two: only whole '#' words count.
HASH_KEYS: Final = (
    "#.#",
    "#.a.#",
    "*.#.*.#",
    "#.#.#",
    "a.#.b.#.c.#",
    "#.#.#.#",
    "#.*.#.*.#",
    "a#.#.#",
    "#a.#.#",
    "#.#.#a",
    "#.#.#.",
    "##.#.#",
)
#: Short keys (every shape up to four words of a, b and the empty word), so that a broker
#: that backtracks on many '#' still routes them at once.
_HASH_ROUTED_KEYS: Final = tuple(
    dict.fromkeys(
        ".".join(words)
        for size in range(5)
        for words in itertools.product(("a", "b", ""), repeat=size)
    )
)
RABBITMQ_PROFILE: Final = Limits(max_hash_wildcards=2)


@dataclass(frozen=True)
class HashLimit:
    """The broker that answered, the keys of ``HASH_KEYS`` it refused (reply code and
    text), and how it routes ``_HASH_ROUTED_KEYS`` to the others (``patterns``)."""

    broker: Broker
    refused: dict[str, tuple[int, str]]
    patterns: tuple[str, ...]
    routed: tuple[frozenset[int], ...]


@pytest.fixture(scope="module")
def hash_limit() -> HashLimit:
    require_broker()
    refused = refused_bindings(HASH_KEYS)
    patterns = tuple(key for key in HASH_KEYS if key not in refused)
    routed = route_with_rabbitmq(patterns, _HASH_ROUTED_KEYS)
    return HashLimit(broker(), refused, patterns, tuple(frozenset(ids) for ids in routed))


def _refusal(pattern: str, limits: Limits) -> str | None:
    """Our validation's message for a new AMQP ``pattern`` under ``limits``, or None."""
    try:
        validate(NewSubscription("q", pattern), limits)
    except MatcherError as e:
        assert e.code == "too_many_hash_wildcards", e
        return e.message
    return None


def test_the_hash_limit_is_the_brokers(
    hash_limit: HashLimit, record_property: Callable[[str, object], None]
) -> None:
    """Where the broker refuses keys with three or more '#' words, the RabbitMQ 4.3 profile
    refuses exactly those, with the broker's own message; where it accepts them all, the
    default (no limit) does too. Either way the broker's version agrees with the release
    the docs name."""
    refused = hash_limit.refused
    limited = bool(refused)
    record_property(
        "rabbitmq",
        f"{hash_limit.broker}; binding keys with more than two '#' words "
        + ("refused" if limited else "accepted"),
    )
    assert limited is (hash_limit.broker.release >= LIMITED_SINCE), hash_limit.broker
    if not limited:
        assert [key for key in HASH_KEYS if _refusal(key, Limits())] == []
        return
    ours = {key: _refusal(key, RABBITMQ_PROFILE) for key in HASH_KEYS}
    assert sorted(refused) == sorted(key for key, message in ours.items() if message)
    for key, (code, text) in refused.items():
        assert (code, text) == (406, f"PRECONDITION_FAILED - {ours[key]}")


def test_the_profile_refuses_the_keys_over_two() -> None:
    """The profile's verdicts, written by hand: the test above holds them to the broker
    where it has the limit."""
    over = {key for key in HASH_KEYS if _refusal(key, RABBITMQ_PROFILE)}
    assert over == {"#.#.#", "a.#.b.#.c.#", "#.#.#.#", "#.*.#.*.#", "#.#.#."}


@pytest.mark.parametrize("engine", ENGINES)
def test_engines_route_many_hashes_like_rabbitmq(engine: str, hash_limit: HashLimit) -> None:
    """The keys of ``HASH_KEYS`` the broker binds (all of them before 4.3.5), routed by it
    and by each engine: what a row stored over the limit matches."""
    differing = differences(
        engine, "amqp", hash_limit.patterns, _HASH_ROUTED_KEYS, hash_limit.routed, "key"
    )
    assert not differing, f"{engine} vs {hash_limit.broker}:\n" + "\n".join(differing[:5])
