"""The streaming route on real files, a real store (PostgreSQL, DuckDB) and the shared local
Spark session, read back by delta-rs and by the DuckDB analytics: a store change applies to
the batches that start after it and to none before, DuckDB reading during the writes sees
whole batches only, and a batch Spark runs again after a restart is not committed twice.
(Kills of the driver: test_stream_faults.py.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from harness.services import reset_postgres
from pipeline import delta
from pipeline.analytics import open_tables, run_query
from pipeline.maintenance import compact, vacuum
from pipeline.stream import BatchProgress, StreamJob, run, start
from tests.pipeline.conftest import Generated, generate
from tests.pipeline.landing import Store, deliveries, land

WAIT_S: Final = 180.0


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Store, Generated, Path, StreamJob]:
    data = generate(subscriptions=30, messages=60, seed=33, tenants=("t1", "t2"))
    store = Store(f"duckdb:///{tmp_path / 'store.duckdb'}")
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


class Poller(threading.Thread):
    """Reads the table through the analytics' DuckDB connection (``open_tables``) over and
    over while the stream writes it, keeping every answer (rows per message), and compacts
    and vacuums it in between (``pipeline.maintenance``, as ``topicstore table`` does)."""

    def __init__(self, out: Path) -> None:
        super().__init__(daemon=True)
        self.out = out
        self.stop = threading.Event()
        self.seen: list[dict[str, int]] = []
        self.error: BaseException | None = None
        self.compactions = 0

    def run(self) -> None:
        try:
            while not self.stop.wait(0.05):
                if not delta.is_table(self.out):
                    continue
                self.seen.append(self.read())
                if len(self.seen) % 5 == 0:
                    self.compactions += compact(self.out).version is not None
                    vacuum(self.out)  # the default retention: in-flight staged files stay
        except BaseException as e:  # reported by the test's thread
            self.error = e

    def read(self) -> dict[str, int]:
        with open_tables(self.out) as conn:
            rows = conn.execute(
                "SELECT message_id, count(*) FROM routed "
                "WHERE kind IN ('deliveries', 'unmatched') GROUP BY message_id"
            ).fetchall()
        return dict(rows)


def _wait(what: str, done: Callable[[], object], query: StreamingQuery) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        if query.exception() is not None or not query.isActive:
            pytest.fail(f"the stream stopped before {what}: {query.exception()}")
        assert time.monotonic() < deadline, f"no {what} after {WAIT_S} s"
        time.sleep(0.02)


@pytest.mark.slow
def test_a_running_stream_routes_each_batch_against_the_store_as_the_batch_started(
    spark: SparkSession, postgres_url: str, tmp_path: Path
) -> None:
    """One ``--follow`` stream over three files landed one by one, on PostgreSQL: a
    subscriber added while batch 1 runs receives nothing of batch 1 (which read its
    snapshot before the add) and every message of its tenant from batch 2 (started after).
    Meanwhile DuckDB polls the table and sees each file's rows all or not at all, and the
    table is compacted and vacuumed between the polls."""
    reset_postgres(postgres_url)
    data = generate(subscriptions=30, messages=60, seed=33, tenants=("t1", "t2"))
    store = Store(postgres_url)
    seq = store.add([(t, s, p) for _, t, s, p in data.subscriptions])
    files = [data.messages[:20], data.messages[20:40], data.messages[40:]]
    landing, out = tmp_path / "landing", tmp_path / "out"
    landing.mkdir()
    job = StreamJob(landing=str(landing), out=out, database_url=store.url, trigger_interval_s=0.2)
    seen: list[BatchProgress] = []
    query, writer = start(spark, job, seen.append)
    poller = Poller(out)
    poller.start()
    try:
        land(landing, "a.jsonl", files[0])
        _wait("batch 0", lambda: seen, query)
        land(landing, "b.parquet", files[1])
        _wait("batch 1's staged files", lambda: any(out.glob("batch-1-*")), query)
        late_seq = store.add([("t1", "late", "#")])  # while batch 1 runs
        _wait("batch 1", lambda: len(seen) == 2, query)
        land(landing, "c.jsonl", files[2])
        _wait("batch 2", lambda: len(seen) == 3, query)
    finally:
        poller.stop.set()
        poller.join(timeout=30)
        query.stop()
        if writer.snapshots is not None:
            writer.snapshots.close()

    assert [(b.batch_id, b.messages) for b in seen] == [(0, 20), (1, 20), (2, 20)]
    assert seen[0].version == 0 and seen[0].version < seen[1].version < seen[2].version  # type: ignore[operator]
    assert [b.change_seq for b in seen] == [seq, seq, late_seq] and late_seq > seq
    before_late = [d for d in store.expected(files[0] + files[1]) if d[2] != "late"]
    got = deliveries(out)
    assert got == sorted(before_late + store.expected(files[2]))
    late = {d[0] for d in got if d[2] == "late"}
    assert late == {m for m, tenant, _ in files[2] if tenant == "t1"} and late

    commits = [h for h in delta.history(out) if h.get("writer") == "stream"]
    assert [(h["batch"], h["change_seq"]) for h in commits] == [(2, late_seq), (1, seq), (0, seq)]
    first = {m for m, _, _ in files[0]}
    assert sum(run_query("tenants", out, as_of=0).column("deliveries")) == len(
        [d for d in before_late if d[0] in first]
    )

    # Every poll saw each file's rows all or none: the final count per file, or nothing.
    assert poller.error is None, poller.error
    final = poller.read()
    assert len(poller.seen) >= 3 and poller.compactions >= 1
    whole = [sum(final.get(m, 0) for m, _, _ in f) for f in files]
    for counts in poller.seen:
        per_file = [sum(counts.get(m, 0) for m, _, _ in f) for f in files]
        assert all(n in (0, w) for n, w in zip(per_file, whole, strict=True)), per_file
    assert any(
        0 < sum(map(bool, [sum(c.get(m, 0) for m, _, _ in f) for f in files])) < 3
        for c in poller.seen
    ), "no poll fell between two batches"


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
