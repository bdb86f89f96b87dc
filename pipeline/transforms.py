"""The routing job's transformations: pure functions, DataFrame in, DataFrame out.

``normalize_messages`` brings any accepted message layout to ``schema.ROUTE_INPUT`` and marks
rows that are malformed before any matching (missing fields, bad timestamps, JSON lines that
do not parse); ``route`` matches on the executors with our own engines (``mapInArrow``);
``stage`` has the executors write them as the routed table's files (``pipeline.files``).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator
from functools import reduce
from pathlib import Path

import pyarrow as pa
from pyspark import Broadcast
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    MapType,
    NumericType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pipeline.changes import PlanChanges
from pipeline.codes import (
    DEFAULT_DIALECT,
    EMPTY_TENANT,
    INVALID_HEADERS,
    INVALID_TS,
    INVALID_UTF8,
    MALFORMED_ROW,
    MAX_OUTPUT_ROWS,
    MESSAGE_DIALECTS,
    MISSING_MESSAGE_ID,
    MISSING_TOPIC,
    MISSING_TS,
    UNKNOWN_DIALECT,
)
from pipeline.errors import InputSchemaError, MissingColumnError
from pipeline.executor import router_for
from pipeline.files import StagedWriter
from pipeline.schema import (
    CORRUPT_COLUMN,
    HEADERS_DDL,
    HEADERS_TYPE,
    OPTIONAL_INPUT,
    ROUTE_INPUT,
    ROUTED,
    STAGED,
)
from pipeline.subscriptions import SubscriptionPlan
from store import DEFAULT_TENANT

#: Seconds-since-epoch values accepted as ``ts``: years 1 to 9999, what a timestamp holds.
MIN_EPOCH_S = -62_135_596_800
MAX_EPOCH_S = 253_402_300_799
_NUMBER = r"^\s*-?[0-9]+(\.[0-9]+)?\s*$"


def _text(column: Column, name: str, data_type: DataType) -> Column:
    if isinstance(data_type, StringType):
        return column
    if isinstance(data_type, NumericType | BinaryType | BooleanType):
        return column.cast("string")
    raise InputSchemaError(
        "invalid_column_type", f"column {name!r} must be text or a number, not {data_type}"
    )


def _epoch(seconds: Column) -> Column:
    return sf.when(seconds.between(MIN_EPOCH_S, MAX_EPOCH_S), sf.timestamp_seconds(seconds))


def _timestamp(column: Column, data_type: DataType) -> Column:
    """``ts`` as a timestamp: a timestamp or date column, seconds since the epoch, or text
    (ISO-8601, or a number of seconds). Unparseable values become null (``invalid_ts``)."""
    if isinstance(data_type, TimestampType):
        return column
    if isinstance(data_type, TimestampNTZType | DateType):
        return column.cast("timestamp")
    if isinstance(data_type, NumericType):
        return _epoch(column.cast("double"))
    if isinstance(data_type, StringType):
        return sf.when(column.rlike(_NUMBER), _epoch(sf.trim(column).try_cast("double"))).otherwise(
            column.try_cast("timestamp")
        )
    raise InputSchemaError(
        "invalid_column_type", f"column 'ts' must be a timestamp, a number or text, not {data_type}"
    )


def _headers(column: Column, data_type: DataType) -> Column:
    """``headers`` as map<string,string>: a map, a struct, or a JSON object in text."""
    if isinstance(data_type, MapType):
        return column.try_cast(HEADERS_TYPE)
    if isinstance(data_type, StructType):
        return sf.from_json(sf.to_json(column), HEADERS_DDL)
    if isinstance(data_type, StringType):
        return sf.from_json(column, HEADERS_DDL)
    raise InputSchemaError(
        "invalid_column_type", f"column 'headers' must be a map or JSON text, not {data_type}"
    )


def normalize_messages(messages: DataFrame, keep: tuple[str, ...] = ()) -> DataFrame:
    """``messages`` in the ``ROUTE_INPUT`` layout, every malformed row marked with a reason
    (and the ``keep`` columns after it, as they are: a stream's file times).

    Required columns: ``message_id``, ``topic``, ``ts``. Optional, and passed on only when
    present: ``tenant`` (default ``default``), ``dialect`` (``amqp``, ``mqtt`` or ``nats``;
    default ``amqp``) and ``headers`` (passed on as JSON text). A missing required column is
    an ``InputSchemaError``: that is the whole file, not a row. ``raw`` keeps the original
    row (as JSON, or the line that did not parse) of rows rejected here; the text of those
    rows is made valid UTF-8, so that every later step can read it.
    """
    types = {field.name: field.dataType for field in messages.schema.fields}
    missing = [name for name in ("message_id", "topic", "ts") if name not in types]
    if missing:
        raise MissingColumnError(
            f"messages have no {', '.join(missing)} column (need message_id, topic, ts)"
        )
    originals = [
        sf.col(name) for name in messages.columns if name != CORRUPT_COLUMN and name not in keep
    ]
    message_id = _text(sf.col("message_id"), "message_id", types["message_id"])
    topic = _text(sf.col("topic"), "topic", types["topic"])
    ts_in = sf.col("ts")
    ts = _timestamp(ts_in, types["ts"])
    optional: dict[str, Column] = {}
    checks: list[tuple[Column, str, Column]] = []
    if CORRUPT_COLUMN in types:
        checks.append(
            (
                sf.col(CORRUPT_COLUMN).isNotNull(),
                MALFORMED_ROW,
                sf.lit("the line is not a JSON object of message fields"),
            )
        )
    checks += [
        (
            message_id.isNull() | (message_id == ""),
            MISSING_MESSAGE_ID,
            sf.lit("message_id is missing or empty"),
        ),
        (topic.isNull(), MISSING_TOPIC, sf.lit("topic is missing")),
        (ts_in.isNull(), MISSING_TS, sf.lit("ts is missing")),
        (
            ts.isNull(),
            INVALID_TS,
            sf.format_string(
                "ts %s is neither a timestamp nor seconds since the epoch (years 1-9999)",
                ts_in.cast("string"),
            ),
        ),
    ]
    if "tenant" in types:
        tenant = _text(sf.col("tenant"), "tenant", types["tenant"])
        optional["tenant"] = sf.coalesce(tenant, sf.lit(DEFAULT_TENANT))
        checks.append(
            (tenant == "", EMPTY_TENANT, sf.lit("tenant is empty (leave it out for the default)"))
        )
    if "dialect" in types:
        dialect = sf.coalesce(
            _text(sf.col("dialect"), "dialect", types["dialect"]), sf.lit(DEFAULT_DIALECT)
        )
        optional["dialect"] = dialect
        checks.append(
            (
                ~dialect.isin(*MESSAGE_DIALECTS),
                UNKNOWN_DIALECT,
                sf.format_string(
                    f"dialect %s is not one of {', '.join(MESSAGE_DIALECTS)}", dialect
                ),
            )
        )
    if "headers" in types:
        headers = _headers(sf.col("headers"), types["headers"])
        optional["headers"] = sf.to_json(headers)
        checks.append(
            (
                sf.col("headers").isNotNull() & headers.isNull(),
                INVALID_HEADERS,
                sf.lit("headers must be an object whose values are text"),
            )
        )
    # Spark strings may hold any bytes (a binary column cast to text, a Parquet writer that
    # did not check); Python could not even read such a row, so it is refused here.
    texts = [message_id, topic, *optional.values()]
    checks.append(
        (
            reduce(operator.or_, (~sf.is_valid_utf8(text) for text in texts)),
            INVALID_UTF8,
            sf.lit("message_id, topic, tenant, dialect and headers must be valid UTF-8"),
        )
    )
    reason: Column = sf.lit(None).cast("string")
    detail: Column = sf.lit(None).cast("string")
    for condition, code, text in reversed(checks):
        # Built inside out, so that the first failing check names the row.
        reason = sf.when(condition, sf.lit(code)).otherwise(reason)
        detail = sf.when(condition, text).otherwise(detail)
    original = sf.to_json(sf.struct(*originals))
    if CORRUPT_COLUMN in types:
        original = sf.coalesce(sf.col(CORRUPT_COLUMN), original)

    def shown(text: Column) -> Column:
        """Text of a rejected row with invalid bytes replaced: it is only shown."""
        return sf.when(reason.isNull(), text).otherwise(sf.make_valid_utf8(text))

    return messages.select(
        shown(message_id).alias("message_id"),
        shown(topic).alias("topic"),
        ts.alias("ts"),
        reason.alias("reason"),
        sf.make_valid_utf8(detail).alias("detail"),
        sf.when(reason.isNotNull(), sf.make_valid_utf8(original)).alias("raw"),
        *(shown(column).alias(name) for name, column in optional.items()),
        *keep,
    )


def _routed_batches(
    plan: Broadcast[SubscriptionPlan],
    changes: Broadcast[PlanChanges] | None,
    max_output_rows: int,
    batches: Iterable[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """On an executor: ``batches`` of messages routed by this worker's router (built from
    the broadcast ``plan`` once, ``router_for``; a stream's ``changes`` applied on top)."""
    router = router_for(plan.value, None if changes is None else changes.value)
    for batch in batches:
        yield from router.route_batch(batch, max_output_rows)


def _route_input(messages: DataFrame) -> DataFrame:
    present = set(messages.columns)
    return messages.select(
        *(
            sf.col(f.name).cast(f.dataType)
            for f in (*ROUTE_INPUT.fields, *OPTIONAL_INPUT.fields)
            if f.name in present
        )
    )


def route(
    messages: DataFrame,
    plan: Broadcast[SubscriptionPlan],
    max_output_rows: int = MAX_OUTPUT_ROWS,
    *,
    changes: Broadcast[PlanChanges] | None = None,
) -> DataFrame:
    """Every normalized message routed on the executors: one ``ROUTED`` row per delivery,
    per unmatched message and per rejected message.

    Each Python worker builds its engines from the broadcast ``plan`` once (``router_for``)
    and routes Arrow batches of ``spark.sql.execution.arrow.maxRecordsPerBatch`` messages;
    a stream's ``changes`` since the plan are applied on top (``pipeline.changes``).
    """

    def route_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return _routed_batches(plan, changes, max_output_rows, batches)

    return _route_input(messages).mapInArrow(route_partition, ROUTED)


def stage(
    messages: DataFrame,
    plan: Broadcast[SubscriptionPlan],
    table: Path,
    staged: Path,
    max_output_rows: int = MAX_OUTPUT_ROWS,
    *,
    changes: Broadcast[PlanChanges] | None = None,
) -> DataFrame:
    """``route``'s rows written by the executors themselves as the routed table's Parquet
    files under ``staged`` (a directory of ``table``; ``pipeline.files``): the result has
    one row per file written and one of totals per task (``STAGED``), not the routed rows.
    Nothing is written until an action runs it; the caller commits the files it returns."""

    def stage_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        writer = StagedWriter(table, staged)
        try:
            for routed in _routed_batches(plan, changes, max_output_rows, batches):
                writer.write(routed)
        except BaseException:
            writer.abort()
            raise
        yield writer.close()

    return _route_input(messages).mapInArrow(stage_partition, STAGED)
