"""Shared subscriptions in the routing job: one member per group per message, chosen by
hash(message_id), so a rerun (another router, another batch order, another Spark run)
writes the same deliveries, and the service's ``hash`` policy keyed by the message id
chooses the same member."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from loader.groups import GroupIndex
from pipeline.codes import DELIVERY
from pipeline.executor import Router
from pipeline.job import RouteJob, run
from pipeline.subscriptions import build_plan
from store import Change

TS = datetime(2024, 5, 1, 12, tzinfo=UTC)
#: (id, tenant, subscriber, pattern, group, policy)
SUBSCRIPTIONS = [
    (1, "default", "audit", "orders.#", None, None),
    (2, "default", "w1", "orders.*", "workers", "round_robin"),
    (3, "default", "w2", "orders.*", "workers", None),
    (4, "default", "w3", "orders.eu", "workers", None),
    (5, "default", "b1", "orders.#", "billing", "hash"),
    (6, "default", "b2", "orders.#", "billing", "hash"),
    (7, "other", "w1", "orders.*", "workers", "random"),  # another tenant: its own group
]
WORKERS = {2, 3, 4}
BILLING = {5, 6}


def _subscriptions(rows: Sequence[tuple[object, ...]] = SUBSCRIPTIONS) -> pa.Table:
    names = ("id", "tenant", "subscriber", "pattern", "group", "group_policy")
    columns = list(zip(*rows, strict=True))
    return pa.table(
        {
            name: pa.array(column, pa.int64() if name == "id" else pa.string())
            for name, column in zip(names, columns, strict=True)
        }
    )


def _messages(n: int, topic: str = "orders.eu") -> pa.RecordBatch:
    string = pa.string()
    return pa.RecordBatch.from_pydict(
        {
            "message_id": pa.array([f"m{i}" for i in range(n)], string),
            "topic": pa.array([topic] * n, string),
            "ts": pa.array([TS] * n, pa.timestamp("us", tz="UTC")),
            "reason": pa.nulls(n, string),
            "detail": pa.nulls(n, string),
            "raw": pa.nulls(n, string),
        }
    )


def _delivered(router: Router, batch: pa.RecordBatch) -> dict[str, set[int]]:
    out: dict[str, set[int]] = defaultdict(set)
    for part in router.route_batch(batch):
        for row in part.to_pylist():
            if row["output"] == DELIVERY:
                out[row["message_id"]].add(row["subscription_id"])
    return dict(out)


def test_one_member_per_group_stable_across_routers_and_order() -> None:
    plan, rejects = build_plan(_subscriptions())
    assert rejects == []
    batch = _messages(600)
    first = _delivered(Router(plan), batch)
    assert len(first) == 600
    for ids in first.values():
        assert 1 in ids  # ungrouped: always
        assert len(ids & WORKERS) == 1 and len(ids & BILLING) == 1
        assert 7 not in ids  # another tenant's group
        assert len(ids) == 3
    # A rerun: a fresh router (another worker), messages in reverse order.
    again = _delivered(
        Router(build_plan(_subscriptions())[0]), _messages(600).take(pa.array(range(599, -1, -1)))
    )
    assert again == first
    # hash(message_id) spreads messages over the members (600 / 3 = 200 each expected).
    counts = Counter(next(iter(ids & WORKERS)) for ids in first.values())
    assert set(counts) == WORKERS and all(140 <= n <= 260 for n in counts.values()), counts


def test_only_matching_members_are_candidates() -> None:
    plan, _ = build_plan(_subscriptions())
    # "orders.us": member 4 (orders.eu) does not match; "orders": only the "#" ones do.
    for ids in _delivered(Router(plan), _messages(200, "orders.us")).values():
        assert len(ids & {2, 3}) == 1 and 4 not in ids
    for ids in _delivered(Router(plan), _messages(50, "orders")).values():
        assert ids & WORKERS == set() and len(ids & BILLING) == 1


def test_the_service_hash_policy_keyed_by_message_id_chooses_the_same_member() -> None:
    plan, _ = build_plan(_subscriptions())
    routed = _delivered(Router(plan), _messages(300))
    index = GroupIndex()
    for sub_id, tenant, subscriber, pattern, group, _ in SUBSCRIPTIONS:
        if group is not None:
            index.add(
                Change(
                    0,
                    "add",
                    sub_id,
                    tenant,
                    subscriber,
                    pattern,
                    "amqp",
                    "topic",
                    None,
                    None,
                    group,
                    "hash",
                )
            )
    matched = [1, 2, 3, 4, 5, 6]  # what "orders.eu" matches in the default tenant
    for message_id, ids in routed.items():
        assert set(index.deliver("default", matched, message_id).ids) == ids


def test_a_member_stating_another_policy_is_rejected() -> None:
    rows = [*SUBSCRIPTIONS, (8, "default", "w4", "orders.*", "workers", "hash")]
    plan, rejects = build_plan(_subscriptions(rows))
    assert [(r.subscription_id, r.reason) for r in rejects] == [(8, "group_policy_conflict")]
    assert 8 not in plan.ids
    bad_group = [(9, "default", "x", "a", "a/b", None)]
    assert [r.reason for r in build_plan(_subscriptions(bad_group))[1]] == ["invalid_group"]


def test_a_spark_rerun_writes_the_same_deliveries(spark: SparkSession, tmp_path: Path) -> None:
    subscriptions = tmp_path / "subs.parquet"
    pq.write_table(_subscriptions(), subscriptions)
    messages = tmp_path / "messages.parquet"
    pq.write_table(pa.Table.from_batches([_messages(400)]), messages)

    def deliveries(out: Path) -> set[tuple[str, int]]:
        run(spark, RouteJob(messages=str(messages), out=out, subscriptions=str(subscriptions)))
        table = DeltaTable(str(out)).to_pyarrow_table(filters=[("kind", "=", "deliveries")])
        return {(r["message_id"], r["subscription_id"]) for r in table.to_pylist()}

    first = deliveries(tmp_path / "one")
    assert first == deliveries(tmp_path / "two")
    per_message: dict[str, set[int]] = defaultdict(set)
    for message_id, sub_id in first:
        per_message[message_id].add(sub_id)
    assert len(per_message) == 400
    assert all(len(ids & WORKERS) == 1 and len(ids & BILLING) == 1 for ids in per_message.values())
    assert first == {
        (m, i)
        for m, ids in _delivered(Router(build_plan(_subscriptions())[0]), _messages(400)).items()
        for i in ids
    }
