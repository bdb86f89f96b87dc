"""The ``pipeline`` table: the Spark routing job end to end (read Parquet, route on the
executors with our engines, write the delivery tables) against the naive Spark approach
(cross join every message with every subscription, keep the pairs where the topic ``rlike``
the pattern converted to a regex), which is timed on a sample.

The naive plan is given its best shape: Spark compiles a non-literal ``rlike`` pattern again
whenever it differs from the previous row's, so with the subscriptions broadcast (the small
side) every one of the pairs would compile a regex. The messages are broadcast instead and
the subscriptions streamed, so each task compiles each of its subscriptions' regexes once
and tests it against every message in a row.

Everything runs on ``local[2]`` in one session. The JVM compiles Spark's hot paths over the
first few million rows, so a session's first run is several times slower than its later
ones: the table shows that first run (labelled "cold JVM" only when this table started the
session), then the best of ``REPEATS`` runs per engine after ``WARMUP_RUNS`` warm-up runs on
a quarter of the messages (what a long-lived Spark application routing batch after batch
sees).
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from time import perf_counter
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from bench.report import Column, Table
from harness.workloads import DEFAULT_SEED, Workload, export_table, seed_workload
from pipeline.codes import DEFAULT_ENGINE
from pipeline.job import RouteJob, RunSummary, run
from pipeline.session import jvm_started, spark_session

log = logging.getLogger(__name__)

MASTER: Final = "local[2]"
#: Engines timed in the pipeline: the job's default (``native``) first, then the plain dict
#: trie it is measured against.
ENGINES: Final = (DEFAULT_ENGINE, "trie")
WORDS: Final = 5
SUBSCRIBERS: Final = 500
DAYS: Final = 3
ROW_GROUP: Final = 100_000
WARMUP_RUNS: Final = 6
REPEATS: Final = 3
NAIVE_WARMUP_MESSAGES: Final = 200
NAIVE: Final = "naive: cross join + rlike"
FIRST_RUN_COLD: Final = "first run (cold JVM)"
#: The first run's label when the session was already running (its JVM warmed by others).
FIRST_RUN_WARM: Final = "first run (JVM already running)"
TARGET_MSG_S: Final = 250_000
TARGET_RATIO: Final = 100


def amqp_regex(pattern: str) -> str:
    """A Java regex for an AMQP pattern, matched against ``"." + topic`` (``""`` for the
    empty topic, which has no words): every word is then ``\\.word``, so ``*`` is one
    ``\\.[^.]*`` and ``#`` any number of them, including none."""
    if pattern == "":
        return "^$"
    parts = []
    for word in pattern.split("."):
        if word == "*":
            parts.append(r"\.[^.]*")
        elif word == "#":
            parts.append(r"(?:\.[^.]*)*")
        else:
            parts.append(r"\." + re.escape(word))
    return "^" + "".join(parts) + "$"


def naive_deliveries(messages: DataFrame, subscriptions: DataFrame) -> DataFrame:
    """Deliveries by brute force: every (message, subscription) pair whose dotted topic
    matches the subscription's ``regex`` (what a Spark user would write first), with the
    messages broadcast so that each regex is compiled once per task, not once per pair."""
    dotted = sf.concat(sf.when(sf.col("topic") == "", "").otherwise("."), sf.col("topic"))
    return (
        sf.broadcast(messages)
        .crossJoin(subscriptions)
        .where(sf.rlike(dotted, sf.col("regex")))
        .select(
            "message_id",
            sf.col("id").alias("subscription_id"),
            "subscriber",
            "tenant",
            "topic",
            "ts",
            sf.to_date("ts").alias("date"),
        )
    )


