"""Maintenance of the routed table (``pipeline.delta``): compaction, retention and vacuum,
each a delta-rs operation committed like any other, so each is safe while a stream appends.

* ``compact`` rewrites the small files of each partition into files of ``target_size``
  bytes: a micro-batch per second leaves 3,600 files an hour per kind and day. The rewrite
  is one commit that removes the small files and adds the new ones (``dataChange = false``:
  a reader sees the same rows before and after); readers of older versions keep reading the
  small files until they are vacuumed.
* ``expire`` deletes the rows of days older than ``days`` (by the ``date`` partition, so
  whole files go and nothing is rewritten); rows without a date (rejected subscriptions,
  rows whose ``ts`` was invalid) are kept.
* ``vacuum`` deletes the files no version younger than ``retain_hours`` needs: files removed
  by compaction or retention, and files no commit ever named (a batch killed before its
  commit), once they are that old. ``retain_hours`` must exceed the longest micro-batch
  (Delta's default is a week), or a stream's staged files could go before their commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Final

#: Delta's own default retention for ``vacuum``.
DEFAULT_RETAIN_HOURS: Final = 168
#: Files ``compact`` writes (delta-rs' default target is 100 MiB).
DEFAULT_TARGET_BYTES: Final = 128 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a maintenance operation did: files added and removed (or deleted from disk),
    and the table's version after it (None: nothing to commit)."""

    operation: str
    files_added: int
    files_removed: int
    version: int | None

    def line(self) -> str:
        committed = f"version {self.version}" if self.version is not None else "no commit"
        return (
            f"{self.operation}: {self.files_added:,} files added, "
            f"{self.files_removed:,} removed; {committed}"
        )


def _table(path: Path) -> Any:
    from deltalake import DeltaTable  # loaded by the command that runs, not by --help

    from pipeline import delta

    return DeltaTable(str(delta.locate_table(path)))


def compact(path: Path, target_bytes: int = DEFAULT_TARGET_BYTES) -> Outcome:
    """Bin-pack each partition's small files into files of about ``target_bytes``."""
    table = _table(path)
    before = table.version()
    metrics = table.optimize.compact(target_size=target_bytes)
    table.update_incremental()
    return Outcome(
        "compact",
        int(metrics.get("numFilesAdded", 0)),
        int(metrics.get("numFilesRemoved", 0)),
        table.version() if table.version() != before else None,
    )


def expire(path: Path, days: int, today: date | None = None) -> Outcome:
    """Delete the rows of days before ``today - days`` (UTC)."""
    cutoff = (today or datetime.now(UTC).date()) - timedelta(days=days)
    table = _table(path)
    before = table.version()
    metrics = table.delete(f"date < '{cutoff.isoformat()}'")
    table.update_incremental()
    return Outcome(
        f"expire before {cutoff.isoformat()}",
        int(metrics.get("num_added_files", 0)),
        int(metrics.get("num_removed_files", 0)),
        table.version() if table.version() != before else None,
    )


def vacuum(path: Path, retain_hours: int = DEFAULT_RETAIN_HOURS) -> Outcome:
    """Delete from disk every file no version of the last ``retain_hours`` needs."""
    table = _table(path)
    deleted = table.vacuum(
        retention_hours=retain_hours,
        dry_run=False,
        enforce_retention_duration=False,
        full=True,
    )
    return Outcome("vacuum", 0, len(deleted), None)
