"""The ``scaled`` table: the throughput workload at 100,000 five-word patterns and 100,000
messages (message ``k`` concretizes pattern ``k``): ns per match and build time.

Some engines cannot do a full pass here in any reasonable time (``naive`` scans 100,000
patterns per message; ``inverted_bitmap`` compiles every new topic against all of them), and
which ones is measured, not assumed: each subject's first pass stops early once it
extrapolates past the budget, and that subject is then timed on the messages it got through.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from bench.passes import budgeted_pass, interleaved_passes
from bench.report import Column, Table
from bench.subjects import BASELINE, Subject, check_agreement, make_subject
from bench.timing import timed
from harness.workloads import Workload

log = logging.getLogger(__name__)

#: Leading timed messages whose results are compared with the baseline's.
CHECKED_MESSAGES = 200
#: Later passes this many times faster than the first mean the first did one-time work.
ONE_TIME_WORK_RATIO = 10.0


def _build(name: str, workload: Workload) -> tuple[Subject, float]:
    """Subject ``name`` holding the workload's patterns, and the seconds that took."""
    subject = make_subject(name)
    subscriptions = workload.subscriptions()

    def load() -> None:
        for sub_id, pattern in subscriptions:
            subject.subscribe(sub_id, pattern)

    return subject, timed(load)


def run_scaled(
    subjects: Sequence[str],
    workload: Workload,
    repeats: int,
    budget_s: float,
    probe_s: float,
) -> Table:
    """Best ns/match of ``repeats`` passes (the first budgeted, the rest interleaved), first
    pass ns/match and build seconds of every subject."""
    built: dict[str, Subject] = {}
    build_s: dict[str, float] = {}
    for name in subjects:
        built[name], build_s[name] = _build(name, workload)
        log.info("scaled %s: built in %.2f s", name, build_s[name])

    messages = workload.messages
    first: dict[str, float] = {}
    timed_messages: dict[str, Sequence[str]] = {}
    for name, subject in built.items():
        seconds, done = budgeted_pass(subject, messages, budget_s, probe_s)
        first[name] = seconds / done
        timed_messages[name] = messages[:done]
        log.info("scaled %s first pass: %.0f ns/match over %d", name, first[name] * 1e9, done)
    later = interleaved_passes(built, timed_messages, repeats - 1, "scaled") if repeats > 1 else {}
    for name, subject in built.items():
        check_agreement(
            {BASELINE: built[BASELINE], name: subject}, timed_messages[name][:CHECKED_MESSAGES]
        )

    def best(name: str) -> float:
        t = later.get(name)
        return first[name] if t is None else min(first[name], t.best / t.messages)

    baseline_best = best(BASELINE)
    table = Table(
        name="scaled",
        title=(
            f"Scaled: {len(workload.patterns):,} five-word subscriptions, "
            f"{len(messages):,} messages, best of {repeats} passes"
        ),
        columns=[
            Column("subject", "{}"),
            Column("ns/match", chart=True),
            Column("x baseline", "{:.2f}"),
            Column("first pass ns/match"),
            Column("messages timed", "{:,}"),
            Column("build s", "{:,.2f}"),
        ],
        reference=BASELINE,
        unit="ns per match",
    )
    distinct = len(set(messages))
    for name in built:
        done = len(timed_messages[name])
        ns: float | None = best(name) * 1e9
        if done < len(messages):
            table.notes.append(
                f"{name}: timed on the first {done:,} messages only; its first pass "
                f"extrapolates to about {first[name] * len(messages):,.0f} s for all "
                f"{len(messages):,} (budget {budget_s:g} s)"
            )
            if first[name] > ONE_TIME_WORK_RATIO * best(name):
                # Its later passes over the subset only reuse the first pass's work (compiled
                # topics): a figure the full workload would reach only after that first pass.
                table.notes.append(
                    f"{name}: ns/match not given: later passes over those {done:,} topics took "
                    f"{ns:,.0f} ns/match reusing the first pass's work (compiled topics), which "
                    f"the full workload would first have to do for all {distinct:,} distinct "
                    "topics"
                )
                ns = None
        ratio = None if ns is None else baseline_best * 1e9 / ns
        table.rows.append([name, ns, ratio, first[name] * 1e9, done, build_s[name]])
    table.notes.append(
        "ns/match: best pass (garbage collector paused); build s: one subscribe call per "
        "pattern, garbage collector paused (cs_trie_load shows what it adds)"
    )
    table.notes.append(
        f"patterns follow the 'Fast Topic Matching' generator's rule at 5 words (i%10 -> "
        f"word 0 is *, else i%25 -> word 2, else i%45 -> word 4); "
        f"{len(set(workload.patterns)):,} distinct patterns, {distinct:,} distinct topics"
    )
    return table
