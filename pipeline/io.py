"""The job's edges: reading messages and subscriptions, writing its tables and summary.

Every output is written with ``overwrite`` into its own directory under the job's output
directory, so running a job again replaces its previous output and never adds to it; other
files in that directory are left alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from pipeline.errors import MissingColumnError
from pipeline.schema import CORRUPT_COLUMN, JSON_MESSAGES, REJECT_SCHEMA, SUBSCRIPTIONS_SOURCE
from pipeline.subscriptions import REQUIRED_COLUMNS, SubscriptionReject
from store import Database
from store.arrow import subscriptions_table

JSON_SUFFIXES: Final = (".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz", ".ndjson.gz")
#: What a job writes under its output directory (and nothing else).
DELIVERIES: Final = "deliveries"
UNMATCHED: Final = "unmatched"
REJECTS: Final = "rejects"
SUMMARY: Final = "summary.json"


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


def store_subscriptions(database_url: str) -> pa.Table:
    """Every subscription in the store at ``database_url``, read in one snapshot (the
    ``topicstore export`` layout); ``NoSchemaError`` for a store never migrated (it is
    not created empty)."""
    db = Database(database_url, create=False)
    try:
        db.require_schema()
        return subscriptions_table(db)
    finally:
        db.dispose()


def _check_subscription_columns(table: pa.Table, source: str) -> None:
    missing = [name for name in REQUIRED_COLUMNS if name not in table.column_names]
    if missing:
        raise MissingColumnError(f"subscriptions in {source} have no {', '.join(missing)} column")


def subscription_rejects(spark: SparkSession, rejects: list[SubscriptionReject]) -> DataFrame:
    """Rejected subscription rows in the ``REJECT_SCHEMA`` layout."""
    rows = [
        (
            None,
            r.subscription_id,
            None,
            r.pattern,
            None,
            r.reason,
            r.detail,
            r.raw,
            SUBSCRIPTIONS_SOURCE,
        )
        for r in rejects
    ]
    return spark.createDataFrame(rows, REJECT_SCHEMA)


#: Parquet writer options of every table. Message ids are unique: a dictionary for them
#: never pays (the writer builds one per column chunk, then falls back to plain), and
#: building it was 8% of the JVM's samples on a 10M-message route.
WRITE_OPTIONS: Final = {"parquet.enable.dictionary#message_id": "false"}


def write_table(frame: DataFrame, path: Path, partition_by: str) -> None:
    """Replace the table at ``path`` with ``frame``, hive-partitioned by one column."""
    frame.write.mode("overwrite").partitionBy(partition_by).options(**WRITE_OPTIONS).parquet(
        str(path)
    )


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    """Write the run summary atomically (a reader never sees half a file)."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    partial.replace(path)
