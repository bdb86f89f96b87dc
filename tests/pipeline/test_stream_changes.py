"""A stream's incremental subscriptions (``pipeline.changes``) route exactly as a full read
of the store at the same change seq: the same messages through both, on the shared local
Spark session and a real store (PostgreSQL and DuckDB), through adds, removes, expiry set,
passed and cleared, groups re-created with another policy, headers subscriptions, rows the
plan refuses, and a re-base; a running stream ships a change made between two batches to
the next one. Also the executor's side alone: a router that applies changes in steps routes
as one built from the full plan."""

from __future__ import annotations

import itertools
import json
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark import Broadcast
from pyspark.sql import DataFrame, SparkSession

from harness.workloads import dense_topic
from matcher import HeaderLimits, Limits
from pipeline import executor, transforms
from pipeline.changes import PlanChanges, Tracker
from pipeline.codes import DELIVERY
from pipeline.staging import Snapshot, plan_subscriptions
from pipeline.stream import BatchProgress, Snapshots, StreamJob, run
from pipeline.subscriptions import SubscriptionPlan
from store import Database, NewSubscription, SubscriptionRepository, validate
from store.arrow import SCHEMA
from store.records import Change

#: The job's pattern limit, below the store's: longer stored patterns are the plan's rejects.
LIMITS = Limits(max_pattern_bytes=9)
ISO = "2024-05-01T12:00:00Z"
MESSAGES = "message_id string, topic string, ts string, tenant string, headers string"
Row = tuple[object, ...]


def _messages(n: int, seed: int) -> list[tuple[str, str, str, str, str | None]]:
    rng = random.Random(seed)
    headers = ('{"x": "1"}', '{"x": "2", "y": "3"}', None, None)
    return [
        (f"m{k:04d}", dense_topic(rng), ISO, rng.choice(("t1", "t2")), rng.choice(headers))
        for k in range(n)
    ]


class Store:
    """The test's writes, each in its own transaction, the database released after it (a
    DuckDB file is then free for the stream's reads)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.rng = random.Random(7)
        self.names = itertools.count()  # a subscriber each: no row is added twice

    def write(self, change: Callable[[SubscriptionRepository], object]) -> None:
        with self.db.write() as session:
            change(SubscriptionRepository(session))
        self.db.dispose()

    def add(self, *items: NewSubscription) -> list[int]:
        ids: list[int] = []

        def add(repo: SubscriptionRepository) -> None:
            added = repo.add_many([validate(item) for item in items])
            ids.extend(sub_id for sub_id, _ in added.items or [])

        self.write(add)
        return ids

    def topics(self, n: int, tenant: str, **fields: object) -> list[int]:
        """``n`` new topic subscriptions with patterns of 1-3 words."""
        words = ("a", "b", "c", "*", "#")
        return self.add(
            *(
                NewSubscription(
                    f"s{next(self.names)}",
                    ".".join(self.rng.choice(words) for _ in range(self.rng.randint(1, 3))),
                    tenant=tenant,
                    **fields,  # type: ignore[arg-type]
                )
                for _ in range(n)
            )
        )

    def remove(self, *ids: int) -> None:
        self.write(lambda repo: [repo.remove(i) for i in ids])

    def expire(self, at: datetime | None, *ids: int) -> None:
        self.write(lambda repo: [repo.set_expiry(i, at) for i in ids])


def _headers(
    subscriber: str, tenant: str, criteria: tuple[tuple[str, str | None], ...]
) -> NewSubscription:
    return NewSubscription(
        subscriber, tenant=tenant, kind="headers", dialect="headers", criteria=criteria, mode="all"
    )


def _rows(routed: DataFrame) -> list[tuple[Row, int]]:
    """Every routed row, and the seconds of its message's timestamp."""
    return [
        ((r.output, r.message_id, r.subscription_id, r.subscriber, r.tenant, r.reason), r.ts.second)
        for r in routed.collect()
    ]


