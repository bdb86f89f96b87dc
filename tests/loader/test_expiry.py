"""The routing table's expiry filter (``loader.expiry``): an id whose instant has passed is
in no read's answer though the engines still hold it (single, batch, groups, headers,
overlap search), until its remove arrives; an expiry set or cleared by an ``add`` of a held
id takes effect; a bulk build with expiries filters the same. Instants are set in the past
or an hour ahead, so nothing here waits for a clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa

from loader import RoutingTable
from loader.expiry import ExpiryIndex
from matcher.groups import Policy
from store.columns import SCHEMA
from store.records import Change

PAST = datetime.now(UTC) - timedelta(seconds=1)
LATER = datetime.now(UTC) + timedelta(hours=1)


def _add(
    seq: int,
    sub_id: int,
    pattern: str,
    expires: datetime | None = None,
    group: str | None = None,
    group_policy: Policy | None = None,
) -> Change:
    return Change(
        seq, "add", sub_id, "t", f"s{sub_id}", pattern, "amqp", "topic", None, None,
        group, group_policy, expires,
    )  # fmt: skip


def _remove(seq: int, sub_id: int, pattern: str) -> Change:
    return Change(seq, "remove", sub_id, "t", f"s{sub_id}", pattern, "amqp", "topic", None, None)


def _batch(table: RoutingTable, topics: list[str]) -> list[list[int]]:
    counts, ids, errors = table.match_ids("t", "amqp", topics)
    assert not errors
    out, at = [], 0
    for n in counts:
        out.append(list(ids[at : at + n]))
        at += n
    return out


def test_an_expired_id_is_in_no_answer_until_its_remove_arrives() -> None:
    table = RoutingTable(("native", "optimized_inverted_bitmap"))
    table.apply([_add(1, 1, "a.#"), _add(2, 2, "a.*", PAST), _add(3, 3, "a.b", LATER)])
    assert sorted(table.match("t", "amqp", "a.b")) == [1, 3]
    assert sorted(table.routes("t", "amqp", "a.b")) == [1, 3]
    assert _batch(table, ["a.b", "a.c", "x"]) == [[1, 3], [1], []]
    assert table.related("t", "amqp", "a.#", "overlaps").ids == [1, 3]
    assert table.patterns_of("t", "amqp", ["s2"]) == {"s2": {}}
    table._check()
    table.expiry._check()
    # The sweep's remove: gone from the engines and from the index.
    table.apply([_remove(4, 2, "a.*")])
    assert 2 not in table.expiry and len(table.expiry) == 1
    assert table.expiry.next == LATER.timestamp()
    table._check()


def test_an_add_of_a_held_id_sets_or_clears_its_expiry() -> None:
    table = RoutingTable(("native",))
    table.apply([_add(1, 1, "a.*", LATER)])
    assert sorted(table.match("t", "amqp", "a.b")) == [1]
    table.apply([_add(2, 1, "a.*", PAST)])  # shortened to an instant already past
    assert sorted(table.match("t", "amqp", "a.b")) == []
    assert _batch(table, ["a.b"]) == [[]]
    table.apply([_add(3, 1, "a.*", None)])  # cleared: it never expires
    assert sorted(table.match("t", "amqp", "a.b")) == [1]
    assert len(table.expiry) == 0 and table.expiry.next == float("inf")
    assert table.seq == 3 and len(table) == 1
    table._check()


def test_a_group_never_delivers_to_an_expired_member() -> None:
    table = RoutingTable(("native",))
    table.apply(
        [
            _add(1, 1, "jobs.#", PAST, group="w", group_policy="round_robin"),
            _add(2, 2, "jobs.#", None, group="w", group_policy="round_robin"),
            _add(3, 3, "solo.#", PAST, group="v", group_policy="random"),
        ]
    )
    assert sorted(table.match("t", "amqp", "jobs.x")) == [2]
    for _ in range(6):  # round robin would reach member 1 every other time
        routes = table.routes("t", "amqp", "jobs.x")
        assert table.deliver("t", routes, "k").ids == [2]
    routes = table.routes("t", "amqp", "solo.x")
    delivered = table.deliver("t", routes, "k")
    assert delivered.ids == [] and delivered.chosen == []
    table._check()


def test_a_bulk_build_filters_what_has_expired_since() -> None:
    table = RoutingTable(("native",))
    rows = pa.table(
        {
            "id": [1, 2],
            "tenant": ["t", "t"],
            "subscriber": ["a", "b"],
            "dialect": ["amqp"] * 2,
            "pattern": ["a.*", "a.#"],
        },
        schema=SCHEMA,
    )
    table.load_columns(rows, 5, (), [(2, PAST)])
    assert sorted(table.match("t", "amqp", "a.b")) == [1]
    assert _batch(table, ["a.b", "a"]) == [[1], []]


def test_the_index_costs_one_comparison_while_nothing_is_due() -> None:
    index = ExpiryIndex()
    assert index.next == float("inf") and index.due(1e12) == frozenset()
    index.set(1, LATER)
    index.set(2, PAST)
    index.set(1, LATER + timedelta(seconds=1))  # moved: its first instant is stale
    now = datetime.now(UTC).timestamp()
    assert index.due(now) == {2}
    assert index.next == float("-inf")  # until 2 leaves, every read filters
    index.drop([2])
    assert (
        index.due(now) == frozenset() and index.next <= (LATER + timedelta(seconds=1)).timestamp()
    )
    index._check()
    for i in range(1_000):  # stale heap entries are compacted away
        index.set(10, LATER + timedelta(seconds=i))
    assert len(index._heap) <= 2 * len(index) + 65
    index._check()


def test_an_expiry_set_in_the_run_that_adds_the_id_is_kept() -> None:
    """A create and its update read from the log together: one run of adds."""
    table = RoutingTable(("native",))
    table.apply([_add(1, 1, "a.*", LATER), _add(2, 1, "a.*", PAST)])
    assert sorted(table.match("t", "amqp", "a.b")) == []
    table.apply([_add(3, 2, "b.*", PAST), _add(4, 2, "b.*", None)])
    assert sorted(table.match("t", "amqp", "b.c")) == [2]
    assert len(table.expiry) == 1
    table._check()
