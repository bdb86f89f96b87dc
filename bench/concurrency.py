"""The ``concurrency`` tables: the multithreaded workloads of the "Fast Topic Matching"
benchmarks, in operations per second.

Each of 1 to 16 threads performs 1,000 operations on one shared matcher that already holds
1,000 random 5-word subscriptions (as their ``populateMatcher``). Operation ``k`` of
every thread uses their key ``{k%10}.{k%50}.{k}``: a read matches it as a topic, a write
subscribes it as a pattern under a new id or, every other write, unsubscribes the id the
thread subscribed before (so the matcher does not grow without bound).

The original gave whole threads one role (odd threads wrote in "50/50"; thread ``j%10 == 0``
wrote in "90/10", so its 1-thread "90/10" run was all writes). Here every thread
interleaves reads and writes in the stated ratio, so the mix holds at every thread count.

CPython runs one thread at a time (the GIL): extra threads add no parallelism, and the
figures show what locking and contention cost, not speed-up. The baseline is not
thread-safe, so it runs behind one ``threading.Lock`` taken for every call.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Final, TypeAlias

from bench.report import Column, Table
from bench.subjects import BASELINE, BenchError, Subject, build
from bench.threads import run_together
from harness.workloads import concurrency_key

log = logging.getLogger(__name__)

#: Mix name -> writes per 10 operations.
MIXES: Final = {"50_50": 5, "90_10": 1}
MATCH: Final = 0
SUBSCRIBE: Final = 1
UNSUBSCRIBE: Final = 2
#: Ids of the writes start here, above any prefill id.
FIRST_WRITE_ID: Final = 1 << 24
#: Subjects left out: ``naive`` scans every pattern per read, and tells nothing about locking.
EXCLUDED: Final = frozenset({"naive"})

#: One planned operation: (MATCH | SUBSCRIBE | UNSUBSCRIBE, id, key).
Op: TypeAlias = tuple[int, int, str]


class LockedSubject:
    """``inner`` behind one lock taken for every call: how a structure that is not
    thread-safe (the baseline) has to be shared."""

    def __init__(self, inner: Subject) -> None:
        self._inner = inner
        self._lock = threading.Lock()

    def subscribe(self, sub_id: int, pattern: str) -> None:
        with self._lock:
            self._inner.subscribe(sub_id, pattern)

    def unsubscribe(self, sub_id: int) -> bool:
        with self._lock:
            return self._inner.unsubscribe(sub_id)

    def match(self, topic: str) -> Iterable[int]:
        with self._lock:
            return self._inner.match(topic)

    def __len__(self) -> int:
        with self._lock:
            return len(self._inner)


def shared_subject(name: str, prefill: Sequence[str]) -> Subject:
    """Subject ``name`` holding ``prefill`` (ids 0..), ready to be shared by threads."""
    subject = build(name, enumerate(prefill))
    return LockedSubject(subject) if name == BASELINE else subject


def is_write(k: int, writes_per_10: int) -> bool:
    """Whether operation ``k`` is a write: writes spread evenly, ``writes_per_10`` per 10."""
    return (k + 1) * writes_per_10 // 10 > k * writes_per_10 // 10


def thread_ops(thread: int, ops: int, writes_per_10: int) -> tuple[list[Op], int]:
    """Thread ``thread``'s operations (kind, id, key) and how many ids it leaves subscribed."""
    plan: list[Op] = []
    held: deque[int] = deque()
    writes = 0
    for k in range(ops):
        key = concurrency_key(k)
        if not is_write(k, writes_per_10):
            plan.append((MATCH, 0, key))
        elif writes % 2 == 0 or not held:
            sub_id = FIRST_WRITE_ID + thread * ops + k
            plan.append((SUBSCRIBE, sub_id, key))
            held.append(sub_id)
            writes += 1
        else:
            plan.append((UNSUBSCRIBE, held.popleft(), key))
            writes += 1
    return plan, len(held)