def _routed(
    spark: SparkSession,
    messages: list[tuple[str, str, str, str, str | None]],
    plan: Broadcast[SubscriptionPlan],
    changes: Broadcast[PlanChanges] | None,
) -> Counter[Row]:
    """Every routed row (deliveries, unmatched, rejected messages), as a multiset."""
    frame = transforms.normalize_messages(spark.createDataFrame(messages, MESSAGES))
    return Counter(row for row, _ in _rows(transforms.route(frame, plan, changes=changes)))


def _rejects(snapshot: Snapshot) -> Counter[tuple[int | None, str | None, str]]:
    return Counter((r.subscription_id, r.pattern, r.reason) for r in snapshot.rejects)


@pytest.mark.slow
@pytest.mark.parametrize("database", ["duckdb"], indirect=True)
def test_incremental_snapshots_route_as_a_full_read_at_the_same_seq(
    spark: SparkSession, database: Database, tmp_path: Path
) -> None:
    store = Store(database)
    base = store.topics(24, "t1") + store.topics(12, "t2")
    grouped = store.topics(3, "t1", group="g", group_policy="hash")
    (header,) = store.add(_headers("h1", "t1", (("x", "1"),)))
    refused = store.add(*(NewSubscription(f"long{k}", "a.b.c.d.e.f", tenant="t2") for k in "12"))
    job = StreamJob(
        landing=str(tmp_path), out=tmp_path / "out", database_url=database.url, limits=LIMITS
    )
    # A re-base once more than 11 operations since the base would be shipped.
    snapshots = Snapshots(spark, job, None, rebase_min=11)
    added: list[int] = []
    soon: list[datetime] = []

    def expire_soon() -> None:
        soon.append(datetime.now(UTC) + timedelta(seconds=2))
        store.expire(soon[0], base[1], added[0])  # held ids: only their expiry changes

    steps: list[tuple[Callable[[], object], int]] = [  # a step, and the operations it ships
        (lambda: None, 0),  # the base
        (
            lambda: added.extend(
                store.topics(2, "t2") + store.topics(1, "t1", group="g", group_policy="hash")
            ),
            3,
        ),
        (lambda: store.remove(base[0], grouped[0], refused[0]), 2),
        (expire_soon, 4),  # each: its position removed, the id added again
        (lambda: time.sleep(max(0.0, (soon[0] - datetime.now(UTC)).total_seconds() + 0.2)), 2),
        (lambda: store.add(_headers("h2", "t2", (("y", None),))), 0),  # past the bound: re-base
        (lambda: store.expire(None, base[1]), 1),  # expired, not swept: live again
        (lambda: store.remove(*grouped[1:], added[2], header), 4),  # group g is gone...
        (lambda: store.topics(2, "t1", group="g", group_policy="round_robin"), 2),  # ...and back
    ]
    messages = _messages(300, seed=33)
    incremental: list[Counter[Row]] = []
    full: list[Snapshot] = []
    bases: list[str] = []
    shipped = 0
    for step, ops in steps:
        step()
        snapshot, plan, changes = snapshots.current()
        # The full read at once: the store does not move in between.
        whole = plan_subscriptions(
            spark,
            subscriptions=None,
            database_url=database.url,
            engine=job.engine,
            limits=LIMITS,
            header_limits=HeaderLimits(),
        )
        assert whole.seq == snapshot.seq
        assert len(whole.plan) == len(snapshot)
        assert _rejects(whole) == _rejects(snapshot) != Counter()
        # The operations since the base only grow, until a re-base starts them afresh.
        assert snapshot.changes is not None
        shipped = 0 if bases and bases[-1] != snapshot.plan.plan_id else shipped
        assert len(snapshot.changes.ops) == shipped + ops
        assert (changes is None) == (not snapshot.changes.ops)
        shipped += ops
        bases.append(snapshot.plan.plan_id)
        full.append(whole)
        incremental.append(_routed(spark, messages, plan, changes))
    assert bases == [bases[0]] * 5 + [bases[5]] * 4 and bases[0] != bases[5]
    # The full reads' routes in one Spark job: each step's messages carry the step as the
    # seconds of their timestamp (their ids stay: a group's member is chosen by id).
    frames = [
        transforms.route(
            transforms.normalize_messages(
                spark.createDataFrame(
                    [(m[0], m[1], ISO.replace(":00Z", f":{k:02d}Z"), *m[3:]) for m in messages],
                    MESSAGES,
                )
            ),
            spark.sparkContext.broadcast(whole.plan),
        )
        for k, whole in enumerate(full)
    ]
    routed = frames[0]
    for frame in frames[1:]:
        routed = routed.unionByName(frame)
    want: list[Counter[Row]] = [Counter() for _ in full]
    for row, k in _rows(routed):
        want[k][row] += 1
    for k, got in enumerate(incremental):
        assert got == want[k], f"step {k}"
        assert sum(n for row, n in got.items() if row[0] == DELIVERY) > 0
    snapshots.close()