def _write_workload(directory: Path, workload: Workload, sample: int) -> tuple[Path, Path, Path]:
    """Messages (and the naive sample of them) and subscriptions as Parquet files, in the
    layouts ``topicstore route`` reads; message ``k`` is sent at ``k`` x (3 days / n)."""
    n = len(workload.messages)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    step = timedelta(days=DAYS) / max(1, n)
    messages = pa.table(
        {
            "message_id": pa.array([f"m{k:09d}" for k in range(n)], pa.string()),
            "topic": pa.array(workload.messages, pa.string()),
            "ts": pa.array([start + step * k for k in range(n)], pa.timestamp("us", tz="UTC")),
        }
    )
    subscriptions = export_table(workload.patterns, SUBSCRIBERS, start)
    paths = (
        directory / "messages.parquet",
        directory / "sample.parquet",
        directory / "subs.parquet",
    )
    pq.write_table(messages, paths[0], row_group_size=ROW_GROUP)
    pq.write_table(messages.slice(0, sample), paths[1])
    pq.write_table(subscriptions, paths[2])
    return paths


def _route(spark: SparkSession, messages: Path, subs: Path, out: Path, engine: str) -> RunSummary:
    return run(
        spark, RouteJob(messages=str(messages), out=out, subscriptions=str(subs), engine=engine)
    )


def _naive(spark: SparkSession, sample: Path, subs: Path, out: Path) -> tuple[float, int]:
    """Seconds to read, route and write the sample the naive way, and its deliveries."""
    started = perf_counter()
    table = pq.read_table(subs, columns=["id", "tenant", "subscriber", "pattern"])
    regexes = [amqp_regex(p) for p in table.column("pattern").to_pylist()]
    subscriptions = spark.createDataFrame(table.append_column("regex", pa.array(regexes)))
    naive_deliveries(spark.read.parquet(str(sample)), subscriptions).write.mode(
        "overwrite"
    ).partitionBy("date").parquet(str(out))
    seconds = perf_counter() - started
    return seconds, spark.read.parquet(str(out)).count()


def _slice(source: Path, rows: int, target: Path) -> Path:
    pq.write_table(pq.read_table(source).slice(0, rows), target, row_group_size=ROW_GROUP)
    return target


def _agree(spark: SparkSession, pipeline_out: Path, naive_out: Path, last_id: str) -> bool:
    """Whether both approaches made exactly the same deliveries for the sample."""
    pairs = ["message_id", "subscription_id"]
    files = DeltaTable(str(pipeline_out)).file_uris(file_pruning_predicate="kind = 'deliveries'")
    ours = spark.read.parquet(*files).where(sf.col("message_id") <= last_id).select(*pairs)
    theirs = spark.read.parquet(str(naive_out)).select(*pairs)
    return ours.exceptAll(theirs).isEmpty() and theirs.exceptAll(ours).isEmpty()


