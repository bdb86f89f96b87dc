"""Column layouts shared by the Spark side and the Arrow side of the routing job, the reason
codes of rejected rows, and the bounds the job enforces.

A routed row is one of three outputs, told apart by ``output`` (a small int, cheap to carry
through Arrow): a delivery (one per message x matching subscription), an unmatched message,
or a rejected message. One wide layout lets the matcher run once per message and the three
tables be split off afterwards.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql.types import (
    BooleanType,
    ByteType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

# -- bounds ---------------------------------------------------------------------------------

#: Messages per Arrow batch sent to a Python worker
#: (``spark.sql.execution.arrow.maxRecordsPerBatch``, Spark's default): a batch and its
#: results stay a few MB; 25,000 and 50,000 measured no faster on the benchmark.
ARROW_BATCH_ROWS: Final = 10_000
#: Deliveries per Arrow batch sent back. A message can match every subscription, so output
#: is cut by rows rather than by messages: a batch holds at most this many deliveries plus
#: one message's fan-out (and its slice's unmatched and rejected rows).
MAX_OUTPUT_ROWS: Final = 65_536

# -- output codes ---------------------------------------------------------------------------

DELIVERY: Final = 0
UNMATCHED: Final = 1
REJECTED: Final = 2

# -- reason codes of rejected message rows (the matcher adds its own: topic_too_long, ...) --

MALFORMED_ROW: Final = "malformed_row"
MISSING_MESSAGE_ID: Final = "missing_message_id"
MISSING_TOPIC: Final = "missing_topic"
MISSING_TS: Final = "missing_ts"
INVALID_TS: Final = "invalid_ts"
EMPTY_TENANT: Final = "empty_tenant"
UNKNOWN_DIALECT: Final = "unknown_dialect"
INVALID_HEADERS: Final = "invalid_headers"
INVALID_UTF8: Final = "invalid_utf8"  # the matcher's code for the same rule
# ... and of rejected subscription rows (besides the store's and the matcher's codes)
MISSING_FIELD: Final = "missing_field"
DUPLICATE_ID: Final = "duplicate_id"

#: Message dialects; ``headers`` is a subscription kind, not a topic syntax.
MESSAGE_DIALECTS: Final = ("amqp", "mqtt", "nats")
DEFAULT_DIALECT: Final = "amqp"

HEADERS_TYPE: Final = MapType(StringType(), StringType())
HEADERS_DDL: Final = "map<string,string>"

#: What the Python routing function receives (``routing.normalize_messages``). ``tenant``,
#: ``dialect`` and ``headers`` are there only when the input has them: every column costs a
#: conversion per row each way, and their defaults are applied on the Python side.
ROUTE_INPUT: Final = StructType(
    [
        StructField("message_id", StringType()),
        StructField("topic", StringType()),
        StructField("ts", TimestampType()),
        StructField("reason", StringType()),
        StructField("detail", StringType()),
        StructField("raw", StringType()),
    ]
)
OPTIONAL_INPUT: Final = StructType(
    [
        StructField("tenant", StringType()),
        StructField("dialect", StringType()),
        # JSON text, not a map: Spark's Arrow writer is slow on maps (7x the cost of the
        # other columns together on 1M rows) and pathological on large batches.
        StructField("headers", StringType()),
    ]
)

#: What it returns: one row per delivery, unmatched message or rejected message.
ROUTED: Final = StructType(
    [
        StructField("output", ByteType(), nullable=False),
        StructField("message_id", StringType()),
        StructField("subscription_id", LongType()),
        StructField("subscriber", StringType()),
        StructField("tenant", StringType()),
        StructField("topic", StringType()),
        StructField("ts", TimestampType()),
        # True on a message's first delivery: counts matched messages without a distinct.
        StructField("first", BooleanType()),
        StructField("reason", StringType()),
        StructField("detail", StringType()),
        StructField("raw", StringType()),
    ]
)

ROUTED_NAMES: Final = tuple(ROUTED.fieldNames())
DELIVERY_COLUMNS: Final = ("message_id", "subscription_id", "subscriber", "tenant", "topic", "ts")
UNMATCHED_COLUMNS: Final = ("message_id", "tenant", "topic", "ts")
#: Both inputs' rejects share one table, partitioned by ``source``.
REJECT_SCHEMA: Final = StructType(
    [
        StructField("message_id", StringType()),
        StructField("subscription_id", LongType()),
        StructField("topic", StringType()),
        StructField("pattern", StringType()),
        StructField("ts", TimestampType()),
        StructField("reason", StringType()),
        StructField("detail", StringType()),
        StructField("raw", StringType()),
        StructField("source", StringType()),
    ]
)
MESSAGES_SOURCE: Final = "messages"
SUBSCRIPTIONS_SOURCE: Final = "subscriptions"

#: Explicit schema for JSON lines: no inference pass over the data, and a line that does not
#: parse lands in ``_corrupt_record`` instead of failing the read.
CORRUPT_COLUMN: Final = "_corrupt_record"
JSON_MESSAGES: Final = StructType(
    [
        StructField("message_id", StringType()),
        StructField("topic", StringType()),
        StructField("ts", StringType()),
        StructField("tenant", StringType()),
        StructField("dialect", StringType()),
        StructField("headers", HEADERS_TYPE),
        StructField(CORRUPT_COLUMN, StringType()),
    ]
)
