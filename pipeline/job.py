"""The routing job: read messages and subscriptions, route, commit the routed table, write a
summary.

I/O happens here and in ``pipeline.io`` only; everything between is the pure
transformations of ``pipeline.transforms``. The routing step (``pipeline.staging``) is the
one every stream micro-batch runs too: routed once per message, every output written in one
pass as Parquet staged under the table, then committed by the driver in one Delta
transaction (``pipeline.delta``) that replaces the table's rows.

Output ``out`` is the routed table; readers see the last committed run whole (an earlier one
with ``--as-of``)::

    _delta_log/                          the table's log, one JSON file per commit
    route-ID/kind=deliveries/date=DAY/   rows of ``delta.DATA_SCHEMA``: deliveries,
    route-ID/kind=unmatched/date=DAY/    unmatched messages and rejects (with their reason
    route-ID/kind=rejects/date=DAY/      code, detail and raw row; source = messages or
                                         subscriptions)
    _summary.json                        counts, duration, messages/s (written last)

Re-running commits a new version that replaces the rows; ``_summary.json`` is removed when a
run starts and written once it has committed. A run that fails removes its staged files.

Bounds, each enforced where the row enters and reported by code as a reject row:

* topics: the matcher's ``Limits`` (``RouteJob.limits``; 255 UTF-8 bytes and 256 words by
  default, AMQP's routing key): ``topic_too_long``, ``too_many_words``, ``nul_byte``, and
  each dialect's grammar (``empty_word``, ``wildcard_in_topic``, ...);
* headers: ``HeaderLimits`` (64 fields, 255-byte names, 1,024-byte values);
* timestamps: years 1 to 9999 (``invalid_ts``);
* memory: ``codes.ARROW_BATCH_ROWS`` messages per Arrow batch into a Python worker,
  ``codes.MAX_OUTPUT_ROWS`` deliveries (plus one message's fan-out) per routed batch, and
  ``files.ROW_GROUP_ROWS`` rows buffered per file a worker writes (a file per kind and day);
  the subscriptions are broadcast whole, at most ``Limits.max_subscriptions`` per engine.

On a cluster: ``topicstore route --master spark://host:7077 ...`` (the driver runs where the
command runs; the ``route`` service of docker-compose.yml is the worked example), or
``spark-submit --master spark://host:7077 pipeline/cli.py route ...``. Every worker needs this
project installed in the Python that ``PYSPARK_PYTHON`` names (one image for driver and
workers does it); ``--messages`` may be any path Spark reads (HDFS, S3), ``--out`` must be a
directory every node mounts at the same path (a shared volume).
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from time import perf_counter
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from matcher import HeaderLimits, Limits
from pipeline import delta, io, transforms
from pipeline.codes import DEFAULT_ENGINE, MAX_OUTPUT_ROWS
from pipeline.session import JOB_SQL_CONF
from pipeline.staging import plan_subscriptions, reason_counts, stage_routed

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RouteJob:
    """What to route and where to (``out``: the routed table's directory).
    ``subscriptions`` is a Parquet path; without it the subscriptions come from
    ``subscription_table`` (read by the caller before Spark started, from
    ``subscriptions_from``; the store's change-log sequence number it reflects in
    ``subscription_seq``), else from the store at ``database_url``."""

    messages: str
    out: Path
    subscriptions: str | None = None
    database_url: str | None = None
    subscription_table: pa.Table | None = None
    subscription_seq: int | None = None
    subscriptions_from: str = "store"
    engine: str = DEFAULT_ENGINE
    limits: Limits = field(default_factory=Limits)
    header_limits: HeaderLimits = field(default_factory=HeaderLimits)
    max_output_rows: int = MAX_OUTPUT_ROWS


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What a run did. ``messages`` = ``matched`` + ``unmatched`` + ``rejected``;
    ``duration_s`` runs from reading the subscriptions to the commit, and ``stages_s``
    splits it. ``table_version`` is the routed table's version the run committed,
    ``change_seq`` the store's change-log sequence number its subscriptions reflect (None
    when they came from a file)."""

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
    table_version: int | None
    change_seq: int | None

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


def run(spark: SparkSession, job: RouteJob) -> RunSummary:
    """Run ``job`` on ``spark``; malformed rows become rejects, never stop the run.

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

    snapshot = plan_subscriptions(
        spark,
        subscriptions=job.subscriptions,
        table=job.subscription_table,
        table_source=job.subscriptions_from,
        table_seq=job.subscription_seq,
        database_url=job.database_url,
        engine=job.engine,
        limits=job.limits,
        header_limits=job.header_limits,
    )
    messages = transforms.normalize_messages(io.read_messages(spark, job.messages))
    staged = delta.stage(out, "route")
    broadcast = spark.sparkContext.broadcast(snapshot.plan)
    stages.done("plan")
    try:
        written = stage_routed(
            messages, broadcast, snapshot.rejects, out, staged, job.max_output_rows
        )
        counted, by_reason = written.totals, written.rejects_by_reason
        stages.done("route_and_write")
        version, _ = delta.commit(
            out,
            written.files,
            replace=True,
            metadata={"writer": "route", "change_seq": snapshot.seq, **counted},
        )
        stages.done("commit")
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)  # never committed: nothing reads it
        raise
    finally:
        broadcast.unpersist()

    plan, sub_rejects = snapshot.plan, snapshot.rejects
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
        subscription_rejects_by_reason=reason_counts([(r.reason, 1) for r in sub_rejects]),
        engine=job.engine,
        messages_path=job.messages,
        subscriptions_source=snapshot.source,
        out=str(out),
        stages_s=stages.seconds,
        table_version=version,
        change_seq=snapshot.seq,
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
