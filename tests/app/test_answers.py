"""The match answer's wire format (``app.delivery``): the batch answer's JSON, written in C
from ``match_ids``' arrays (``app._answers``), byte for byte what orjson writes for the
answers as dicts, and the batch answer of a real routing table, with and without groups."""

from __future__ import annotations

import itertools
import time
from array import array
from collections import Counter
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app._answers import MatchCounts, encode_answers
from app.delivery import batch
from loader import RoutingTable
from matcher import MatcherError
from store import Change

#: Names the encoder must escape and order as orjson and ``sorted`` do: quotes,
#: backslashes, control characters, DEL, non-ASCII (after ASCII), a prefix of another.
NAMES = st.sampled_from(["a", "ab", "b", "é", 'q"\\', "t\t\x01\x1f\x7f", "😀z", "\u2028"])
#: Dense ids (the list) and far ones (the dict), up to the largest id.
IDS = st.one_of(st.integers(0, 60), st.sampled_from([70_000, 2**31, 2**32 - 1]))
ERRORS = st.builds(MatcherError, st.sampled_from(["nul_byte", "topic_too_long"]), st.text())
ANSWERS = st.lists(
    st.one_of(st.lists(IDS, unique=True).map(sorted), ERRORS),
    max_size=6,
)


def _reference(
    answers: list[list[int] | MatcherError], by_id: list[str | None], far: dict[int, str]
) -> list[dict[str, Any]]:
    """The answers as the API's dicts, written out plainly: an id's name from the list when
    set there, else from the dict, else none."""
    items: list[dict[str, Any]] = []
    for answer in answers:
        if isinstance(answer, MatcherError):
            items.append({"error": {"code": answer.code, "message": answer.message}})
            continue
        names = set()
        for sub_id in answer:
            name = by_id[sub_id] if sub_id < len(by_id) else None
            if name is None:
                name = far.get(sub_id)
            if name is not None:
                names.add(name)
        items.append({"subscriptions": answer, "subscribers": sorted(names), "groups": []})
    return items


@given(
    answers=ANSWERS,
    by_id=st.lists(st.one_of(st.none(), NAMES), max_size=50),
    far=st.dictionaries(IDS, NAMES, max_size=8),
)
def test_the_encoder_writes_what_orjson_writes(
    answers: list[list[int] | MatcherError], by_id: list[str | None], far: dict[int, str]
) -> None:
    counts, ids = array("I"), array("I")
    errors: dict[int, MatcherError] = {}
    for k, answer in enumerate(answers):
        if isinstance(answer, MatcherError):
            errors[k] = answer
            counts.append(0)
        else:
            counts.append(len(answer))
            ids.extend(answer)
    delivered = MatchCounts()
    encoded, matched = encode_answers(counts, ids, errors, by_id, far, delivered)
    assert encoded == orjson.dumps(_reference(answers, by_id, far))[1:-1]
    assert matched == len(ids)
    # Every answered id is counted once per answer naming it (the list's ids in arrays,
    # the others in the map); a drain takes them and starts again from zero.
    assert _drained(delivered) == Counter(ids)
    assert len(delivered) == 0 and _drained(delivered) == Counter()


def _drained(delivered: MatchCounts) -> Counter[int]:
    """A drain's counts per id (an id may come twice: once from the arrays, once from
    the map)."""
    found: Counter[int] = Counter()
    ids, counts, lasts = delivered.drain()
    assert len(ids) == len(counts) == len(lasts)
    for sub_id, count in zip(ids, counts, strict=True):
        found[sub_id] += count
    return found


@given(
    rounds=st.lists(
        st.tuples(st.lists(IDS, max_size=20), st.integers(0, 100), st.booleans()), max_size=8
    )
)
def test_match_counts_count_every_id_and_put_back_what_a_drain_took(
    rounds: list[tuple[list[int], int, bool]],
) -> None:
    """Counting against a plain Counter, the dense bound moving between calls (the arrays
    grow past ids the map already holds), drains in between, and a drain put back (a failed
    flush) adding to what was counted since."""
    counted = MatchCounts()
    expected: Counter[int] = Counter()
    for ids, dense, drain in rounds:
        counted.add(ids, dense)
        expected.update(ids)
        if drain:
            taken = counted.drain()
            assert _counts_of(taken) == expected
            counted.restore(*taken)
    assert _drained(counted) == expected


