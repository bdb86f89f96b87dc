"""The routed table: one Delta Lake table (written through ``deltalake``, delta-rs) holding
every output of a route, batch or stream: deliveries, unmatched messages and rejects, told
apart by the partition column ``kind`` and partitioned by ``date`` (the UTC day of ``ts``).

Why one table and not three: a Delta commit is atomic per table, so one table makes each
route or micro-batch one commit, visible whole or not at all, to every reader at once (the
fan-out queries read deliveries and unmatched together and never see one without the
other).

How data gets in (``stage`` then ``commit``): Spark's executors write Parquet files into a
directory of their own under the table (``stage``: a fresh name per write, and a fresh file
name per task attempt, ``pipeline.files``); the driver then commits the files the
successful tasks named to the log in one transaction (``commit``). Files no commit names
are invisible to every Delta reader; a crash before the commit leaves them behind, and
``vacuum`` removes them.

Idempotency: a commit may carry an application transaction (``app_id``, ``version``); a
commit whose version is not above the table's recorded one for that app is skipped. A
stream uses its checkpoint's id and the micro-batch id, so a retried batch is never
committed twice. The check and the commit are two steps: one writer per ``app_id`` (Spark
runs one query per checkpoint) is the invariant that makes that safe.

Costs: ``commit`` reads each staged file's Parquet footer (one small read per file) and
appends one JSON file to ``_delta_log/``; delta-rs writes a checkpoint every 100 commits.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from pipeline.errors import MissingDeliveriesError, PipelineError, UnknownVersionError

#: Values of the ``kind`` partition.
DELIVERIES: Final = "deliveries"
UNMATCHED: Final = "unmatched"
REJECTS: Final = "rejects"
KINDS: Final = (DELIVERIES, UNMATCHED, REJECTS)
PARTITIONS: Final = ("kind", "date")
#: Spark's (and Hive's) directory name for a null partition value.
NULL_PARTITION: Final = "__HIVE_DEFAULT_PARTITION__"
#: The columns stored in the data files, in order; ``kind`` and ``date`` live in the paths
#: and the log. Deliveries fill message_id..ts; unmatched rows leave subscription_id and
#: subscriber null; rejects fill reason, detail, raw and source (messages, subscriptions).
DATA_SCHEMA: Final = pa.schema(
    [
        ("message_id", pa.string()),
        ("subscription_id", pa.int64()),
        ("subscriber", pa.string()),
        ("tenant", pa.string()),
        ("topic", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("pattern", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("raw", pa.string()),
        ("source", pa.string()),
    ]
)
SCHEMA: Final = pa.schema([*DATA_SCHEMA, ("kind", pa.string()), ("date", pa.date32())])
#: Keys of the commit metadata this package writes (beside delta-rs' own).
META_PREFIX: Final = "topicstore."


class DeltaTableError(PipelineError):
    """The routed table cannot be read or written as asked."""


def is_table(path: Path) -> bool:
    """Whether ``path`` holds a Delta table."""
    from deltalake import DeltaTable

    return (path / "_delta_log").is_dir() and DeltaTable.is_deltatable(str(path))


def locate_table(path: Path) -> Path:
    """The routed table at ``path``: a route output, or a directory under it (the
    ``deliveries/`` a user may name out of habit)."""
    for candidate in (path, path.parent):
        if (candidate / "_delta_log").is_dir():
            return candidate
    raise MissingDeliveriesError(
        f"{path} is not a routed table (no _delta_log/): give a `topicstore route --out` directory"
    )


def stage(table: Path, label: str) -> Path:
    """A new directory under ``table`` for one write's files, created (so that a write in
    progress shows as soon as it starts)."""
    staged = table / f"{label}-{uuid.uuid4().hex[:12]}"
    staged.mkdir(parents=True)
    return staged


def _partition_values(relative: Path) -> dict[str, str | None]:
    values: dict[str, str | None] = {}
    for part in relative.parts[1:-1]:
        name, sep, value = part.partition("=")
        if sep and name in PARTITIONS:
            values[name] = None if value == NULL_PARTITION else value
    missing = [name for name in PARTITIONS if name not in values]
    if missing:
        raise DeltaTableError("bad_staged_file", f"{relative} has no {', '.join(missing)}=")
    return values


def _add_actions(table: Path, files: Sequence[Path]) -> tuple[list[Any], int]:
    """An ``AddAction`` per Parquet file of ``files`` (relative to ``table``) and their
    rows."""
    from deltalake.transaction import AddAction

    actions = []
    rows = 0
    for relative in sorted(files):
        file = table / relative
        meta = pq.read_metadata(file)
        _check_schema(meta.schema.to_arrow_schema(), file)
        stat = file.stat()
        rows += meta.num_rows
        actions.append(
            AddAction(
                relative.as_posix(),
                stat.st_size,
                _partition_values(relative),
                int(stat.st_mtime * 1000),
                True,
                json.dumps({"numRecords": meta.num_rows}),
            )
        )
    return actions, rows


def _check_schema(found: pa.Schema, file: Path) -> None:
    """A staged file must hold exactly the table's data columns (a writer that drifted
    would otherwise commit files no reader can merge)."""
    got = pa.schema([(f.name, f.type) for f in found])
    if got != DATA_SCHEMA:
        raise DeltaTableError(
            "schema_mismatch", f"{file} has columns {got}, the table {DATA_SCHEMA}"
        )


def write_rows(staged: Path, kind: str, rows: pa.Table, name: str) -> list[Path]:
    """Write ``rows`` (``DATA_SCHEMA`` plus ``date``) into ``staged`` as the executors do:
    one file per date under ``kind=KIND/date=DATE/``; returns the files. For the few rows the
    driver makes itself (rejected subscriptions), where a Spark job would cost more than the
    rows."""
    written = []
    dates = rows.column("date").to_pylist()
    for day in sorted(set(dates), key=lambda d: (d is None, d)):
        mask = pa.array([d == day for d in dates])
        part = "date=" + (NULL_PARTITION if day is None else day.isoformat())
        directory = staged / f"kind={kind}" / part
        directory.mkdir(parents=True, exist_ok=True)
        pq.write_table(
            rows.filter(mask).select(DATA_SCHEMA.names).cast(DATA_SCHEMA), directory / name
        )
        written.append(directory / name)
    return written


def committed_version(table: Path, app_id: str) -> int | None:
    """The newest version ``app_id`` committed to ``table`` (None: none, or no table)."""
    from deltalake import DeltaTable

    if not is_table(table):
        return None
    return DeltaTable(str(table)).transaction_version(app_id)


def commit(
    table: Path,
    files: Sequence[Path],
    *,
    replace: bool = False,
    txn: tuple[str, int] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> tuple[int | None, int]:
    """Commit ``files`` (Parquet files under ``table``, relative to it) to ``table``
    (created when missing) in one transaction: appended, or replacing every row
    (``replace``; earlier versions stay readable until vacuumed). Returns the new table
    version, or None when ``txn`` (app id, version) was committed already (then nothing is
    written), and the rows.

    ``metadata`` goes into the commit as ``topicstore.KEY`` entries (``history``)."""
    from deltalake import CommitProperties, DeltaTable, Schema, Transaction
    from deltalake.transaction import create_table_with_add_actions

    actions, rows = _add_actions(table, files)
    properties = CommitProperties(
        custom_metadata={f"{META_PREFIX}{k}": v for k, v in (metadata or {}).items()},
        app_transactions=[Transaction(*txn)] if txn is not None else None,
    )
    if not is_table(table):  # the first commit creates the table: it is version 0
        create_table_with_add_actions(
            str(table),
            Schema.from_arrow(SCHEMA),
            actions,
            mode="append",
            partition_by=list(PARTITIONS),
            commit_properties=properties,
        )
        return 0, rows
    delta = DeltaTable(str(table))
    if txn is not None:
        done = delta.transaction_version(txn[0])
        if done is not None and done >= txn[1]:
            return None, rows
    delta.create_write_transaction(
        actions,
        "overwrite" if replace else "append",
        SCHEMA,
        list(PARTITIONS),
        commit_properties=properties,
    )
    delta.update_incremental()  # the handle still shows the version it read
    return delta.version(), rows


def dataset(table: Path, version: int | None = None) -> ds.Dataset:
    """The committed rows of ``table`` (as of ``version``, default the newest) as an Arrow
    dataset: only files some commit named, so a write in progress is never seen."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    try:
        delta = DeltaTable(str(table))
        # A version past the newest is refused here: delta-rs panics on some of them.
        if version is not None and version != delta.version():
            if version > delta.version():
                raise UnknownVersionError(
                    f"{table} has no version {version}: its newest is {delta.version()}"
                )
            delta = DeltaTable(str(table), version=version)
    except DeltaError as e:
        raise UnknownVersionError(f"{table} has no version {version}: {e}") from e
    return delta.to_pyarrow_dataset()


def history(table: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The table's commits, newest first, with this package's metadata keys unprefixed."""
    from deltalake import DeltaTable

    out = []
    for entry in DeltaTable(str(table)).history(limit):
        ours = {
            k.removeprefix(META_PREFIX): v for k, v in entry.items() if k.startswith(META_PREFIX)
        }
        out.append({"version": entry.get("version"), "operation": entry.get("operation"), **ours})
    return out
