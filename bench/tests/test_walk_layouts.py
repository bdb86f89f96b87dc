"""The walk-layouts experiment builds, its three layouts agree on every topic's ids (the
program exits non-zero otherwise), and its output becomes the two tables."""

from __future__ import annotations

from bench.walk_layouts import run_walk_layouts


def test_walk_layouts_agree_and_report_each_layout() -> None:
    results = run_walk_layouts(patterns=3_000, chase_max_kib=256)
    rows = {row[0]: row for row in results.layouts.rows}
    assert list(rows) == ["edge_table", "node_blocks", "tuple_space"]
    for name, every, few, mib in rows.values():
        assert isinstance(every, float) and every > 0, name
        assert isinstance(few, float) and few > 0, name
        assert isinstance(mib, float) and mib > 0, name
    assert [row[0] for row in results.chase.rows] == [32, 256]
