"""The ``adversarial`` table: the worst case for ``#``, in µs per match.

1,000 patterns with up to 4 ``#`` each over a three-letter alphabet, against 128-word topics
over the same alphabet (255 bytes, the longest AMQP key): every ``#`` can stop almost
anywhere. RabbitMQ's trie and the baseline backtrack, which is exponential in the number of
``#``; the engines here are not, and this table is where that shows. The baseline's trie with
memoized states runs beside it, so the table shows what backtracking costs and what the
obvious fix for it buys, each row named for what it is.

Each topic's match is timed on its own; a topic's figure is its best over the passes (noise
only slows a call down), and the table gives the mean and the worst topic. Engines that keep
work between matches (``STATEFUL``) get two rows: "cold" = each topic's first match on a
fresh matcher of its own (DFA states built, the topic compiled, with nothing left behind by
other topics: what a client choosing its topics can make every message cost), best over that
many fresh matchers; "warm" = passes after one untimed pass. Both dict tries run on a few
topics only, each call under a CPU-time budget, and report "timeout" when it runs out.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Final

from bench.report import Cell, Column, Table
from bench.subjects import BASELINE, MEMOIZED_BASELINE, BenchError, Subject, build
from bench.timing import BudgetExceededError, cpu_budget, cpu_budget_available, gc_paused
from harness.workloads import Workload

log = logging.getLogger(__name__)

#: Engines whose matches leave work behind for later ones (topics compiled, DFA states,
#: native's result frozensets kept per end node).
STATEFUL: Final = frozenset({"dfa", "inverted_bitmap", "native"})
TIMEOUT: Final = "timeout"
#: Subjects run under a CPU-time budget per call, on a few topics.
BUDGETED: Final = (BASELINE, MEMOIZED_BASELINE)
#: Their rows, named for what they are.
ROW_LABELS: Final = {
    BASELINE: "baseline: dict trie, backtracking",
    MEMOIZED_BASELINE: "dict trie, memoized",
}


@dataclass(slots=True)
class Timings:
    """Best seconds per topic index, the results seen, and topics that ran out of budget."""

    best: dict[int, float]
    results: dict[int, frozenset[int]]
    timeouts: int = 0

    def add(self, index: int, seconds: float, result: Iterable[int]) -> None:
        self.best[index] = min(self.best.get(index, math.inf), seconds)
        self.results[index] = frozenset(result)


def _timed_pass(subject: Subject, topics: Sequence[str], into: Timings) -> None:
    match = subject.match
    with gc_paused():
        for index, topic in enumerate(topics):
            start = perf_counter()
            result = match(topic)
            into.add(index, perf_counter() - start, result)


def _cold_pass(
    name: str, subscriptions: list[tuple[int, str]], topics: Sequence[str], into: Timings
) -> None:
    """Each topic's first match on a fresh subject ``name`` (building it is not timed)."""
    for index, topic in enumerate(topics):
        subject = build(name, subscriptions)
        with gc_paused():
            start = perf_counter()
            result = subject.match(topic)
            into.add(index, perf_counter() - start, result)


def _guarded_pass(
    name: str, subject: Subject, topics: Sequence[str], budget_s: float, into: Timings
) -> None:
    """One pass in which every call gets ``budget_s`` of CPU time, then counts as a timeout."""
    match = subject.match
    with gc_paused():
        for index, topic in enumerate(topics):
            start = perf_counter()
            try:
                with cpu_budget(budget_s):
                    result = match(topic)
            except BudgetExceededError:
                into.timeouts += 1
                log.info("adversarial %s topic %d: timeout after %.1f s", name, index, budget_s)
                continue
            into.add(index, perf_counter() - start, result)


def _measure(
    name: str, workload: Workload, topics: Sequence[str], repeats: int, budget_s: float
) -> dict[str, Timings]:
    """Row label -> timings for subject ``name``."""
    subscriptions = workload.subscriptions()
    if name in BUDGETED:
        guarded = Timings({}, {})
        _guarded_pass(name, build(name, subscriptions), topics, budget_s, guarded)
        return {ROW_LABELS[name]: guarded}
    if name in STATEFUL:
        cold, warm = Timings({}, {}), Timings({}, {})
        for _ in range(repeats):
            _cold_pass(name, subscriptions, topics, cold)
        subject = build(name, subscriptions)
        _timed_pass(subject, topics, Timings({}, {}))
        for _ in range(repeats):
            _timed_pass(subject, topics, warm)
        return {f"{name} cold": cold, f"{name} warm": warm}
    timings = Timings({}, {})
    subject = build(name, subscriptions)
    for _ in range(repeats):
        _timed_pass(subject, topics, timings)
    return {name: timings}


