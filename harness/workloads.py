"""Seeded, reproducible inputs for every table and for the tests that need many patterns.

The generator of the "Fast Topic Matching" benchmarks puts a ``*`` at a position chosen by
the subscriber index ``i``: ``i % 10 == 0`` the first word, else ``i % 25 == 0`` the middle
word, else ``i % 45 == 0`` the last word; every other word is a random digit. With 3 words
that is exactly the throughput workload (``*.d.d``, ``d.*.d``, ``d.d.*``, ``d.d.d``); with
5 words it is the "1,000 randomly generated 5-word subscriptions" of the micro benchmark,
and at 100,000 patterns the ``scaled`` workload.

The other inputs are built to stress one thing each: ``#``-heavy patterns against the
longest keys AMQP allows (``adversarial``), the same benchmarks' multithreaded
``{j%10}.{j%50}.{j}`` keys (``concurrency``), patterns with distinct first words
(``cs_trie_load``), five-word market patterns with topics drawn from them (the store and
the service: ``store_load``, ``api_load``) and short dense patterns over three letters and
the empty word (the pipeline tests).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from datetime import datetime

    import pyarrow as pa

DEFAULT_SEED: Final = 0
THROUGHPUT_PATTERNS: Final = 1_000
THROUGHPUT_MESSAGES: Final = 100_000
HOT_SUBSCRIPTIONS: Final = 1_000
SCALED_PATTERNS: Final = 100_000
#: Words of the adversarial inputs; ``*`` and ``#`` are added to patterns on top.
ADVERSARIAL_ALPHABET: Final = ("a", "b", "c")
#: 128 one-letter words joined by dots: 255 bytes, the longest AMQP routing key.
ADVERSARIAL_TOPIC_WORDS: Final = 128
ADVERSARIAL_MAX_HASHES: Final = 4
#: Words of the dense inputs: few, so that patterns match often; the empty word is an AMQP
#: word like any other.
DENSE_ALPHABET: Final = ("a", "b", "c", "")


def _digit(rng: random.Random) -> str:
    return str(rng.randrange(10))


def star_position(i: int, words: int) -> int | None:
    """Where subscriber ``i``'s ``*`` goes in a ``words``-word pattern (the "Fast Topic
    Matching" rule)."""
    if i % 10 == 0:
        return 0
    if i % 25 == 0:
        return words // 2
    if i % 45 == 0:
        return words - 1
    return None


def seed_patterns(count: int, words: int, rng: random.Random) -> list[str]:
    """``count`` patterns of ``words`` words; pattern ``i`` is for subscriber ``i``.

    Digits are drawn left to right, pattern after pattern, so a seed fixes every pattern.
    """
    patterns = []
    for i in range(count):
        star = star_position(i, words)
        parts = ["*" if j == star else _digit(rng) for j in range(words)]
        patterns.append(".".join(parts))
    return patterns


def concretize(pattern: str, rng: random.Random) -> str:
    """A topic ``pattern`` matches: each ``*`` replaced by a random digit, left to right."""
    return ".".join(_digit(rng) if word == "*" else word for word in pattern.split("."))


@dataclass(frozen=True, slots=True)
class Workload:
    """Subscriptions (id = index) and the messages routed against them."""

    patterns: tuple[str, ...]
    messages: tuple[str, ...]

    def subscriptions(self) -> list[tuple[int, str]]:
        """(sub id, pattern) pairs, ready for ``subscribe``."""
        return list(enumerate(self.patterns))


def seed_workload(patterns: int, messages: int, words: int, seed: int) -> Workload:
    """``patterns`` seed-rule patterns of ``words`` words, then message ``k`` = a
    concretization of pattern ``k % patterns``. Patterns are drawn before messages from one
    generator, so a seed fixes both."""
    rng = random.Random(seed)
    pats = seed_patterns(patterns, words, rng)
    msgs = tuple(concretize(pats[k % patterns], rng) for k in range(messages))
    return Workload(tuple(pats), msgs)


def throughput_workload(
    patterns: int = THROUGHPUT_PATTERNS,
    messages: int = THROUGHPUT_MESSAGES,
    seed: int = DEFAULT_SEED,
) -> Workload:
    """The "Fast Topic Matching" throughput workload: 3-word patterns over digits."""
    return seed_workload(patterns, messages, 3, seed)


def scaled_workload(
    patterns: int = SCALED_PATTERNS,
    messages: int = SCALED_PATTERNS,
    seed: int = DEFAULT_SEED,
) -> Workload:
    """The throughput workload scaled up: 5-word patterns, so 100,000 of them do not
    collapse onto the 1,000 possible 3-digit keys."""
    return seed_workload(patterns, messages, 5, seed)


def random_subscriptions(
    count: int = HOT_SUBSCRIPTIONS, seed: int = DEFAULT_SEED, words: int = 5
) -> list[str]:
    """The "randomly generated 5-word subscriptions" of "Fast Topic Matching" (micro, memory)."""
    return seed_patterns(count, words, random.Random(seed))


