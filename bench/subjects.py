"""What the suite can time: any engine by name (``trie``), the same behind the result cache
(``trie+cache``), the dict-trie baseline or its memoized variant, behind one protocol; and a
check that they agree with the baseline (a fast wrong answer is no result)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Protocol

from bench.baseline import DictTrie, MemoizedDictTrie
from matcher import create_matcher

BASELINE: Final = "baseline"
#: The baseline's trie remembering explored states (``bench.baseline.MemoizedDictTrie``).
MEMOIZED_BASELINE: Final = "memoized-baseline"
#: Suffix of a subject that is an engine behind ``create_matcher(..., cache_size=CACHE_SIZE)``.
CACHE_SUFFIX: Final = "+cache"
CACHE_SIZE: Final = 65_536


class Subject(Protocol):
    """The part of the matcher interface the benchmarks call."""

    def subscribe(self, sub_id: int, pattern: str) -> None: ...

    def unsubscribe(self, sub_id: int) -> bool: ...

    def match(self, topic: str) -> Iterable[int]: ...

    def __len__(self) -> int: ...


class BenchError(Exception):
    """A benchmark could not produce a trustworthy figure; ``code`` says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def cached(engine: str) -> str:
    """The subject name of ``engine`` behind the result cache."""
    return engine + CACHE_SUFFIX


def make_subject(name: str) -> Subject:
    """A new, empty engine ``name`` (AMQP dialect), cached for ``<engine>+cache``, or the
    baseline for ``BASELINE`` (memoized for ``MEMOIZED_BASELINE``)."""
    if name == BASELINE:
        return DictTrie()
    if name == MEMOIZED_BASELINE:
        return MemoizedDictTrie()
    if name.endswith(CACHE_SUFFIX):
        return create_matcher(name.removesuffix(CACHE_SUFFIX), "amqp", cache_size=CACHE_SIZE)
    return create_matcher(name, dialect="amqp")


def build(name: str, subscriptions: Iterable[tuple[int, str]]) -> Subject:
    """Subject ``name`` holding ``subscriptions``."""
    subject = make_subject(name)
    for sub_id, pattern in subscriptions:
        subject.subscribe(sub_id, pattern)
    return subject


def check_agreement(subjects: Mapping[str, Subject], topics: Sequence[str]) -> None:
    """Raise ``BenchError`` unless every subject returns the baseline's ids for ``topics``."""
    reference = subjects[BASELINE]
    for topic in topics:
        expected = set(reference.match(topic))
        for name, subject in subjects.items():
            got = set(subject.match(topic))
            if got != expected:
                raise BenchError(
                    "result_mismatch",
                    f"{name} matched {topic!r} to {sorted(got)[:10]}, "
                    f"the baseline to {sorted(expected)[:10]}",
                )
