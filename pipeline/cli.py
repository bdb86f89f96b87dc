"""The ``route`` and ``analytics`` commands: plain typer command functions, registered on
``app`` here and meant to be registered on the ``topicstore`` command line as they are.

This file also runs as a script, which is how ``spark-submit`` starts it on a cluster::

    spark-submit --master spark://host:7077 pipeline/cli.py route --messages ... --out ...
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from matcher import ENGINES
from pipeline.analytics import BUCKETS, QUERIES, QueryResult, run_query
from pipeline.codes import DEFAULT_ENGINE
from pipeline.errors import PipelineError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipeline.job import RouteJob
    from pipeline.stream import StreamJob

app = typer.Typer(
    help="Route message tables with Spark and query the results with DuckDB.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # plain help, as the topicstore command line writes it
)


def route(
    messages: Annotated[
        str,
        typer.Option(
            "--messages",
            help="Messages (message_id, topic, ts; optional tenant, dialect, headers): "
            "Parquet, or JSON lines named *.json, *.jsonl or *.ndjson; a file or a directory.",
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="The routed table (Delta): deliveries, unmatched and rejects; replaced.",
        ),
    ],
    subscriptions: Annotated[
        str | None,
        typer.Option(
            "--subscriptions",
            help="Subscriptions Parquet (topicstore export); default: the configured store, "
            "or the service at --api.",
        ),
    ] = None,
    api: Annotated[
        str | None,
        typer.Option(
            "--api",
            help="Read the subscriptions through the service at this URL (which holds the "
            "store while it runs), with --token.",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="TOPICSTORE_ADMIN_TOKEN",
            show_default=False,
            help="The service's token for --api (default: TOPICSTORE_ADMIN_TOKEN, else the "
            "one `serve --dev` made).",
        ),
    ] = None,
    master: Annotated[
        str | None,
        typer.Option("--master", help="Spark master: local[*] (default), local[N], spark://…"),
    ] = None,
    engine: Annotated[
        str,
        typer.Option("--engine", help=f"Matching engine on the executors: {', '.join(ENGINES)}."),
    ] = DEFAULT_ENGINE,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            envvar="TOPICSTORE_DATABASE_URL",
            help="Store to read subscriptions from when --subscriptions is not given "
            "(default: the embedded DuckDB file).",
        ),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            help="Keep routing files as they land in the --messages directory (a stream "
            "appending to --out, exactly once per file; see --checkpoint).",
        ),
    ] = False,
    available_now: Annotated[
        bool,
        typer.Option(
            "--available-now",
            help="As --follow, but route the files landed so far, then stop.",
        ),
    ] = False,
    trigger_interval: Annotated[
        float,
        typer.Option(
            "--trigger-interval", min=0.1, max=3600, help="--follow: seconds between batches."
        ),
    ] = 1.0,
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint",
            help="--follow: the stream's checkpoint directory (default: OUT/_checkpoint).",
        ),
    ] = None,
    class_archive: Annotated[
        str,
        typer.Option(
            "--class-archive",
            help="Where a local JVM keeps Spark's class-data archive: off, or a directory "
            "(default: TOPICSTORE_SPARK_CLASS_ARCHIVE, else $XDG_CACHE_HOME/topicstore, "
            "else ~/.cache/topicstore).",
        ),
    ] = "",
) -> None:
    """Route every message to the subscriptions whose pattern matches it (Spark). The
    paths, Java and the subscriptions are checked before Spark starts."""
    from pipeline import preflight
    from store import DEFAULT_DATABASE_URL

    if engine not in ENGINES:
        raise typer.BadParameter(
            f"unknown engine {engine!r}; known: {', '.join(ENGINES)}", param_hint="--engine"
        )
    if api is not None and subscriptions is not None:
        raise typer.BadParameter("give --subscriptions or --api, not both", param_hint="--api")
    try:
        preflight.check_paths(messages, subscriptions, out)
        if not _jvm_running():
            preflight.check_java(os.environ)
        table, seq = None, None
        if api is not None:
            table = preflight.service_subscriptions(api, token)
        elif subscriptions is None:
            table, seq = preflight.store_subscriptions(database_url or DEFAULT_DATABASE_URL)
    except preflight.PreflightError as e:
        typer.echo(f"error: {e.code}: {e.message}", err=True)
        if e.hint:
            typer.echo(f"hint: {e.hint}", err=True)
        raise typer.Exit(e.status) from e
    if follow or available_now:
        from pipeline.stream import StreamJob  # Spark's Python side loads from here on

        _follow(
            StreamJob(
                landing=messages,
                out=out,
                checkpoint=checkpoint,
                subscriptions=subscriptions,
                # From the store, each batch reads it again when its change log has moved.
                database_url=None if api is not None else database_url or DEFAULT_DATABASE_URL,
                subscription_table=table if api is not None else None,
                subscriptions_from=api or "store",
                engine=engine,
                available_now=available_now,
                trigger_interval_s=trigger_interval,
            ),
            master,
            class_archive,
        )
        return
    from pipeline.job import RouteJob  # Spark's Python side loads from here on

    job = RouteJob(
        messages=messages,
        out=out,
        subscriptions=subscriptions,
        subscription_table=table,
        subscription_seq=seq,
        subscriptions_from=api or "store",
        engine=engine,
    )
    _route(job, master, class_archive)


def _jvm_running() -> bool:
    """Whether this process has Spark's JVM already (a caller's session, or the one
    spark-submit started), so there is no Java to check."""
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return True
    if "pyspark" not in sys.modules:
        return False
    from pipeline.session import jvm_started

    return jvm_started()


def _on_spark(master: str | None, class_archive: str, work: Callable[[SparkSession], None]) -> None:
    """Run ``work`` on a Spark session (a caller's, else one started here, stopped after),
    reporting a known error as one line (exit 2); keep the class archive once it ran."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import SparkSession  # Spark loads only for this command

    from pipeline.session import class_archive_complete, spark_session
    from store import StoreError

    ours = SparkSession.getActiveSession() is None  # a caller's session is left running
    spark = spark_session(master, class_archive=class_archive_file(class_archive, os.environ))
    try:
        work(spark)
    except (PipelineError, StoreError) as e:
        typer.echo(f"error: {e.code}: {e.message}", err=True)
        raise typer.Exit(2) from e
    except AnalysisException as e:  # e.g. PATH_NOT_FOUND: a --messages path not there
        code = (e.getCondition() or "analysis_error").lower()
        message = str(e).strip().splitlines()[0] if str(e).strip() else code
        typer.echo(f"error: {code}: {message}", err=True)
        raise typer.Exit(2) from e
    except KeyboardInterrupt:  # --follow runs until it is interrupted
        typer.echo("stopped", err=True)
        return
    finally:
        if ours:
            spark.stop()
    class_archive_complete()  # a whole job ran: the JVM's class archive is worth keeping


def _route(job: RouteJob, master: str | None, class_archive: str) -> None:
    """Run ``job`` and print its summary."""
    from pipeline.job import run

    def work(spark: SparkSession) -> None:
        summary = run(spark, job)
        typer.echo(
            f"routed {summary.messages:,} messages in {summary.duration_s:.1f} s "
            f"({summary.messages_per_s:,.0f} msg/s): {summary.deliveries:,} deliveries, "
            f"{summary.unmatched:,} unmatched, {summary.rejected:,} rejected; "
            f"{summary.subscriptions:,} subscriptions "
            f"({summary.subscriptions_rejected:,} rejected)"
        )
        typer.echo(f"summary: {job.out / '_summary.json'} (table version {summary.table_version})")

    _on_spark(master, class_archive, work)


def _follow(job: StreamJob, master: str | None, class_archive: str) -> None:
    """Run the stream ``job``, a line per micro-batch, until it ends or is interrupted."""
    from pipeline.stream import run

    _on_spark(
        master,
        class_archive,
        lambda spark: run(spark, job, lambda progress: typer.echo(progress.line())),
    )


def class_archive_file(setting: str, environ: Mapping[str, str]) -> Path | None:
    """The class-data archive ``route`` maps or records (``pipeline.session``): none for
    ``off``; in the directory ``setting`` names, else in the user's cache
    (``$XDG_CACHE_HOME/topicstore``, else ``~/.cache/topicstore``); keyed by the Java of
    ``$JAVA_HOME``, else the one on the ``PATH``."""
    from pipeline.session import class_archive_in  # Spark loads only for route

    if setting.lower() == "off":
        return None
    cache = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    directory = Path(setting) if setting else Path(cache) / "topicstore"
    return class_archive_in(directory, environ.get("JAVA_HOME"))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool | str):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float | Decimal):
        number = float(value)
        return f"{number:,.4g}" if abs(number) < 1 else f"{number:,.2f}"
    if isinstance(value, datetime | date):
        return value.isoformat(sep=" ") if isinstance(value, datetime) else value.isoformat()
    return str(value)