def _counts_of(taken: tuple[array[int], array[int], array[int]]) -> Counter[int]:
    found: Counter[int] = Counter()
    for sub_id, count in zip(taken[0], taken[1], strict=True):
        found[sub_id] += count
    return found


def test_match_counts_keep_the_second_of_the_last_delivery() -> None:
    counted = MatchCounts()
    counted.restore([5, 70_000], [2, 3], [100, 200])
    counted.restore([5, 70_000], [1, 1], [50, 300])
    ids, counts, lasts = counted.drain()
    assert sorted(zip(ids, counts, lasts, strict=True)) == [(5, 3, 100), (70_000, 4, 300)]
    before = int(time.time())
    counted.add([5, 5], 10)
    counted.add([70_000], 10)
    ids, counts, lasts = counted.drain()
    after = int(time.time())
    assert sorted(zip(ids, counts, strict=True)) == [(5, 2), (70_000, 1)]
    assert all(before - 1 <= last <= after for last in lasts)  # the coarse clock may lag


def test_a_count_past_what_its_word_holds_moves_to_the_map_whole() -> None:
    """A word holds 2**24 - 1 deliveries: the next ones go on counting, none lost."""
    counted = MatchCounts()
    many = 2**24 + 5
    counted.add(itertools.repeat(7, many), 10)
    assert _drained(counted) == Counter({7: many})


def _add(
    sub_id: int, tenant: str, subscriber: str, pattern: str, group: str | None = None
) -> Change:
    return Change(
        sub_id, "add", sub_id, tenant, subscriber, pattern, "amqp", "topic", None, None, group
    )


@pytest.mark.parametrize("engines", [("native", "trie"), ("trie",), ("native",)])
def test_a_batch_answer_names_each_topics_subscribers(engines: tuple[str, ...]) -> None:
    """Whatever engine answers (``native``'s ``match_ids`` or the base class's), a tenant
    without groups gets the same JSON; a tenant with groups gets each group's choice."""
    table = RoutingTable(engines)
    table.apply(
        [
            _add(1, "t", "s1", "a.*"),
            _add(2, "t", "s2", "a.#"),
            _add(3, "t", "s1", "b.c"),
            _add(70_000, "t", "far", "b.*"),
            _add(4, "g", "m1", "a.*", group="grp"),
            _add(5, "g", "m2", "a.*", group="grp"),
            _add(6, "g", "solo", "a.#"),
        ]
    )
    encoded, matched = batch(table, "t", "amqp", ["a.x", "b.c", "a.\x00", "zzz"])
    answers = orjson.loads(b"[" + encoded + b"]")
    assert answers[:2] == [
        {"subscriptions": [1, 2], "subscribers": ["s1", "s2"], "groups": []},
        {"subscriptions": [3, 70_000], "subscribers": ["far", "s1"], "groups": []},
    ]
    assert answers[2]["error"]["code"] == "nul_byte"
    assert answers[3] == {"subscriptions": [], "subscribers": [], "groups": []}
    assert matched == 4

    encoded, matched = batch(table, "g", "amqp", ["a.x", "a.\x00"], keys=["k", "k"])
    grouped, error = orjson.loads(b"[" + encoded + b"]")
    # Counted: the 2 ids answered and the 1 candidate the random choice read (one ring).
    assert error["error"]["code"] == "nul_byte" and matched == 3
    (choice,) = grouped["groups"]
    assert (choice["group"], choice["candidates"]) == ("grp", 2)
    assert choice["subscription"] in (4, 5) and sorted(grouped["subscriptions"]) == sorted(
        [choice["subscription"], 6]
    )
    assert grouped["subscribers"] == sorted({choice["subscriber"], "solo"})