def run_pipeline_bench(messages: int, subscriptions: int, naive_sample: int) -> Table:
    """msg/s of the routing job (its first run, then each engine's best of ``REPEATS``
    warm runs) and of the naive approach on the first ``naive_sample`` messages, and the
    per-message ratios."""
    naive_sample = min(naive_sample, messages)
    workload = seed_workload(subscriptions, messages, WORDS, DEFAULT_SEED)
    had_session = SparkSession.getActiveSession() is not None
    cold = not jvm_started()
    load_before = os.getloadavg()[0]
    spark = spark_session(MASTER)
    try:
        with tempfile.TemporaryDirectory(prefix="topicstore-bench-") as scratch:
            root = Path(scratch)
            msgs, sample, subs = _write_workload(root, workload, naive_sample)
            first = _route(spark, msgs, subs, root / "out-first", ENGINES[0])
            log.info("pipeline first run: %.2f s", first.duration_s)
            warmup = _slice(msgs, max(1, messages // 4), root / "warmup.parquet")
            for i in range(WARMUP_RUNS):
                _route(spark, warmup, subs, root / "out-warmup", ENGINES[i % len(ENGINES)])
            best: dict[str, RunSummary] = {}
            for _ in range(REPEATS):
                for engine in ENGINES:  # interleaved: both see the same machine
                    summary = _route(spark, msgs, subs, root / f"out-{engine}", engine)
                    log.info("pipeline %s: %.2f s", engine, summary.duration_s)
                    if engine not in best or summary.duration_s < best[engine].duration_s:
                        best[engine] = summary
            naive_out = root / "naive-out"
            small = _slice(sample, min(NAIVE_WARMUP_MESSAGES, naive_sample), root / "n.parquet")
            _naive(spark, small, subs, naive_out)  # warm-up: the same plan, compiled once
            naive_s, naive_count = _naive(spark, sample, subs, naive_out)
            last_id = f"m{naive_sample - 1:09d}"
            agree = _agree(spark, root / f"out-{ENGINES[0]}", naive_out, last_id)
    finally:
        if not had_session:
            spark.stop()
    load = (load_before, os.getloadavg()[0])
    first_label = FIRST_RUN_COLD if cold else FIRST_RUN_WARM
    return _table(
        workload, (first_label, first), best, (naive_sample, naive_s, naive_count, agree), load
    )


def _table(
    workload: Workload,
    first: tuple[str, RunSummary],
    best: dict[str, RunSummary],
    naive: tuple[int, float, int, bool],
    load: tuple[float, float],
) -> Table:
    naive_sample, naive_s, naive_count, agree = naive
    naive_rate = naive_sample / naive_s
    table = Table(
        name="pipeline",
        title=(
            f"Pipeline: {len(workload.messages):,} messages x {len(workload.patterns):,} "
            f"subscriptions on Spark {MASTER}, end to end (read, route, write)"
        ),
        columns=[
            Column("approach", "{}"),
            Column("messages", "{:,}"),
            Column("seconds", "{:,.2f}"),
            Column("msg/s", chart=True),
            Column("x naive", "{:,.0f}"),
        ],
        reference=NAIVE,
        unit="messages per second",
    )

    def row(label: str, summary: RunSummary) -> None:
        rate = summary.messages / summary.duration_s
        table.rows.append([label, summary.messages, summary.duration_s, rate, rate / naive_rate])

    for engine, summary in best.items():
        row(f"mapInArrow + {engine}", summary)
    row(f"mapInArrow + {ENGINES[0]}, {first[0]}", first[1])
    table.rows.append([NAIVE, naive_sample, naive_s, naive_rate, 1.0])
    default = best[ENGINES[0]]
    rate = default.messages / default.duration_s
    speed_met = "met" if rate >= TARGET_MSG_S else "NOT met"
    ratio_met = "met" if rate / naive_rate >= TARGET_RATIO else "NOT met"
    table.notes += [
        f"targets: >= {TARGET_MSG_S:,} msg/s end to end ({speed_met} by {ENGINES[0]}) and "
        f">= {TARGET_RATIO}x the naive approach per message ({ratio_met})",
        f"engines: best of {REPEATS} runs each, interleaved, after a first run and "
        f"{WARMUP_RUNS} warm-up runs on a quarter of the messages; seconds run from reading "
        f"the subscriptions to the last table written (session start-up excluded); "
        f"{ENGINES[0]} stages: {default.stages_s}",
        f"{default.deliveries:,} deliveries ({default.deliveries / default.messages:.2f} per "
        f"message), {len(set(workload.messages)):,} distinct topics, 'Fast Topic "
        f"Matching' 5-word patterns over digits, {SUBSCRIBERS} subscribers",
        f"naive: {naive_sample:,} messages x {len(workload.patterns):,} subscriptions = "
        f"{naive_sample * len(workload.patterns):,} rlike tests (messages broadcast, each "
        f"regex compiled once per task), {naive_count:,} deliveries; "
        f"identical to the pipeline's for those messages: {'yes' if agree else 'NO'}",
        f"1-minute load average {load[0]:.1f} before, {load[1]:.1f} after, on "
        f"{os.cpu_count()} CPUs (other processes slow every row alike)",
    ]
    return table
