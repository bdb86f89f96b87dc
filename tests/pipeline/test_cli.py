"""The route command end to end on small files (in the shared Spark session)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from pipeline.cli import app


def test_route_command(spark: SparkSession, tmp_path: Path) -> None:
    messages = tmp_path / "messages"
    messages.mkdir()
    lines = [
        {"message_id": "m1", "topic": "stock.nasdaq.msft", "ts": "2024-05-01T10:00:00Z"},
        {"message_id": "m2", "topic": "weather", "ts": "2024-05-01T10:00:01Z"},
        {"message_id": "m3", "topic": "stock.x", "ts": 1714557602},
    ]
    (messages / "part-0.jsonl").write_text(
        "\n".join(json.dumps(line) for line in lines) + "\nnot json\n", encoding="utf-8"
    )
    subscriptions = tmp_path / "subs.parquet"
    pq.write_table(
        pa.table(
            {"id": [1, 2], "subscriber": ["alice", "bob"], "pattern": ["stock.#", "*.*.msft"]}
        ),
        subscriptions,
    )
    out = tmp_path / "out"
    args = ["route", "--messages", str(messages), "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--subscriptions", str(subscriptions)])
    assert result.exit_code == 0, result.output
    assert (
        "routed 4 messages" in result.output
        and "3 deliveries, 1 unmatched, 1 rejected" in result.output
    )
    summary = json.loads((out / "_summary.json").read_text(encoding="utf-8"))
    assert summary["matched"] == 2 and summary["rejects_by_reason"] == {"malformed_row": 1}
    # DuckDB reads the committed table: m1 reached alice and bob, m3 alice.
    tenants = CliRunner().invoke(app, ["analytics", "tenants", "--deliveries", str(out), "--json"])
    assert tenants.exit_code == 0, tenants.output
    assert json.loads(tenants.stdout) == [
        {"tenant": "default", "deliveries": 3, "messages": 2, "subscribers": 2}
    ]
    assert SparkSession.getActiveSession() is spark  # the caller's session keeps running

    # The same directory as a landing directory: one micro-batch, its progress line, and the
    # same rows in the stream's table.
    stream = tmp_path / "stream"
    follow = ["route", "--available-now", "--messages", str(messages), "--out", str(stream)]
    streamed = CliRunner().invoke(app, [*follow, "--subscriptions", str(subscriptions)])
    assert streamed.exit_code == 0, streamed.output
    assert (
        "batch 0: 4 messages" in streamed.output
        and "3 deliveries, 1 unmatched, 1 rejected; version 0" in streamed.output
    )
    again = CliRunner().invoke(app, ["analytics", "tenants", "--deliveries", str(stream), "--json"])
    assert json.loads(again.stdout) == json.loads(tenants.stdout)

    refused = CliRunner().invoke(
        app, [*args, "--subscriptions", str(subscriptions), "--engine", "fast"]
    )
    assert refused.exit_code == 2 and "unknown engine" in refused.output
    no_store = CliRunner().invoke(app, [*args, "--database-url", "sqlite:///nowhere.db"])
    assert no_store.exit_code == 2 and "unsupported_database" in no_store.output
