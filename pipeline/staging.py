"""The routing step shared by the batch job (``pipeline.job``) and every micro-batch of the
stream (``pipeline.stream``): a snapshot of the subscriptions, and messages routed against
it into staged files of the routed table (``pipeline.delta``), ready for one commit.

The matcher runs once per message and the routed rows are written in one pass, partitioned
by ``kind`` and ``date``, by the Python workers that routed them (``pipeline.files``); the
totals come back with the files' names (no job of their own), and rejected messages, when
there are any, are counted by reason from the staged files.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.dataset as ds
from pyspark import Broadcast
from pyspark.sql import DataFrame, SparkSession

from matcher import HeaderLimits, Limits
from pipeline import delta, io, transforms
from pipeline.changes import PlanChanges
from pipeline.errors import PipelineError
from pipeline.files import TOTALS
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


#: Input splits per core: a file is read as this many tasks per core, so that the last ones
#: do not leave a core idle (a 10M-message file made three tasks of two cores: a third of the
#: run on one core) and each task's Python worker writes while the others route.
SPLITS_PER_CORE: Final = 4


def _split(spark: SparkSession, parallelism: int) -> None:
    """Read files as at least ``SPLITS_PER_CORE`` tasks per core (Spark's own floor on the
    splits of a file scan; a split is still at least one Parquet row group)."""
    spark.conf.set("spark.sql.files.minPartitionNum", str(SPLITS_PER_CORE * parallelism))


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


def _rejects_by_reason(table: Path, files: list[Path], rejected: int) -> dict[str, int]:
    """Rejected messages by reason, read from the staged rejects: one column of the rows
    the run set aside, no Spark job."""
    rejects = [table / f for f in files if f.parts[1] == f"kind={delta.REJECTS}"]
    if not rejected or not rejects:
        return {}  # the usual case: nothing to count
    rows = ds.dataset([str(f) for f in rejects], format="parquet").to_table(
        columns=["reason"], filter=ds.field("source") == MESSAGES_SOURCE
    )
    return reason_counts(list(Counter(rows.column("reason").to_pylist()).items()))


@dataclass(frozen=True, slots=True)
class Staged:
    """What a routing step staged: its totals (``files.TOTALS``), rejected messages by
    reason, and the files to commit (relative to the table)."""

    totals: dict[str, int]
    rejects_by_reason: dict[str, int]
    files: list[Path]


def stage_routed(
    messages: DataFrame,
    plan: Broadcast[SubscriptionPlan],
    sub_rejects: list[SubscriptionReject],
    table: Path,
    staged: Path,
    max_output_rows: int,
    changes: Broadcast[PlanChanges] | None = None,
) -> Staged:
    """Route ``messages`` (``transforms.normalize_messages``) against the broadcast ``plan``
    (with a stream's ``changes`` since it applied) and write every routed row, and
    ``sub_rejects``, under ``staged`` (a new directory of ``table``): the executors write
    the files (``transforms.stage``), and the files the successful tasks name are the ones
    to commit.

    The caller owns the broadcasts: a stream keeps its plan's for as long as the plan is
    its base, and ships the store's changes as a small second one (``pipeline.changes``)."""
    parallelism = _parallelism(messages.sparkSession)
    _split(messages.sparkSession, parallelism)
    returned = transforms.stage(
        _spread(messages, parallelism),
        plan,
        table,
        staged,
        max_output_rows,
        changes=changes,
    ).collect()
    totals = {name: sum(row[name] for row in returned) for name in TOTALS}
    files = [Path(row["path"]) for row in returned if row["path"] is not None]
    if sub_rejects:
        rows = io.subscription_reject_rows(sub_rejects)
        written = delta.write_rows(staged, delta.REJECTS, rows, "subscriptions.parquet")
        files += [path.relative_to(table) for path in written]
    return Staged(totals, _rejects_by_reason(table, files, totals["rejected"]), files)
