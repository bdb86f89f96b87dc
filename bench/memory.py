"""The "Fast Topic Matching" memory table: bytes per subscription at 1,000, 100,000 and 1,000,000
subscriptions.

Subscriptions are that benchmark's random 5-word patterns
(``harness.workloads.random_subscriptions``) scaled up. A 5-word digit space holds 100,000
literal patterns (plus the ``*`` variants), so up to 100,000 the patterns are mostly
distinct; at 1,000,000 several ids share each pattern,
which is realistic too (many consumers, one binding key).

Two measures, because neither alone is right:

* ``tracemalloc``: what the subject allocated through Python's allocator while subscribing,
  after the empty subject existed. Exact and repeatable, but blind to memory a C extension
  takes with ``malloc``: pyroaring's bitmap containers are not counted.
* RSS growth of a new child process while it subscribes: sees everything, bitmaps
  included, but only in pages, so it is meaningful at large counts only. This is the
  trustworthy column. The child is forked from a fork server that has only imported this
  module: it has built nothing, as a fresh interpreter would not have.

Both collect garbage before reading. The child keeps the cyclic garbage collector on while
subscribing, as a service does; tracemalloc pauses it (it reads only what is still alive
after a collection, and tracing is slow enough). Ids and pattern strings are the caller's
and are not counted; all a subject builds is.
"""

from __future__ import annotations

import gc
import json
import logging
import multiprocessing
import os
import sys
import tracemalloc
import types
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from time import perf_counter
from typing import Final

from bench.report import Cell, Column, Table
from bench.subjects import BASELINE, BenchError, make_subject
from bench.timing import gc_paused
from harness.workloads import DEFAULT_SEED, random_subscriptions

log = logging.getLogger(__name__)

_STATM: Final = Path("/proc/self/statm")
#: Subjects measured at sizes above the tracemalloc sizes: the ones built to scale.
LARGE_SUBJECTS: Final = (
    "optimized_inverted_bitmap",
    "trie",
    "cs_trie",
    "dfa",
    "native",
    BASELINE,
)
#: Per-subscription cost grows a little with size (deeper maps, more collisions); the
#: estimate for a larger child is padded by this factor.
GROWTH_MARGIN: Final = 1.5
MIB: Final = 2**20


def traced_bytes(name: str, patterns: Sequence[str]) -> tuple[int, float]:
    """Bytes subject ``name`` allocates (tracemalloc) to hold ``patterns``, and the seconds
    that took (tracing slows allocation down several times)."""
    subscriptions = list(enumerate(patterns))
    subject = make_subject(name)
    gc.collect()
    tracemalloc.start()
    try:
        with gc_paused():
            start = perf_counter()
            for sub_id, pattern in subscriptions:
                subject.subscribe(sub_id, pattern)
            elapsed = perf_counter() - start
        gc.collect()
        allocated, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return allocated, elapsed


def _resident_bytes() -> int:
    return int(_STATM.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True, slots=True)
class RssGrowth:
    """What a child reports: resident bytes gained while subscribing, and the seconds."""

    bytes: int
    seconds: float


def _rss_child(name: str, count: int, seed: int) -> RssGrowth:
    """In a fresh process: resident bytes gained while subject ``name`` subscribes ``count``,
    with the garbage collector on, as in a service (garbage that only the collector frees
    would otherwise pile up and inflate the figure)."""
    subscriptions = list(enumerate(random_subscriptions(count, seed)))
    subject = make_subject(name)
    gc.collect()
    before = _resident_bytes()
    start = perf_counter()
    for sub_id, pattern in subscriptions:
        subject.subscribe(sub_id, pattern)
    elapsed = perf_counter() - start
    gc.collect()
    return RssGrowth(_resident_bytes() - before, elapsed)


#: Where RSS children come from: a fork server that has imported this module (and with it
#: the engines and the workload generator) once, so each child starts with nothing built
#: and nothing of the parent's, in milliseconds instead of an interpreter's start.
_CHILDREN: Final = multiprocessing.get_context("forkserver")


def _report(name: str, count: int, seed: int, answer: Connection) -> None:
    """The child's body: ``_rss_child``'s figures sent to the parent."""
    grown = _rss_child(name, count, seed)
    answer.send((grown.bytes, grown.seconds))
    answer.close()


def rss_growth(name: str, count: int, seed: int, timeout: float) -> RssGrowth | None:
    """RSS growth measured in a child process; None where ``/proc`` does not exist."""
    if not _STATM.exists():
        return None
    _CHILDREN.set_forkserver_preload(["bench.memory"])  # read when the server starts
    receiving, sending = _CHILDREN.Pipe(duplex=False)
    child = _CHILDREN.Process(target=_report, args=(name, count, seed, sending), daemon=True)
    # A child imports its parent's main module again (a script, or `python -m` of the
    # whole suite) unless the parent's has no name or file to import it by; the child runs
    # only ``_report``, so it is started while a bare module stands in for it.
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        child.start()
    finally:
        sys.modules["__main__"] = main
    sending.close()
    try:
        if not receiving.poll(timeout):
            raise BenchError("rss_child_failed", f"{name} at {count:,}: no answer in {timeout} s")
        rss_bytes, seconds = receiving.recv()
    except EOFError:
        raise BenchError("rss_child_failed", f"{name} at {count:,}: the child died") from None
    finally:
        receiving.close()
        child.kill()
        child.join()
    return RssGrowth(int(rss_bytes), float(seconds))


