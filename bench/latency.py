"""The ``concurrency_latency`` table: how long a single match takes while writers run.

Two reader threads time every match (``perf_counter_ns``) over the "Fast Topic Matching"
multithreaded keys ``{j%10}.{j%50}.{j}``, first alone ("quiet"), then while two writer
threads subscribe and unsubscribe those keys as patterns non-stop ("under writes"). The
matcher holds 1,000 random 5-word subscriptions and one subscription per key, and every key
was matched once before timing (compiled topics, DFA states). Op counts are fixed: readers
do ``reads`` matches each, starting once every writer has written; writers stop when the
readers are done (or at ``max_writes``).

What it shows: a reader that takes no lock (``trie``, ``cs_trie``, ``dfa``) is only slowed
by sharing the interpreter, while the locked baseline waits for writers; ``dfa`` rebuilds
its states after every write.
"""

from __future__ import annotations

import logging
import statistics
import sys
import threading
from collections.abc import Sequence
from functools import partial
from time import perf_counter_ns
from typing import Final

from bench.concurrency import EXCLUDED, shared_subject
from bench.percentiles import percentile
from bench.report import Cell, Column, Table
from bench.subjects import BASELINE, Subject
from bench.threads import run_together
from harness.workloads import concurrency_key

log = logging.getLogger(__name__)

PERCENTILES: Final = (50, 99)
#: Writer ids start here, above the prefill's.
FIRST_WRITER_ID: Final = 1 << 28


def _read(subject: Subject, keys: Sequence[str], reads: int, out: list[int]) -> None:
    match, clock, n = subject.match, perf_counter_ns, len(keys)
    for k in range(reads):
        topic = keys[k % n]
        start = clock()
        match(topic)
        out.append(clock() - start)


def _write(
    subject: Subject,
    keys: Sequence[str],
    first_id: int,
    max_writes: int,
    ready: threading.Barrier,
    stop: threading.Event,
    done: list[int],
) -> None:
    subscribe, unsubscribe, n = subject.subscribe, subject.unsubscribe, len(keys)
    writes = 0
    while writes < max_writes and not stop.is_set():
        sub_id = first_id + writes
        subscribe(sub_id, keys[writes // 2 % n])
        unsubscribe(sub_id)
        writes += 2
        if writes == 2:
            ready.wait()
    done.append(writes)


def _phase(
    subject: Subject, keys: Sequence[str], readers: int, writers: int, reads: int, max_writes: int
) -> tuple[list[int], float]:
    """Read latencies (ns) of all readers, and writes per second while they ran. Readers
    start once every writer has completed a write, so the two really overlap."""
    samples: list[list[int]] = [[] for _ in range(readers)]
    ready = threading.Barrier(readers + writers)
    stop = threading.Event()
    left = [readers]
    left_lock = threading.Lock()
    writes: list[int] = []

    def reader(out: list[int]) -> None:
        ready.wait()
        _read(subject, keys, reads, out)
        with left_lock:
            left[0] -= 1
            if not left[0]:
                stop.set()

    jobs = [partial(reader, out) for out in samples]
    jobs += [
        partial(_write, subject, keys, FIRST_WRITER_ID * (w + 1), max_writes, ready, stop, writes)
        for w in range(writers)
    ]
    seconds = run_together(jobs)
    return [ns for out in samples for ns in out], sum(writes) / seconds


def run_read_latency(
    subjects: Sequence[str],
    prefill: Sequence[str],
    keys: int,
    readers: int,
    writers: int,
    reads: int,
    max_writes: int,
    rounds: int,
) -> Table:
    """p50/p99 read latency of every subject, quiet and under writes: the median over
    ``rounds`` rounds, and the range of the p99 under writes, which can differ from round to
    round (it depends on where the interpreter switches threads)."""
    names = [name for name in subjects if name not in EXCLUDED]
    topics = [concurrency_key(j) for j in range(keys)]
    table = Table(
        name="concurrency_latency",
        title=(
            f"Read latency (µs), {readers} readers x {reads:,} matches, quiet and with "
            f"{writers} writers subscribing/unsubscribing; median of {rounds} rounds"
        ),
        columns=[
            Column("subject", "{}"),
            *(Column(f"quiet p{p}", "{:,.1f}", chart=True) for p in PERCENTILES),
            *(Column(f"under writes p{p}", "{:,.1f}", chart=True) for p in PERCENTILES),
            Column(f"under writes p{PERCENTILES[-1]} range"),
            Column("writes/s during reads"),
        ],
        reference=BASELINE,
        unit="µs per match",
    )
    for name in names:
        subject = shared_subject(name, [*prefill, *topics])
        for topic in topics:
            subject.match(topic)  # warm: compiled topics, DFA states
        figures: list[list[float]] = []  # per round: quiet p50, p99, busy p50, p99, writes/s
        for _ in range(rounds):
            quiet, _ = _phase(subject, topics, readers, 0, reads, 0)
            busy, write_rate = _phase(subject, topics, readers, writers, reads, max_writes)
            figures.append(
                [
                    *(percentile(quiet, p) / 1e3 for p in PERCENTILES),
                    *(percentile(busy, p) / 1e3 for p in PERCENTILES),
                    write_rate,
                ]
            )
        medians = [statistics.median(column) for column in zip(*figures, strict=True)]
        tails = [round_figures[-2] for round_figures in figures]
        row: list[Cell] = [name, *medians[:-1], f"{min(tails):,.1f}-{max(tails):,.1f}"]
        row.append(medians[-1])
        table.rows.append(row)
        log.info("latency %s: %s", name, row[1:])
    table.notes.append(
        f"quiet = the {readers} readers alone; under writes = the same while {writers} writer "
        "threads subscribe and unsubscribe non-stop; percentiles over every timed match of all "
        f"readers in a round (perf_counter_ns around one match call), median of {rounds} "
        "rounds on the same matcher; the range column gives the lowest and highest round"
    )
    table.notes.append(
        f"matcher: {len(prefill):,} random 5-word subscriptions plus one per key "
        f"{{j%10}}.{{j%50}}.{{j}} (j < {keys:,}); readers match those keys in turn; each "
        "write cycle subscribes a key under a new id and unsubscribes it"
    )
    table.notes.append(
        "CPython's GIL runs one thread at a time, so a match can also wait for another "
        f"thread's time slice (switch interval {sys.getswitchinterval() * 1e3:g} ms); "
        "trie, cs_trie and dfa readers take no lock, inverted_bitmap readers lock only to "
        "compile a new topic, the baseline is behind one threading.Lock: its tail depends on "
        "whether a thread switch lands while a writer holds that lock, so it varies by round"
    )
    excluded = [name for name in subjects if name in EXCLUDED]
    if excluded:
        table.notes.append(f"{', '.join(excluded)} not run (see the concurrency tables)")
    return table
