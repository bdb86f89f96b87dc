"""The job's transformations on a real local Spark, compared with ``assertDataFrameEqual``
against hand-written expectations and against the naive matcher on generated data."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.testing import assertDataFrameEqual

from pipeline import delta, transforms
from pipeline.codes import MAX_OUTPUT_ROWS
from pipeline.errors import InputSchemaError
from pipeline.files import TOTALS
from pipeline.subscriptions import build_plan
from tests.pipeline.conftest import Generated, generate, naive_deliveries

T = datetime(2024, 5, 1, 12, tzinfo=UTC)
ISO = "2024-05-01T12:00:00Z"
MESSAGES = (
    "message_id string, topic string, ts string, tenant string, dialect string, headers string"
)


def _stage(
    spark: SparkSession,
    data: Generated,
    messages: DataFrame,
    table: Path,
    max_output_rows: int = MAX_OUTPUT_ROWS,
) -> tuple[DataFrame, dict[str, int]]:
    """The routed rows as the executors staged them under ``table`` (read back with their
    ``kind`` and ``date`` partitions), and the totals the tasks returned."""
    plan, rejects = build_plan(data.subscriptions_table())
    assert rejects == []
    staged = table / "stage"
    written = transforms.stage(
        transforms.normalize_messages(messages),
        spark.sparkContext.broadcast(plan),
        table,
        staged,
        max_output_rows,
    ).collect()
    assert {(table / row["path"]).parent.parent.parent for row in written if row["path"]} == {
        staged
    }
    totals = {name: sum(row[name] for row in written) for name in TOTALS}
    return spark.read.parquet(str(staged)), totals


def _kind(rows: DataFrame, kind: str) -> DataFrame:
    return rows.where(sf.col("kind") == kind)


def test_normalize_marks_every_malformed_row(spark: SparkSession) -> None:
    rows = [
        ("m1", "a.b", ISO, None, None, None),
        ("m2", "a", "1714564800", "t1", "mqtt", '{"k": "v"}'),
        ("m3", "", "2024-05-01 12:00:00", None, "nats", None),
        (None, "a", ISO, None, None, None),
        ("", "a", ISO, None, None, None),
        ("m6", None, ISO, None, None, None),
        ("m7", "a", None, None, None, None),
        ("m8", "a", "yesterday", None, None, None),
        ("m9", "a", "99999999999999", None, None, None),
        ("m10", "a", ISO, "", None, None),
        ("m11", "a", ISO, None, "smtp", None),
        ("m12", "a", ISO, None, None, "[1, 2]"),
    ]
    normalized = transforms.normalize_messages(spark.createDataFrame(rows, MESSAGES))
    expected = spark.createDataFrame(
        [
            ("m1", "a.b", T, None, "default", "amqp", None),
            ("m2", "a", T, None, "t1", "mqtt", '{"k":"v"}'),
            ("m3", "", T, None, "default", "nats", None),
            (None, "a", T, "missing_message_id", "default", "amqp", None),
            ("", "a", T, "missing_message_id", "default", "amqp", None),
            ("m6", None, T, "missing_topic", "default", "amqp", None),
            ("m7", "a", None, "missing_ts", "default", "amqp", None),
            ("m8", "a", None, "invalid_ts", "default", "amqp", None),
            ("m9", "a", None, "invalid_ts", "default", "amqp", None),
            ("m10", "a", T, "empty_tenant", "", "amqp", None),
            ("m11", "a", T, "unknown_dialect", "default", "smtp", None),
            ("m12", "a", T, "invalid_headers", "default", "amqp", None),
        ],
        "message_id string, topic string, ts timestamp, reason string, tenant string, "
        "dialect string, headers string",
    )
    assertDataFrameEqual(normalized.select(*expected.columns), expected)
    raw = {r.message_id: r.raw for r in normalized.collect()}
    assert raw["m1"] is None and raw["m2"] is None
    # to_json leaves null fields out.
    assert json.loads(raw["m8"]) == {"message_id": "m8", "topic": "a", "ts": "yesterday"}
    details = {r.message_id: r.detail for r in normalized.where("reason IS NOT NULL").collect()}
    assert "yesterday" in details["m8"] and "smtp" in details["m11"]


def test_normalize_accepts_timestamp_date_and_number_columns(spark: SparkSession) -> None:
    frame = spark.createDataFrame(
        [(1, "a", T, date(2024, 5, 1), 1714564800, 1714564800.5)],
        "message_id long, topic string, ts timestamp, day date, epoch long, fraction double",
    )
    expected = {"ts": 1714564800.0, "day": 1714521600.0, "epoch": 1714564800.0}
    expected["fraction"] = 1714564800.5
    for column, seconds in expected.items():
        normalized = transforms.normalize_messages(
            frame.select("message_id", "topic", sf.col(column).alias("ts"))
        )
        assert normalized.columns == ["message_id", "topic", "ts", "reason", "detail", "raw"]
        row = normalized.select(
            "message_id", "reason", sf.col("ts").cast("double").alias("seconds")
        ).first()
        assert row is not None
        assert (row.message_id, row.reason, row.seconds) == ("1", None, seconds)


def test_invalid_utf8_is_refused_before_reaching_python(spark: SparkSession) -> None:
    frame = spark.createDataFrame(
        [("m1", bytearray(b"a.b"), ISO), ("m2", bytearray(b"a.\xff"), ISO)],
        "message_id string, topic binary, ts string",
    )
    rows = {
        r.message_id: (r.reason, r.topic) for r in transforms.normalize_messages(frame).collect()
    }
    # The rejected row's text is made readable (U+FFFD) for rejects/.
    assert rows == {"m1": (None, "a.b"), "m2": ("invalid_utf8", "a.\ufffd")}


def test_missing_or_unusable_columns_fail_the_whole_input(spark: SparkSession) -> None:
    with pytest.raises(InputSchemaError, match="no ts column") as missing:
        transforms.normalize_messages(
            spark.createDataFrame([("m", "a")], "message_id string, topic string")
        )
    assert missing.value.code == "missing_column"
    frame = spark.createDataFrame(
        [("m", ["a"], ISO)], "message_id string, topic array<string>, ts string"
    )
    with pytest.raises(InputSchemaError) as unusable:
        transforms.normalize_messages(frame)
    assert unusable.value.code == "invalid_column_type"


def test_hand_written_routing_into_the_three_tables(spark: SparkSession, tmp_path: Path) -> None:
    data = Generated(
        subscriptions=[
            (1, "default", "alice", "stock.*.msft"),
            (2, "default", "bob", "stock.#"),
            (3, "other", "carol", "#"),
        ],
        messages=[],
    )
    messages = spark.createDataFrame(
        [
            ("m1", "stock.nasdaq.msft", "2024-05-01T23:59:59Z"),
            ("m2", "stock", "2024-05-02T00:00:00Z"),
            ("m3", "weather", ISO),
            ("m4", "x" * 300, ISO),
            (None, "stock", ISO),
        ],
        "message_id string, topic string, ts string",
    )
    rows, totals = _stage(spark, data, messages, tmp_path)
    assert rows.columns == [*delta.DATA_SCHEMA.names, "kind", "date"]
    assertDataFrameEqual(
        _kind(rows, "deliveries").select(
            "message_id", "subscription_id", "subscriber", "tenant", "topic", "ts", "date"
        ),
        spark.createDataFrame(
            [
                (
                    "m1",
                    1,
                    "alice",
                    "default",
                    "stock.nasdaq.msft",
                    datetime(2024, 5, 1, 23, 59, 59, tzinfo=UTC),
                    date(2024, 5, 1),
                ),
                (
                    "m1",
                    2,
                    "bob",
                    "default",
                    "stock.nasdaq.msft",
                    datetime(2024, 5, 1, 23, 59, 59, tzinfo=UTC),
                    date(2024, 5, 1),
                ),
                (
                    "m2",
                    2,
                    "bob",
                    "default",
                    "stock",
                    datetime(2024, 5, 2, tzinfo=UTC),
                    date(2024, 5, 2),
                ),
            ],
            "message_id string, subscription_id long, subscriber string, tenant string, "
            "topic string, ts timestamp, date date",
        ),
    )
    assertDataFrameEqual(
        _kind(rows, "unmatched").select("message_id", "tenant", "topic", "ts", "date"),
        spark.createDataFrame(
            [("m3", "default", "weather", datetime(2024, 5, 1, 12, tzinfo=UTC), date(2024, 5, 1))],
            "message_id string, tenant string, topic string, ts timestamp, date date",
        ),
    )
    assertDataFrameEqual(
        _kind(rows, "rejects").select("message_id", "reason", "source"),
        spark.createDataFrame(
            [("m4", "topic_too_long", "messages"), (None, "missing_message_id", "messages")],
            "message_id string, reason string, source string",
        ),
    )
    assert totals == {"deliveries": 3, "matched": 2, "unmatched": 1, "rejected": 2}


@pytest.mark.parametrize("max_output_rows", [65_536, 7])
def test_deliveries_equal_the_naive_matcher(
    spark: SparkSession, tmp_path: Path, max_output_rows: int
) -> None:
    data = generate(subscriptions=120, messages=800, seed=3, tenants=("t1", "t2"))
    messages = spark.createDataFrame(
        [(m, tenant, topic, ISO) for m, tenant, topic in data.messages],
        "message_id string, tenant string, topic string, ts string",
    ).repartition(3)
    rows, _ = _stage(spark, data, messages, tmp_path, max_output_rows)
    expected = spark.createDataFrame(
        sorted(naive_deliveries(data)),
        "message_id string, subscription_id long, subscriber string, tenant string",
    )
    assertDataFrameEqual(_kind(rows, "deliveries").select(*expected.columns), expected)
    matched = {row[0] for row in naive_deliveries(data)}
    unmatched = {r.message_id for r in _kind(rows, "unmatched").select("message_id").collect()}
    assert unmatched == {m for m, _, _ in data.messages} - matched
