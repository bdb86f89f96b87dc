"""The executor side of writing the routed table: routed rows (``schema.ROUTED``, as
``executor.Router.route_batch`` emits them) laid out as the table stores them
(``delta.DATA_SCHEMA``, by ``kind`` and ``date``) and written as Parquet by the Python worker
that routed them. Plain Python and Arrow, no Spark.

Why here and not in Spark's writer: a message has about two deliveries, each repeating the
message's id, topic and tenant and the subscriber's name. Sent back to the JVM, every one of
those rows was converted from Arrow to Spark's rows and encoded again by Spark's Parquet
writer, which was most of a route's time; written here, the rows go from the Arrow batches
the router built straight into Parquet (Arrow's C++ writer, outside the GIL), and the JVM
receives one small row per file.

Exactly once: a task writes its own new files (a fresh name each, under the staged
directory of ``delta.stage``) and returns their paths and row counts as its output rows
(``STAGED_NAMES``); the driver commits the files the successful tasks returned, and nothing
else. A failed or retried attempt's files are named by no output the driver receives, so no
commit names them (``vacuum`` removes them).

Memory: each open file buffers at most ``ROW_GROUP_ROWS`` rows before writing them as a row
group; a task keeps a file open per (kind, date) it has rows of, a day or two of deliveries
and unmatched messages.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import delta
from pipeline.codes import DELIVERY, REJECTED, UNMATCHED
from pipeline.schema import MESSAGES_SOURCE

#: Rows a file buffers before it writes them as a Parquet row group.
ROW_GROUP_ROWS: Final = 500_000
#: Parquet settings of the staged files. Dictionaries for the columns with few values
#: (subscribers, tenants, reasons); none for message ids and topics, which repeat only
#: within a message's deliveries (a dictionary of unique values never pays: the writer
#: builds it, then falls back to plain). Snappy, as Spark writes.
DICTIONARY_COLUMNS: Final = ("subscriber", "tenant", "pattern", "reason", "source")
COMPRESSION: Final = "snappy"
#: The output rows of a staging task: one per file it wrote (``path`` relative to the
#: table, ``rows``), then one of its totals (``path`` null): ``deliveries``, ``matched``
#: (messages with at least one delivery), ``unmatched`` and ``rejected`` (messages).
STAGED_NAMES: Final = ("path", "rows", "deliveries", "matched", "unmatched", "rejected")
TOTALS: Final = STAGED_NAMES[2:]
#: Day numbers of rows without a date, and the stride that keeps (output, day) keys apart.
_NO_DAY: Final = -(2**30)
_OUTPUT_STRIDE: Final = 2**32
_KIND_OF: Final = {DELIVERY: delta.DELIVERIES, UNMATCHED: delta.UNMATCHED, REJECTED: delta.REJECTS}


def table_layout(routed: pa.RecordBatch) -> Iterator[tuple[str, str, pa.RecordBatch]]:
    """``routed`` (``schema.ROUTED``) as (kind, date directory name, rows in
    ``delta.DATA_SCHEMA``) groups; ``date`` is the UTC day of ``ts``
    (``delta.NULL_PARTITION`` without one)."""
    n = routed.num_rows
    if n == 0:
        return
    outputs = routed.column("output").to_numpy(zero_copy_only=False)
    source = pc.if_else(
        pc.equal(routed.column("output"), REJECTED),
        pa.scalar(MESSAGES_SOURCE),
        pa.scalar(None, pa.string()),
    )
    columns = {name: routed.column(name) for name in routed.schema.names}
    columns["pattern"] = pa.nulls(n, pa.string())
    columns["source"] = source
    columns["ts"] = columns["ts"].cast(delta.DATA_SCHEMA.field("ts").type)
    rows = pa.RecordBatch.from_arrays(
        [columns[name] for name in delta.DATA_SCHEMA.names], schema=delta.DATA_SCHEMA
    )
    days = pc.cast(columns["ts"], pa.date32())
    # Keys as (output, day) codes: one pass of numpy groups the rows however they mix.
    day_numbers = days.cast(pa.int32()).fill_null(_NO_DAY).to_numpy().astype(np.int64)
    keys = outputs.astype(np.int64) * _OUTPUT_STRIDE + day_numbers
    if (keys == keys[0]).all():  # the usual batch: one kind and day
        uniques, firsts = keys[:1], np.zeros(1, dtype=np.int64)
    else:
        uniques, firsts = np.unique(keys, return_index=True)
    for key, first in zip(uniques, firsts, strict=True):
        day = days[int(first)]
        name = delta.NULL_PARTITION if not day.is_valid else day.as_py().isoformat()
        output = int(outputs[first])
        part = rows if len(uniques) == 1 else rows.filter(pa.array(keys == key))
        yield _KIND_OF[output], name, part


def routed_totals(routed: pa.RecordBatch) -> tuple[int, int, int, int]:
    """``TOTALS`` of ``routed``: deliveries, matched messages, unmatched, rejected."""
    outputs = routed.column("output").to_numpy(zero_copy_only=False)
    deliveries = outputs == DELIVERY
    first = routed.column("first").fill_null(False).to_numpy(zero_copy_only=False)
    return (
        int(deliveries.sum()),
        int((deliveries & first).sum()),
        int((outputs == UNMATCHED).sum()),
        int((outputs == REJECTED).sum()),
    )


@dataclass
class _Open:
    path: Path
    writer: pq.ParquetWriter
    buffered: list[pa.RecordBatch] = field(default_factory=list)
    buffered_rows: int = 0
    rows: int = 0

    def flush(self) -> None:
        if self.buffered:
            self.writer.write_table(
                pa.Table.from_batches(self.buffered), row_group_size=self.buffered_rows
            )
            self.rows += self.buffered_rows
            self.buffered, self.buffered_rows = [], 0


class StagedWriter:
    """One task's files under ``staged`` (a directory of the table at ``table``): a file per
    (kind, date) it has rows of, written as rows arrive. ``close`` writes what is buffered
    and returns the task's output rows (``STAGED_NAMES``)."""

    def __init__(self, table: Path, staged: Path, row_group_rows: int = ROW_GROUP_ROWS) -> None:
        self._table = table
        self._staged = staged
        self._row_group_rows = row_group_rows
        self._files: dict[tuple[str, str], _Open] = {}
        self._totals = [0, 0, 0, 0]

    def write(self, routed: pa.RecordBatch) -> None:
        """Add ``routed`` (``schema.ROUTED``) to the task's files."""
        for i, value in enumerate(routed_totals(routed)):
            self._totals[i] += value
        for kind, day, rows in table_layout(routed):
            file = self._files.get((kind, day))
            if file is None:
                directory = self._staged / f"kind={kind}" / f"date={day}"
                directory.mkdir(parents=True, exist_ok=True)
                path = directory / f"part-{uuid.uuid4().hex}.parquet"
                writer = pq.ParquetWriter(
                    path,
                    delta.DATA_SCHEMA,
                    compression=COMPRESSION,
                    use_dictionary=list(DICTIONARY_COLUMNS),
                )
                file = self._files[(kind, day)] = _Open(path, writer)
            file.buffered.append(rows)
            file.buffered_rows += rows.num_rows
            if file.buffered_rows >= self._row_group_rows:
                file.flush()

    def close(self) -> pa.RecordBatch:
        """Finish every file; the output rows: one per file, then the totals."""
        paths: list[str | None] = []
        rows: list[int] = []
        for file in self._files.values():
            file.flush()
            file.writer.close()
            paths.append(file.path.relative_to(self._table).as_posix())
            rows.append(file.rows)
        self._files.clear()
        n = len(paths)
        columns = [
            pa.array([*paths, None], pa.string()),
            pa.array([*rows, 0], pa.int64()),
            *(pa.array([0] * n + [total], pa.int64()) for total in self._totals),
        ]
        return pa.RecordBatch.from_arrays(columns, names=list(STAGED_NAMES))

    def abort(self) -> None:
        """Close the open files after a failure (their rows are never committed)."""
        for file in self._files.values():
            file.writer.close()
        self._files.clear()
