"""The broadcast plan: valid rows grouped by (tenant, dialect) with positions, every invalid
row set aside with the store's (or the matcher's) reason code."""

from __future__ import annotations

import json

import pyarrow as pa

from pipeline.subscriptions import build_plan


def test_valid_rows_are_grouped_by_tenant_and_dialect_with_positions() -> None:
    table = pa.table(
        {
            "id": pa.array([7, 3, 9, 4], pa.int64()),
            "tenant": ["t1", "t1", None, "t2"],
            "subscriber": ["alice", "bob", "carol", "dave"],
            "pattern": ["a.*", "a/+", "#", "ignored for headers"],
            "dialect": ["amqp", "mqtt", None, "headers"],
            "kind": ["topic", "topic", None, "headers"],
            "criteria": [None, None, None, json.dumps([["x", "1"], ["y", None]])],
            "mode": [None, None, None, "any"],
        }
    )
    plan, rejects = build_plan(table, engine="trie")
    assert rejects == []
    assert plan.ids == (7, 3, 9, 4)
    assert plan.subscribers == ("alice", "bob", "carol", "dave")
    assert plan.tenants == ("t1", "t1", "default", "t2")
    assert dict(plan.topics) == {
        ("t1", "amqp"): ((0, "a.*"),),
        ("t1", "mqtt"): ((1, "a/+"),),
        ("default", "amqp"): ((2, "#"),),
    }
    assert dict(plan.headers) == {"t2": ((3, (("x", "1"), ("y", None)), "any"),)}
    assert plan.engine == "trie" and len(plan) == 4


def test_minimal_columns_default_to_the_default_tenant_and_amqp() -> None:
    table = pa.table({"id": [1], "subscriber": ["s"], "pattern": ["a.#"]})
    plan, rejects = build_plan(table)
    assert rejects == [] and dict(plan.topics) == {("default", "amqp"): ((0, "a.#"),)}


def test_every_invalid_row_is_rejected_with_its_reason() -> None:
    rows = [
        (None, "s", "a"),  # no id
        (2**32, "s", "a"),  # id out of range
        (5, "s", "a.b"),
        (5, "s", "a.c"),  # same id again
        (6, "", "a"),  # empty subscriber
        (7, None, "a"),  # no subscriber
        (8, "s", "x" * 256),  # pattern over 255 bytes
        (9, "s", "a\x00b"),  # NUL
        (10, "s", "a"),  # empty tenant (below)
    ]
    table = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "subscriber": [r[1] for r in rows],
            "pattern": [r[2] for r in rows],
            "tenant": [None] * (len(rows) - 1) + [""],
        }
    )
    plan, rejects = build_plan(table)
    assert plan.ids == (5,)
    assert [(r.subscription_id, r.reason) for r in rejects] == [
        (None, "missing_field"),
        (2**32, "invalid_sub_id"),
        (5, "duplicate_id"),
        (6, "empty_subscriber"),
        (7, "missing_field"),
        (8, "pattern_too_long"),
        (9, "nul_byte"),
        (10, "empty_tenant"),
    ]
    assert all(r.detail for r in rejects)
    assert json.loads(rejects[2].raw) == {
        "id": 5,
        "subscriber": "s",
        "pattern": "a.c",
        "tenant": None,
    }


def test_dialect_kind_and_criteria_errors_are_rejected() -> None:
    table = pa.table(
        {
            "id": pa.array([1, 2, 3, 4, 5, 6], pa.int64()),
            "subscriber": ["s"] * 6,
            "pattern": ["a.>.b", "a", "a", "", "", ""],
            "dialect": ["nats", "smtp", "amqp", "headers", "headers", "headers"],
            "kind": ["topic", "topic", "queue", "headers", "headers", "headers"],
            "criteria": [None, None, None, "not json", json.dumps([["x", "1"]]), '{"ab": "1"}'],
            "mode": [None, None, None, "all", "most", "all"],
        }
    )
    plan, rejects = build_plan(table)
    assert len(plan) == 0
    assert [r.reason for r in rejects] == [
        "invalid_wildcard",
        "invalid_dialect",
        "invalid_kind",
        "invalid_criteria",
        "invalid_mode",
        "invalid_criteria",
    ]


def test_each_plan_has_its_own_id() -> None:
    table = pa.table({"id": [1], "subscriber": ["s"], "pattern": ["a"]})
    assert build_plan(table)[0].plan_id != build_plan(table)[0].plan_id
