"""The streaming route on real files, a real (DuckDB) store and the shared local Spark
session, read back by delta-rs and by the DuckDB analytics: available-now routes what has
landed and a later run only what landed since; a store change applies from the next batch;
a batch Spark runs again after a restart is not committed twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from pipeline import delta
from pipeline.analytics import run_query
from pipeline.stream import BatchProgress, StreamJob, run
from tests.pipeline.conftest import Generated, generate
from tests.pipeline.landing import Store, deliveries, land


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
    land(landing, "a.jsonl", first)
    land(landing, "b.parquet", second)
    seq = store.add([])  # no change: the seq the first batch must record

    (batch,) = _run(spark, job)
    assert (batch.batch_id, batch.messages, batch.version) == (0, 40, 0)
    assert batch.change_seq == seq and batch.lag_s is not None
    before = store.expected(first + second)
    assert deliveries(job.out) == before and before

    # A subscriber to everything arrives, then a third file: only the third file is routed,
    # and it alone reaches the newcomer.
    later_seq = store.add([("t1", "late", "#")])
    assert later_seq > seq
    land(landing, "c.jsonl", third)
    (batch,) = _run(spark, job)
    assert (batch.batch_id, batch.messages, batch.change_seq) == (1, 20, later_seq)
    after = deliveries(job.out)
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
    land(landing, "a.jsonl", data.messages[:30])
    (batch,) = _run(spark, job)
    once = deliveries(job.out)
    assert once == store.expected(data.messages[:30]) and batch.version == 0

    commits = job.checkpoint_dir / "commits"
    for name in ("0", ".0.crc"):  # the record and Hadoop's checksum of it
        (commits / name).unlink()
    (again,) = _run(spark, job)
    assert (again.batch_id, again.version) == (0, None)  # run again, not committed again
    assert deliveries(job.out) == once
    assert DeltaTable(str(job.out)).version() == 0
    assert len(list(job.out.glob("batch-*"))) == 1  # the skipped run staged nothing
