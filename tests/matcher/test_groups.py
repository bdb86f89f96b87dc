"""Shared subscriptions in the matcher package: the ``$share/`` grammar, group names, the
policies and the selection rule (every ungrouped id plus exactly one member per group)."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from matcher.groups import (
    MAX_GROUP_BYTES,
    InvalidGroupError,
    by_hash,
    check_group,
    check_key,
    check_policy,
    choose,
    new_counter,
    select,
    split_shared,
    stable_hash,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$share/g/a/b", ("g", "a/b")),
        ("$share/g/#", ("g", "#")),
        ("$share/g/+", ("g", "+")),
        ("$share/g//", ("g", "/")),  # the filter "/" is two empty levels
        ("$share/grp-1.x/$SYS/x", ("grp-1.x", "$SYS/x")),
        ("$share/\u00e9t\u00e9/a", ("\u00e9t\u00e9", "a")),
        ("a/b", None),
        ("$sharex/g/a", None),  # not the prefix: an ordinary filter
        ("$share", None),  # no "/": an ordinary (never matching) $ filter
        ("$SHARE/g/a", None),  # case-sensitive, as topic filters are
    ],
)
def test_split_shared(text: str, expected: tuple[str, str] | None) -> None:
    assert split_shared(text) == expected


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("$share/", "invalid_shared_subscription"),
        ("$share/g", "invalid_shared_subscription"),
        ("$share/g/", "invalid_shared_subscription"),  # MQTT 5: the filter is not empty
        ("$share//a", "empty_group"),  # the ShareName is at least one character
        ("$share/+/a", "invalid_group"),
        ("$share/#/a", "invalid_group"),
        ("$share/a+b/a", "invalid_group"),
        ("$share/a#/a", "invalid_group"),
        ("$share/a b/a", "invalid_group"),
        ("$share/" + "g" * (MAX_GROUP_BYTES + 1) + "/a", "group_too_long"),
    ],
)
def test_split_shared_refuses(text: str, code: str) -> None:
    with pytest.raises(InvalidGroupError) as caught:
        split_shared(text)
    assert caught.value.code == code


@pytest.mark.parametrize(
    ("value", "code"),
    [
        ("", "empty_group"),
        ("a/b", "invalid_group"),
        ("a\tb", "invalid_group"),
        ("a\nb", "invalid_group"),
        ("a\x00", "nul_byte"),
        ("\ud800", "lone_surrogate"),
        ("\u00e9" * 65, "group_too_long"),  # 130 bytes
        (7, "not_text"),
    ],
)
def test_check_group_refuses(value: object, code: str) -> None:
    with pytest.raises(InvalidGroupError) as caught:
        check_group(value)
    assert caught.value.code == code


def test_check_group_accepts_up_to_the_limit() -> None:
    assert check_group("g" * MAX_GROUP_BYTES) == "g" * MAX_GROUP_BYTES
    assert check_group("workers.eu-1*>") == "workers.eu-1*>"


def test_policy_and_key() -> None:
    assert check_policy("hash") == "hash"
    with pytest.raises(InvalidGroupError, match="random, round_robin, hash"):
        check_policy("sticky")
    assert check_key("") == ""
    with pytest.raises(InvalidGroupError) as caught:
        check_key("k" * 1025)
    assert caught.value.code == "key_too_long"


# -- selection ------------------------------------------------------------------------------

ids_and_groups = st.dictionaries(
    st.integers(0, 2**32 - 1), st.one_of(st.none(), st.sampled_from("abc")), max_size=30
)


@given(ids_and_groups, st.sampled_from(["random", "round_robin", "hash"]), st.text())
def test_select_delivers_every_ungrouped_id_and_one_member_per_group(
    assignment: dict[int, str | None], policy: str, key: str
) -> None:
    group_of = {i: g for i, g in assignment.items() if g is not None}
    rng = random.Random(1)
    counters = {g: new_counter() for g in "abc"}

    def pick(group: str, members: Sequence[int]) -> int:
        assert members == sorted(members)
        assert all(group_of[m] == group for m in members)
        return choose(
            policy, members, key_hash=lambda: stable_hash(key), counter=counters[group], rng=rng
        )

    delivered, chosen = select(list(assignment), group_of, pick)
    ungrouped = {i for i, g in assignment.items() if g is None}
    groups = {g for g in assignment.values() if g is not None}
    assert delivered == sorted(delivered)
    assert set(delivered) - set(chosen) == ungrouped
    assert sorted(chosen.values()) == sorted(groups)  # exactly one member per group
    for member, group in chosen.items():
        assert group_of[member] == group and member in delivered


@given(st.sets(st.integers(0, 2**32 - 1), min_size=2, max_size=20), st.text())
def test_hash_is_sticky_when_other_members_leave(members: set[int], key: str) -> None:
    """Rendezvous hashing: removing any member but the chosen one keeps the choice."""
    ordered = sorted(members)
    chosen = by_hash(ordered, stable_hash(key))
    for leaving in ordered:
        if leaving != chosen:
            assert by_hash([m for m in ordered if m != leaving], stable_hash(key)) == chosen


def test_hash_spreads_keys_over_members() -> None:
    members = [3, 17, 40, 41, 99]
    counts = Counter(by_hash(members, stable_hash(f"message-{i}")) for i in range(5000))
    assert set(counts) == set(members)
    assert all(800 <= n <= 1200 for n in counts.values()), counts  # 1,000 expected each


def test_stable_hash_is_the_same_in_another_process() -> None:
    """Python's own ``hash`` of a str is salted per process; a rerun must choose alike."""
    keys = ["", "m-1", "\u00e9t\u00e9", "x" * 300]
    script = f"from matcher.groups import stable_hash\nprint([stable_hash(k) for k in {keys!r}])\n"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == str([stable_hash(k) for k in keys])
    # Written by hand once: the hash must not change between releases either.
    assert stable_hash("m-1") == int.from_bytes(
        __import__("hashlib").blake2b(b"m-1", digest_size=8).digest(), "little"
    )


def test_round_robin_cycles_in_id_order() -> None:
    counter = new_counter()
    rng = random.Random(0)
    picks = [
        choose("round_robin", [5, 9, 12], key_hash=lambda: 0, counter=counter, rng=rng)
        for _ in range(7)
    ]
    assert picks == [5, 9, 12, 5, 9, 12, 5]


def test_random_reaches_every_member_evenly() -> None:
    rng = random.Random(7)
    counts = Counter(
        choose("random", [1, 2, 3, 4], key_hash=lambda: 0, counter=new_counter(), rng=rng)
        for _ in range(4000)
    )
    assert all(850 <= n <= 1150 for n in counts.values()), counts


def test_one_member_needs_no_policy() -> None:
    def no_key() -> int:
        raise AssertionError("the key is not needed for one member")

    assert choose("hash", [4], key_hash=no_key, counter=new_counter(), rng=random.Random()) == 4