def _check(rows: Mapping[str, Timings], topics: Sequence[str]) -> None:
    """Every row must return what the first row that matched a topic returned."""
    reference: dict[int, tuple[str, frozenset[int]]] = {}
    for label, timings in rows.items():
        for index, result in timings.results.items():
            first = reference.setdefault(index, (label, result))
            if first[1] != result:
                raise BenchError(
                    "result_mismatch",
                    f"{label} matched {len(result)} ids for adversarial topic {index}, "
                    f"{first[0]} {len(first[1])} ({topics[index][:40]}...)",
                )


def run_adversarial(
    subjects: Sequence[str],
    workload: Workload,
    repeats: int,
    subsets: Mapping[str, int],
    budget_s: float,
) -> Table:
    """Mean and worst µs per match of every subject (cold and warm rows for ``STATEFUL``)."""
    rows: dict[str, Timings] = {}
    attempted: dict[str, int] = {}
    skipped: list[str] = []
    for name in subjects:
        if name in BUDGETED and not cpu_budget_available():
            skipped.append(name)
            continue
        topics = workload.messages[: subsets.get(name, len(workload.messages))]
        for label, timings in _measure(name, workload, topics, repeats, budget_s).items():
            rows[label] = timings
            attempted[label] = len(topics)
            log.info("adversarial %s: %d topics", label, len(timings.best))
    _check(rows, workload.messages)

    hashes = [pattern.split(".").count("#") for pattern in workload.patterns]
    words = len(workload.messages[0].split(".")) if workload.messages else 0
    table = Table(
        name="adversarial",
        title=(
            f"Adversarial: {len(workload.patterns):,} patterns with up to {max(hashes)} '#', "
            f"{words}-word topics, µs per match"
        ),
        columns=[
            Column("subject", "{}"),
            Column("topics", "{:,}"),
            Column("mean µs", "{:,.1f}", chart=True),
            Column("worst µs", "{:,.1f}", chart=True),
            Column("timeouts", "{:,}"),
        ],
        reference=ROW_LABELS[BASELINE],
        unit="µs per match",
    )
    for label, timings in rows.items():
        seconds = list(timings.best.values())
        mean: Cell = sum(seconds) / len(seconds) * 1e6 if seconds else TIMEOUT
        worst: Cell = TIMEOUT if timings.timeouts else max(seconds) * 1e6
        table.rows.append([label, attempted[label], mean, worst, timings.timeouts])
    table.notes.append(
        f"patterns: 1-6 words from a, b, c, * plus 0-{max(hashes)} '#' anywhere "
        f"({sum(h >= 3 for h in hashes):,} with 3 or more); topics: {words} words from a, b, c"
    )
    table.notes.append(
        f"per topic the best of {repeats} passes (garbage collector paused); cold rows: each "
        f"topic's first match on a fresh matcher, {repeats} times; warm rows: {repeats} passes "
        "after an untimed one"
    )
    budgeted = [ROW_LABELS[name] for name in BUDGETED if ROW_LABELS[name] in rows]
    if budgeted:
        table.notes.append(
            f"{' and '.join(budgeted)}: one pass over {attempted[budgeted[0]]} topics, each "
            f"call stopped after {budget_s:g} s of CPU (SIGPROF) and counted as a timeout; a "
            "mean covers only the calls that finished"
        )
        table.notes.append(
            "both are bench/baseline.py's dict-of-dicts trie: backtracking re-explores the "
            "same (node, word) states and is exponential in the number of '#'; memoized "
            "explores each once (polynomial, but each state is a Python call)"
        )
    for name, count in subsets.items():
        if name in subjects and name not in BUDGETED and count < len(workload.messages):
            table.notes.append(f"{name} timed on the first {count:,} topics only")
    if skipped:
        table.notes.append(
            f"{', '.join(skipped)} not run: its CPU-time budget needs the main thread"
        )
    return table