def topics_for(patterns: Sequence[str], seed: int = DEFAULT_SEED) -> list[str]:
    """One concrete topic per pattern, so every lookup hits at least one subscription."""
    rng = random.Random(seed)
    return [concretize(pattern, rng) for pattern in patterns]


def adversarial_pattern(rng: random.Random, max_hashes: int = ADVERSARIAL_MAX_HASHES) -> str:
    """1 to 6 words from the alphabet or ``*``, with 0 to ``max_hashes`` ``#`` inserted at
    random places (adjacent ``#`` included: engines must merge them)."""
    tokens = [rng.choice((*ADVERSARIAL_ALPHABET, "*")) for _ in range(rng.randint(1, 6))]
    for _ in range(rng.randint(0, max_hashes)):
        tokens.insert(rng.randint(0, len(tokens)), "#")
    return ".".join(tokens)


def adversarial_workload(
    patterns: int, topics: int, words: int = ADVERSARIAL_TOPIC_WORDS, seed: int = DEFAULT_SEED
) -> Workload:
    """``#``-heavy patterns and long topics over a three-letter alphabet: every ``#`` can
    stop at almost any of the ``words`` positions, which is what makes backtracking
    exponential in the number of ``#`` (and a breadth-first frontier wide)."""
    rng = random.Random(seed)
    pats = tuple(adversarial_pattern(rng) for _ in range(patterns))
    msgs = tuple(
        ".".join(rng.choice(ADVERSARIAL_ALPHABET) for _ in range(words)) for _ in range(topics)
    )
    return Workload(pats, msgs)


def concurrency_key(j: int) -> str:
    """The "Fast Topic Matching" multithreaded key: 3 words ``{j%10}.{j%50}.{j}``, used both
    as a pattern (writes) and as a topic (reads)."""
    return f"{j % 10}.{j % 50}.{j}"


def distinct_first_word_patterns(count: int) -> list[str]:
    """``w{i}.x.y``: every pattern adds a child to the root, the case where the Go
    CS-trie of "Fast Topic Matching" copied the whole root level on every insert."""
    return [f"w{i}.x.y" for i in range(count)]


def market_subscriptions(count: int, seed: int) -> list[tuple[str, str]]:
    """``(subscriber, pattern)`` pairs of five-word patterns over realistic words: a region,
    a venue, a symbol, a side, an event; every tenth has a ``*`` somewhere, every 25th (of
    the others) ends in ``#`` from the fourth or fifth word; 1,000 subscribers. The store
    and service benchmarks' input."""
    rng = random.Random(seed)
    words = [
        [f"r{i}" for i in range(20)],
        [f"v{i}" for i in range(50)],
        [f"s{i}" for i in range(5_000)],
        ["buy", "sell", "hold"],
        [f"e{i}" for i in range(30)],
    ]
    out = []
    for i in range(count):
        parts = [rng.choice(choices) for choices in words]
        if i % 10 == 0:
            parts[rng.randrange(5)] = "*"
        elif i % 25 == 0:
            parts[rng.randrange(3, 5) :] = ["#"]
        out.append((f"q{i % 1_000}", ".".join(parts)))
    return out


#: The mixed store's vocabulary and subscribers (issue 30's startup shape).
MIXED_WORDS: Final = 3_000
MIXED_SUBSCRIBERS: Final = 50_000


def mixed_subscriptions(count: int, seed: int) -> list[tuple[str, str]]:
    """``(subscriber, pattern)`` pairs shaped like an operator's store rather than one
    application's: patterns of 3 to 6 words over a 3,000-word vocabulary, 1 in 7 with a
    ``*`` at a random position, 1 in 50 (less those) ending in ``#``, 50,000
    subscribers. Unlike the market patterns the words do not sit at fixed positions, so the
    engines' tries branch wider; the startup bench's input."""
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(MIXED_WORDS)]
    out = []
    for i in range(count):
        parts = [rng.choice(vocabulary) for _ in range(rng.randint(3, 6))]
        if i % 7 == 0:
            parts[rng.randrange(len(parts))] = "*"
        elif i % 50 == 1:
            parts[-1] = "#"
        out.append((f"c{rng.randrange(MIXED_SUBSCRIBERS)}", ".".join(parts)))
    return out


def topic_for(pattern: str, filler: Sequence[str], rng: random.Random) -> str:
    """A topic ``pattern`` matches: each ``*`` takes the word of ``filler`` at its position,
    each ``#`` zero to two of ``filler``'s words from there."""
    words: list[str] = []
    for position, word in enumerate(pattern.split(".")):
        if word == "*":
            words.append(filler[position % len(filler)])
        elif word == "#":
            words.extend(filler[position : position + rng.randrange(3)])
        else:
            words.append(word)
    return ".".join(words)


@dataclass(frozen=True, slots=True)
class MarketWorkload:
    """Subscriptions to load and topics drawn from them (``sources[k]`` is the index of the
    subscription ``topics[k]`` was drawn from, so it must be among the matches)."""

    subscriptions: list[tuple[str, str]]
    topics: list[str]
    sources: list[int]