def format_result(result: QueryResult) -> str:
    """The result as an aligned text table (text left, numbers right)."""
    cells = [[_cell(v) for v in row] for row in result.rows]
    widths = [
        max(len(text) for text in column) for column in zip(result.columns, *cells, strict=True)
    ]
    numeric = [
        all(isinstance(row[i], int | float | Decimal) for row in result.rows if row[i] is not None)
        for i in range(len(result.columns))
    ]

    def line(texts: list[str] | tuple[str, ...]) -> str:
        parts = (
            text.rjust(width) if right else text.ljust(width)
            for text, width, right in zip(texts, widths, numeric, strict=True)
        )
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(result.columns), rule, *(line(row) for row in cells)]) + "\n"


def analytics(
    query: Annotated[
        str, typer.Argument(help=f"One of: {', '.join(QUERIES)}.", show_default=False)
    ],
    deliveries: Annotated[
        Path,
        typer.Option("--deliveries", help="A routed table (a route or stream --out)."),
    ],
    subscriptions: Annotated[
        Path | None,
        typer.Option("--subscriptions", help="Subscriptions export, for never-matched (Parquet)."),
    ] = None,
    chart: Annotated[
        Path | None,
        typer.Option("--chart", help="Also draw a PNG (fanout, timeline, subscribers)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON records.")] = False,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Rows of a ranking (default 20).")
    ] = None,
    bucket: Annotated[
        str, typer.Option("--bucket", help=f"timeline bucket: {', '.join(BUCKETS)}.")
    ] = "hour",
    as_of: Annotated[
        int | None,
        typer.Option("--as-of", min=0, help="Read this version of the table (default: newest)."),
    ] = None,
) -> None:
    """Query a routed table with DuckDB (in memory; the service's database is never opened)."""
    if chart is not None:
        from pipeline.charts import CHARTS  # matplotlib loads only for charts

        if query not in CHARTS:
            raise typer.BadParameter(
                f"no chart for {query!r}; charts exist for {', '.join(CHARTS)}",
                param_hint="--chart",
            )
    try:
        result = run_query(
            query, deliveries, subscriptions=subscriptions, limit=limit, bucket=bucket, as_of=as_of
        )
        if chart is not None:
            from pipeline.charts import write_chart

            write_chart(result, chart)
    except PipelineError as e:
        typer.echo(f"error: {e.code}: {e.message}", err=True)  # as every command reports
        raise typer.Exit(2) from e
    if as_json:
        typer.echo(json.dumps(result.records(), indent=2))
    else:
        typer.echo(format_result(result), nl=False)
    if chart is not None:
        typer.echo(f"chart: {chart}", err=as_json)


app.command()(route)
app.command()(analytics)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    app()


if __name__ == "__main__":
    main()
