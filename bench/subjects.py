"""What the suite can time: any engine by name, or the dict-trie baseline, behind one protocol,
and a check that they agree before any of them is timed (a fast wrong answer is no result)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Protocol

from bench.baseline import DictTrie
from matcher import create_matcher

BASELINE: Final = "baseline"


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


def make_subject(name: str) -> Subject:
    """A new, empty engine ``name`` (AMQP dialect), or the baseline for ``BASELINE``."""
    if name == BASELINE:
        return DictTrie()
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
