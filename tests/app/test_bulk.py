"""The bulk path's shortcuts give what the full path gives: ``plain`` accepts only items
the full validation accepts unchanged, and ``BulkResult.json`` writes the response
model's JSON."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import JsonValue

from app.auth import OPERATOR, Caller
from app.bulk import BulkResult, Items, accept_plain, parse_item, plain
from app.operations import AdminOperations
from app.refusals import ServiceError
from app.settings import Settings
from matcher import Limits, MatcherError
from store import Database, StoreError

LIMITS = Limits(max_topic_bytes=24, max_pattern_bytes=24, max_words=4)
TEXT = st.text(alphabet=st.sampled_from("ab.*# \t\x01\x7fé\x00\ud800\u00a0\u202e"), max_size=30)
#: Patterns of whole words, so that several '#' words (and '#' inside words) come often.
WORDS = st.lists(st.sampled_from(["#", "*", "a", "a#", ""]), max_size=5).map(".".join)
ITEMS = st.one_of(
    st.dictionaries(
        st.sampled_from(["subscriber", "pattern", "dialect", "tenant", "group", "labels"]),
        st.one_of(TEXT, st.none(), st.integers(), st.sampled_from(["amqp", "mqtt", "nats"])),
    ),
    # Items shaped like the common case, so that plain's own checks are reached often.
    st.fixed_dictionaries(
        {"subscriber": st.one_of(st.just("q"), TEXT), "pattern": st.one_of(WORDS, TEXT)},
        optional={"dialect": st.sampled_from(["amqp", "mqtt"]), "tenant": st.just("ab")},
    ),
)
CALLERS = st.sampled_from([OPERATOR, Caller("ab")])


@pytest.mark.parametrize(
    "limits", [LIMITS, replace(LIMITS, max_hash_wildcards=1)], ids=["any_hashes", "one_hash"]
)
@settings(max_examples=500, deadline=None)
@given(item=ITEMS, caller=CALLERS)
def test_plain_accepts_only_what_the_full_path_accepts_unchanged(
    limits: Limits, item: dict[str, JsonValue], caller: Caller
) -> None:
    operations = AdminOperations.__new__(AdminOperations)
    operations._limits = limits  # the full path's rules under the same limits
    quick = plain(item, caller, limits)
    try:
        full = operations._new(parse_item(item), caller)
    except (MatcherError, StoreError, ServiceError):
        assert quick is None
        return
    if quick is not None:
        assert quick == full and quick.labels == full.labels


@pytest.mark.parametrize(
    "limits", [LIMITS, replace(LIMITS, max_hash_wildcards=1)], ids=["any_hashes", "one_hash"]
)
@settings(max_examples=200, deadline=None)
@given(items=st.lists(ITEMS, max_size=12), caller=CALLERS)
def test_the_columns_check_accepts_what_plain_accepts(
    limits: Limits, items: list[JsonValue], caller: Caller
) -> None:
    """``accept_plain`` on a batch's columns takes exactly the items ``plain`` takes, as
    the same records; every other item is left for the full path."""
    columns = Items.of(items)
    accepted = accept_plain(columns, caller, limits)
    taken = {
        index: (tenant, subscriber, pattern)
        for index, tenant, subscriber, pattern in zip(
            accepted.at.to_pylist(),
            accepted.tenant.to_pylist(),
            accepted.subscriber.to_pylist(),
            accepted.pattern.to_pylist(),
            strict=True,
        )
    }
    expected = {}
    for index, item in enumerate(items):
        new = plain(item, caller, limits)
        if new is not None:
            assert new.dialect == "amqp" and new.group is None and new.labels is None
            expected[index] = (new.tenant, new.subscriber, new.pattern)
    assert taken == expected
    left = {index for index, _ in accepted.refused} | {index for index, _ in columns.others}
    assert left == set(range(len(items))) - set(taken)
    assert all(columns.item(index, row) == items[index] for index, row in accepted.refused)


def test_plain_takes_the_common_case() -> None:
    item: dict[str, JsonValue] = {"subscriber": "q1", "pattern": "stock.*.msft", "tenant": "t"}
    new = plain(item, OPERATOR, Limits())
    assert new is not None and (new.tenant, new.subscriber, new.pattern) == (
        "t",
        "q1",
        "stock.*.msft",
    )
    assert plain({**item, "dialect": "mqtt"}, OPERATOR, Limits()) is None
    assert plain({**item, "group": "g"}, OPERATOR, Limits()) is None


def test_the_written_json_is_the_response_models() -> None:
    result = BulkResult.of(4)
    result.store(0, 7, True)
    result.store(1, 3, False)
    result.fail(2, "invalid_wildcard", "mqtt: '#' may only be the last word «é»")
    result.fail(3, "x", "first")
    result.store(3, 9, True)  # a group run again alone: the later outcome stands
    assert result.json() == result.out().model_dump_json().encode()
    assert json.loads(result.json())["results"][3] == {
        "index": 3,
        "status": "created",
        "id": 9,
        "error": None,
    }
    assert (result.created, result.exists, result.failed) == (2, 1, 1)


def test_bulk_through_the_operations_keeps_each_items_outcome(database: Database) -> None:
    operations = AdminOperations(database, Settings(_env_file=None, database_url=database.url))
    items: list[JsonValue] = [
        {"subscriber": "a", "pattern": "x.y"},
        {"subscriber": "a", "pattern": "x.y"},  # the same again: exists
        {"subscriber": "a", "pattern": "a/#/b", "dialect": "mqtt"},
        {"subscriber": "b", "pattern": "x.é"},
        {"subscriber": "c", "pattern": "p", "nope": 1},
    ]
    result = operations.create_many(items, OPERATOR)
    assert result.statuses == ["created", "exists", "error", "created", "error"]
    assert result.ids[0] == result.ids[1] is not None
    assert {i: e.code for i, e in result.errors.items()} == {
        2: "invalid_wildcard",
        4: "invalid_request",
    }
