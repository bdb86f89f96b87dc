"""Seed 000's throughput table: messages per second over one pass of ``match``.

Every subject, the baseline included, is timed in the same process and the passes are
interleaved (repeat 1 of every subject, then repeat 2, ...), keeping the best of the repeats:
on a shared 2-core machine, noise only ever slows a pass down, so the best pass is the
closest to the code's own cost, and a slow spell hits every subject alike.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from bench.report import Column, Table
from bench.subjects import BASELINE, Subject, build, check_agreement
from bench.timing import timed
from bench.workloads import Workload

log = logging.getLogger(__name__)

#: Messages whose results are compared with the baseline before anything is timed.
CHECKED_MESSAGES = 200


def _pass(subject: Subject, messages: Sequence[str]) -> float:
    """Seconds one ``match`` per message takes."""
    match: Callable[[str], Iterable[int]] = subject.match

    def loop() -> None:
        for topic in messages:
            match(topic)

    return timed(loop)


def run_throughput(
    subjects: Sequence[str],
    workload: Workload,
    repeats: int,
    subsets: Mapping[str, int],
) -> Table:
    """msg/s of each subject on ``workload`` (best of ``repeats`` interleaved passes).

    A subject named in ``subsets`` is timed on that many leading messages only (``naive``
    scans every pattern per message); its msg/s is still comparable.
    """
    built: dict[str, Subject] = {}
    for name in subjects:
        built[name] = build(name, workload.subscriptions())
    check_agreement(built, workload.messages[:CHECKED_MESSAGES])

    timed_messages = {
        name: workload.messages[: subsets.get(name, len(workload.messages))] for name in built
    }
    best = dict.fromkeys(built, math.inf)
    first: dict[str, float] = {}
    for repeat in range(repeats):
        for name, subject in built.items():
            messages = timed_messages[name]
            seconds = _pass(subject, messages)
            first.setdefault(name, seconds)
            best[name] = min(best[name], seconds)
            log.info(
                "throughput %s pass %d/%d: %.0f msg/s",
                name,
                repeat + 1,
                repeats,
                len(messages) / seconds,
            )

    def rate(name: str, seconds: float) -> float:
        return len(timed_messages[name]) / seconds

    baseline_rate = rate(BASELINE, best[BASELINE])
    table = Table(
        name="throughput",
        title=(
            f"Throughput: {len(workload.patterns):,} subscriptions, "
            f"{len(workload.messages):,} messages, best of {repeats} interleaved passes"
        ),
        columns=[
            Column("subject", "{}"),
            Column("msg/s", chart=True),
            Column("x baseline", "{:.2f}"),
            Column("first pass msg/s"),
            Column("messages timed", "{:,}"),
        ],
        reference=BASELINE,
        unit="messages per second",
    )
    for name in built:
        messages = timed_messages[name]
        table.rows.append(
            [
                name,
                rate(name, best[name]),
                rate(name, best[name]) / baseline_rate,
                rate(name, first[name]),
                len(messages),
            ]
        )
        if len(messages) < len(workload.messages):
            table.notes.append(
                f"{name} timed on the first {len(messages):,} messages only (it scans every "
                f"pattern per message); a full pass would take about "
                f"{len(workload.messages) / rate(name, best[name]):,.0f} s"
            )
    table.notes.append(
        "baseline = plain Python dict-of-dicts trie (bench/baseline.py), timed in the same run"
    )
    table.notes.append(
        "first pass includes one-time work such as inverted_bitmap compiling each new topic"
    )
    return table
