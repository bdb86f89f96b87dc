"""The streaming route (``topicstore route --follow``): Spark Structured Streaming over a
landing directory, each micro-batch routed by the batch job's own step
(``staging.stage_routed``) and committed to the routed table exactly once.

Input: Spark's file source over the landing directory, Parquet (``*.parquet``) and JSON
lines (``*.json``, ``*.jsonl``, ``*.ndjson``, gzipped too) side by side, each normalized as
``route`` normalizes it. A file is routed once: the source records the files of every batch
in the checkpoint before the batch runs, and a restarted stream re-runs an unfinished batch
with the same files. Files must appear whole (written elsewhere or under a name starting with
``.`` or ``_``, then renamed into place). Parquet files share one layout: the first file's,
or ``route``'s canonical one (``DEFAULT_PARQUET``) when the directory starts empty.

Exactly once: a micro-batch's rows are staged under the table and committed in one Delta
transaction carrying (``app_id``, batch id); ``app_id`` is derived from the checkpoint's own
query id, so it is stable across restarts of this stream and new for a new checkpoint. A
batch whose id the table already holds for this app (killed after our commit, before Spark
recorded the batch) is skipped, not committed twice; one killed before the commit left only
invisible staged files, and its retry stages afresh.

Subscriptions: each micro-batch routes against one snapshot of the store, identified by the
change-log sequence number it reflects, which its commit records (``change_seq``). A change
committed to the store applies to every micro-batch that starts after it. The snapshot is a
base plan, read in full and broadcast once, plus the changes since it
(``pipeline.changes``). Cost of a change: on the driver O(changes), before each batch one
indexed query of the change log after the last seq applied (no row when nothing changed);
on each executor O(changes since the base) once per new change set, to deserialize it, and
O(1) engine work per change not applied yet. Past ``changes.rebase_bound`` operations since
the base (a tenth of it, at least 1,000) the stream re-bases: one full read and broadcast,
O(subscriptions), at most once per that many changes. A subscription whose ``expires_at``
passes leaves at the next batch, as a full read would leave it out. With
``--subscriptions FILE`` the file is read once, when the stream starts.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
from pyspark import Broadcast
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import StructType

from matcher import HeaderLimits, Limits
from pipeline import delta, io, transforms
from pipeline.changes import REBASE_MIN, PlanChanges, Tracker
from pipeline.codes import DEFAULT_ENGINE, MAX_OUTPUT_ROWS
from pipeline.errors import PipelineError
from pipeline.schema import CORRUPT_COLUMN, JSON_MESSAGES
from pipeline.session import JOB_SQL_CONF
from pipeline.staging import Snapshot, plan_subscriptions, stage_routed
from pipeline.subscriptions import SubscriptionPlan

log = logging.getLogger(__name__)

#: The Parquet layout assumed when the landing directory has no Parquet file yet.
DEFAULT_PARQUET: Final = (
    "message_id string, topic string, ts timestamp, tenant string, dialect string, "
    "headers map<string,string>"
)
JSON_GLOB: Final = "*.{json,jsonl,ndjson,json.gz,jsonl.gz,ndjson.gz}"
#: Default bound on the files one micro-batch takes (Spark's ``maxFilesPerTrigger``): a
#: backlog is routed in batches of this many files rather than in one.
MAX_FILES_PER_TRIGGER: Final = 100
CHECKPOINT_DIR: Final = "_checkpoint"
#: The column carrying each message's file modification time through the stream (the file
#: source's ``_metadata``), observed per batch for its lag.
LANDED: Final = "_landed"


@dataclass(frozen=True, slots=True)
class StreamJob:
    """A stream from ``landing`` into the routed table ``out``. ``checkpoint`` defaults to
    ``out/_checkpoint``; ``available_now`` routes what has landed and stops, otherwise a
    micro-batch starts every ``trigger_interval_s`` (when files have landed)."""

    landing: str
    out: Path
    checkpoint: Path | None = None
    subscriptions: str | None = None
    database_url: str | None = None
    #: Subscriptions read by the caller (``route --api``): routed to as they are.
    subscription_table: pa.Table | None = None
    subscriptions_from: str = "store"
    engine: str = DEFAULT_ENGINE
    limits: Limits = field(default_factory=Limits)
    header_limits: HeaderLimits = field(default_factory=HeaderLimits)
    max_output_rows: int = MAX_OUTPUT_ROWS
    available_now: bool = False
    trigger_interval_s: float = 1.0
    max_files_per_trigger: int = MAX_FILES_PER_TRIGGER

    @property
    def checkpoint_dir(self) -> Path:
        return self.checkpoint if self.checkpoint is not None else self.out / CHECKPOINT_DIR


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """One micro-batch: what it routed, how long it took, the table version it committed
    (None: the table held this batch already), the snapshot it routed against, and its lag:
    seconds from the newest of its files landing (modification time) to its commit."""

    batch_id: int
    messages: int
    deliveries: int
    unmatched: int
    rejected: int
    seconds: float
    version: int | None
    change_seq: int | None
    lag_s: float | None
    #: Changes since the base plan shipped with the batch (``pipeline.changes``; None: the
    #: subscriptions are not the store's).
    shipped: int | None = None

    def line(self) -> str:
        rate = self.messages / self.seconds if self.seconds > 0 else 0.0
        committed = f"version {self.version}" if self.version is not None else "already committed"
        lag = f"{self.lag_s:.1f} s" if self.lag_s is not None else "-"
        seq = self.change_seq if self.change_seq is not None else "-"
        shipped = f" (base + {self.shipped:,} changes)" if self.shipped is not None else ""
        return (
            f"batch {self.batch_id}: {self.messages:,} messages in {self.seconds:.1f} s "
            f"({rate:,.0f} msg/s): {self.deliveries:,} deliveries, "
            f"{self.unmatched:,} unmatched, {self.rejected:,} rejected; {committed}, "
            f"change seq {seq}{shipped}, lag {lag}"
        )


class Snapshots:
    """The stream's current subscription snapshot and its broadcasts. A file's (or a table
    the caller read) is read once, when the stream starts. The store's is a base plan,
    broadcast once, and the changes since it (``pipeline.changes``), shipped again only
    when the change log has moved or a subscription has expired; past the re-base bound,
    the base is read and broadcast again (see the module docstring for the cost)."""

    def __init__(
        self,
        spark: SparkSession,
        job: StreamJob,
        committed: tuple[int | None, int] | None,
        *,
        rebase_min: int = REBASE_MIN,
    ) -> None:
        self._spark = spark
        self._job = job
        self._rebase_min = rebase_min
        self.snapshot: Snapshot | None = None
        self._tracker: Tracker | None = None
        self._broadcast: Broadcast[SubscriptionPlan] | None = None
        self._changes: Broadcast[PlanChanges] | None = None
        #: The (change seq, subscriptions) of the snapshot whose subscription rejects the
        #: table holds already.
        self._rejects_written = committed

    def current(
        self,
    ) -> tuple[Snapshot, Broadcast[SubscriptionPlan], Broadcast[PlanChanges] | None]:
        """The snapshot a batch starting now routes against, its plan's broadcast and the
        broadcast of its changes since the plan (None: none)."""
        job = self._job
        store = job.database_url
        if job.subscriptions is not None or job.subscription_table is not None or store is None:
            if self.snapshot is None or self._broadcast is None:
                self.snapshot = plan_subscriptions(
                    self._spark,
                    subscriptions=job.subscriptions,
                    table=job.subscription_table,
                    table_source=job.subscriptions_from,
                    database_url=None,
                    engine=job.engine,
                    limits=job.limits,
                    header_limits=job.header_limits,
                )
                self._broadcast = self._spark.sparkContext.broadcast(self.snapshot.plan)
            return self.snapshot, self._broadcast, None
        tracker = self._tracker
        if tracker is not None and self.snapshot is not None and self._broadcast is not None:
            room = tracker.room()
            changes = io.store_changes(store, tracker.seq, room + 1)
            if len(changes) <= room:
                moved = tracker.advance(changes, datetime.now(UTC))
                if not tracker.full():
                    if moved:
                        self._ship(tracker)
                    return self.snapshot, self._broadcast, self._changes
        table, seq = io.store_subscriptions(store)
        tracker = self._tracker = Tracker(
            table,
            seq,
            engine=job.engine,
            limits=job.limits,
            header_limits=job.header_limits,
            rebase_min=self._rebase_min,
        )
        if self._broadcast is not None:
            self._broadcast.unpersist()
        self._broadcast = self._spark.sparkContext.broadcast(tracker.base)
        log.info("subscriptions: %d at change seq %s (a new base)", len(tracker.base), seq)
        self._ship(tracker)
        assert self.snapshot is not None
        return self.snapshot, self._broadcast, self._changes

    def _ship(self, tracker: Tracker) -> None:
        """The tracker's state as the snapshot, its changes as a new (small) broadcast."""
        changes = tracker.changes
        self.snapshot = Snapshot(tracker.base, tracker.rejects(), "store", tracker.seq, changes)
        if self._changes is not None:
            self._changes.unpersist()
        self._changes = self._spark.sparkContext.broadcast(changes) if changes.ops else None
        if changes.ops:
            log.info(
                "subscriptions: %d at change seq %s (%d changes since the base)",
                len(self.snapshot),
                tracker.seq,
                len(changes.ops),
            )

    def rejects_to_write(self, snapshot: Snapshot) -> bool:
        """Whether a batch should write ``snapshot``'s rejected subscriptions: once per
        snapshot (a batch that fails to commit leaves them for the next)."""
        return bool(snapshot.rejects) and self._rejects_written != (snapshot.seq, len(snapshot))

    def rejects_written(self, snapshot: Snapshot) -> None:
        self._rejects_written = (snapshot.seq, len(snapshot))

    def close(self) -> None:
        for broadcast in (self._broadcast, self._changes):
            if broadcast is not None:
                broadcast.unpersist()


