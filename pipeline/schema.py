"""Spark column layouts shared by the Spark side and the Arrow side of the routing job.

One wide routed layout (``ROUTED``, its ``output`` column holding a ``pipeline.codes`` output
code) lets the matcher run once per message and the three tables be split off afterwards.
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

HEADERS_TYPE: Final = MapType(StringType(), StringType())
HEADERS_DDL: Final = "map<string,string>"

#: What the Python routing function receives (``transforms.normalize_messages``). ``tenant``,
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
#: What a staging task returns (``pipeline.files``): a row per file it wrote, then its
#: totals.
STAGED: Final = StructType(
    [
        StructField("path", StringType()),
        StructField("rows", LongType(), nullable=False),
        StructField("deliveries", LongType(), nullable=False),
        StructField("matched", LongType(), nullable=False),
        StructField("unmatched", LongType(), nullable=False),
        StructField("rejected", LongType(), nullable=False),
    ]
)
#: ``source`` of a reject row: which input it came from.
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
