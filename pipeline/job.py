"""The routing job: read messages and subscriptions, route, write the tables and a summary.

I/O happens here and in ``pipeline.io`` only; everything between is the pure
transformations of ``pipeline.transforms``. The matcher runs once per message: the routed rows
are persisted and the three tables (deliveries, unmatched, rejects) are split off them. The
summary's counts are observed while the first table is written (no job of their own), and a
table they show empty is written without reading the rows again; only rejected messages,
when there are any, are counted by reason in one more small job.

Output under ``out``::

    deliveries/date=YYYY-MM-DD/   message_id, subscription_id, subscriber, tenant, topic, ts
    unmatched/date=YYYY-MM-DD/    message_id, tenant, topic, ts
    rejects/source=messages/      message_id, subscription_id, topic, pattern, ts, reason,
    rejects/source=subscriptions/ detail, raw (the original row, for rows refused before routing)
    summary.json                  counts, duration, messages/s (written last)

Re-running overwrites these and nothing else; ``summary.json`` is removed when a run starts
and written when it has finished, so its presence means the tables are complete.

Bounds, each enforced where the row enters and reported by code in ``rejects/``:

* topics: the matcher's ``Limits`` (``RouteJob.limits``; 255 UTF-8 bytes and 256 words by
  default, AMQP's routing key): ``topic_too_long``, ``too_many_words``, ``nul_byte``, and
  each dialect's grammar (``empty_word``, ``wildcard_in_topic``, ...);
* headers: ``HeaderLimits`` (64 fields, 255-byte names, 1,024-byte values);
* timestamps: years 1 to 9999 (``invalid_ts``);
* memory: ``schema.ARROW_BATCH_ROWS`` messages per Arrow batch into a Python worker and
  ``schema.MAX_OUTPUT_ROWS`` deliveries (plus one message's fan-out) per batch back; the
  subscriptions are broadcast whole, at most ``Limits.max_subscriptions`` per engine.

On a cluster: ``topicstore route --master spark://host:7077 ...`` (the driver runs where the
command runs; the ``route`` service of docker-compose.yml is the worked example), or
``spark-submit --master spark://host:7077 pipeline/cli.py route ...``. Every worker needs this
project installed in the Python that ``PYSPARK_PYTHON`` names (one image for driver and
workers does it); ``--messages`` may be any path Spark reads (HDFS, S3), ``--out`` must be a
directory every node mounts at the same path (a shared volume).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from time import perf_counter
from typing import Any

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, Observation, SparkSession

from matcher import HeaderLimits, Limits
from pipeline import io, transforms
from pipeline.codes import DEFAULT_ENGINE, MAX_OUTPUT_ROWS
from pipeline.errors import PipelineError
from pipeline.session import JOB_SQL_CONF
from pipeline.subscriptions import SubscriptionPlan, SubscriptionReject, build_plan

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RouteJob:
    """What to route and where to. ``subscriptions`` is a Parquet path; without it the
    subscriptions come from ``subscription_table`` (read by the caller before Spark
    started, from ``subscriptions_from``), else from the store at ``database_url``."""

    messages: str
    out: Path
    subscriptions: str | None = None
    database_url: str | None = None
    subscription_table: pa.Table | None = None
    subscriptions_from: str = "store"
    engine: str = DEFAULT_ENGINE
    limits: Limits = field(default_factory=Limits)
    header_limits: HeaderLimits = field(default_factory=HeaderLimits)
    max_output_rows: int = MAX_OUTPUT_ROWS


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What a run did. ``messages`` = ``matched`` + ``unmatched`` + ``rejected``;
    ``duration_s`` runs from reading the subscriptions to the last table written, and
    ``stages_s`` splits it (the first table written includes the routing itself)."""

    started_at: str
    duration_s: float
    messages_per_s: float
    messages: int
    matched: int
    unmatched: int
    rejected: int
    deliveries: int
    rejects_by_reason: dict[str, int]
    subscriptions: int
    subscriptions_rejected: int
    subscription_rejects_by_reason: dict[str, int]
    engine: str
    messages_path: str
    subscriptions_source: str
    out: str
    stages_s: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class _Stages:
    """Seconds per stage of a run, in order."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._mark = perf_counter()

    def done(self, stage: str) -> None:
        now = perf_counter()
        self.seconds[stage] = round(now - self._mark, 3)
        self._mark = now


def _parallelism(spark: SparkSession) -> int:
    return max(1, spark.sparkContext.defaultParallelism)


def _spread(frame: DataFrame, parallelism: int) -> DataFrame:
    """At least one partition per core: a single Parquet row group or JSON file would
    otherwise be routed by one Python worker while the others idle."""
    if frame.rdd.getNumPartitions() < parallelism:
        return frame.repartition(parallelism)
    return frame


def _plan(
    spark: SparkSession, job: RouteJob
) -> tuple[SubscriptionPlan, list[SubscriptionReject], str]:
    """The subscriptions to route to, the rows left out, and where they came from."""
    if job.subscriptions is not None:
        table = io.read_subscriptions(spark, job.subscriptions)
        source = job.subscriptions
    elif job.subscription_table is not None:
        table, source = job.subscription_table, job.subscriptions_from
    elif job.database_url is not None:
        table = io.store_subscriptions(job.database_url)
        source = "store"
    else:
        raise PipelineError("no_subscriptions", "give a subscriptions file or a database URL")
    plan, rejects = build_plan(
        table, engine=job.engine, limits=job.limits, header_limits=job.header_limits
    )
    log.debug("%d subscriptions (%d rejected); engine %s", len(plan), len(rejects), job.engine)
    return plan, rejects, source


def _rows_if_any(frame: DataFrame, rows: int) -> DataFrame:
    """``frame``, or its empty form when the observed totals say it has no ``rows``: Spark
    plans ``LIMIT 0`` as an empty relation, so writing it scans nothing (with every message
    matched, the unmatched and rejects tables each scanned all the cached routed rows to
    find none)."""
    return frame if rows else frame.limit(0)


def _reason_counts(pairs: list[tuple[str, int]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for reason, n in sorted(pairs):
        counts[reason] = counts.get(reason, 0) + n
    return counts


def _rejects_by_reason(routed: DataFrame, rejected: int) -> dict[str, int]:
    if not rejected:
        return {}  # the usual case: no job to count nothing
    return _reason_counts(
        [
            (str(row["reason"]), row["rows"])
            for row in transforms.rejects_by_reason(routed).collect()
        ]
    )


def run(spark: SparkSession, job: RouteJob) -> RunSummary:
    """Run ``job`` on ``spark``; malformed rows go to ``rejects/``, never stop the run.

    Raises ``PipelineError`` for a problem with a whole input (no such column, neither
    subscriptions nor a database given) and the store's errors for an unusable store.
    """
    for key, value in JOB_SQL_CONF.items():
        spark.conf.set(key, value)
    out = job.out
    out.mkdir(parents=True, exist_ok=True)
    (out / io.SUMMARY).unlink(missing_ok=True)
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    stages = _Stages()

    plan, sub_rejects, source = _plan(spark, job)
    broadcast = spark.sparkContext.broadcast(plan)
    messages = transforms.normalize_messages(io.read_messages(spark, job.messages))
    routed = transforms.route(
        _spread(messages, _parallelism(spark)), broadcast, job.max_output_rows
    )
    # Route once; the tables are all read from the cached rows, and the totals observed while
    # the first of them computes those rows.
    totals = Observation("routed")
    routed = routed.observe(totals, *transforms.routed_totals())
    routed = routed.persist(StorageLevel.MEMORY_AND_DISK)
    stages.done("plan")
    try:
        io.write_table(transforms.deliveries(routed), out / io.DELIVERIES, "date")
        stages.done("route_and_deliveries")
        counted: dict[str, int] = totals.get
        unmatched_rows = _rows_if_any(transforms.unmatched(routed), counted["unmatched"])
        io.write_table(unmatched_rows, out / io.UNMATCHED, "date")
        stages.done("unmatched")
        rejects = _rows_if_any(transforms.message_rejects(routed), counted["rejected"])
        if sub_rejects:
            rejects = rejects.unionByName(io.subscription_rejects(spark, sub_rejects))
        io.write_table(rejects, out / io.REJECTS, "source")
        stages.done("rejects")
        by_reason = _rejects_by_reason(routed, counted["rejected"])
        stages.done("counts")
    finally:
        routed.unpersist()
        broadcast.unpersist()

    duration = sum(stages.seconds.values())
    matched, unmatched, rejected = counted["matched"], counted["unmatched"], counted["rejected"]
    total = matched + unmatched + rejected
    summary = RunSummary(
        started_at=started_at,
        duration_s=round(duration, 3),
        messages_per_s=round(total / duration, 1) if duration > 0 else 0.0,
        messages=total,
        matched=matched,
        unmatched=unmatched,
        rejected=rejected,
        deliveries=counted["deliveries"],
        rejects_by_reason=by_reason,
        subscriptions=len(plan),
        subscriptions_rejected=len(sub_rejects),
        subscription_rejects_by_reason=_reason_counts([(r.reason, 1) for r in sub_rejects]),
        engine=job.engine,
        messages_path=job.messages,
        subscriptions_source=source,
        out=str(out),
        stages_s=stages.seconds,
    )
    io.write_summary(out / io.SUMMARY, summary.to_json())
    log.debug(
        "routed %d messages in %.1f s (%.0f msg/s): %d deliveries, %d unmatched, %d rejected; "
        "stages %s",
        total,
        duration,
        summary.messages_per_s,
        summary.deliveries,
        unmatched,
        summary.rejected,
        stages.seconds,
    )
    return summary
