"""Interleaved best-of-N passes of ``match`` over a message list (throughput and scaled).

Repeat 1 of every subject runs, then repeat 2, and so on, and each subject keeps its best
pass: on a shared 2-core machine noise only ever slows a pass down, so the best pass is the
closest to the code's own cost, and a slow spell hits every subject alike. The first pass is
kept too, because it is the one that pays one-time work (compiling topics, building DFA
states, filling a cache).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from bench.subjects import Subject
from bench.timing import timed

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PassTimes:
    """Seconds of a subject's first and best pass over ``messages`` messages."""

    first: float
    best: float
    messages: int

    def rate(self, seconds: float | None = None) -> float:
        """Messages per second of the best pass (or of ``seconds``)."""
        return self.messages / (self.best if seconds is None else seconds)


def timed_pass(subject: Subject, messages: Sequence[str]) -> float:
    """Seconds one ``match`` per message takes (garbage collector paused)."""
    match: Callable[[str], Iterable[int]] = subject.match

    def loop() -> None:
        for topic in messages:
            match(topic)

    return timed(loop)


def interleaved_passes(
    subjects: Mapping[str, Subject],
    messages: Mapping[str, Sequence[str]],
    repeats: int,
    label: str,
) -> dict[str, PassTimes]:
    """First and best of ``repeats`` interleaved passes of each subject over its messages."""
    best = dict.fromkeys(subjects, math.inf)
    first: dict[str, float] = {}
    for repeat in range(repeats):
        for name, subject in subjects.items():
            seconds = timed_pass(subject, messages[name])
            first.setdefault(name, seconds)
            best[name] = min(best[name], seconds)
            log.info(
                "%s %s pass %d/%d: %.0f msg/s",
                label,
                name,
                repeat + 1,
                repeats,
                len(messages[name]) / seconds,
            )
    return {name: PassTimes(first[name], best[name], len(messages[name])) for name in subjects}


def budgeted_pass(
    subject: Subject, messages: Sequence[str], budget_s: float, probe_s: float
) -> tuple[float, int]:
    """(seconds, messages done) of a first pass that stops early, once it has run for
    ``probe_s``, if the whole pass extrapolates past ``budget_s``.

    Chunks double (1, 2, 4, ... messages), so a subject that needs a second per message is
    caught after a few and a fast one pays a few dozen chunk boundaries.
    """
    done, elapsed, chunk = 0, 0.0, 1
    while done < len(messages):
        part = messages[done : done + chunk]
        elapsed += timed_pass(subject, part)
        done += len(part)
        if (
            done < len(messages)
            and elapsed >= probe_s
            and elapsed / done * len(messages) > budget_s
        ):
            break
        chunk *= 2
    return elapsed, done
