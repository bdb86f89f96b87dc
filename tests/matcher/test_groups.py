"""Shared subscriptions in the matcher package: the ``$share/`` grammar, group names, the
policies and the selection rule (every ungrouped id plus exactly one member per group)."""

from __future__ import annotations

import math
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from functools import partial
from typing import overload

import pytest
from hypothesis import given
from hypothesis import strategies as st

from matcher.groups import (
    MAX_GROUP_BYTES,
    POINTS,
    PROBES,
    InvalidGroupError,
    Ring,
    by_hash,
    check_group,
    check_key,
    check_policy,
    choose,
    member_points,
    new_counter,
    nth,
    pick_hash,
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


def _choose(policy: str, members: Sequence[int], key: str = "", **kw: object) -> int:
    """``choose`` over one ring of ``members``: the member alone."""
    return choose(
        policy,
        [Ring.of(members, policy == "hash")],
        key_hash=lambda: stable_hash(key),
        counter=kw.get("counter", new_counter()),  # type: ignore[arg-type]
        rng=kw.get("rng", random.Random(0)),  # type: ignore[arg-type]
    )[0]


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
        return _choose(policy, members, key, counter=counters[group], rng=rng)

    delivered, chosen = select(list(assignment), group_of, pick)
    ungrouped = {i for i, g in assignment.items() if g is None}
    groups = {g for g in assignment.values() if g is not None}
    assert delivered == sorted(delivered)
    assert set(delivered) - set(chosen) == ungrouped
    assert sorted(chosen.values()) == sorted(groups)  # exactly one member per group
    for member, group in chosen.items():
        assert group_of[member] == group and member in delivered


members_sets = st.sets(st.integers(0, 2**32 - 1), min_size=2, max_size=20)


@given(members_sets, st.text())
def test_hash_is_sticky_when_other_members_leave(members: set[int], key: str) -> None:
    """Removing any member but the chosen one keeps the choice."""
    ordered = sorted(members)
    chosen = by_hash(ordered, stable_hash(key))
    for leaving in ordered:
        if leaving != chosen:
            assert by_hash([m for m in ordered if m != leaving], stable_hash(key)) == chosen


@given(members_sets, st.integers(0, 2**32 - 1), st.text())
def test_hash_moves_a_key_only_to_a_member_that_joins(
    members: set[int], joining: int, key: str
) -> None:
    """Minimal movement the other way: a new member takes some keys, nobody else does."""
    before = by_hash(members, stable_hash(key))
    assert by_hash(members | {joining}, stable_hash(key)) in (before, joining)


@given(st.lists(members_sets, min_size=1, max_size=4), st.integers(0, 2**64 - 1))
def test_a_choice_over_several_rings_is_the_choice_over_their_union(
    sets: list[set[int]], key_hash: int
) -> None:
    """A group whose members match through several patterns (one ring each, as the routing
    table keeps them) chooses as if its matching members were one set: ``hash``, and the
    id order that ``round_robin`` and ``random`` index."""
    parts: list[set[int]] = []
    for s in sets:  # disjoint, as a member has one pattern
        parts.append(s - set().union(*parts))
    parts = [p for p in parts if p]
    union = sorted(set().union(*parts))
    rings = [Ring.of(p) for p in parts]
    assert pick_hash(rings, key_hash)[0] == by_hash(union, key_hash)
    for i in (0, len(union) // 2, len(union) - 1):
        assert nth(rings, i)[0] == union[i]


def test_hash_spreads_keys_over_members() -> None:
    members = [3, 17, 40, 41, 99]
    counts = Counter(by_hash(members, stable_hash(f"message-{i}")) for i in range(5000))
    assert set(counts) == set(members)
    assert all(800 <= n <= 1200 for n in counts.values()), counts  # 1,000 expected each


def test_hash_spreads_keys_over_many_members() -> None:
    """100 members, 100,000 keys (1,000 each expected): none below 0.7x or above 1.3x."""
    ring = Ring.of(range(5000, 5100))
    counts = Counter(pick_hash([ring], stable_hash(f"m{i}"))[0] for i in range(100_000))
    assert len(counts) == 100
    assert min(counts.values()) >= 700 and max(counts.values()) <= 1300, counts


class _Counted(Sequence[int]):
    """A sequence that counts the items read from it: what a choice examined."""

    def __init__(self, items: Sequence[int], reads: list[int]) -> None:
        self._items, self._reads = items, reads

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[int]: ...
    def __getitem__(self, i: int | slice) -> int | Sequence[int]:
        self._reads[0] += 1
        return self._items[i]


@pytest.mark.parametrize("policy", ["hash", "round_robin", "random"])
def test_a_choice_reads_log_members_not_members(policy: str) -> None:
    """Every policy reads O(log members) items of a group's rings: a group of 100,000
    members costs a few dozen reads more than one of 100 (a pass over the members would
    read 1,000 times more). Reads are counted, not timed."""

    def reads(size: int, parts: int) -> int:
        counted = [0]
        members = range(10_000, 10_000 + size)
        rings = [
            Ring(*(_Counted(s, counted) for s in (r.ids, r.points, r.owners)))
            for r in (Ring.of(members[k::parts], policy == "hash") for k in range(parts))
        ]
        rng, counter = random.Random(3), new_counter()
        for k in range(50):
            key = partial(stable_hash, f"k{k}")
            choose(policy, rings, key_hash=key, counter=counter, rng=rng)
        return counted[0] // 50

    def bound(size: int, parts: int) -> float:
        """Reads of binary searches: per probe, or per step of the search over id values."""
        depth = math.log2(size * POINTS) + 4
        if policy == "hash":
            return parts * PROBES * depth
        return 1 if parts == 1 else parts * depth * depth

    for parts in (1, 3):  # one pattern matched, or three (one ring each)
        assert reads(100, parts) <= bound(100, parts)
        assert reads(100_000, parts) <= bound(100_000, parts) < 100_000 / 20


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


def test_member_points_are_fixed_across_releases() -> None:
    """A member's ring positions, written down: a change would move every key (a rerun of
    the Spark job would disagree with the last run)."""
    digest = __import__("hashlib").blake2b((7).to_bytes(8, "little"), digest_size=64).digest()
    assert member_points(7) == tuple(
        int.from_bytes(digest[k : k + 8], "little") for k in range(0, 64, 8)
    )
    assert len(member_points(7)) == POINTS == 8


def _naive_hash(members: set[int], key_hash: int) -> int:
    """The ``hash`` rule as docs/groups.md states it, by brute force: probe ``i`` of a key
    is ``key_hash + i * step`` (``step`` the key hash mixed, odd), and the member whose
    point lies nearest after any probe, clockwise on the 64-bit ring, wins (ties: the
    lower id). O(members x POINTS x PROBES)."""
    mask = (1 << 64) - 1
    x = key_hash
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & mask
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & mask
    step = (x ^ (x >> 31)) | 1
    probes = [(key_hash + i * step) & mask for i in range(PROBES)]
    return min(
        ((point - probe) & mask, m)
        for m in members
        for point in member_points(m)
        for probe in probes
    )[1]


@given(st.sets(st.integers(0, 2**32 - 1), min_size=1, max_size=12), st.integers(0, 2**64 - 1))
def test_hash_is_the_nearest_point_after_a_probe(members: set[int], key_hash: int) -> None:
    assert by_hash(members, key_hash) == _naive_hash(members, key_hash)


def test_round_robin_cycles_in_id_order() -> None:
    counter = new_counter()
    picks = [_choose("round_robin", [5, 9, 12], counter=counter) for _ in range(7)]
    assert picks == [5, 9, 12, 5, 9, 12, 5]


def test_round_robin_over_several_rings_cycles_in_id_order() -> None:
    counter = new_counter()
    rings = [Ring.of([5, 12], False), Ring.of([9], False), Ring.of([1, 30], False)]

    def picks() -> int:
        return choose(
            "round_robin", rings, key_hash=lambda: 0, counter=counter, rng=random.Random()
        )[0]

    assert [picks() for _ in range(6)] == [1, 5, 9, 12, 30, 1]


def test_random_reaches_every_member_evenly() -> None:
    rng = random.Random(7)
    counts = Counter(_choose("random", [1, 2, 3, 4], rng=rng) for _ in range(4000))
    assert all(850 <= n <= 1150 for n in counts.values()), counts


def test_one_member_needs_no_policy() -> None:
    def no_key() -> int:
        raise AssertionError("the key is not needed for one member")

    ring = [Ring.of([4])]
    assert choose("hash", ring, key_hash=no_key, counter=new_counter(), rng=random.Random()) == (
        4,
        1,
    )
