"""The routing table's group index against a plain model: random adds and removes (with
repeats, as the change log may replay them), then every delivery rule and ``_check()``."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loader import RoutingTable
from loader.groups import GroupIndex
from store import Change

#: (op, id, tenant, group or None)
ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove"]),
        st.integers(0, 12),
        st.sampled_from(["t1", "t2"]),
        st.one_of(st.none(), st.sampled_from(["a", "b"])),
    ),
    max_size=40,
)


def _change(seq: int, op: str, sub_id: int, tenant: str, group: str | None) -> Change:
    return Change(
        seq,
        "add" if op == "add" else "remove",
        sub_id,
        tenant,
        f"s{sub_id}",
        "x.#",
        "amqp",
        "topic",
        None,
        None,
        group,
        None if group is None else "round_robin",
    )


@given(ops, st.text(max_size=5))
def test_index_follows_adds_and_removes_and_delivers_one_per_group(
    steps: list[tuple[str, int, str, str | None]], key: str
) -> None:
    table = RoutingTable(("trie",))
    model: dict[int, tuple[str, str | None]] = {}
    for seq, (op, sub_id, tenant, group) in enumerate(steps, start=1):
        if op == "add" and sub_id in model:
            tenant, group = model[sub_id]  # an id is one subscription: replayed as it was
        elif op == "remove" and sub_id in model:
            tenant, group = model[sub_id]
        table.apply([_change(seq, op, sub_id, tenant, group)])
        if op == "add":
            model.setdefault(sub_id, (tenant, group))
        else:
            model.pop(sub_id, None)
        table.groups._check()
        table._check()
    assert dict(table.groups.state()) == {
        i: ((t, g), "round_robin") for i, (t, g) in model.items() if g is not None
    }
    for tenant in ("t1", "t2"):
        matched = table.match(tenant, "amqp", "x.y")
        assert set(matched) == {i for i, (t, _) in model.items() if t == tenant}
        delivery = table.deliver(tenant, matched, key)
        groups = {g for i, (t, g) in model.items() if t == tenant and g is not None}
        ungrouped = {i for i, (t, g) in model.items() if t == tenant and g is None}
        assert [c.group for c in delivery.chosen] == sorted(groups)
        assert set(delivery.ids) == ungrouped | {c.subscription for c in delivery.chosen}
        for choice in delivery.chosen:
            assert model[choice.subscription] == (tenant, choice.group)
            assert choice.candidates == sum(
                1 for v in model.values() if v == (tenant, choice.group)
            )
        assert table.groups.has_groups(tenant) == bool(groups)


def test_a_tenant_without_groups_gets_its_match_sorted() -> None:
    index = GroupIndex()
    assert index.deliver("t", frozenset({5, 1, 3}), "k") == ([1, 3, 5], [])
