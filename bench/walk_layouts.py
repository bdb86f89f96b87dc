"""The ``walk_layouts`` experiment: what the scaled workload's walk costs in three layouts of
the same trie, with no Python around it, and this machine's memory latency at each size.

``python -m bench.walk_layouts [PATTERNS]`` writes the scaled workload (``PATTERNS``
five-word patterns and as many messages) to a scratch directory, compiles
``walk_layouts.cpp`` there with the flags ``native`` is built with, and prints two tables:
ns per topic for each layout over all messages and over the first 100 repeated (the
program first checks that every layout answers every topic with the same ids), then a
random pointer chase over arrays of 32 KiB to 256 MiB. It is an experiment behind the
account of the tuple index in docs/benchmarks.md, not a table of the suite.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bench.report import Column, Table, format_table
from harness.workloads import SCALED_PATTERNS, scaled_workload

SOURCE: Final = Path(__file__).with_name("walk_layouts.cpp")
#: The largest array of the pointer chase, KiB.
CHASE_MAX_KIB: Final = 262_144


@dataclass(frozen=True, slots=True)
class Results:
    """The program's two tables."""

    layouts: Table
    chase: Table


def run_walk_layouts(
    patterns: int = SCALED_PATTERNS, chase_max_kib: int = CHASE_MAX_KIB
) -> Results:
    """Build and run the experiment over ``scaled_workload(patterns, patterns)``."""
    compiler = shutil.which("g++")
    if compiler is None:
        raise RuntimeError("walk_layouts needs g++ (the machine that builds native has it)")
    workload = scaled_workload(patterns, patterns)
    with tempfile.TemporaryDirectory(prefix="walk_layouts-") as scratch:
        root = Path(scratch)
        (root / "patterns.txt").write_text("\n".join(workload.patterns) + "\n")
        (root / "messages.txt").write_text("\n".join(workload.messages) + "\n")
        program = root / "walk_layouts"
        subprocess.run([compiler, "-O3", "-std=c++17", "-o", str(program), str(SOURCE)], check=True)
        out = subprocess.run(
            [
                str(program),
                str(root / "patterns.txt"),
                str(root / "messages.txt"),
                str(chase_max_kib),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    return _tables(out.splitlines(), len(set(workload.messages)))


def _tables(lines: Sequence[str], distinct: int) -> Results:
    layouts = Table(
        name="walk_layouts",
        title="The scaled walk in three layouts (C++, no Python; best of 5 passes)",
        columns=[
            Column("layout", "{}"),
            Column("ns/topic", "{:,.1f}", chart=True),
            Column("100 topics ns/topic", "{:,.1f}"),
            Column("MiB", "{:,.2f}"),
        ],
        reference="edge_table",
    )
    chase = Table(
        name="pointer_chase",
        title="Random pointer chase: ns per dependent load",
        columns=[Column("array KiB", "{:,}"), Column("ns/load", "{:,.1f}", chart=True)],
    )
    sizes: list[float] = []
    for line in lines:
        kind, *fields = line.split()
        if kind == "layout":
            name, every, few, _ids = fields
            layouts.rows.append([name, float(every), float(few), None])
        elif kind == "sizes":
            sizes = [float(f) for f in fields]
        elif kind == "chase":
            kib, ns, _ = fields
            chase.rows.append([int(kib), float(ns)])
    for row, size in zip(layouts.rows, sizes, strict=True):
        row[3] = size
    layouts.notes.append(
        f"ns/topic: over the workload's messages ({distinct:,} distinct topics); 100 topics: "
        "the first 100 repeated; MiB: the structure the walk reads (edges; blocks; tuples)"
    )
    return Results(layouts, chase)


def main(argv: Sequence[str]) -> None:
    """``python -m bench.walk_layouts [PATTERNS]``: print both tables."""
    results = run_walk_layouts(int(argv[0]) if argv else SCALED_PATTERNS)
    print(format_table(results.layouts))
    print(format_table(results.chase))


if __name__ == "__main__":
    main(sys.argv[1:])