def market_workload(count: int, topics: int, seed: int = DEFAULT_SEED) -> MarketWorkload:
    """``count`` of ``market_subscriptions`` and ``topics`` topics, each drawn from a random
    one of them (its wildcards filled with the words of a random concrete pattern)."""
    subs = market_subscriptions(count, seed)
    rng = random.Random(seed + 1)
    concrete = [p for _, p in subs if "*" not in p and "#" not in p] or ["a.b.c.d.e"]
    sources = [rng.randrange(count) for _ in range(topics)]
    drawn = [topic_for(subs[k][1], rng.choice(concrete).split("."), rng) for k in sources]
    return MarketWorkload(subs, drawn, sources)


def drawn_topics(patterns: Sequence[str], topics: int, seed: int = DEFAULT_SEED) -> list[str]:
    """``topics`` topics, each drawn from a random one of ``patterns`` (its wildcards filled
    with the words of a random concrete pattern), so each matches at least its source."""
    rng = random.Random(seed + 1)
    concrete = [p for p in patterns if "*" not in p and "#" not in p] or ["a.b.c.d.e"]
    return [
        topic_for(rng.choice(patterns), rng.choice(concrete).split("."), rng) for _ in range(topics)
    ]


def dense_pattern(rng: random.Random) -> str:
    """1-5 words of ``DENSE_ALPHABET``, ``*`` or ``#`` (several ``#`` included): few words,
    so that patterns match often."""
    words = rng.randint(1, 5)
    return ".".join(rng.choice((*DENSE_ALPHABET, "*", "#", "#")) for _ in range(words))


def dense_topic(rng: random.Random) -> str:
    """0-5 words of ``DENSE_ALPHABET`` (0 words is the empty topic)."""
    return ".".join(rng.choice(DENSE_ALPHABET) for _ in range(rng.randint(0, 5)))


#: The route-scale workload (issue 33's): patterns over ``ROUTE_PATTERN_WORDS`` words,
#: topics over the first ``ROUTE_TOPIC_WORDS`` of them, both 2 to 5 words long.
ROUTE_PATTERN_WORDS: Final = 300
ROUTE_TOPIC_WORDS: Final = 60
ROUTE_SUBSCRIPTIONS: Final = 9_999
#: The seed whose patterns give the issue's figures (1.9 deliveries per message, 24% of
#: messages unmatched); the fan-out of this generator moves from seed to seed (1.7-2.2
#: deliveries), because the few two-word ``#`` patterns carry most of it.
ROUTE_SEED: Final = 10


def route_patterns(count: int = ROUTE_SUBSCRIPTIONS, seed: int = ROUTE_SEED) -> list[str]:
    """``count`` patterns of 2 to 5 words drawn uniformly from ``ROUTE_PATTERN_WORDS`` words
    (``w0`` ...); 30% have one word replaced by ``*``, another 15% one by ``#``."""
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(ROUTE_PATTERN_WORDS)]
    patterns = []
    for _ in range(count):
        words = rng.randint(2, 5)
        parts = [rng.choice(vocabulary) for _ in range(words)]
        wildcard = rng.random()
        if wildcard < 0.30:
            parts[rng.randrange(words)] = "*"
        elif wildcard < 0.45:
            parts[rng.randrange(words)] = "#"
        patterns.append(".".join(parts))
    return patterns


def route_topics(count: int, seed: int = ROUTE_SEED) -> pa.Array:
    """``count`` topics of 2 to 5 words drawn uniformly from the first
    ``ROUTE_TOPIC_WORDS`` pattern words, as an Arrow array: built vectorized (10,000,000
    take about 5 s), with numpy's generator seeded by ``seed``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 6, size=count, dtype=np.int32)
    offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    words = pa.array([f"w{i}" for i in range(ROUTE_TOPIC_WORDS)], pa.string())
    chosen = words.take(pa.array(rng.integers(0, ROUTE_TOPIC_WORDS, size=int(offsets[-1]))))
    topics = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), chosen), ".")
    return topics.cast(pa.string())


def export_table(patterns: Sequence[str], subscribers: int, created_at: datetime) -> pa.Table:
    """``patterns`` as a ``topicstore export`` file's rows (ids from 1, tenant ``default``,
    AMQP topic subscriptions spread over ``subscribers`` names), what ``topicstore route
    --subscriptions`` reads in the pipeline benchmarks."""
    import pyarrow as pa

    from store.arrow import SCHEMA

    count = len(patterns)
    nulls = ("criteria", "mode", "labels", "group", "group_policy", "expires_at")
    return pa.table(
        {
            "id": pa.array(range(1, count + 1), pa.int64()),
            "tenant": pa.array(["default"] * count),
            "subscriber": pa.array([f"subscriber-{i % subscribers:03d}" for i in range(count)]),
            "pattern": pa.array(patterns),
            "dialect": pa.array(["amqp"] * count),
            "kind": pa.array(["topic"] * count),
            **{name: pa.nulls(count, SCHEMA.field(name).type) for name in nulls},
            "created_at": pa.array([created_at] * count, SCHEMA.field("created_at").type),
        },
        schema=SCHEMA,
    )
