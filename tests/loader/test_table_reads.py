"""The routing table's reads for explain and overlap search: catalog entries, a subscriber's
patterns, and the related-pattern search with and without the bitmap engine (whose rows
prune it); always per tenant and dialect."""

from __future__ import annotations

import pytest

from loader import RoutingTable
from matcher import InvalidPatternError
from store import Change

_ROWS = [
    (1, "acme", "q1", "a.#", "amqp"),
    (2, "acme", "q1", "a.b", "amqp"),
    (3, "acme", "q2", "*.c", "amqp"),
    (4, "acme", "q1", "a/#", "mqtt"),
    (5, "globex", "q1", "#", "amqp"),
]


def _table(engines: tuple[str, ...]) -> RoutingTable:
    table = RoutingTable(engines)
    table.apply(
        Change(i, "add", i, tenant, subscriber, pattern, dialect, "topic", None, None)
        for i, tenant, subscriber, pattern, dialect in _ROWS
    )
    return table


@pytest.mark.parametrize("engines", [("native", "optimized_inverted_bitmap"), ("trie",)])
def test_related_and_patterns_of(engines: tuple[str, ...]) -> None:
    table = _table(engines)
    assert table.related("acme", "amqp", "a.c", "overlaps").ids == [1, 3]
    assert table.related("acme", "amqp", "a.#", "covered_by").ids == [1, 2]
    assert table.related("acme", "amqp", "a.#", "covered_by", after=1).ids == [2]
    assert table.related("acme", "amqp", "#", "overlaps", limit=2).ids == [1, 2]
    assert table.related("acme", "mqtt", "a", "overlaps").ids == [4]
    assert table.related("nobody", "amqp", "a", "overlaps").ids == []
    with pytest.raises(InvalidPatternError):
        table.related("nobody", "mqtt", "a/#/b", "overlaps")  # validated without subscriptions
    assert table.patterns_of("acme", "amqp", ["q1", "q2", "q3"]) == {
        "q1": {1: "a.#", 2: "a.b"},
        "q2": {3: "*.c"},
        "q3": {},
    }
    assert table.patterns_of("globex", "amqp", ["q1"]) == {"q1": {5: "#"}}
    assert table.patterns_of("acme", "nats", ["q1"]) == {"q1": {}}
    assert {i: e.pattern for i, e in table.entries([2, 5, 99]).items()} == {2: "a.b", 5: "#"}
    table.apply([Change(6, "remove", 1, "acme", "q1", "a.#", "amqp", "topic", None, None)])
    assert table.related("acme", "amqp", "a.c", "overlaps").ids == [3]
    assert table.patterns_of("acme", "amqp", ["q1"]) == {"q1": {2: "a.b"}}
