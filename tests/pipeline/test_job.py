"""The routing job end to end on small generated files: the routed table's three kinds of
rows (read back by delta-rs), the summary, malformed rows as rejects, re-runs that replace
rather than add (the previous run readable as an earlier version), subscriptions from a real
(DuckDB) store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from migrations.runner import upgrade
from pipeline.errors import PipelineError
from pipeline.job import RouteJob, run
from store import Database, NewSubscription, SubscriptionRepository, validate
from tests.pipeline.conftest import generate, naive_deliveries

START = datetime(2024, 5, 1, tzinfo=UTC)
ISO = "2024-05-01T10:00:00Z"
#: (JSON line, message_id or None, reason) of every malformed message row.
MALFORMED = [
    ("{not json", None, "malformed_row"),
    (json.dumps({"topic": "a", "ts": ISO}), None, "missing_message_id"),
    (json.dumps({"message_id": "bad1", "topic": "a"}), "bad1", "missing_ts"),
    (json.dumps({"message_id": "bad2", "topic": "a", "ts": "later"}), "bad2", "invalid_ts"),
    (json.dumps({"message_id": "bad3", "topic": "x" * 300, "ts": ISO}), "bad3", "topic_too_long"),
    (json.dumps({"message_id": "bad4", "topic": "a\x00b", "ts": ISO}), "bad4", "nul_byte"),
    (
        json.dumps({"message_id": "bad5", "topic": "a", "ts": ISO, "dialect": "x"}),
        "bad5",
        "unknown_dialect",
    ),
]


def _table(out: Path, kind: str, version: int | None = None) -> list[dict[str, Any]]:
    """The committed rows of one kind, as delta-rs reads the table."""
    table = DeltaTable(str(out), version=version)
    rows: list[dict[str, Any]] = table.to_pyarrow_table(filters=[("kind", "=", kind)]).to_pylist()
    return rows


def _write_inputs(tmp_path: Path, start: datetime = START) -> tuple[Path, Path, Any]:
    data = generate(subscriptions=80, messages=300, seed=21)
    lines = [
        json.dumps(
            {"message_id": m, "topic": t, "ts": (start + timedelta(minutes=6 * k)).isoformat()}
        )
        for k, (m, _, t) in enumerate(data.messages)
    ]
    messages = tmp_path / "messages.jsonl"
    messages.write_text(
        "\n".join([*lines, *(line for line, _, _ in MALFORMED)]) + "\n", encoding="utf-8"
    )
    subs = data.subscriptions_table()
    bad = pa.table(
        {
            "id": pa.array([1000, 9001], pa.int64()),  # 1000 is a duplicate id
            "tenant": ["default", "default"],
            "subscriber": ["dup", "nul"],
            "pattern": ["a", "a\x00"],
        }
    )
    subscriptions = tmp_path / "subs.parquet"
    pq.write_table(pa.concat_tables([subs, bad]), subscriptions)
    return messages, subscriptions, data


@pytest.mark.slow
def test_job_commits_the_routed_table_and_a_summary(spark: SparkSession, tmp_path: Path) -> None:
    messages, subscriptions, data = _write_inputs(tmp_path)
    out = tmp_path / "out"
    job = RouteJob(messages=str(messages), out=out, subscriptions=str(subscriptions))
    summary = run(spark, job)

    deliveries = _table(out, "deliveries")
    expected = naive_deliveries(data)
    got = {
        (r["message_id"], r["subscription_id"], r["subscriber"], r["tenant"]) for r in deliveries
    }
    assert got == expected and len(deliveries) == len(expected)
    assert {str(r["date"]) for r in deliveries} == {"2024-05-01", "2024-05-02"}
    assert all(str(r["date"]) == r["ts"].date().isoformat() for r in deliveries)  # UTC days

    matched = {m for m, _, _, _ in expected}
    unmatched = {r["message_id"] for r in _table(out, "unmatched")}
    assert unmatched == {m for m, _, _ in data.messages} - matched

    rejects = _table(out, "rejects")
    by_source = {
        source: sorted(
            (
                (r["message_id"], r["subscription_id"], r["reason"])
                for r in rejects
                if r["source"] == source
            ),
            key=str,
        )
        for source in ("messages", "subscriptions")
    }
    assert by_source["messages"] == sorted(
        ((m, None, reason) for _, m, reason in MALFORMED), key=str
    )
    assert by_source["subscriptions"] == [(None, 1000, "duplicate_id"), (None, 9001, "nul_byte")]
    raw = {r["reason"]: r["raw"] for r in rejects}
    assert (
        raw["malformed_row"] == "{not json"
        and json.loads(raw["missing_ts"])["message_id"] == "bad1"
    )

    written = json.loads((out / "_summary.json").read_text(encoding="utf-8"))
    assert written == summary.to_json()
    assert (summary.messages, summary.matched, summary.unmatched, summary.rejected) == (
        len(data.messages) + len(MALFORMED),
        len(matched),
        len(unmatched),
        len(MALFORMED),
    )
    assert summary.deliveries == len(expected)
    assert summary.rejects_by_reason == {reason: 1 for _, _, reason in MALFORMED}
    assert (summary.subscriptions, summary.subscriptions_rejected) == (80, 2)
    assert summary.subscription_rejects_by_reason == {"duplicate_id": 1, "nul_byte": 1}
    assert set(summary.stages_s) == {"plan", "route_and_write", "commit"}
    assert (summary.table_version, summary.change_seq) == (0, None)  # subscriptions from a file

    # Running again replaces every row: nothing is duplicated, and the first run stays
    # readable as the version it committed.
    again = run(spark, job)
    assert (again.messages, again.deliveries) == (summary.messages, summary.deliveries)
    assert again.table_version == 1
    assert sorted(map(str, _table(out, "deliveries"))) == sorted(map(str, deliveries))
    assert len(_table(out, "rejects")) == len(rejects)
    assert len(_table(out, "unmatched")) == len(unmatched)
    assert sorted(map(str, _table(out, "deliveries", version=0))) == sorted(map(str, deliveries))
    assert len(DeltaTable(str(out)).to_pyarrow_table()) == len(
        DeltaTable(str(out), version=0).to_pyarrow_table()
    )


def test_a_task_with_more_days_than_open_writers_still_files_every_row_by_day(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Each task writes at most ``spark.sql.maxConcurrentOutputFileWriters`` (4)
    partitions at once unsorted and Spark sorts the rest: messages of ten days, interleaved,
    all land in their own day, none lost or doubled."""
    data = generate(subscriptions=40, messages=200, seed=5)
    lines = [
        json.dumps(
            {"message_id": m, "topic": t, "ts": (START + timedelta(days=k % 10)).isoformat()}
        )
        for k, (m, _, t) in enumerate(data.messages)
    ]
    messages = tmp_path / "messages.jsonl"
    messages.write_text("\n".join(lines) + "\n", encoding="utf-8")
    subscriptions = tmp_path / "subs.parquet"
    pq.write_table(data.subscriptions_table(), subscriptions)
    out = tmp_path / "out"
    run(spark, RouteJob(messages=str(messages), out=out, subscriptions=str(subscriptions)))
    deliveries = _table(out, "deliveries")
    got = [
        (r["message_id"], r["subscription_id"], r["subscriber"], r["tenant"]) for r in deliveries
    ]
    assert sorted(got) == sorted(naive_deliveries(data))
    assert len({str(r["date"]) for r in deliveries}) == 10
    assert all(str(r["date"]) == r["ts"].date().isoformat() for r in deliveries)
    # Unique message ids are written without a dictionary (``files.DICTIONARY_COLUMNS``); the
    # subscriber column, with few values, keeps one.
    for file in out.glob("route-*/kind=deliveries/date=*/*.parquet"):
        chunk = pq.ParquetFile(file).metadata.row_group(0)
        encodings = {chunk.column(i).path_in_schema: chunk.column(i).encodings for i in range(6)}
        assert not any("DICTIONARY" in e for e in encodings["message_id"]), encodings
        assert any("DICTIONARY" in e for e in encodings["subscriber"]), encodings


