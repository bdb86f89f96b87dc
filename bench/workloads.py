"""Seeded, reproducible inputs: seed 000's throughput workload and its random subscriptions.

Seed 000's generator puts a ``*`` at a position chosen by the subscriber index ``i``:
``i % 10 == 0`` the first word, else ``i % 25 == 0`` the middle word, else ``i % 45 == 0``
the last word; every other word is a random digit. With 3 words that is exactly the
throughput workload (``*.d.d``, ``d.*.d``, ``d.d.*``, ``d.d.d``); with 5 words it is the
"1,000 randomly generated 5-word subscriptions" of the micro benchmark.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

DEFAULT_SEED: Final = 0
THROUGHPUT_PATTERNS: Final = 1_000
THROUGHPUT_MESSAGES: Final = 100_000
HOT_SUBSCRIPTIONS: Final = 1_000


def _digit(rng: random.Random) -> str:
    return str(rng.randrange(10))


def star_position(i: int, words: int) -> int | None:
    """Where subscriber ``i``'s ``*`` goes in a ``words``-word pattern (seed 000's rule)."""
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


def throughput_workload(
    patterns: int = THROUGHPUT_PATTERNS,
    messages: int = THROUGHPUT_MESSAGES,
    seed: int = DEFAULT_SEED,
) -> Workload:
    """Seed 000's throughput workload: 3-word patterns, then message ``k`` = a concretization
    of pattern ``k % patterns``. Patterns are drawn before messages from one generator."""
    rng = random.Random(seed)
    pats = seed_patterns(patterns, 3, rng)
    msgs = tuple(concretize(pats[k % patterns], rng) for k in range(messages))
    return Workload(tuple(pats), msgs)


def random_subscriptions(
    count: int = HOT_SUBSCRIPTIONS, seed: int = DEFAULT_SEED, words: int = 5
) -> list[str]:
    """Seed 000's "randomly generated 5-word subscriptions" (micro and memory benchmarks)."""
    return seed_patterns(count, words, random.Random(seed))


def topics_for(patterns: Sequence[str], seed: int = DEFAULT_SEED) -> list[str]:
    """One concrete topic per pattern, so every lookup hits at least one subscription."""
    rng = random.Random(seed)
    return [concretize(pattern, rng) for pattern in patterns]
