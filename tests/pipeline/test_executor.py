"""The executor-side router on Arrow batches, without Spark: hand-written cases, the naive
matcher on generated data, output batches bounded by rows, one router per plan."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from pipeline.codes import DELIVERY, REJECTED, UNMATCHED
from pipeline.executor import Router, router_for
from pipeline.schema import ROUTED_NAMES
from pipeline.subscriptions import build_plan
from tests.pipeline.conftest import generate, naive_deliveries

TS = datetime(2024, 5, 1, 12, tzinfo=UTC)


def _batch(rows: Sequence[Mapping[str, object]], optional: tuple[str, ...] = ()) -> pa.RecordBatch:
    """A batch in the ROUTE_INPUT layout (plus the ``optional`` columns)."""
    string = pa.string()
    columns: dict[str, pa.Array] = {
        "message_id": pa.array([r["message_id"] for r in rows], string),
        "topic": pa.array([r["topic"] for r in rows], string),
        "ts": pa.array([r.get("ts", TS) for r in rows], pa.timestamp("us", tz="UTC")),
        "reason": pa.array([r.get("reason") for r in rows], string),
        "detail": pa.array([r.get("detail") for r in rows], string),
        "raw": pa.array([r.get("raw") for r in rows], string),
    }
    for name in optional:
        columns[name] = pa.array([r.get(name) for r in rows], string)
    return pa.RecordBatch.from_pydict(columns)


def _subscriptions(rows: list[tuple[int, str, str]], **extra: list[object]) -> pa.Table:
    ids, subscribers, patterns = zip(*rows, strict=True)
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "subscriber": subscribers, "pattern": patterns, **extra}
    )


def _rows(router: Router, batch: pa.RecordBatch, max_rows: int = 65_536) -> list[dict[str, object]]:
    out = list(router.route_batch(batch, max_rows))
    assert all(b.schema.names == list(ROUTED_NAMES) for b in out)
    return [row for b in out for row in b.to_pylist()]


def _deliveries(rows: list[dict[str, object]]) -> set[tuple[object, ...]]:
    return {
        (r["message_id"], r["subscription_id"], r["subscriber"], r["tenant"])
        for r in rows
        if r["output"] == DELIVERY
    }


@pytest.mark.parametrize("engine", ["dfa", "trie", "native"])
def test_hand_written_batch(engine: str) -> None:
    plan, _ = build_plan(
        _subscriptions([(1, "alice", "stock.*.msft"), (2, "bob", "stock.#"), (3, "carol", "news")]),
        engine=engine,
    )
    batch = _batch(
        [
            {"message_id": "m1", "topic": "stock.nasdaq.msft"},
            {"message_id": "m2", "topic": "stock"},
            {"message_id": "m3", "topic": "weather.today"},
            {"message_id": "m4", "topic": "x" * 256},
            {"message_id": "m5", "topic": "a\x00b"},
            {"message_id": None, "topic": None, "reason": "malformed_row", "raw": "{oops"},
        ]
    )
    rows = _rows(Router(plan), batch)
    assert _deliveries(rows) == {
        ("m1", 1, "alice", "default"),
        ("m1", 2, "bob", "default"),
        ("m2", 2, "bob", "default"),
    }
    firsts = sorted((r["message_id"], r["first"]) for r in rows if r["output"] == DELIVERY)
    assert [f for m, f in firsts if m == "m1"].count(True) == 1 and ("m2", True) in firsts
    assert [r["message_id"] for r in rows if r["output"] == UNMATCHED] == ["m3"]
    rejects = [(r["message_id"], r["reason"], r["raw"]) for r in rows if r["output"] == REJECTED]
    assert rejects == [
        ("m4", "topic_too_long", None),
        ("m5", "nul_byte", None),
        (None, "malformed_row", "{oops"),
    ]
    assert all(r["ts"] == TS for r in rows if r["message_id"] is not None)


@pytest.mark.parametrize("engine", ["dfa", "trie", "cs_trie", "native"])
def test_agrees_with_the_naive_matcher_on_generated_data(engine: str) -> None:
    data = generate(subscriptions=150, messages=600, seed=11)
    plan, rejects = build_plan(data.subscriptions_table(), engine=engine)
    assert rejects == []
    batch = _batch([{"message_id": m, "topic": t} for m, _, t in data.messages])
    rows = _rows(Router(plan), batch)
    assert _deliveries(rows) == naive_deliveries(data)
    matched = {r["message_id"] for r in rows if r["output"] == DELIVERY}
    unmatched = {r["message_id"] for r in rows if r["output"] == UNMATCHED}
    assert matched | unmatched == {m for m, _, _ in data.messages} and not matched & unmatched
    assert sum(1 for r in rows if r["first"]) == len(matched)


@pytest.mark.parametrize("engine", ["native", "trie"])
@pytest.mark.parametrize("max_rows", [1, 3, 65_536])
def test_arrays_path_routes_as_the_per_message_path(engine: str, max_rows: int) -> None:
    """One engine, no upstream rejects, no headers, no groups: the router takes
    ``Matcher.match_ids``' arrays (``native``'s own, ``trie``'s the base class's) instead of
    a result per message. Its rows, rejects included and cut into batches of ``max_rows``
    deliveries, equal the per-message path's, taken by the same messages beside one
    rejected upstream (whose row is then left out)."""
    subscriptions = _subscriptions(
        [(1, "alice", "stock.*.msft"), (2, "bob", "stock.#"), (3, "carol", "#"), (4, "d", "x.y")]
    )
    topics = ["stock.nasdaq.msft", "stock", "x" * 256, "x.y", "a\x00b", "é.y", "x.y", "stock.a"]
    messages = [{"message_id": f"m{k}", "topic": t} for k, t in enumerate(topics)]
    upstream = {"message_id": None, "topic": None, "reason": "malformed_row", "raw": "{oops"}
    plan, _ = build_plan(subscriptions, engine=engine)
    got = [b.to_pylist() for b in Router(plan).route_batch(_batch(messages), max_rows)]
    per_message = Router(plan).route_batch(_batch([*messages, upstream]), max_rows)
    expected = [
        rows
        for b in per_message
        if (rows := [r for r in b.to_pylist() if r["reason"] != "malformed_row"])
    ]
    assert got == expected
    reasons = {r["message_id"]: r["reason"] for rows in got for r in rows if r["reason"]}
    assert reasons == {"m2": "topic_too_long", "m4": "nul_byte"}
    if max_rows == 1:
        assert len(got) > 3  # cut after each message with deliveries


def test_tenants_are_isolated_and_dialects_apply() -> None:
    data = generate(subscriptions=120, messages=400, seed=5, tenants=("t1", "t2", "t3"))
    plan, _ = build_plan(data.subscriptions_table())
    batch = _batch(
        [{"message_id": m, "tenant": tenant, "topic": t} for m, tenant, t in data.messages],
        optional=("tenant",),
    )
    assert _deliveries(_rows(Router(plan), batch)) == naive_deliveries(data)

    mqtt, _ = build_plan(_subscriptions([(1, "s", "a/+"), (2, "s", "#")], dialect=["mqtt"] * 2))
    batch = _batch(
        [
            {"message_id": "m1", "topic": "a/b", "dialect": "mqtt"},
            {"message_id": "m2", "topic": "$SYS/x", "dialect": "mqtt"},
            {"message_id": "m3", "topic": "a/#", "dialect": "mqtt"},
            {"message_id": "m4", "topic": "a/b", "dialect": "amqp"},
        ],
        optional=("dialect",),
    )
    rows = _rows(Router(mqtt), batch)
    assert _deliveries(rows) == {("m1", 1, "s", "default"), ("m1", 2, "s", "default")}
    outputs = {r["message_id"]: (r["output"], r["reason"]) for r in rows if r["output"] != DELIVERY}
    # '#' never matches a '$' topic; a wildcard in an MQTT topic is refused; an AMQP
    # message does not see MQTT subscriptions.
    assert outputs == {
        "m2": (UNMATCHED, None),
        "m3": (REJECTED, "wildcard_in_topic"),
        "m4": (UNMATCHED, None),
    }


def test_headers_subscriptions_match_beside_topics() -> None:
    table = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "subscriber": ["topic", "all", "any"],
            "pattern": ["a.#", "", ""],
            "kind": ["topic", "headers", "headers"],
            "criteria": [
                None,
                json.dumps([["format", "pdf"], ["type", "report"]]),
                json.dumps([["format", "pdf"], ["urgent", None]]),
            ],
            "mode": [None, "all", "any"],
        }
    )
    plan, rejects = build_plan(table)
    assert rejects == []
    batch = _batch(
        [
            {"message_id": "m1", "topic": "a.b", "headers": '{"format":"pdf","type":"report"}'},
            {"message_id": "m2", "topic": "x", "headers": '{"urgent":"yes"}'},
            {"message_id": "m3", "topic": "a", "headers": None},
            {"message_id": "m4", "topic": "x", "headers": json.dumps({"f": "v" * 2000})},
        ],
        optional=("headers",),
    )
    rows = _rows(Router(plan), batch)
    assert {(m, s) for m, s, _, _ in _deliveries(rows)} == {
        ("m1", 1),
        ("m1", 2),
        ("m1", 3),
        ("m2", 3),
        ("m3", 1),
    }
    assert [(r["message_id"], r["reason"]) for r in rows if r["output"] == REJECTED] == [
        ("m4", "value_too_long")
    ]


def test_output_batches_are_cut_by_rows() -> None:
    # Every message matches all 10 subscriptions: 40 messages -> 400 deliveries.
    plan, _ = build_plan(_subscriptions([(i, f"s{i}", "#") for i in range(10)]))
    batch = _batch([{"message_id": f"m{k}", "topic": f"t.{k}"} for k in range(40)])
    router = Router(plan)
    batches = list(router.route_batch(batch, max_rows=25))
    deliveries = [b.num_rows for b in batches]
    # Cut after the message that reaches 25 rows: 3 messages (30 rows) per batch.
    assert deliveries == [30] * 13 + [10]
    whole = _rows(router, batch)
    assert [r for b in batches for r in b.to_pylist()] == whole


def test_tenants_without_subscriptions_share_one_empty_engine() -> None:
    plan, _ = build_plan(_subscriptions([(1, "s", "a")], tenant=["t1"]))
    batch = _batch(
        [
            {"message_id": f"m{k}", "tenant": f"x{k}", "topic": "a", "headers": '{"h": "v"}'}
            for k in range(500)
        ]
        + [{"message_id": "bad", "tenant": "x0", "topic": "a" * 300}],
        optional=("tenant", "headers"),
    )
    router = Router(plan)
    rows = _rows(router, batch)
    assert [r["output"] for r in rows] == [UNMATCHED] * 500 + [REJECTED]
    assert router.engine_count() == 2  # one empty topic engine, one empty headers engine


def test_a_worker_builds_one_router_per_plan() -> None:
    table = _subscriptions([(1, "s", "a")])
    plan, _ = build_plan(table)
    assert router_for(plan) is router_for(plan)
    other, _ = build_plan(table)
    assert router_for(other) is not router_for(plan)
