"""The routing table's group index against a plain model: random adds and removes (with
repeats, as the change log may replay them) of members sharing patterns or not, then every
delivery rule, the routes the engines hold and ``_check()``."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loader import RoutingTable
from loader.groups import SMALL_RING, GroupIndex
from matcher import create_matcher
from matcher.groups import Policy, by_hash, stable_hash
from store import Change
from store.records import Op, headers_pattern

#: Each group's policy: fixed per group, as the store keeps it.
POLICIES: dict[str, Policy] = {"a": "hash", "b": "round_robin", "c": "random"}
PATTERNS = ("x.#", "x.*", "#.y", "z")
TOPICS = ("x.y", "x", "z", "q.y")

#: (op, id, tenant, group or None, pattern)
ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove"]),
        st.integers(0, 12),
        st.sampled_from(["t1", "t1", "t2"]),
        st.one_of(st.none(), st.sampled_from(sorted(POLICIES))),
        st.sampled_from([PATTERNS[0], *PATTERNS]),  # members sharing a pattern, more often
    ),
    max_size=50,
)


def _change(seq: int, op: str, sub_id: int, tenant: str, group: str | None, pattern: str) -> Change:
    return Change(
        seq,
        "add" if op == "add" else "remove",
        sub_id,
        tenant,
        f"s{sub_id}",
        pattern,
        "amqp",
        "topic",
        None,
        None,
        group,
        None if group is None else POLICIES[group],
    )


def _matching(pattern: str, topic: str) -> bool:
    reference = create_matcher("naive", "amqp")
    reference.subscribe(1, pattern)
    return bool(reference.match(topic))


@settings(max_examples=150)
@given(ops, st.text(max_size=5), st.booleans())
def test_index_follows_adds_and_removes_and_delivers_one_per_group(
    steps: list[tuple[str, int, str, str | None, str]], key: str, batched: bool
) -> None:
    table = RoutingTable(("native", "trie"))
    model: dict[int, tuple[str, str | None, str]] = {}
    changes = []
    for seq, (op, sub_id, tenant, group, pattern) in enumerate(steps, start=1):
        if sub_id in model:  # an id is one subscription: replayed as it was
            tenant, group, pattern = model[sub_id]
        changes.append(_change(seq, op, sub_id, tenant, group, pattern))
        if op == "add":
            model.setdefault(sub_id, (tenant, group, pattern))
        else:
            model.pop(sub_id, None)
        if not batched:
            table.apply(changes[-1:])
            table._check()
    if batched:  # in runs: several adds and removes of one class at once
        table.apply(changes)
        table._check()
    assert dict(table.groups.state()) == {
        i: ((t, g), POLICIES[g]) for i, (t, g, _) in model.items() if g is not None
    }
    for tenant in ("t1", "t2"):
        for topic in TOPICS:
            matching = {
                i: (g, p) for i, (t, g, p) in model.items() if t == tenant and _matching(p, topic)
            }
            assert set(table.match(tenant, "amqp", topic)) == set(matching)
            routes = table.routes(tenant, "amqp", topic)
            # The engines hold one id per (group, pattern): the route of its members.
            held = Counter(matching[i] for i in routes)
            assert held == Counter({v for v in matching.values() if v[0] is not None}) + Counter(
                v for v in matching.values() if v[0] is None
            )
            delivery = table.deliver(tenant, routes, key)
            groups = {g for g, _ in matching.values() if g is not None}
            ungrouped = {i for i, (g, _) in matching.items() if g is None}
            assert [c.group for c in delivery.chosen] == sorted(groups)
            assert set(delivery.ids) == ungrouped | {c.subscription for c in delivery.chosen}
            # From the routes, or from every member's id (what ``match`` gives): alike.
            expanded = table.deliver(tenant, set(matching), key)
            assert [c.group for c in expanded.chosen] == sorted(groups)
            for choice in [*delivery.chosen, *expanded.chosen]:
                members = {i for i, (g, _) in matching.items() if g == choice.group}
                assert choice.subscription in members
                assert choice.candidates == len(members)
                if choice.policy == "hash":
                    assert choice.subscription == by_hash(members, stable_hash(key))
        assert table.groups.has_groups(tenant) == any(
            t == tenant and g is not None for t, g, _ in model.values()
        )
    assert sum(table.sizes().values()) == len(model)


def test_a_large_group_keeps_its_ring_through_joins_and_leaves() -> None:
    """Past ``SMALL_RING`` members a ring is changed in numpy: it stays equal to the
    reference ring (``_check``) and the choice to ``by_hash`` over the members, while its
    route leaves and members join and leave, one at a time and in runs."""
    table = RoutingTable(("native",))
    size = 3 * SMALL_RING
    seq = iter(range(1, 10_000))

    def add(ids: range | list[int]) -> None:
        table.apply([_change(next(seq), "add", i, "t", "a", "jobs.#") for i in ids])

    def remove(ids: range | list[int]) -> None:
        table.apply([_change(next(seq), "remove", i, "t", "a", "jobs.#") for i in ids])

    add(range(100, 100 + size))
    members = set(range(100, 100 + size))
    rng = random.Random(5)
    for turn in range(30):
        leaving = rng.sample(sorted(members), rng.choice([1, 5]))
        if turn % 3 == 0:  # the route itself leaves
            leaving.append(next(iter(table.routes("t", "amqp", "jobs.1"))))
        remove(sorted(set(leaving)))
        members -= set(leaving)
        joining = [rng.randrange(1000, 5000) for _ in range(rng.choice([1, 7]))]
        add(joining)
        members |= set(joining)
        table._check()
        routes = table.routes("t", "amqp", "jobs.1")
        assert len(routes) == 1 and next(iter(routes)) in members
        for k in range(5):
            chosen = table.deliver("t", routes, f"k{k}").ids
            assert chosen == [by_hash(members, stable_hash(f"k{k}"))]
    assert table.sizes() == {("t", "amqp"): len(members)}


def test_a_hash_group_of_100000_spreads_and_costs_its_probes() -> None:
    """A 100,000-member hash group on one pattern: one route in the engines, a choice that
    examines ``PROBES`` candidates per topic, keys spread over the members."""
    table = RoutingTable(("native",))
    table.apply([_change(1, "add", i, "t", "a", "hot.#") for i in range(1, 100_001)])
    routes = table.routes("t", "amqp", "hot.x")
    assert len(routes) == 1 and len(table.match("t", "amqp", "hot.x")) == 100_000
    delivery = table.deliver("t", routes, "k")
    assert delivery.chosen[0].candidates == 100_000 and delivery.examined == 21
    chosen = Counter(table.deliver("t", routes, f"m{i}").ids[0] for i in range(2_000))
    assert len(chosen) > 1_900  # 2,000 keys over 100,000 members: few collide


def test_headers_members_sharing_criteria_are_one_route() -> None:
    criteria = (("kind", "order"),)
    text = headers_pattern(criteria, "all")

    def change(seq: int, op: Op, sub_id: int) -> Change:
        return Change(
            seq, op, sub_id, "t", f"s{sub_id}", text, "headers", "headers", criteria, "all",
            "g", "hash",
        )  # fmt: skip

    table = RoutingTable(("native",))
    table.apply([change(1, "add", i) for i in (1, 2, 3)])
    assert len(table.header_routes("t", {"kind": "order"})) == 1
    assert set(table.match_headers("t", {"kind": "order"})) == {1, 2, 3}
    table.apply([change(2, "remove", 1)])  # the route leaves: another member takes over
    routes = table.header_routes("t", {"kind": "order"})
    assert len(routes) == 1 and set(routes) <= {2, 3}
    assert table.deliver("t", routes, "k").ids == [by_hash({2, 3}, stable_hash("k"))]
    assert table.sizes() == {("t", "headers"): 2}


def test_overlap_search_finds_every_member_of_a_route() -> None:
    """The engines hold one route per (group, pattern); an overlap search still lists
    every member, in id order, page by page."""
    table = RoutingTable()
    table.apply(
        [_change(1, "add", i, "t", "a", "jobs.#") for i in (5, 9, 12)]
        + [_change(1, "add", i, "t", None, "jobs.*") for i in (7, 20)]
        + [_change(1, "add", 30, "t", "a", "mail.#")]
    )
    found = table.related("t", "amqp", "jobs.x", "overlaps", None, 3)
    assert found.ids == [5, 7, 9] and found.resume == 9
    found = table.related("t", "amqp", "jobs.x", "overlaps", 9, 3)
    assert found.ids == [12, 20] and found.resume is None


@pytest.mark.parametrize("policy", ["round_robin", "random", "hash"])
def test_a_group_over_several_patterns_chooses_among_all_matching_members(policy: Policy) -> None:
    table = RoutingTable(("native",))
    rows = [(i, "jobs.#") for i in range(1, 80)] + [(i, "*.eu") for i in range(80, 90)]
    table.apply(
        [
            Change(1, "add", i, "t", f"s{i}", p, "amqp", "topic", None, None, "g", policy)
            for i, p in rows
        ]
    )
    routes = table.routes("t", "amqp", "jobs.eu")
    assert len(routes) == 2
    seen = Counter(table.deliver("t", routes, f"k{k}").ids[0] for k in range(2_000))
    assert set(seen) == set(range(1, 90))  # every member of both patterns is chosen
    if policy == "round_robin":
        assert set(seen.values()) == {2_000 // 89, 2_000 // 89 + 1}


def test_a_tenant_without_groups_gets_its_match_sorted() -> None:
    index = GroupIndex()
    assert index.deliver("t", frozenset({5, 1, 3}), "k") == ([1, 3, 5], [], 0)