def app_id(checkpoint: Path) -> str:
    """The stream's application id in the table's transactions: its checkpoint's query id
    (Spark writes ``metadata`` once, when the checkpoint is new, and keeps it across
    restarts)."""
    meta = json.loads((checkpoint / "metadata").read_text(encoding="utf-8"))
    return f"topicstore-stream-{meta['id']}"


def _parquet_schema(spark: SparkSession, landing: str) -> StructType | str:
    first = next(iter(sorted(Path(landing).rglob("*.parquet"))), None)
    return spark.read.parquet(str(first)).schema if first is not None else DEFAULT_PARQUET


def messages_stream(spark: SparkSession, job: StreamJob) -> DataFrame:
    """The landing directory's Parquet and JSON lines files as one stream of normalized
    messages (``transforms.normalize_messages``, each format on its own first)."""
    limit = str(job.max_files_per_trigger)
    parquet = (
        spark.readStream.schema(_parquet_schema(spark, job.landing))
        .option("pathGlobFilter", "*.parquet")
        .option("maxFilesPerTrigger", limit)
        .parquet(job.landing)
    )
    lines = (
        spark.readStream.schema(JSON_MESSAGES)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT_COLUMN)
        .option("pathGlobFilter", JSON_GLOB)
        .option("maxFilesPerTrigger", limit)
        .json(job.landing)
    )
    frames = [
        transforms.normalize_messages(
            source.select("*", sf.col("_metadata.file_modification_time").alias(LANDED)),
            keep=(LANDED,),
        )
        for source in (parquet, lines)
    ]
    return frames[0].unionByName(frames[1], allowMissingColumns=True)


