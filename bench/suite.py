"""Runs every benchmark table, prints it, and optionally writes text, PNG and JSON results.

Sizes live in one place (``FULL`` and ``QUICK``) so a smoke test runs the very same code as a
real measurement, only smaller.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from time import perf_counter
from typing import Final

from bench.memory import run_memory
from bench.micro import MicroInputs, run_micro
from bench.report import Table, format_table, write_chart
from bench.subjects import BASELINE
from bench.throughput import run_throughput
from bench.workloads import DEFAULT_SEED, random_subscriptions, throughput_workload, topics_for
from matcher import ENGINES

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Sizes:
    """Every size the suite uses."""

    patterns: int
    messages: int
    repeats: int
    naive_messages: int
    micro_hot: int
    micro_batch: int
    micro_topics: int
    micro_rounds: int
    memory_sizes: tuple[int, ...]
    memory_budget_s: float
    seed: int = DEFAULT_SEED


FULL: Final = Sizes(
    patterns=1_000,
    messages=100_000,
    repeats=3,
    naive_messages=2_000,
    micro_hot=1_000,
    micro_batch=100,
    micro_topics=100,
    micro_rounds=5,
    memory_sizes=(1_000, 100_000),
    memory_budget_s=30.0,
)
QUICK: Final = Sizes(
    patterns=1_000,
    messages=2_000,
    repeats=1,
    naive_messages=200,
    micro_hot=100,
    micro_batch=10,
    micro_topics=10,
    micro_rounds=1,
    memory_sizes=(100, 1_000),
    memory_budget_s=5.0,
)


def _tables(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    """Each table in turn, as soon as it is measured."""
    subjects = [*engines, BASELINE]
    workload = throughput_workload(sizes.patterns, sizes.messages, sizes.seed)
    yield run_throughput(subjects, workload, sizes.repeats, subsets={"naive": sizes.naive_messages})
    hot = random_subscriptions(sizes.micro_hot, sizes.seed)
    yield run_micro(
        subjects,
        MicroInputs(
            hot=hot,
            batch=random_subscriptions(sizes.micro_batch, sizes.seed + 1),
            topics=topics_for(hot[: sizes.micro_topics], sizes.seed),
            rounds=sizes.micro_rounds,
        ),
    )
    yield run_memory(subjects, sizes.memory_sizes, sizes.memory_budget_s, sizes.seed)


def run(
    out_dir: Path | None,
    engines: Sequence[str] = ENGINES,
    quick: bool = False,
    *,
    messages: int | None = None,
    repeats: int | None = None,
) -> list[Table]:
    """Run all tables for ``engines`` (the baseline always runs too) and print them; with
    ``out_dir``, also write ``<table>.txt``, ``<table>.png`` and ``results.json`` there."""
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        raise ValueError(f"unknown engine(s) {', '.join(unknown)}; known: {', '.join(ENGINES)}")
    sizes = QUICK if quick else FULL
    if messages is not None:
        sizes = replace(
            sizes, messages=messages, naive_messages=min(sizes.naive_messages, messages)
        )
    if repeats is not None:
        sizes = replace(sizes, repeats=repeats)

    started = perf_counter()
    tables = []
    for table in _tables(engines, sizes):
        print(format_table(table), flush=True)
        tables.append(table)
    wall_s = perf_counter() - started
    log.info("benchmark suite took %.1f s", wall_s)

    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        for table in tables:
            (out_dir / f"{table.name}.txt").write_text(format_table(table), encoding="utf-8")
            write_chart(table, out_dir / f"{table.name}.png")
        results = {
            "meta": {
                "when": datetime.now(UTC).isoformat(timespec="seconds"),
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "engines": list(engines),
                "quick": quick,
                "sizes": asdict(sizes),
                "wall_s": round(wall_s, 1),
            },
            "tables": {table.name: table.to_json() for table in tables},
        }
        (out_dir / "results.json").write_text(
            json.dumps(results, indent=2) + "\n", encoding="utf-8"
        )
        log.info("wrote %s", out_dir)
    return tables
