"""The streaming route on real files, a real (DuckDB) store and the shared local Spark
session, read back by delta-rs and by the DuckDB analytics: available-now routes what has
landed and a later run only what landed since; a store change applies from the next batch;
a batch Spark runs again after a restart is not committed twice."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from migrations.runner import upgrade
from pipeline import delta
from pipeline.analytics import run_query
from pipeline.stream import BatchProgress, StreamJob, run
from store import Database, NewSubscription, SubscriptionRepository, validate
from tests.pipeline.conftest import Generated, generate, naive_deliveries

TS = datetime(2024, 5, 1, 10, tzinfo=UTC)
Delivery = tuple[str, int, str, str]


class Store:
    """A migrated DuckDB store the test adds subscriptions to between runs."""

    def __init__(self, path: Path) -> None:
        self.url = f"duckdb:///{path}"
        db = Database(self.url)
        upgrade(db.url)
        db.dispose()
        self.subscriptions: list[tuple[int, str, str, str]] = []

    def add(self, rows: Sequence[tuple[str, str, str]]) -> int:
        """Add (tenant, subscriber, pattern) rows; the change-log seq after them."""
        db = Database(self.url)
        try:
            with db.write() as session:
                added = SubscriptionRepository(session).add_many(
                    [validate(NewSubscription(s, p, tenant=t)) for t, s, p in rows]
                )
            ids = [sub_id for sub_id, _ in added.items or []]
            self.subscriptions += [(i, *row) for i, row in zip(ids, rows, strict=True)]
            with db.read() as session:
                return SubscriptionRepository(session).last_seq()
        finally:
            db.dispose()

    def expected(self, messages: list[tuple[str, str, str]]) -> list[Delivery]:
        return sorted(naive_deliveries(Generated(self.subscriptions, messages)))


def _land(landing: Path, name: str, messages: list[tuple[str, str, str]]) -> None:
    """One file of messages, written aside and renamed into place (as producers must)."""
    partial = landing / f".{name}.partial"
    if name.endswith(".parquet"):
        ids, tenants, topics = zip(*messages, strict=True)
        pq.write_table(
            pa.table(
                {
                    "message_id": list(ids),
                    "tenant": list(tenants),
                    "topic": list(topics),
                    "ts": pa.array([TS] * len(ids), pa.timestamp("us", tz="UTC")),
                }
            ),
            partial,
        )
    else:
        lines = (
            json.dumps({"message_id": m, "tenant": t, "topic": topic, "ts": TS.isoformat()})
            for m, t, topic in messages
        )
        partial.write_text("\n".join(lines) + "\n", encoding="utf-8")
    partial.rename(landing / name)


def _deliveries(out: Path) -> list[Delivery]:
    """Every committed delivery, duplicates kept (delta-rs reading the table)."""
    rows = DeltaTable(str(out)).to_pyarrow_table(
        columns=["message_id", "subscription_id", "subscriber", "tenant"],
        filters=[("kind", "=", "deliveries")],
    )
    return sorted(zip(*(rows.column(i).to_pylist() for i in range(4)), strict=True))


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Store, Generated, Path, StreamJob]:
    data = generate(subscriptions=30, messages=60, seed=33, tenants=("t1", "t2"))
    store = Store(tmp_path / "store.duckdb")
    store.add([(t, s, p) for _, t, s, p in data.subscriptions])
    landing = tmp_path / "landing"
    landing.mkdir()
    job = StreamJob(
        landing=str(landing), out=tmp_path / "out", database_url=store.url, available_now=True
    )
    return store, data, landing, job


def _run(spark: SparkSession, job: StreamJob) -> list[BatchProgress]:
    seen: list[BatchProgress] = []
    run(spark, job, seen.append)
    return seen


@pytest.mark.slow
def test_each_file_is_routed_once_and_a_store_change_applies_from_the_next_batch(
    spark: SparkSession, setup: tuple[Store, Generated, Path, StreamJob]
) -> None:
    store, data, landing, job = setup
    first, second, third = data.messages[:20], data.messages[20:40], data.messages[40:]
    _land(landing, "a.jsonl", first)
    _land(landing, "b.parquet", second)
    seq = store.add([])  # no change: the seq the first batch must record

    (batch,) = _run(spark, job)
    assert (batch.batch_id, batch.messages, batch.version) == (0, 40, 0)
    assert batch.change_seq == seq and batch.lag_s is not None
    before = store.expected(first + second)
    assert _deliveries(job.out) == before and before

    # A subscriber to everything arrives, then a third file: only the third file is routed,
    # and it alone reaches the newcomer.
    later_seq = store.add([("t1", "late", "#")])
    assert later_seq > seq
    _land(landing, "c.jsonl", third)
    (batch,) = _run(spark, job)
    assert (batch.batch_id, batch.messages, batch.change_seq) == (1, 20, later_seq)
    after = _deliveries(job.out)
    assert after == sorted(before + store.expected(third))
    late = [d for d in after if d[2] == "late"]
    assert {d[0] for d in late} == {m for m, tenant, _ in third if tenant == "t1"}

    commits = [h for h in delta.history(job.out) if h.get("writer") == "stream"]
    assert [(h["batch"], h["change_seq"]) for h in commits] == [(1, later_seq), (0, seq)]
    # DuckDB sees the same committed rows, and the first batch alone as of version 0.
    assert sum(run_query("tenants", job.out).column("deliveries")) == len(after)
    assert sum(run_query("tenants", job.out, as_of=0).column("deliveries")) == len(before)


@pytest.mark.slow
def test_a_batch_spark_runs_again_after_a_restart_is_not_committed_twice(
    spark: SparkSession, setup: tuple[Store, Generated, Path, StreamJob]
) -> None:
    """A driver killed after the table commit but before Spark recorded the batch: Spark's
    record of it (the checkpoint's commits/0) is removed, so the restarted stream runs batch
    0 again, with the same files; the table already holds it and keeps one copy."""
    store, data, landing, job = setup
    _land(landing, "a.jsonl", data.messages[:30])
    (batch,) = _run(spark, job)
    once = _deliveries(job.out)
    assert once == store.expected(data.messages[:30]) and batch.version == 0

    commits = job.checkpoint_dir / "commits"
    for name in ("0", ".0.crc"):  # the record and Hadoop's checksum of it
        (commits / name).unlink()
    (again,) = _run(spark, job)
    assert (again.batch_id, again.version) == (0, None)  # run again, not committed again
    assert _deliveries(job.out) == once
    assert DeltaTable(str(job.out)).version() == 0
    assert len(list(job.out.glob("batch-*"))) == 1  # the skipped run staged nothing