def run_memory(
    subjects: Sequence[str],
    traced_sizes: Sequence[int],
    rss_sizes: Sequence[int],
    budget_s: float,
    large_budget_s: float,
    large_subjects: Collection[str] = LARGE_SUBJECTS,
    seed: int = DEFAULT_SEED,
) -> Table:
    """Bytes per subscription of every subject: tracemalloc at ``traced_sizes``, child RSS
    at ``rss_sizes`` (sizes above the largest traced size for ``large_subjects`` only), and
    the RSS growth in MiB at the largest size.

    A measurement whose estimated time (extrapolated linearly from the previous size, padded
    by ``GROWTH_MARGIN`` for RSS children) exceeds ``budget_s`` (``large_budget_s`` above the
    traced sizes) is skipped, and a note says so."""
    traced_sizes = sorted(traced_sizes)
    rss_sizes = sorted(rss_sizes)
    largest = rss_sizes[-1]
    table = Table(
        name="memory",
        title="Memory: bytes per subscription (random 5-word patterns)",
        columns=[
            Column("subject", "{}"),
            *(Column(f"tracemalloc {n:,}", chart=True) for n in traced_sizes),
            *(Column(f"RSS {n:,}", chart=True) for n in rss_sizes),
            Column(f"RSS MiB {largest:,}", "{:,.1f}"),
        ],
        reference=BASELINE,
        unit="bytes per subscription",
    )
    patterns = random_subscriptions(traced_sizes[-1], seed)
    for name in subjects:
        row: list[Cell] = [name]
        seconds_per_sub = 0.0
        for n in traced_sizes:
            estimate = seconds_per_sub * n
            if estimate > budget_s:
                row.append(None)
                table.notes.append(
                    f"{name} tracemalloc at {n:,} skipped: estimated {estimate:,.0f} s "
                    f"> {budget_s:,.0f} s"
                )
                continue
            allocated, seconds = traced_bytes(name, patterns[:n])
            seconds_per_sub = max(seconds_per_sub, seconds / n)
            row.append(allocated / n)
            log.info("memory %s %d subs: %.0f bytes/sub (%.1f s)", name, n, allocated / n, seconds)
        grown: RssGrowth | None = None
        for n in rss_sizes:
            large = n > traced_sizes[-1]
            budget = large_budget_s if large else budget_s
            estimate = seconds_per_sub * n * (GROWTH_MARGIN if grown else 1.0)
            if large and name not in large_subjects:
                grown = None
            elif estimate > budget:
                grown = None
                table.notes.append(
                    f"{name} RSS at {n:,} skipped: estimated {estimate:,.0f} s > {budget:,.0f} s"
                )
            else:
                grown = rss_growth(name, n, seed, timeout=max(60.0, 4 * budget))
                if grown is not None:
                    seconds_per_sub = grown.seconds / n
                    log.info(
                        "memory %s %d subs: RSS +%.0f MiB (%.1f s)",
                        name,
                        n,
                        grown.bytes / MIB,
                        grown.seconds,
                    )
            row.append(None if grown is None else grown.bytes / n)
        row.append(None if grown is None else grown.bytes / MIB)
        table.rows.append(row)
    large_sizes = [n for n in rss_sizes if n > traced_sizes[-1]]
    if large_sizes:
        table.notes.append(
            f"at {', '.join(f'{n:,}' for n in large_sizes)} only "
            f"{', '.join(s for s in subjects if s in large_subjects)} are measured (RSS only: "
            "tracemalloc there would add minutes and miss pyroaring's memory anyway)"
        )
    table.notes.append(
        "tracemalloc misses memory pyroaring takes with malloc (bitmap containers) and all of "
        "native's (C++ new/malloc); the RSS columns (growth of a fresh process while "
        "subscribing, page-granular) include it"
    )
    table.notes.append(
        f"RSS MiB {largest:,}: the subject's whole footprint at {largest:,} subscriptions "
        "(RSS growth), not counting the interpreter or the caller's pattern strings and ids"
    )
    if "inverted_bitmap" in subjects:
        table.notes.append(
            "inverted_bitmap's compiled-topic table is empty here (no message routed); each "
            "compiled topic costs extra, up to Limits.max_compiled_topics topics"
        )
    return table


def main(argv: Sequence[str]) -> None:
    """``python -m bench.memory NAME COUNT SEED``: one RSS measurement; prints JSON."""
    name, count, seed = argv
    grown = _rss_child(name, int(count), int(seed))
    print(json.dumps({"rss_bytes": grown.bytes, "seconds": grown.seconds}))


if __name__ == "__main__":
    main(sys.argv[1:])
