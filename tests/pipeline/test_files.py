"""The executor-side writer of the routed table, without Spark: routed rows laid out by kind
and day, files a Delta commit accepts, each task's own files and totals."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import delta
from pipeline.executor import Router
from pipeline.files import STAGED_NAMES, StagedWriter, table_layout
from pipeline.subscriptions import build_plan

DAY1 = datetime(2024, 5, 1, 23, 59, 59, tzinfo=UTC)
DAY2 = datetime(2024, 5, 2, 0, 0, tzinfo=UTC)


def _router() -> Router:
    plan, rejects = build_plan(
        pa.table(
            {
                "id": pa.array([1, 2], pa.int64()),
                "subscriber": ["alice", "bob"],
                "pattern": ["a.*", "#"],
            }
        )
    )
    assert rejects == []
    return Router(plan)


def _batch(rows: Sequence[tuple[str, str, datetime | None, str | None]]) -> pa.RecordBatch:
    """Messages in the ROUTE_INPUT layout: (message_id, topic, ts, upstream reason)."""
    string = pa.string()
    return pa.RecordBatch.from_pydict(
        {
            "message_id": pa.array([r[0] for r in rows], string),
            "topic": pa.array([r[1] for r in rows], string),
            "ts": pa.array([r[2] for r in rows], pa.timestamp("us", tz="UTC")),
            "reason": pa.array([r[3] for r in rows], string),
            "detail": pa.array(["why" if r[3] else None for r in rows], string),
            "raw": pa.array(["{}" if r[3] else None for r in rows], string),
        }
    )


MESSAGES = [
    ("m1", "a.b", DAY1, None),  # alice and bob
    ("m2", "x", DAY2, None),  # bob
    ("m3", "a.b", DAY2, None),  # alice and bob
    ("m4", "x" * 300, DAY1, None),  # topic_too_long
    ("m5", "a", None, "invalid_ts"),  # rejected upstream, no day
]


def test_rows_are_grouped_by_kind_and_utc_day() -> None:
    (routed,) = _router().route_batch(_batch(MESSAGES))
    groups = {
        (kind, day): sorted((r["message_id"], r["subscription_id"]) for r in rows.to_pylist())
        for kind, day, rows in table_layout(routed)
    }
    assert groups == {
        ("deliveries", "2024-05-01"): [("m1", 1), ("m1", 2)],
        ("deliveries", "2024-05-02"): [("m2", 2), ("m3", 1), ("m3", 2)],
        ("rejects", "2024-05-01"): [("m4", None)],
        ("rejects", delta.NULL_PARTITION): [("m5", None)],
    }
    for _, _, rows in table_layout(routed):
        assert rows.schema == delta.DATA_SCHEMA
    rejects = [r for k, _, rows in table_layout(routed) if k == "rejects" for r in rows.to_pylist()]
    assert {(r["reason"], r["source"]) for r in rejects} == {
        ("topic_too_long", "messages"),
        ("invalid_ts", "messages"),
    }


def test_a_task_writes_one_file_per_kind_and_day_that_a_commit_accepts(tmp_path: Path) -> None:
    table = tmp_path / "table"
    staged = delta.stage(table, "route")
    router = _router()
    writer = StagedWriter(table, staged, row_group_rows=2)
    for part in (MESSAGES[:2], MESSAGES[2:]):  # two input batches, same files
        for routed in router.route_batch(_batch(part)):
            writer.write(routed)
    out = writer.close().to_pylist()
    assert list(out[0]) == list(STAGED_NAMES)
    files = [Path(str(row["path"])) for row in out if row["path"] is not None]
    assert len(files) == len(set(files)) == 4
    assert sum(int(str(row["rows"])) for row in out) == 7
    assert out[-1] == {
        "path": None,
        "rows": 0,
        "deliveries": 5,
        "matched": 3,
        "unmatched": 0,
        "rejected": 2,
    }
    # Rows are buffered across input batches up to the bound: day 2's deliveries (m2's from the
    # first batch, m3's two from the second) are one row group of 3, not one per batch.
    day2 = next(f for f in files if "kind=deliveries/date=2024-05-02" in f.as_posix())
    meta = pq.ParquetFile(table / day2).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [3]
    version, rows = delta.commit(table, files)
    assert (version, rows) == (0, 7)
    got = delta.dataset(table).to_table().to_pylist()
    assert sorted((r["message_id"], r["kind"], r["date"]) for r in got) == [
        ("m1", "deliveries", date(2024, 5, 1)),
        ("m1", "deliveries", date(2024, 5, 1)),
        ("m2", "deliveries", date(2024, 5, 2)),
        ("m3", "deliveries", date(2024, 5, 2)),
        ("m3", "deliveries", date(2024, 5, 2)),
        ("m4", "rejects", date(2024, 5, 1)),
        ("m5", "rejects", None),
    ]


def test_another_attempt_writes_other_files(tmp_path: Path) -> None:
    """A retried task never overwrites or meets a failed attempt's files: only the files an
    attempt returns are committed."""
    table = tmp_path / "table"
    staged = delta.stage(table, "route")
    names = []
    for _ in range(2):
        writer = StagedWriter(table, staged)
        for routed in _router().route_batch(_batch(MESSAGES[:1])):
            writer.write(routed)
        names.append({row["path"] for row in writer.close().to_pylist() if row["path"]})
    assert names[0] and names[1] and names[0].isdisjoint(names[1])