def _last_seq(out: Path, app: str) -> tuple[int | None, int] | None:
    """The (change seq, subscriptions) of this stream's newest commit, if it is among the
    table's last 100 (whose subscription rejects are in the table already)."""
    if not delta.is_table(out):
        return None
    for entry in delta.history(out, 100):
        if entry.get("app") == app:
            return entry.get("change_seq"), int(entry.get("subscriptions", -1))
    return None


class BatchWriter:
    """The ``foreachBatch`` function: route, stage, commit once, report."""

    def __init__(
        self, spark: SparkSession, job: StreamJob, report: Callable[[BatchProgress], None]
    ) -> None:
        self._spark = spark
        self._job = job
        self._report = report
        self._app: str | None = None
        self.snapshots: Snapshots | None = None

    def _start(self) -> tuple[str, Snapshots]:
        if self._app is None or self.snapshots is None:
            self._app = app_id(self._job.checkpoint_dir)
            self.snapshots = Snapshots(self._spark, self._job, _last_seq(self._job.out, self._app))
        return self._app, self.snapshots

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        started = time.perf_counter()
        job = self._job
        app, snapshots = self._start()
        done = delta.committed_version(job.out, app)
        if done is not None and done >= batch_id:
            log.info("batch %d of %s is in the table already: skipped", batch_id, app)
            self._report(BatchProgress(batch_id, 0, 0, 0, 0, 0.0, None, None, None))
            return
        landed = Observation("landed")
        frame = frame.observe(landed, sf.max(LANDED).alias("newest")).drop(LANDED)
        snapshot, plan, changes = snapshots.current()
        staged = delta.stage(job.out, f"batch-{batch_id}")
        write_rejects = snapshots.rejects_to_write(snapshot)
        try:
            written = stage_routed(
                frame,
                plan,
                snapshot.rejects if write_rejects else [],
                job.out,
                staged,
                job.max_output_rows,
                changes,
            )
            counted = written.totals
            version, _ = delta.commit(
                job.out,
                written.files,
                txn=(app, batch_id),
                metadata={
                    "writer": "stream",
                    "app": app,
                    "batch": batch_id,
                    "change_seq": snapshot.seq,
                    "subscriptions": len(snapshot),
                    **counted,
                },
            )
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)  # never committed: nothing reads it
            raise
        if version is None:
            shutil.rmtree(staged, ignore_errors=True)
        elif write_rejects:
            snapshots.rejects_written(snapshot)
        newest: datetime | None = landed.get["newest"]
        self._report(
            BatchProgress(
                batch_id=batch_id,
                messages=counted["matched"] + counted["unmatched"] + counted["rejected"],
                deliveries=counted["deliveries"],
                unmatched=counted["unmatched"],
                rejected=counted["rejected"],
                seconds=time.perf_counter() - started,
                version=version,
                change_seq=snapshot.seq,
                lag_s=None if newest is None else max(0.0, time.time() - newest.timestamp()),
                shipped=None if snapshot.changes is None else len(snapshot.changes.ops),
            )
        )


