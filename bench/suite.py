"""Runs the selected benchmark tables (``bench.tables.TABLES``), prints each as soon as it
is measured, and optionally writes text, PNG and JSON results.

Sizes live in one place (``bench.sizes``) so a smoke test runs the very same code as a real
measurement, only smaller.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from time import perf_counter

from bench.report import Table, format_table, write_chart
from bench.sizes import FULL, QUICK
from bench.tables import TABLES
from matcher import ENGINES

log = logging.getLogger(__name__)


def run(
    out_dir: Path | None,
    engines: Sequence[str] = ENGINES,
    quick: bool = False,
    *,
    tables: Sequence[str] | None = None,
    messages: int | None = None,
    repeats: int | None = None,
) -> list[Table]:
    """Run ``tables`` (default: all, in registry order) for ``engines`` (the baseline runs
    too) and print them; with ``out_dir``, also write ``<table>.txt``, ``<table>.png`` and
    ``results.json`` (the tables of this run only) there. ``messages`` and ``repeats``
    override the throughput table's."""
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        raise ValueError(f"unknown engine(s) {', '.join(unknown)}; known: {', '.join(ENGINES)}")
    selected = list(TABLES) if not tables else list(dict.fromkeys(tables))
    unknown = [name for name in selected if name not in TABLES]
    if unknown:
        raise ValueError(f"unknown table(s) {', '.join(unknown)}; known: {', '.join(TABLES)}")
    sizes = QUICK if quick else FULL
    if messages is not None:
        sizes = replace(
            sizes, messages=messages, naive_messages=min(sizes.naive_messages, messages)
        )
    if repeats is not None:
        sizes = replace(sizes, repeats=repeats)

    # Other work on the machine slows every figure; the load average says how much there was.
    load_before = os.getloadavg()[0]
    started = perf_counter()
    done: list[Table] = []
    for name in selected:
        for table in TABLES[name].run(engines, sizes):
            print(format_table(table), flush=True)
            done.append(table)
    wall_s = perf_counter() - started
    log.info(
        "benchmark suite took %.1f s (1-minute load average %.2f before, %.2f after)",
        wall_s,
        load_before,
        os.getloadavg()[0],
    )

    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        for table in done:
            (out_dir / f"{table.name}.txt").write_text(format_table(table), encoding="utf-8")
            write_chart(table, out_dir / f"{table.name}.png")
        results = {
            "meta": {
                "when": datetime.now(UTC).isoformat(timespec="seconds"),
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "engines": list(engines),
                "tables": selected,
                "quick": quick,
                "sizes": asdict(sizes),
                "wall_s": round(wall_s, 1),
                "loadavg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            },
            "tables": {table.name: table.to_json() for table in done},
        }
        (out_dir / "results.json").write_text(
            json.dumps(results, indent=2) + "\n", encoding="utf-8"
        )
        log.info("wrote %s", out_dir)
    return done
