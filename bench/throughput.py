"""The "Fast Topic Matching" throughput table: messages per second over one pass of
``match``, for every engine with and without the result cache (``<engine>+cache``), beside
the baseline.

Every subject is timed in the same process with interleaved passes (``bench.passes``). The
results are checked against the baseline only after timing, so the first pass is every
subject's first sight of the messages (cold: no topic compiled, no DFA state, nothing cached).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bench.passes import interleaved_passes
from bench.report import Column, Table
from bench.subjects import BASELINE, CACHE_SIZE, CACHE_SUFFIX, Subject, build, check_agreement
from harness.workloads import Workload

#: Messages whose results are compared with the baseline once timing is done.
CHECKED_MESSAGES = 200


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
    timed_messages = {
        name: workload.messages[: subsets.get(name, len(workload.messages))] for name in built
    }
    times = interleaved_passes(built, timed_messages, repeats, "throughput")
    # After timing: checking first would warm every subject on these messages' topics.
    check_agreement(built, workload.messages[:CHECKED_MESSAGES])
    baseline_rate = times[BASELINE].rate()
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
    for name, t in times.items():
        table.rows.append([name, t.rate(), t.rate() / baseline_rate, t.rate(t.first), t.messages])
        if t.messages < len(workload.messages):
            table.notes.append(
                f"{name} timed on the first {t.messages:,} messages only (it scans every "
                f"pattern per message); a full pass would take about "
                f"{len(workload.messages) / t.rate():,.0f} s"
            )
    table.notes.append(
        "baseline = plain Python dict-of-dicts trie (bench/baseline.py), timed in the same run"
    )
    table.notes.append(
        "first pass = each subject's first sight of these messages (results are checked "
        f"against the baseline on {CHECKED_MESSAGES} messages after timing): it pays one-time "
        "work such as inverted_bitmap compiling each new topic, dfa building its states and a "
        "cache's misses"
    )
    if any(name.endswith(CACHE_SUFFIX) for name in built):
        table.notes.append(
            f"<engine>{CACHE_SUFFIX} = the engine behind create_matcher(cache_size="
            f"{CACHE_SIZE:,}); these {len(workload.messages):,} messages hold only "
            f"{len(set(workload.messages)):,} distinct topics, so after the first pass every "
            "match is a cache hit: an upper bound for workloads with few distinct topics"
        )
    return table
