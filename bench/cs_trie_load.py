"""The ``cs_trie_load`` table: loading subscriptions whose first words are all distinct.

The Go CS-trie of "Fast Topic Matching" copied a whole trie level on every insert, so
loading ``w{i}.x.y`` (every pattern a new child of the root) was quadratic: 13 s for 10,000
subscriptions and 19 minutes for 100,000. Ours keeps children in a persistent hash map, so a
load should grow about linearly: the "x10 size" column is the time ratio from the smaller to
the larger size (10 when linear). ``snapshot()`` should cost the same at any size.

Per-call loads are timed twice: with the cyclic garbage collector on, as a running service has it
(objects older than the load are frozen out of its view, as in a fresh process), and with
it paused, which is the structure's own cost; the gap is what collections add. The engines'
bulk path (``subscribe_many``, one call) is timed too, as the service loads at startup.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from time import perf_counter
from typing import Final

from bench.report import Cell, Column, Table
from bench.subjects import BASELINE, Subject, make_subject
from bench.timing import gc_on_isolated, timed
from harness.workloads import distinct_first_word_patterns
from matcher import Matcher
from matcher.cs_trie import CsTrieMatcher

log = logging.getLogger(__name__)

#: The subjects this table is about: the persistent tries beside the mutable one.
LOAD_SUBJECTS: Final = ("trie", "cs_trie", "dfa", "native", BASELINE)


def _load(subject: Subject, patterns: Sequence[str]) -> None:
    for sub_id, pattern in enumerate(patterns):
        subject.subscribe(sub_id, pattern)


def load_seconds(name: str, patterns: Sequence[str], gc_on: bool) -> tuple[Subject, float]:
    """A fresh subject ``name`` loaded with ``patterns``, and the seconds the load took."""
    subject = make_subject(name)
    if not gc_on:
        return subject, timed(lambda: _load(subject, patterns))
    with gc_on_isolated():
        start = perf_counter()
        _load(subject, patterns)
        return subject, perf_counter() - start


def bulk_seconds(name: str, patterns: Sequence[str]) -> float | None:
    """Seconds ``subscribe_many`` takes to load ``patterns`` into a fresh engine ``name``
    (None for the baseline, which has no bulk path)."""
    subject = make_subject(name)
    if not isinstance(subject, Matcher):
        return None
    items = list(enumerate(patterns))
    return timed(lambda: subject.subscribe_many(items))


def snapshot_ns(subject: CsTrieMatcher, calls: int) -> float:
    """Best-of-3 ns per ``snapshot()`` call."""
    snapshot = subject.snapshot

    def loop() -> None:
        for _ in range(calls):
            snapshot()

    return min(timed(loop) for _ in range(3)) * 1e9 / calls


def run_cs_trie_load(subjects: Sequence[str], sizes: Sequence[int], snapshot_calls: int) -> Table:
    """Load seconds of each relevant subject at each size, GC on and GC paused, the growth
    from the smallest to the largest size, and ``snapshot()`` ns at the largest size."""
    sizes = sorted(sizes)
    small, large = sizes[0], sizes[-1]
    factor = large // small
    names = [name for name in subjects if name in LOAD_SUBJECTS]
    table = Table(
        name="cs_trie_load",
        title=(
            f"Loading {' and '.join(f'{n:,}' for n in sizes)} subscriptions w{{i}}.x.y "
            "(all first words distinct): seconds"
        ),
        columns=[
            Column("subject", "{}"),
            *(Column(f"{n:,} s", "{:,.3f}", chart=True) for n in sizes),
            Column(f"x{factor} size", "{:,.1f}"),
            *(Column(f"{n:,} s GC paused", "{:,.3f}", chart=True) for n in sizes),
            Column(f"x{factor} GC paused", "{:,.1f}"),
            Column(f"subscribe_many {large:,} s", "{:,.3f}"),
            Column(f"snapshot ns at {large:,}", "{:,.0f}"),
        ],
        reference=BASELINE,
        unit="seconds",
    )
    patterns = distinct_first_word_patterns(large)
    for name in names:
        row: list[Cell] = [name]
        snapshot: float | None = None
        for gc_on in (True, False):
            seconds: dict[int, float] = {}
            for n in sizes:
                # one subject alive at a time, so no load pays for fresh pages another holds
                subject, seconds[n] = load_seconds(name, patterns[:n], gc_on)
                if n == large and not gc_on and isinstance(subject, CsTrieMatcher):
                    snapshot = snapshot_ns(subject, snapshot_calls)
                del subject
                log.info("cs_trie_load %s %d (GC %s): %.3f s", name, n, gc_on, seconds[n])
            row += [*seconds.values(), seconds[large] / seconds[small]]
        row += [bulk_seconds(name, patterns), snapshot]
        table.rows.append(row)
    table.notes.append(
        f"one subscribe call per pattern; x{factor} size = load time at {large:,} over load "
        f"time at {small:,} ({factor} = linear); subscribe_many = the engines' bulk load (one "
        "call, one write; cs_trie builds a mutable trie and freezes it)"
    )
    table.notes.append(
        "GC on: the cyclic collector runs, blind to older objects (gc.freeze), as in a fresh "
        "process; GC paused: the structure's own cost"
    )
    table.notes.append(
        "the Go CS-trie of 'Fast Topic Matching': 13 s for 10,000 and 19 min for 100,000 "
        "(it copied a whole level per insert); snapshot ns only where snapshot() exists "
        "(cs_trie, dfa)"
    )
    return table