def _subscription(sub_id: int, tenant: str, pattern: str, **fields: object) -> dict[str, object]:
    return {
        "id": sub_id,
        "tenant": tenant,
        "subscriber": f"s{sub_id % 3}",
        "pattern": pattern,
        "dialect": "amqp",
        "kind": "topic",
        **fields,
    }


def _change(seq: int, op: str, row: dict[str, object]) -> Change:
    return Change(
        seq,
        op,  # type: ignore[arg-type]
        row["id"],  # type: ignore[arg-type]
        row["tenant"],  # type: ignore[arg-type]
        row["subscriber"],  # type: ignore[arg-type]
        row["pattern"],  # type: ignore[arg-type]
        "amqp",
        "topic",
        None,
        None,
        row.get("group"),  # type: ignore[arg-type]
        row.get("group_policy"),  # type: ignore[arg-type]
        row.get("expires_at"),  # type: ignore[arg-type]
    )


def _route(router: executor.Router, batch: pa.RecordBatch) -> Counter[Row]:
    out = pa.Table.from_batches(list(router.route_batch(batch)))
    names = ("output", "message_id", "subscription_id", "subscriber", "tenant", "reason")
    return Counter(zip(*(out.column(n).to_pylist() for n in names), strict=True))


def test_a_router_applying_changes_in_steps_routes_as_one_built_from_the_full_plan() -> None:
    """On the executor alone: the same router, kept between steps, applies each step's new
    operations only (to engines built before the changes, and a tenant's new one), and a new
    router applies them all at once; one that has applied more than a change set holds is
    built again."""
    patterns = ["a.*", "#", "a.b", "*.b", "b.#", "a.b.c", "c", "#.c"]
    rows = {i: _subscription(i, ("t1", "t2")[i % 2], p) for i, p in enumerate(patterns, 1)}
    rows[9] = _subscription(9, "t1", "a.#", group="g", group_policy="hash")
    rows[10] = _subscription(10, "t1", "#", group="g", group_policy="hash")
    tracker = _tracker(rows, 0)
    rng = random.Random(5)
    batch = pa.RecordBatch.from_pylist(
        [
            {"message_id": f"m{k}", "topic": dense_topic(rng), "tenant": f"t{rng.randint(1, 3)}"}
            for k in range(200)
        ]
    )
    batch = batch.append_column("ts", pa.nulls(batch.num_rows, pa.timestamp("us", tz="UTC")))
    for name in ("reason", "detail", "raw"):
        batch = batch.append_column(name, pa.nulls(batch.num_rows, pa.string()))
    kept = executor.Router(tracker.base)
    _route(kept, batch)  # builds its engines before any change
    seq = 0
    # Each step's changes: an id removed, or a row added (a held id: its expiry changed).
    steps: list[list[int | dict[str, object]]] = [
        [2, _subscription(11, "t2", "#", group="g"), _subscription(14, "t3", "*.*")],
        [_subscription(12, "t1", "a.*", group="g", group_policy="hash")],
        [9, 11, _subscription(13, "t2", "c")],
        [{**rows[1], "expires_at": datetime(2999, 1, 1, tzinfo=UTC)}],
    ]
    for step in steps:
        changes = []
        for item in step:
            seq += 1
            if isinstance(item, int):
                changes.append(_change(seq, "remove", rows.pop(item)))
            else:
                changes.append(_change(seq, "add", item))
                rows[int(item["id"])] = item  # type: ignore[call-overload]
        assert tracker.advance(changes, datetime.now(UTC))
        kept.apply(tracker.changes)
        assert kept.applied == len(tracker.changes.ops)
        whole = _tracker(rows, seq).base
        assert len(tracker) == len(whole)
        want = _route(executor.Router(whole), batch)
        assert _route(kept, batch) == want
        fresh = executor.Router(tracker.base)  # a new worker: the base and every change
        fresh.apply(tracker.changes)
        assert _route(fresh, batch) == want
    router = executor.router_for(tracker.base, tracker.changes)
    assert executor.router_for(tracker.base, tracker.changes) is router
    shorter = PlanChanges(tracker.base.plan_id, 0, tracker.changes.ops[:2], 0)
    assert executor.router_for(tracker.base, shorter).applied == 2


