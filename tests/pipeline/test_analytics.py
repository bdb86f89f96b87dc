"""Every analytics query against hand-computed answers on a small routed table laid out as
the job writes it (Delta, UTC timestamps), as of its newest and an earlier version, and the
charts drawn from them."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from matplotlib.patches import Rectangle
from typer.testing import CliRunner

from pipeline import delta
from pipeline.analytics import QUERIES, QueryResult, run_query
from pipeline.charts import CHARTS, fanout_figure, write_chart
from pipeline.cli import app
from pipeline.errors import (
    InvalidBucketError,
    MissingColumnError,
    MissingDeliveriesError,
    MissingSubscriptionsError,
    NoChartError,
    UnknownQueryError,
    UnknownVersionError,
)
from tests.routed import write_routed

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_routed(tmp_path_factory.mktemp("routed"))


def test_deliveries_per_subscriber(routed: Path) -> None:
    result = run_query("subscribers", routed)
    assert result.columns == ("tenant", "subscriber", "deliveries", "messages", "subscriptions")
    assert result.rows == [
        ("t1", "alice", 3, 3, 1),
        ("t1", "bob", 2, 2, 1),
        ("t1", "dave", 1, 1, 1),
        ("t2", "carol", 1, 1, 1),
    ]
    assert run_query("subscribers", routed, limit=2).rows == result.rows[:2]


def test_deliveries_per_tenant(routed: Path) -> None:
    result = run_query("tenants", routed / "deliveries")  # the deliveries/ directory works too
    assert result.columns == ("tenant", "deliveries", "messages", "subscribers")
    assert result.rows == [("t1", 6, 3, 3), ("t2", 1, 1, 1)]


def test_fanout_histogram_counts_unmatched_as_zero(routed: Path) -> None:
    result = run_query("fanout", routed)
    assert result.columns == ("fanout", "messages", "topics")
    assert result.rows == [(0, 3, 2), (1, 2, 2), (2, 1, 1), (3, 1, 1)]


def test_fanout_per_topic(routed: Path) -> None:
    result = run_query("topic-fanout", routed)
    assert result.columns == (
        "topic",
        "messages",
        "deliveries",
        "min_fanout",
        "avg_fanout",
        "median_fanout",
        "max_fanout",
    )
    assert result.rows == [
        ("d.e", 1, 3, 3, 3.0, 3.0, 3),
        ("a.b", 3, 3, 0, 1.0, 1.0, 2),
        ("c", 1, 1, 1, 1.0, 1.0, 1),
        ("x", 2, 0, 0, 0.0, 0.0, 0),
    ]


def test_hot_topics(routed: Path) -> None:
    result = run_query("hot-topics", routed, limit=3)
    assert result.columns == ("topic", "messages", "deliveries", "share")
    assert result.rows == [("a.b", 3, 3, 0.4286), ("x", 2, 0, 0.2857), ("d.e", 1, 3, 0.1429)]


def test_timeline_and_unmatched_rate(routed: Path) -> None:
    result = run_query("timeline", routed)
    assert result.columns == ("bucket", "messages", "deliveries", "unmatched", "unmatched_rate")
    assert result.rows == [
        (datetime(2024, 5, 1, 10), 3, 3, 1, 0.3333),
        (datetime(2024, 5, 1, 11), 2, 1, 1, 0.5),
        (datetime(2024, 5, 2, 9), 2, 3, 1, 0.5),
    ]
    daily = run_query("timeline", routed, bucket="day")
    assert daily.rows == [
        (datetime(2024, 5, 1), 5, 4, 2, 0.4),
        (datetime(2024, 5, 2), 2, 3, 1, 0.5),
    ]
    assert daily.records()[0] == {
        "bucket": "2024-05-01T00:00:00",
        "messages": 5,
        "deliveries": 4,
        "unmatched": 2,
        "unmatched_rate": 0.4,
    }
    with pytest.raises(InvalidBucketError) as bad:
        run_query("timeline", routed, bucket="fortnight")
    assert bad.value.code == "invalid_bucket"


def test_subscriptions_that_never_matched(routed: Path) -> None:
    result = run_query("never-matched", routed, subscriptions=routed / "subscriptions.parquet")
    assert result.columns == ("id", "tenant", "subscriber", "pattern", "dialect")
    assert result.rows == [(5, "t2", "eve", "z.#", "amqp"), (6, "t1", "frank", "y", "amqp")]
    with pytest.raises(MissingSubscriptionsError) as missing:
        run_query("never-matched", routed)
    assert missing.value.code == "needs_subscriptions"


def test_minimal_subscription_exports_get_default_columns(routed: Path, tmp_path: Path) -> None:
    pq.write_table(
        pa.table({"id": [6, 7], "subscriber": ["f", "g"], "pattern": ["y", "w"]}),
        tmp_path / "s.parquet",
    )
    result = run_query("never-matched", routed, subscriptions=tmp_path / "s.parquet")
    assert result.rows == [(6, "default", "f", "y", "amqp"), (7, "default", "g", "w", "amqp")]


def test_a_subscriptions_export_without_patterns_is_refused(routed: Path, tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": [6], "subscriber": ["f"]}), tmp_path / "s.parquet")
    with pytest.raises(MissingColumnError) as refused:
        run_query("never-matched", routed, subscriptions=tmp_path / "s.parquet")
    assert refused.value.code == "missing_column"
    assert "pattern" in refused.value.message


def test_empty_tables_give_empty_answers(tmp_path: Path) -> None:
    DeltaTable.create(tmp_path, delta.SCHEMA, partition_by=list(delta.PARTITIONS))
    for name in QUERIES:
        subscriptions = None
        if name == "never-matched":
            subscriptions = tmp_path / "s.parquet"
            pq.write_table(
                pa.table({"id": [1], "subscriber": ["s"], "pattern": ["a"]}), subscriptions
            )
        rows = run_query(name, tmp_path, subscriptions=subscriptions).rows
        assert rows == ([(1, "default", "s", "a", "amqp")] if name == "never-matched" else [])


def test_as_of_reads_an_earlier_version(routed: Path) -> None:
    """Version 0 is May 1st alone (``tests.routed.VERSIONS``); the newest adds May 2nd."""
    days = run_query("timeline", routed, bucket="day", as_of=0)
    assert days.column("messages") == [5]
    assert run_query("timeline", routed, bucket="day", as_of=1).column("messages") == [5, 2]
    tenants = run_query("tenants", routed, as_of=0)
    assert tenants.rows == [("t1", 3, 2, 2), ("t2", 1, 1, 1)]
    with pytest.raises(UnknownVersionError) as unknown:
        run_query("tenants", routed, as_of=7)
    assert unknown.value.code == "unknown_version"


def test_unknown_queries_and_paths_are_refused(routed: Path, tmp_path: Path) -> None:
    with pytest.raises(UnknownQueryError) as unknown:
        run_query("everything", routed)
    assert unknown.value.code == "unknown_query"
    with pytest.raises(MissingDeliveriesError) as nowhere:
        run_query("tenants", tmp_path / "nothing")
    assert nowhere.value.code == "no_deliveries"


@pytest.mark.parametrize("query", sorted(CHARTS))
def test_charts_are_png_files(routed: Path, tmp_path: Path, query: str) -> None:
    path = tmp_path / "charts" / f"{query}.png"
    write_chart(run_query(query, routed), path)
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 5_000


def test_the_fanout_histogram_has_a_numeric_axis() -> None:
    # A categorical axis would put 7 right after 4; on a number line 5 and 6 stay empty.
    result = QueryResult(
        "fanout", ("fanout", "messages", "topics"), [(0, 3, 2), (4, 2, 1), (7, 1, 1)]
    )
    (ax,) = fanout_figure(result).axes
    bars = [patch for patch in ax.patches if isinstance(patch, Rectangle)]
    assert [bar.get_x() + bar.get_width() / 2 for bar in bars] == [0, 4, 7]
    assert [bar.get_height() for bar in bars] == [3, 2, 1]
    assert ax.xaxis.get_converter() is None  # no category mapping
    assert all(float(tick).is_integer() for tick in ax.get_xticks())


def test_a_query_without_a_chart_is_refused(routed: Path, tmp_path: Path) -> None:
    with pytest.raises(NoChartError) as refused:
        write_chart(run_query("tenants", routed), tmp_path / "t.png")
    assert refused.value.code == "no_chart"


def test_the_analytics_command(routed: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    text = runner.invoke(app, ["analytics", "subscribers", "--deliveries", str(routed)])
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    assert lines[0].split() == ["tenant", "subscriber", "deliveries", "messages", "subscriptions"]
    assert lines[2].split() == ["t1", "alice", "3", "3", "1"] and len(lines) == 6

    chart = tmp_path / "fanout.png"
    as_json = runner.invoke(
        app, ["analytics", "fanout", "--deliveries", str(routed), "--json", "--chart", str(chart)]
    )
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)[0] == {"fanout": 0, "messages": 3, "topics": 2}
    assert chart.read_bytes().startswith(PNG_SIGNATURE)

    refused = runner.invoke(
        app, ["analytics", "tenants", "--deliveries", str(routed), "--chart", str(chart)]
    )
    assert refused.exit_code == 2 and "no chart" in refused.output
    missing = runner.invoke(app, ["analytics", "never-matched", "--deliveries", str(routed)])
    assert missing.exit_code == 2 and "needs_subscriptions" in missing.output