def test_kinds_with_no_rows_get_no_files(spark: SparkSession, tmp_path: Path) -> None:
    """Every message matched and none rejected: the table has deliveries only, and the run
    wrote no file for the other kinds."""
    data = generate(subscriptions=40, messages=200, seed=9)
    matched = {m for m, _, _, _ in naive_deliveries(data)}
    kept = [row for row in data.messages if row[0] in matched]
    assert kept
    messages = tmp_path / "messages.parquet"
    pq.write_table(
        pa.table(
            {
                "message_id": [m for m, _, _ in kept],
                "topic": [t for _, _, t in kept],
                "ts": pa.array([START] * len(kept), pa.timestamp("us", tz="UTC")),
            }
        ),
        messages,
    )
    subscriptions = tmp_path / "subs.parquet"
    pq.write_table(data.subscriptions_table(), subscriptions)
    out = tmp_path / "out"
    summary = run(
        spark, RouteJob(messages=str(messages), out=out, subscriptions=str(subscriptions))
    )
    assert (summary.matched, summary.unmatched, summary.rejected) == (len(kept), 0, 0)
    assert {r["message_id"] for r in _table(out, "deliveries")} == matched
    assert _table(out, "unmatched") == [] and _table(out, "rejects") == []
    assert {p.name for p in out.glob("route-*/kind=*")} == {"kind=deliveries"}


