"""The "Fast Topic Matching" microbenchmark table: subscribe, unsubscribe and match in ns per
operation, cold (empty) and hot (1,000 random 5-word subscriptions).

An operation is timed in batches (``batch`` subscribes, then the same ids unsubscribed, or
one match per lookup topic) and the best of ``rounds`` batches is kept. Each round leaves
the subject as it found it, so a "cold" subscribe always meets a nearly empty subject. In
both states the lookup topics are matched once before timing, as a running broker would
have seen them: that is what makes ``inverted_bitmap`` lookups O(1), and what its
subscribe then pays for (it updates every compiled topic).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from bench.report import Column, Table
from bench.subjects import BASELINE, Subject, build
from bench.timing import timed

log = logging.getLogger(__name__)

STATES: Final = ("cold", "hot")
OPS: Final = ("subscribe", "unsubscribe", "match")
#: Ids for the timed subscriptions, above any id the hot set uses.
FIRST_BATCH_ID: Final = 1 << 30


@dataclass(frozen=True, slots=True)
class MicroInputs:
    """What the micro benchmark feeds every subject."""

    hot: Sequence[str]
    batch: Sequence[str]
    topics: Sequence[str]
    rounds: int


def _measure(subject: Subject, inputs: MicroInputs) -> dict[str, float]:
    """Best ns/op of each operation on ``subject`` in its current state."""
    match, subscribe, unsubscribe = subject.match, subject.subscribe, subject.unsubscribe
    topics = inputs.topics
    batch = [(FIRST_BATCH_ID + j, pattern) for j, pattern in enumerate(inputs.batch)]
    ids = [sub_id for sub_id, _ in batch]

    def match_all() -> None:
        for topic in topics:
            match(topic)

    def subscribe_all() -> None:
        for sub_id, pattern in batch:
            subscribe(sub_id, pattern)

    def unsubscribe_all() -> None:
        for sub_id in ids:
            unsubscribe(sub_id)

    match_all()  # warm: compiled topics, caches
    best = dict.fromkeys(OPS, math.inf)
    for _ in range(inputs.rounds):
        best["match"] = min(best["match"], timed(match_all) / len(topics))
        best["subscribe"] = min(best["subscribe"], timed(subscribe_all) / len(batch))
        best["unsubscribe"] = min(best["unsubscribe"], timed(unsubscribe_all) / len(ids))
    return {op: seconds * 1e9 for op, seconds in best.items()}


def run_micro(subjects: Sequence[str], inputs: MicroInputs) -> Table:
    """ns/op for every (state, operation) of every subject."""
    table = Table(
        name="micro",
        title=(
            f"Microbenchmarks (ns/op, best of {inputs.rounds}): cold = empty, "
            f"hot = {len(inputs.hot):,} random 5-word subscriptions"
        ),
        columns=[
            Column("subject", "{}"),
            *(Column(f"{state} {op}", chart=True) for state in STATES for op in OPS),
        ],
        reference=BASELINE,
        unit="ns per operation",
    )
    for name in subjects:
        row: list[str | int | float | None] = [name]
        for state in STATES:
            subject = build(name, enumerate(inputs.hot) if state == "hot" else ())
            figures = _measure(subject, inputs)
            log.info(
                "micro %s %s: %s",
                name,
                state,
                ", ".join(f"{op} {ns:,.0f} ns" for op, ns in figures.items()),
            )
            row.extend(figures[op] for op in OPS)
        table.rows.append(row)
    table.notes.append(
        f"subscribe/unsubscribe timed in batches of {len(inputs.batch):,} (5-word patterns, "
        f"new ids), match over {len(inputs.topics):,} topics each matching a hot subscription"
    )
    table.notes.append(
        "in both states the lookup topics were matched once before timing, so "
        f"inverted_bitmap holds {len(inputs.topics):,} compiled topics its subscribe updates"
    )
    return table