def _tracker(rows: dict[int, dict[str, object]], seq: int) -> Tracker:
    table = pa.Table.from_pylist(list(rows.values()), schema=SCHEMA)
    return Tracker(table, seq, engine="native", limits=LIMITS, header_limits=HeaderLimits())


@pytest.mark.slow
@pytest.mark.parametrize("database", ["duckdb"], indirect=True)
def test_a_stream_ships_a_change_made_between_its_batches_to_the_next_batch(
    spark: SparkSession, database: Database, tmp_path: Path
) -> None:
    """One running stream, a batch per file: a change committed after a batch (by the
    progress callback, between two batches) reaches the next batch, shipped as changes on
    the same base, and no earlier one."""
    store = Store(database)
    store.topics(10, "t1")
    landing = tmp_path / "landing"
    landing.mkdir()
    files = {
        name: [(f"{name}{m[0]}", *m[1:]) for m in _messages(40, seed=k)]
        for k, name in enumerate("abc")
    }
    for k, (name, messages) in enumerate(files.items()):
        lines = (
            json.dumps(dict(zip(("message_id", "topic", "ts", "tenant"), m, strict=False)))
            for m in messages
        )
        path = landing / f"{name}.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.utime(path, (1_700_000_000 + k, 1_700_000_000 + k))  # the order batches take them
    job = StreamJob(
        landing=str(landing),
        out=tmp_path / "out",
        database_url=database.url,
        available_now=True,
        max_files_per_trigger=1,
    )
    late: list[int] = []

    def between(batch: BatchProgress) -> None:
        seen.append(batch)
        if batch.batch_id == 0:
            late.extend(store.add(NewSubscription("late", "#", tenant="t1")))
        elif batch.batch_id == 1:
            store.remove(*late)
            store.add(NewSubscription("later", "#", tenant="t1"))

    seen: list[BatchProgress] = []
    run(spark, job, between)
    assert [(b.batch_id, b.shipped) for b in seen] == [(0, 0), (1, 1), (2, 3)]
    rows = DeltaTable(str(job.out)).to_pyarrow_table(
        columns=["message_id", "subscriber"], filters=[("kind", "=", "deliveries")]
    )
    got = Counter(zip(*(rows.column(i).to_pylist() for i in range(2)), strict=True))
    for name, subscriber in (("b", "late"), ("c", "later")):
        t1 = [m[0] for m in files[name] if m[3] == "t1"]
        assert sorted(m for (m, s), n in got.items() for _ in range(n) if s == subscriber) == t1