def test_a_rerun_on_other_input_leaves_nothing_of_the_previous_run(
    spark: SparkSession, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    (out / "notes.txt").parent.mkdir(parents=True)
    (out / "notes.txt").write_text("not ours", encoding="utf-8")
    (tmp_path / "first").mkdir()
    first_messages, subscriptions, _ = _write_inputs(tmp_path / "first")
    run(spark, RouteJob(messages=str(first_messages), out=out, subscriptions=str(subscriptions)))
    later = tmp_path / "later.parquet"
    pq.write_table(
        pa.table(
            {
                "message_id": ["z1", "z2"],
                "topic": ["a", "no.such.topic.here.at.all"],
                "ts": pa.array(
                    [datetime(2024, 6, 1, tzinfo=UTC)] * 2, pa.timestamp("us", tz="UTC")
                ),
            }
        ),
        later,
    )
    summary = run(spark, RouteJob(messages=str(later), out=out, subscriptions=str(subscriptions)))
    assert summary.messages == 2 and summary.rejected == 0
    assert {str(r["date"]) for r in _table(out, "deliveries")} == {"2024-06-01"}
    assert {r["message_id"] for r in _table(out, "deliveries")} | {
        r["message_id"] for r in _table(out, "unmatched")
    } == {"z1", "z2"}
    assert [r["source"] for r in _table(out, "rejects")] == ["subscriptions"] * 2
    assert (out / "notes.txt").read_text(encoding="utf-8") == "not ours"


def test_subscriptions_from_the_store_with_tenants_dialects_and_headers(
    spark: SparkSession, tmp_path: Path
) -> None:
    url = f"duckdb:///{tmp_path / 'store.duckdb'}"
    db = Database(url)
    upgrade(db.url)
    with db.write() as session:
        ids = SubscriptionRepository(session).add_many(
            [
                validate(NewSubscription("alice", "orders.*", tenant="t1")),
                validate(NewSubscription("bob", "orders.#", tenant="t2")),
                validate(NewSubscription("carol", "sensors/+/temp", tenant="t1", dialect="mqtt")),
                validate(
                    NewSubscription(
                        "dave",
                        tenant="t1",
                        kind="headers",
                        criteria=(("priority", "high"),),
                        mode="all",
                    )
                ),
            ]
        )
    with db.read() as session:
        seq = SubscriptionRepository(session).last_seq()
    db.dispose()
    alice, bob, carol, dave = (sub_id for sub_id, _ in ids.items or [])
    messages = tmp_path / "messages.parquet"
    ts = pa.array([START] * 5, pa.timestamp("us", tz="UTC"))
    pq.write_table(
        pa.table(
            {
                "message_id": ["m1", "m2", "m3", "m4", "m5"],
                "topic": [
                    "orders.new",
                    "orders.new",
                    "sensors/kitchen/temp",
                    "other",
                    "orders.new",
                ],
                "ts": ts,
                "tenant": ["t1", "t2", "t1", "t1", "t3"],
                "dialect": ["amqp", "amqp", "mqtt", "amqp", "amqp"],
                "headers": pa.array(
                    [None, None, None, [("priority", "high")], None],
                    pa.map_(pa.string(), pa.string()),
                ),
            }
        ),
        messages,
    )
    summary = run(spark, RouteJob(messages=str(messages), out=tmp_path / "out", database_url=url))
    got = sorted(
        (r["message_id"], r["subscription_id"], r["tenant"])
        for r in _table(tmp_path / "out", "deliveries")
    )
    assert got == [("m1", alice, "t1"), ("m2", bob, "t2"), ("m3", carol, "t1"), ("m4", dave, "t1")]
    assert [r["message_id"] for r in _table(tmp_path / "out", "unmatched")] == ["m5"]
    assert summary.subscriptions_source == "store" and summary.subscriptions == 4
    assert summary.change_seq == seq and seq > 0  # the snapshot's place in the change log
    assert str(_table(tmp_path / "out", "deliveries")[0]["date"]) == "2024-05-01"


def test_without_subscriptions_or_a_store_the_job_refuses(
    spark: SparkSession, tmp_path: Path
) -> None:
    with pytest.raises(PipelineError) as refused:
        run(spark, RouteJob(messages=str(tmp_path / "none.parquet"), out=tmp_path / "out"))
    assert refused.value.code == "no_subscriptions"
