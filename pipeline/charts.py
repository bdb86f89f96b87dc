"""PNG charts of analytics results, for what people would rather look at than read.

Matplotlib's object API on a bare ``Figure`` renders with Agg and never opens a window or
touches global pyplot state, so charts are safe to draw in a server or a test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeAlias

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, PercentFormatter, StrMethodFormatter

from pipeline.analytics import QueryResult
from pipeline.errors import NoChartError

#: Bars past this many are left out of a ranking chart (the table has them all).
MAX_BARS: Final = 30


def _thousands() -> StrMethodFormatter:
    return StrMethodFormatter("{x:,.0f}")


def fanout_figure(result: QueryResult) -> Figure:
    """Messages per fan-out (the ``fanout`` query) as a histogram on a numeric axis: a
    fan-out nobody had leaves a gap where it would be (4 is not drawn next to 7)."""
    fig = Figure(figsize=(8.0, 4.5))
    ax = fig.subplots()
    fanouts = [int(v) for v in result.column("fanout")]
    bars = ax.bar(fanouts, result.column("messages"), width=0.8, color="C0")
    ax.bar_label(bars, [f"{v:,}" for v in result.column("messages")], fontsize="small")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("deliveries per message (fan-out; 0 = unmatched)")
    ax.set_ylabel("messages")
    ax.set_title("Fan-out histogram")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(_thousands())
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def fanout_histogram(result: QueryResult, path: Path) -> None:
    """``fanout_figure`` as a PNG: how widely messages spread."""
    fanout_figure(result).savefig(path, dpi=100, format="png")


def deliveries_over_time(result: QueryResult, path: Path) -> None:
    """Deliveries and messages per time bucket, with the unmatched rate (``timeline``)."""
    fig = Figure(figsize=(10.0, 4.5))
    ax = fig.subplots()
    buckets = result.column("bucket")
    ax.plot(buckets, result.column("deliveries"), label="deliveries", color="C0", marker=".")
    ax.plot(buckets, result.column("messages"), label="messages", color="C2", marker=".")
    ax.set_ylabel("per bucket")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(_thousands())
    rate = ax.twinx()
    rate.plot(
        buckets,
        [float(v) for v in result.column("unmatched_rate")],
        label="unmatched rate",
        color="C3",
        linestyle="--",
    )
    rate.yaxis.set_major_formatter(PercentFormatter(1.0))
    rate.set_ylim(0, 1)
    rate.set_ylabel("unmatched rate")
    lines = ax.get_legend_handles_labels()
    more = rate.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize="small", loc="upper left")
    ax.set_title("Deliveries over time (UTC)")
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")


def top_subscribers(result: QueryResult, path: Path) -> None:
    """The subscribers receiving the most deliveries (``subscribers``), largest on top."""
    rows = result.rows[:MAX_BARS]
    labels = [f"{row[1]} ({row[0]})" for row in rows][::-1]
    values = [row[2] for row in rows][::-1]
    fig = Figure(figsize=(8.0, max(3.0, 0.3 * len(rows) + 1.2)))
    ax = fig.subplots()
    bars = ax.barh(labels, values, color="C1")
    ax.bar_label(bars, [f"{v:,}" for v in values], fontsize="small", padding=2)
    ax.set_xlabel("deliveries")
    ax.xaxis.set_major_formatter(_thousands())
    ax.set_title("Top subscribers (tenant)")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")


Chart: TypeAlias = Callable[[QueryResult, Path], None]

#: The chart drawn for each query that has one.
CHARTS: Final[dict[str, Chart]] = {
    "fanout": fanout_histogram,
    "timeline": deliveries_over_time,
    "subscribers": top_subscribers,
}


def write_chart(result: QueryResult, path: Path) -> None:
    """Draw ``result`` as its query's chart into the PNG ``path``."""
    chart = CHARTS.get(result.name)
    if chart is None:
        raise NoChartError(f"no chart for {result.name!r}; charts exist for {', '.join(CHARTS)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    chart(result, path)