def start(
    spark: SparkSession, job: StreamJob, report: Callable[[BatchProgress], None]
) -> tuple[StreamingQuery, BatchWriter]:
    """Start the stream; the caller waits on the query (``awaitTermination``) and stops it."""
    if job.subscriptions is None and job.subscription_table is None and job.database_url is None:
        raise PipelineError("no_subscriptions", "give a subscriptions file or a database URL")
    if not Path(job.landing).is_dir():
        raise PipelineError("no_landing_dir", f"{job.landing} is not a directory")
    for key, value in JOB_SQL_CONF.items():
        spark.conf.set(key, value)
    job.out.mkdir(parents=True, exist_ok=True)
    writer = BatchWriter(spark, job, report)
    stream = messages_stream(spark, job).writeStream.foreachBatch(writer)
    stream = stream.option("checkpointLocation", str(job.checkpoint_dir))
    trigger: dict[str, Any] = (
        {"availableNow": True}
        if job.available_now
        else {"processingTime": f"{job.trigger_interval_s} seconds"}
    )
    return stream.trigger(**trigger).start(), writer


def run(spark: SparkSession, job: StreamJob, report: Callable[[BatchProgress], None]) -> None:
    """Run the stream until it ends (``available_now``), fails, or is interrupted."""
    query, writer = start(spark, job, report)
    try:
        query.awaitTermination()
    except StreamingQueryException as e:  # a batch failed: its error, as one line
        message = str(e).strip().splitlines()[0] if str(e).strip() else "the stream failed"
        raise PipelineError("stream_failed", message) from e
    finally:
        query.stop()
        if writer.snapshots is not None:
            writer.snapshots.close()
