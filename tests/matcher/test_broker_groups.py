"""Shared subscriptions against the real brokers: Mosquitto (MQTT 5 ``$share/``) and
nats-server (queue subscribe). The same subscriptions go through the store's validation
(``$share/`` parsed there) into a routing table, and for every message:

* the ungrouped subscriptions that receive it are exactly the broker's;
* each group delivers to exactly one member, as the broker does, and both choices are
  among the group's matching members;
* the messages a group receives are the broker's, and the union over its members of what
  they received is the broker's too (every matching member takes part);
* ``round_robin`` and ``random`` spread the messages over the members within a tolerance,
  as the broker does.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence

import pytest

from loader import RoutingTable
from matcher.groups import check_policy
from store import Change, NewSubscription, validate
from tests.brokers import require_mqtt, require_nats, share_with_mosquitto, share_with_nats

pytestmark = pytest.mark.brokers

ROUNDS = 60  # each topic published this often: 240 messages, seconds on both brokers


def _table(
    patterns: Sequence[str],
    dialect: str,
    groups: Sequence[str | None],
    policies: Sequence[str | None],
) -> tuple[RoutingTable, list[Change]]:
    table = RoutingTable(("native",))
    changes = []
    for i, (pattern, group, policy) in enumerate(zip(patterns, groups, policies, strict=True)):
        new = validate(
            NewSubscription(
                f"s{i}", pattern, dialect=dialect, group=group, group_policy=check_policy(policy)
            )
            if policy is not None
            else NewSubscription(f"s{i}", pattern, dialect=dialect, group=group)
        )
        changes.append(
            Change(
                i + 1,
                "add",
                i,
                new.tenant,
                new.subscriber,
                new.pattern,
                dialect,
                "topic",
                None,
                None,
                new.group,
                new.group_policy,
            )
        )
    table.apply(changes)
    return table, changes


def _compare(
    table: RoutingTable,
    changes: list[Change],
    dialect: str,
    topics: Sequence[str],
    broker: list[set[int]],
) -> dict[str, tuple[Counter[int], Counter[int]]]:
    """Checks every message; returns per group (ours, the broker's) member counts."""
    group_of = {c.subscription_id: c.group for c in changes if c.group is not None}
    ungrouped = {c.subscription_id for c in changes if c.group is None}
    counts: dict[str, tuple[Counter[int], Counter[int]]] = {
        g: (Counter(), Counter()) for g in set(group_of.values())
    }
    received_by: dict[str, tuple[set[int], set[int]]] = {g: (set(), set()) for g in counts}
    for k, topic in enumerate(topics):
        matched = table.match("default", dialect, topic)
        ours = set(table.deliver("default", matched, f"m{k}").ids)
        theirs = broker[k]
        assert ours & ungrouped == theirs & ungrouped == set(matched) & ungrouped, topic
        for group, (mine, broker_counts) in counts.items():
            candidates = {i for i in matched if group_of.get(i) == group}
            our_pick = {i for i in ours if group_of.get(i) == group}
            their_pick = {i for i in theirs if group_of.get(i) == group}
            assert len(our_pick) == len(their_pick) == (1 if candidates else 0), (topic, group)
            assert our_pick <= candidates and their_pick <= candidates, (topic, group)
            mine.update(our_pick)
            broker_counts.update(their_pick)
            if candidates:
                received_by[group][0].add(k)
            if their_pick:
                received_by[group][1].add(k)
    for group, (we_deliver, broker_delivers) in received_by.items():
        assert we_deliver == broker_delivers, group
    return counts


def _spread(counts: Counter[int], members: set[int], tolerance: float) -> None:
    """Every member got its share of the messages, within ``tolerance`` of an even split."""
    assert set(counts) == members, counts
    even = sum(counts.values()) / len(members)
    assert all(abs(n - even) <= tolerance * even for n in counts.values()), counts


def test_mqtt_shared_subscriptions_match_mosquitto() -> None:
    require_mqtt()
    p = f"ts/{uuid.uuid4().hex[:12]}"
    # In MQTT 5 a shared subscription is (group, filter): members of one group here share
    # one filter, where that and this store's (tenant, group) agree (see docs/groups.md).
    filters = [
        f"$share/rr/{p}/+/b",
        f"$share/rr/{p}/+/b",
        f"$share/rr/{p}/+/b",
        f"$share/rand/{p}/#",
        f"$share/rand/{p}/#",
        f"{p}/a/+",
        f"{p}/#",
    ]
    policies = ["round_robin"] * 3 + ["random"] * 2 + [None, None]
    table, changes = _table(filters, "mqtt", [None] * 7, policies)
    assert [c.group for c in changes] == ["rr"] * 3 + ["rand"] * 2 + [None, None]
    topics = [f"{p}/{t}" for t in ("a/b", "c/b", "a/c", "x")] * ROUNDS
    broker = share_with_mosquitto(filters, topics)
    counts = _compare(table, changes, "mqtt", topics, broker)
    _spread(counts["rr"][0], {0, 1, 2}, 0.0)  # our round robin: exactly even
    _spread(counts["rr"][1], {0, 1, 2}, 0.3)
    _spread(counts["rand"][0], {3, 4}, 0.3)
    _spread(counts["rand"][1], {3, 4}, 0.3)


def test_nats_queue_groups_match_nats_server() -> None:
    require_nats()
    p = f"ts.{uuid.uuid4().hex[:12]}"
    # A NATS queue group spans subjects: one member per queue name among every matching
    # subscription, the same rule as this store's (tenant, group).
    subscriptions: list[tuple[str, str | None]] = [
        (f"{p}.*.b", "q"),
        (f"{p}.*.b", "q"),
        (f"{p}.a.>", "q"),
        (f"{p}.>", "all"),
        (f"{p}.>", "all"),
        (f"{p}.a.*", None),
    ]
    patterns = [s for s, _ in subscriptions]
    groups = [q for _, q in subscriptions]
    policies = ["random" if q else None for q in groups]
    table, changes = _table(patterns, "nats", groups, policies)
    topics = [f"{p}.{t}" for t in ("a.b", "c.b", "a.c", "x.y")] * ROUNDS
    broker = share_with_nats(subscriptions, topics)
    counts = _compare(table, changes, "nats", topics, broker)
    _spread(counts["all"][0], {3, 4}, 0.3)
    _spread(counts["all"][1], {3, 4}, 0.3)
    # "q" on c.b: members 0 and 1 only; on a.b, a.c: member 2 too.
    assert set(counts["q"][0]) == set(counts["q"][1]) == {0, 1, 2}


@pytest.mark.parametrize("policy", ["round_robin", "hash"])
def test_other_policies_still_deliver_one_member_per_group_like_nats(policy: str) -> None:
    """nats-server picks at random; the other policies change which member, never how
    many: the same per-message checks hold."""
    require_nats()
    p = f"ts.{uuid.uuid4().hex[:12]}"
    subscriptions: list[tuple[str, str | None]] = [
        (f"{p}.*", "w"),
        (f"{p}.>", "w"),
        (f"{p}.a", None),
    ]
    table, changes = _table(
        [s for s, _ in subscriptions], "nats", ["w", "w", None], [policy, policy, None]
    )
    topics = [f"{p}.{t}" for t in ("a", "b", "b.c")] * 20
    broker = share_with_nats(subscriptions, topics)
    counts = _compare(table, changes, "nats", topics, broker)
    assert set(counts["w"][0]) == set(counts["w"][1]) == {0, 1}
