"""The job's edges: reading messages and subscriptions, writing its rows and summary.

Rows are written as Parquet into a staging directory of the routed table
(``pipeline.delta``), which the driver then commits; the summary is written beside the
table's log, atomically.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from pipeline import delta
from pipeline.errors import MissingColumnError
from pipeline.schema import CORRUPT_COLUMN, JSON_MESSAGES, SUBSCRIPTIONS_SOURCE
from pipeline.subscriptions import REQUIRED_COLUMNS, SubscriptionReject
from store import Database
from store.arrow import subscriptions_snapshot
from store.records import Change
from store.routing_reads import RoutingReads

JSON_SUFFIXES: Final = (".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz", ".ndjson.gz")
#: The last run's summary, in the table's directory (a leading ``_``: Delta readers and
#: ``vacuum`` leave it alone).
SUMMARY: Final = "_summary.json"
#: Change-log rows read per query (``store_changes``).
CHANGES_PAGE: Final = 10_000


def is_json(path: str) -> bool:
    """JSON lines by suffix; a local directory is JSON when its data files are."""
    if path.endswith(JSON_SUFFIXES):
        return True
    local = Path(path)
    if local.is_dir():
        files = (
            p.name for p in local.rglob("*") if p.is_file() and not p.name.startswith((".", "_"))
        )
        return any(name.endswith(JSON_SUFFIXES) for name in files)
    return False


def read_messages(spark: SparkSession, path: str) -> DataFrame:
    """Messages from Parquet or JSON lines. JSON is read with a fixed schema (no inference
    pass) in permissive mode: a line that does not parse becomes a row with only
    ``_corrupt_record`` set, which the job rejects as ``malformed_row``."""
    if is_json(path):
        return (
            spark.read.schema(JSON_MESSAGES)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT_COLUMN)
            .json(path)
        )
    return spark.read.parquet(path)


def read_subscriptions(spark: SparkSession, path: str) -> pa.Table:
    """A subscriptions Parquet file (the ``topicstore export`` layout), on the driver: read
    directly when it is local (a Spark job costs ~0.3 s more), through Spark otherwise."""
    table = spark.read.parquet(path).toArrow() if "://" in path else pq.read_table(path)
    _check_subscription_columns(table, path)
    return table


def store_subscriptions(database_url: str) -> tuple[pa.Table, int]:
    """Every subscription in the store at ``database_url`` and the change-log sequence
    number they reflect, read in one snapshot (the ``topicstore export`` layout);
    ``NoSchemaError`` for a store never migrated (it is not created empty)."""
    db = Database(database_url, create=False)
    try:
        db.require_schema()
        return subscriptions_snapshot(db)
    finally:
        db.dispose()


def store_changes(database_url: str, since: int, limit: int) -> list[Change]:
    """The store's changes after seq ``since``, oldest first, at most ``limit``: the change
    log's own read (``RoutingReads.changes_since``, an index range), so a stream ships what
    changed without reading the subscriptions; when nothing has, one query that returns no
    row. The store is opened for the read only (a DuckDB file stays free for its writers in
    between)."""
    db = Database(database_url, create=False)
    found: list[Change] = []
    try:
        with db.read() as session:
            reads = RoutingReads(session)
            while len(found) < limit:
                wanted = min(CHANGES_PAGE, limit - len(found))
                page = reads.changes_since(since, wanted)
                found += page
                if len(page) < wanted:
                    break
                since = page[-1].seq
    finally:
        db.dispose()
    return found


def _check_subscription_columns(table: pa.Table, source: str) -> None:
    missing = [name for name in REQUIRED_COLUMNS if name not in table.column_names]
    if missing:
        raise MissingColumnError(f"subscriptions in {source} have no {', '.join(missing)} column")


def subscription_reject_rows(rejects: list[SubscriptionReject]) -> pa.Table:
    """Rejected subscription rows in the routed table's layout (no ``ts``: no date)."""
    n = len(rejects)
    given: dict[str, list[Any]] = {
        "subscription_id": [r.subscription_id for r in rejects],
        "pattern": [r.pattern for r in rejects],
        "reason": [r.reason for r in rejects],
        "detail": [r.detail for r in rejects],
        "raw": [r.raw for r in rejects],
        "source": [SUBSCRIPTIONS_SOURCE] * n,
    }
    table = pa.table({name: given.get(name, [None] * n) for name in delta.DATA_SCHEMA.names})
    return table.cast(delta.DATA_SCHEMA).append_column("date", pa.nulls(n, pa.date32()))


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    """Write the run summary atomically (a reader never sees half a file)."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    partial.replace(path)