def _perform(subject: Subject, plan: list[Op]) -> None:
    match, subscribe, unsubscribe = subject.match, subject.subscribe, subject.unsubscribe
    for kind, sub_id, key in plan:
        if kind == MATCH:
            match(key)
        elif kind == SUBSCRIBE:
            subscribe(sub_id, key)
        else:
            unsubscribe(sub_id)


def timed_workload(
    name: str, prefill: Sequence[str], threads: int, ops: int, writes_per_10: int
) -> float:
    """Seconds ``threads`` threads take to perform their operations on a fresh subject
    ``name``; raises ``BenchError`` if the subject lost or invented a subscription."""
    subject = shared_subject(name, prefill)
    plans = [thread_ops(t, ops, writes_per_10) for t in range(threads)]
    elapsed = run_together([partial(_perform, subject, plan) for plan, _ in plans])
    expected = len(prefill) + sum(left for _, left in plans)
    if len(subject) != expected:
        raise BenchError(
            "lost_update", f"{name} holds {len(subject)} subscriptions, expected {expected}"
        )
    return elapsed


def run_concurrency(
    subjects: Sequence[str],
    prefill: Sequence[str],
    thread_counts: Sequence[int],
    ops: int,
    repeats: int,
) -> list[Table]:
    """One table per mix: ops/s of each subject at each thread count (best of ``repeats``,
    interleaved: every subject at every count, then again)."""
    names = [name for name in subjects if name not in EXCLUDED]
    best: dict[tuple[str, str, int], float] = {}
    for repeat in range(repeats):
        for mix, writes_per_10 in MIXES.items():
            for threads in thread_counts:
                for name in names:
                    seconds = timed_workload(name, prefill, threads, ops, writes_per_10)
                    key = (mix, name, threads)
                    best[key] = min(best.get(key, math.inf), seconds)
                    log.info(
                        "concurrency %s %s %d threads (%d/%d): %.0f ops/s",
                        mix,
                        name,
                        threads,
                        repeat + 1,
                        repeats,
                        threads * ops / seconds,
                    )
    return [
        _table(mix, names, thread_counts, ops, repeats, best, subjects, len(prefill))
        for mix in MIXES
    ]


def _table(
    mix: str,
    names: Sequence[str],
    thread_counts: Sequence[int],
    ops: int,
    repeats: int,
    best: Mapping[tuple[str, str, int], float],
    subjects: Sequence[str],
    prefill: int,
) -> Table:
    reads = 10 - MIXES[mix]
    table = Table(
        name=f"concurrency_{mix}",
        title=(
            f"Concurrency {reads * 10}/{100 - reads * 10} read/write: ops/s, {ops:,} ops per "
            f"thread, best of {repeats}"
        ),
        columns=[
            Column("subject", "{}"),
            *(Column(f"{n} thread{'s' if n > 1 else ''}", chart=True) for n in thread_counts),
        ],
        reference=BASELINE,
        unit="operations per second (all threads)",
    )
    for name in names:
        table.rows.append([name, *(n * ops / best[(mix, name, n)] for n in thread_counts)])
    table.notes.append(
        "ops/s = threads x ops / wall time from releasing the threads to the last one done; "
        "a write subscribes {k%10}.{k%50}.{k} under a new id or (every other write) "
        "unsubscribes the thread's previous one, a read matches {k%10}.{k%50}.{k}; the matcher "
        f"starts with {prefill:,} random 5-word subscriptions"
    )
    table.notes.append(
        "CPython's GIL runs one thread at a time: more threads cannot add throughput here, the "
        "drop with threads is lock and switching cost; baseline = dict trie behind one "
        "threading.Lock (it is not thread-safe)"
    )
    excluded = [name for name in subjects if name in EXCLUDED]
    if excluded:
        table.notes.append(
            f"{', '.join(excluded)} not run: it scans every pattern per read, so it would "
            "measure that scan, not concurrency"
        )
    return table
