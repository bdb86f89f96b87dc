"""Seed 000's memory table: bytes per subscription at several subscription counts.

Subscriptions are seed 000's random 5-word patterns (``workloads.random_subscriptions``)
scaled up; a 5-word digit space holds 100,000 distinct patterns, so large counts stay
realistic rather than collapsing onto a few shared patterns.

Two measures, because neither alone is right:

* ``tracemalloc``: what the subject allocated through Python's allocator while subscribing,
  after the empty subject existed. Exact and repeatable, but blind to memory a C extension
  takes with ``malloc``: pyroaring's bitmap containers are not counted.
* RSS growth of a fresh child process (``python -m bench.memory``) while it subscribes: sees
  everything, bitmaps included, but only in pages, so it is meaningful at large counts only.

Ids and pattern strings are the caller's and are not counted; all a subject builds is.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from time import perf_counter

from bench.report import Cell, Column, Table
from bench.subjects import BASELINE, BenchError, make_subject
from bench.workloads import DEFAULT_SEED, random_subscriptions

log = logging.getLogger(__name__)

_STATM = Path("/proc/self/statm")


def traced_bytes(name: str, patterns: Sequence[str]) -> tuple[int, float]:
    """Bytes subject ``name`` allocates (tracemalloc) to hold ``patterns``, and the seconds
    that took (tracing slows allocation down several times)."""
    subscriptions = list(enumerate(patterns))
    subject = make_subject(name)
    gc.collect()
    tracemalloc.start()
    try:
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


def _rss_child(name: str, count: int, seed: int) -> int:
    """In a fresh process: resident bytes gained while subject ``name`` subscribes ``count``."""
    subscriptions = list(enumerate(random_subscriptions(count, seed)))
    subject = make_subject(name)
    gc.collect()
    before = _resident_bytes()
    for sub_id, pattern in subscriptions:
        subject.subscribe(sub_id, pattern)
    gc.collect()
    return _resident_bytes() - before


def rss_bytes(name: str, count: int, seed: int, timeout: float) -> int | None:
    """RSS growth measured in a child process; None where ``/proc`` does not exist."""
    if not _STATM.exists():
        return None
    root = str(Path(__file__).resolve().parent.parent)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", "bench.memory", name, str(count), str(seed)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, check=True, timeout=timeout, env=env
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        raise BenchError("rss_child_failed", f"{' '.join(command)}: {e}") from e
    return int(json.loads(done.stdout)["rss_bytes"])


def run_memory(
    subjects: Sequence[str],
    sizes: Sequence[int],
    budget_s: float,
    seed: int = DEFAULT_SEED,
) -> Table:
    """Bytes per subscription of every subject at every size (tracemalloc), plus RSS growth
    at the largest size. A size whose estimated time (extrapolated linearly from the
    smallest) exceeds ``budget_s`` is skipped, and a note says so."""
    sizes = sorted(sizes)
    largest = sizes[-1]
    table = Table(
        name="memory",
        title="Memory: bytes per subscription (random 5-word patterns)",
        columns=[
            Column("subject", "{}"),
            *(Column(f"{n:,} subs tracemalloc", chart=True) for n in sizes),
            Column(f"{largest:,} subs RSS", chart=True),
        ],
        reference=BASELINE,
        unit="bytes per subscription",
    )
    patterns = random_subscriptions(largest, seed)
    for name in subjects:
        row: list[Cell] = [name]
        seconds_per_sub = 0.0
        for n in sizes:
            estimate = seconds_per_sub * n
            if estimate > budget_s:
                row.append(None)
                table.notes.append(
                    f"{name} at {n:,} skipped: estimated {estimate:,.0f} s > {budget_s:,.0f} s"
                )
                continue
            allocated, seconds = traced_bytes(name, patterns[:n])
            seconds_per_sub = max(seconds_per_sub, seconds / n)
            row.append(allocated / n)
            log.info("memory %s %d subs: %.0f bytes/sub (%.1f s)", name, n, allocated / n, seconds)
        if row[-1] is None:
            row.append(None)
        else:
            grown = rss_bytes(name, largest, seed, timeout=max(60.0, 4 * budget_s))
            row.append(None if grown is None else grown / largest)
        table.rows.append(row)
    table.notes.append(
        "tracemalloc misses memory pyroaring takes with malloc (bitmap containers); the RSS "
        "column (growth of a fresh process, page-granular) includes it"
    )
    if "inverted_bitmap" in subjects:
        table.notes.append(
            "inverted_bitmap's compiled-topic table is empty here (no message routed); each "
            "compiled topic costs extra, up to Limits.max_compiled_topics topics"
        )
    return table


def main(argv: Sequence[str]) -> None:
    """``python -m bench.memory NAME COUNT SEED``: the RSS child; prints JSON."""
    name, count, seed = argv
    print(json.dumps({"rss_bytes": _rss_child(name, int(count), int(seed))}))


if __name__ == "__main__":
    main(sys.argv[1:])
