"""Shared subscriptions in the store, on real PostgreSQL and a real DuckDB file: the group
and its policy are stored, logged with every change, streamed for building, exported, and
the policy rule (``store.groups``) holds."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from store import Database, NewSubscription, SubscriptionRepository, validate
from store.export import export_parquet
from store.groups import GroupConflictError, GroupPolicies, check_same_group


def test_group_columns_travel_with_every_change(database: Database, tmp_path: Path) -> None:
    items = [
        validate(NewSubscription("w1", "$share/g/a/+", dialect="mqtt", group_policy="hash")),
        validate(NewSubscription("w2", "a.*", group="g2", group_policy="round_robin")),
        validate(NewSubscription("plain", "a.#")),
    ]
    with database.write() as session:
        repo = SubscriptionRepository(session)
        row, _ = repo.add(items[0])
        stored = repo.add_many(items[1:]).items or []  # the staging path, quoted "group"
    assert (row.pattern, row.group, row.group_policy) == ("a/+", "g", "hash")
    with database.read() as session:
        repo = SubscriptionRepository(session)
        changes = repo.changes_since(0)
        streamed = list(repo.stream_all())
        assert repo.group_policies([("default", "g"), ("default", "g2"), ("default", "x")]) == {
            ("default", "g"): "hash",
            ("default", "g2"): "round_robin",
        }
        assert repo.groups_of([row.id, *(i for i, _ in stored)]) == {
            row.id: "g",
            stored[0][0]: "g2",
            stored[1][0]: None,
        }
    # (DuckDB may number one bulk insert's rows in another order than the items.)
    expected = {
        row.id: ("g", "hash"),
        stored[0][0]: ("g2", "round_robin"),
        stored[1][0]: (None, None),
    }
    assert {c.subscription_id: (c.group, c.group_policy) for c in changes} == expected
    assert {c.subscription_id: (c.group, c.group_policy) for c in streamed} == expected
    with database.write() as session:
        SubscriptionRepository(session).remove(row.id)
    with database.read() as session:
        removed = SubscriptionRepository(session).changes_since(len(changes))
    assert [(c.op, c.group, c.group_policy) for c in removed] == [("remove", "g", "hash")]
    export_parquet(database, tmp_path / "subs.parquet")
    table = pq.read_table(tmp_path / "subs.parquet")
    exported = zip(
        *(table.column(n).to_pylist() for n in ("id", "group", "group_policy")), strict=True
    )
    assert {i: (g, p) for i, g, p in exported} == {
        stored[0][0]: ("g2", "round_robin"),
        stored[1][0]: (None, None),
    }


def test_postgres_checks_group_and_policy_come_together(postgres_url: str) -> None:
    db = Database(postgres_url)
    try:
        with (
            pytest.raises(sa.exc.IntegrityError, match="ck_subscription_group_policy"),
            db.write() as session,
        ):
            session.execute(
                sa.text(
                    "INSERT INTO subscription (tenant, subscriber, pattern, dialect, "
                    "group_policy) VALUES ('t', 's', 'p', 'amqp', 'hash')"
                )
            )
    finally:
        db.dispose()


def test_the_first_member_fixes_the_policy() -> None:
    policies = GroupPolicies({("t", "known"): "hash"})
    first = policies.resolve(validate(NewSubscription("a", "x", tenant="t", group="new")))
    assert first.group_policy == "random"  # the default
    assert policies.resolve(validate(NewSubscription("b", "x", tenant="t", group="known")))
    with pytest.raises(GroupConflictError) as caught:
        policies.resolve(
            validate(NewSubscription("c", "x", tenant="t", group="new", group_policy="hash"))
        )
    assert caught.value.code == "group_policy_conflict"
    other_tenant = validate(NewSubscription("c", "x", tenant="u", group="new", group_policy="hash"))
    assert policies.resolve(other_tenant).group_policy == "hash"
    plain = validate(NewSubscription("d", "x"))
    assert policies.resolve(plain) == plain
    check_same_group(first, "new")
    with pytest.raises(GroupConflictError, match="in no group"):
        check_same_group(first, None)
