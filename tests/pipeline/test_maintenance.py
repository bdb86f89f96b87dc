"""Compaction, retention and vacuum of a routed table (``tests.routed``'s, written twice
over: small files), read back by delta-rs and the analytics; no Spark."""

from __future__ import annotations

import json
from collections import Counter
from datetime import date
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from typer.testing import CliRunner

from pipeline import delta
from pipeline.analytics import run_query
from pipeline.maintenance import compact, expire, vacuum
from pipeline.table_cli import table
from tests.routed import DELIVERIES, UNMATCHED, write_routed


def _rows(path: Path) -> Counter[str]:
    """Every committed row, as a multiset."""
    return Counter(map(str, DeltaTable(str(path)).to_pyarrow_table().to_pylist()))


def _small_files(tmp_path: Path) -> Path:
    """The hand-written table appended twice (four commits, eight files), and a rejected
    subscription without a date."""
    root = write_routed(tmp_path / "routed")
    write_routed(root)
    reject: dict[str, list[str | None]] = {name: [None] for name in delta.DATA_SCHEMA.names}
    reject |= {"reason": ["duplicate_id"], "source": ["subscriptions"], "kind": ["rejects"]}
    reject["date"] = [None]
    write_deltalake(
        root,
        pa.table(reject, schema=delta.SCHEMA),
        partition_by=list(delta.PARTITIONS),
        mode="append",
    )
    return root


def test_compaction_keeps_the_rows_in_fewer_files(tmp_path: Path) -> None:
    root = _small_files(tmp_path)
    before = _rows(root)
    files = len(DeltaTable(str(root)).file_uris())
    outcome = compact(root)
    assert outcome.version == 5 and outcome.files_removed == 8
    # One file per partition with more than one: (deliveries, unmatched) x two days.
    assert outcome.files_added == 4
    assert len(DeltaTable(str(root)).file_uris()) == files - 8 + 4
    assert _rows(root) == before
    fanout = run_query("fanout", root).rows
    assert fanout == run_query("fanout", root, as_of=4).rows  # the same answers


def test_expiry_drops_old_days_and_keeps_rows_without_a_date(tmp_path: Path) -> None:
    root = _small_files(tmp_path)
    outcome = expire(root, days=1, today=date(2024, 5, 3))  # keep May 2nd on
    assert outcome.version == 5 and outcome.files_removed == 4
    kept = DeltaTable(str(root)).to_pyarrow_table().to_pylist()
    assert {str(r["date"]) for r in kept} == {"2024-05-02", "None"}
    may_2nd = [d for d in DELIVERIES if d[-1].day == 2] + [u for u in UNMATCHED if u[-1].day == 2]
    assert len(kept) == 2 * len(may_2nd) + 1
    assert expire(root, days=1, today=date(2024, 5, 3)).files_removed == 0  # nothing left


def test_vacuum_deletes_what_no_recent_version_needs(tmp_path: Path) -> None:
    root = _small_files(tmp_path)
    orphan = root / "batch-7-0123456789ab" / "kind=deliveries" / "date=2024-05-01"
    orphan.mkdir(parents=True)
    (orphan / "part-0.parquet").write_bytes(b"a batch killed before its commit")
    (root / "_checkpoint").mkdir()
    (root / "_checkpoint" / "metadata").write_text("{}", encoding="utf-8")
    (root / "_summary.json").write_text("{}", encoding="utf-8")
    compact(root)
    rows = _rows(root)
    assert vacuum(root, retain_hours=1).files_removed == 0  # all younger than an hour

    outcome = vacuum(root, retain_hours=0)
    # The compacted-away files, the orphan, and the subscriptions export write_routed left
    # in the table's directory (any file there that no commit names and that is not hidden,
    # a name starting with "_" or ".": the directory belongs to the table).
    assert outcome.files_removed == 8 + 1 + 1
    assert not (orphan / "part-0.parquet").exists()
    assert not (root / "subscriptions.parquet").exists()
    assert (root / "_checkpoint" / "metadata").exists() and (root / "_summary.json").exists()
    assert _rows(root) == rows


def test_the_table_command(tmp_path: Path) -> None:
    root = _small_files(tmp_path)
    runner = CliRunner()
    compacted = runner.invoke(table, ["compact", str(root)])
    assert compacted.exit_code == 0, compacted.output
    assert compacted.output == "compact: 4 files added, 8 removed; version 5\n"
    history = runner.invoke(table, ["history", str(root), "--limit", "2"])
    assert [json.loads(line)["version"] for line in history.output.splitlines()] == [5, 4]
    missing = runner.invoke(table, ["vacuum", str(tmp_path / "nothing")])
    assert missing.exit_code == 2 and "no_deliveries" in missing.output
