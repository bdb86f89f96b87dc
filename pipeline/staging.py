"""The routing step shared by the batch job (``pipeline.job``) and every micro-batch of the
stream (``pipeline.stream``): a snapshot of the subscriptions, and messages routed against
it into staged files of the routed table (``pipeline.delta``), ready for one commit.

The matcher runs once per message and the routed rows are written in one pass, partitioned
by ``kind`` and ``date``; the totals are observed while they are written (no job of their
own), and rejected messages, when there are any, are counted by reason from the staged
files.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
from pyspark import Broadcast
from pyspark.sql import DataFrame, Observation, SparkSession

from matcher import HeaderLimits, Limits
from pipeline import delta, io, transforms
from pipeline.changes import PlanChanges
from pipeline.errors import PipelineError
from pipeline.schema import MESSAGES_SOURCE
from pipeline.subscriptions import SubscriptionPlan, SubscriptionReject, build_plan

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The subscriptions a run routes to: the plan, the rows left out, where they came
    from, the store's change-log sequence number they reflect (None for a file), and the
    changes since the plan that it includes."""

    plan: SubscriptionPlan
    rejects: list[SubscriptionReject]
    source: str
    seq: int | None
    #: A stream's changes since ``plan`` (``pipeline.changes``), part of the snapshot.
    changes: PlanChanges | None = None

    def __len__(self) -> int:
        """Subscriptions routed to: the plan's, with the changes applied."""
        return len(self.plan) + (self.changes.net if self.changes is not None else 0)


def plan_subscriptions(
    spark: SparkSession,
    *,
    subscriptions: str | None,
    database_url: str | None,
    engine: str,
    limits: Limits,
    header_limits: HeaderLimits,
    table: pa.Table | None = None,
    table_source: str = "store",
    table_seq: int | None = None,
) -> Snapshot:
    """The subscriptions of a Parquet file, else ``table`` (read by the caller, from
    ``table_source``, reflecting change ``table_seq``), else of the store at
    ``database_url`` (read in one snapshot with its change-log sequence number).
    O(subscriptions)."""
    seq: int | None = None
    if subscriptions is not None:
        table = io.read_subscriptions(spark, subscriptions)
        source = subscriptions
    elif table is not None:
        source, seq = table_source, table_seq
    elif database_url is not None:
        table, seq = io.store_subscriptions(database_url)
        source = "store"
    else:
        raise PipelineError("no_subscriptions", "give a subscriptions file or a database URL")
    plan, rejects = build_plan(table, engine=engine, limits=limits, header_limits=header_limits)
    log.debug("%d subscriptions (%d rejected); engine %s", len(plan), len(rejects), engine)
    return Snapshot(plan, rejects, source, seq)


def _parallelism(spark: SparkSession) -> int:
    return max(1, spark.sparkContext.defaultParallelism)


def _spread(frame: DataFrame, parallelism: int) -> DataFrame:
    """At least one partition per core: a single Parquet row group or JSON file would
    otherwise be routed by one Python worker while the others idle."""
    if frame.rdd.getNumPartitions() < parallelism:
        return frame.repartition(parallelism)
    return frame


def reason_counts(pairs: list[tuple[str, int]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for reason, n in sorted(pairs):
        counts[reason] = counts.get(reason, 0) + n
    return counts


def _rejects_by_reason(staged: Path, rejected: int) -> dict[str, int]:
    """Rejected messages by reason, read from the staged rejects: one column of the rows
    the run set aside, no Spark job."""
    directory = staged / f"kind={delta.REJECTS}"
    if not rejected or not directory.is_dir():
        return {}  # the usual case: nothing to count
    rows = ds.dataset(directory, format="parquet").to_table(
        columns=["reason"], filter=ds.field("source") == MESSAGES_SOURCE
    )
    return reason_counts(list(Counter(rows.column("reason").to_pylist()).items()))


def stage_routed(
    messages: DataFrame,
    plan: Broadcast[SubscriptionPlan],
    sub_rejects: list[SubscriptionReject],
    staged: Path,
    max_output_rows: int,
    changes: Broadcast[PlanChanges] | None = None,
) -> tuple[dict[str, int], dict[str, int]]:
    """Route ``messages`` (``transforms.normalize_messages``) against the broadcast ``plan``
    (with a stream's ``changes`` since it applied) and write every routed row, and
    ``sub_rejects``, under ``staged``. Returns the totals (``transforms.routed_totals``) and
    the rejected messages by reason.

    The caller owns the broadcasts: a stream keeps its plan's for as long as the plan is
    its base, and ships the store's changes as a small second one (``pipeline.changes``)."""
    routed = transforms.route(
        _spread(messages, _parallelism(messages.sparkSession)),
        plan,
        max_output_rows,
        changes=changes,
    )
    totals = Observation("routed")
    io.write_staged(
        transforms.table_rows(routed.observe(totals, *transforms.routed_totals())), staged
    )
    counted: dict[str, int] = totals.get
    if sub_rejects:
        delta.write_rows(
            staged, delta.REJECTS, io.subscription_reject_rows(sub_rejects), "subscriptions.parquet"
        )
    return counted, _rejects_by_reason(staged, counted["rejected"])
