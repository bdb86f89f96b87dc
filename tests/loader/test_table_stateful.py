"""The routing table against a plain dict under random adds, removes, snapshots, bulk
loads and matches (a hypothesis state machine): the compact catalog (columns plus a
persistent delta, folded often here) must always say what the dict says, old snapshots
must never change, and matches must name exactly the reference's subscribers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import loader.catalog
from loader import Entry, RoutingTable, Snapshot
from loader.applying import APPLY_SLICE
from loader.reconcile_figures import group_sizes, range_stats
from loader.repairing import as_change
from matcher import CapacityError, MatcherError, create_matcher
from matcher.cache import CachedMatcher
from store.records import Change, Removals, headers_pattern
from tests.matcher.native_capacity import lower_capacity

TENANTS = st.sampled_from(["t1", "t2"])
#: Names with quotes, backslashes, control characters, non-ASCII, a prefix of another.
SUBSCRIBERS = st.sampled_from(["a", "ab", "b", "é", 'q"\\', "t\t\x01\x1f\x7f", "😀z"])
WORDS = ["x", "y", "z"]
PATTERNS = st.lists(st.sampled_from([*WORDS, "*", "#"]), min_size=1, max_size=3).map(".".join)
TOPICS = st.lists(st.sampled_from(WORDS), max_size=3).map(".".join)
#: Topics the dialect refuses: the batch answers them with an error entry.
BAD_TOPICS = st.sampled_from(["x.\x00", "x." * 200])
#: Dense ids, and a few far ones (kept in the table's sparse dict, not its list).
IDS = st.one_of(st.integers(0, 40), st.sampled_from([70_000, 2**31, 2**32 - 1]))
ENGINES = ("native", "trie")


class TableAgrees(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.table = RoutingTable(ENGINES, shadow_max=3)
        self.model: dict[int, Entry] = {}
        self.seq = 0
        self.kept: list[tuple[Snapshot, dict[int, Entry]]] = []
        self.naive = create_matcher("naive", "amqp")

    @rule(sub_id=IDS, tenant=TENANTS, subscriber=SUBSCRIBERS, pattern=PATTERNS)
    def add(self, sub_id: int, tenant: str, subscriber: str, pattern: str) -> None:
        self.seq += 1
        entry = Entry(tenant, subscriber, "amqp", pattern)
        applied = self.table.apply([as_change(self.seq, "add", sub_id, entry)])
        assert applied == (sub_id not in self.model)
        self.model.setdefault(sub_id, entry)

    @rule(sub_id=IDS, tenant=TENANTS, subscriber=SUBSCRIBERS, value=st.sampled_from(["1", "2"]))
    def add_headers(self, sub_id: int, tenant: str, subscriber: str, value: str) -> None:
        self.seq += 1
        entry = Entry(tenant, subscriber, "headers", headers_pattern((("k", value),), "all"))
        self.table.apply([as_change(self.seq, "add", sub_id, entry)])
        self.model.setdefault(sub_id, entry)

    @rule(sub_id=IDS)
    def remove(self, sub_id: int) -> None:
        self.seq += 1
        entry = self.model.pop(sub_id, Entry("t1", "a", "amqp", "x"))
        self.table.apply([as_change(self.seq, "remove", sub_id, entry)])

    @rule(ids=st.lists(IDS, max_size=5), new=IDS, add_first=st.booleans())
    def remove_ids(self, ids: list[int], new: int, add_first: bool) -> None:
        """Removes read as ids (``Removals``: the table finds each one's tenant and dialect
        itself), some absent or twice, next to an add."""
        first, self.seq = self.seq + 1, self.seq + len(ids) + 1
        entry = Entry("t2", "a", "amqp", "x.#")
        if add_first:
            removals = Removals(list(range(first + 1, self.seq + 1)), ids)
            self.table.apply([as_change(first, "add", new, entry), removals])
            self.model.setdefault(new, entry)
            for sub_id in ids:
                self.model.pop(sub_id, None)
        else:
            removals = Removals(list(range(first, self.seq)), ids)
            self.table.apply([removals, as_change(self.seq, "add", new, entry)])
            for sub_id in ids:
                self.model.pop(sub_id, None)
            self.model.setdefault(new, entry)
        assert self.table.seq == self.seq

    @rule()
    def keep_snapshot(self) -> None:
        self.kept.append((self.table.snapshot(), dict(self.model)))

    @rule()
    def reload(self) -> None:
        """A fresh table bulk-built from the model holds the same (the columnar path)."""
        fresh = RoutingTable(ENGINES, shadow_max=3)
        fresh.load((as_change(0, "add", i, e) for i, e in sorted(self.model.items())), self.seq)
        assert dict(fresh.snapshot().entries.items()) == self.model
        fresh._check()
        self.table = fresh
        self.kept.clear()

    @rule(tenant=TENANTS, topics=st.lists(st.one_of(TOPICS, BAD_TOPICS), max_size=4))
    def match(self, tenant: str, topics: list[str]) -> None:
        """The batch answer in arrays (``match_ids``) says per topic what ``match`` and the
        reference say, and ``subscriber_names`` names its ids as the reference does."""
        counts, ids, errors = self.table.match_ids(tenant, "amqp", topics)
        by_id, far = self.table.subscriber_names()
        assert len(counts) == len(topics)
        at = 0
        for k, topic in enumerate(topics):
            try:
                found = self.table.match(tenant, "amqp", topic)
            except MatcherError as e:
                assert (errors[k].code, errors[k].message, counts[k]) == (e.code, e.message, 0)
                continue
            assert k not in errors
            got = list(ids[at : at + counts[k]])
            at += counts[k]
            expected = sorted(
                i
                for i, e in self.model.items()
                if e.tenant == tenant and e.dialect == "amqp" and self._matches(e.pattern, topic)
            )
            assert sorted(found) == expected == got
            names = sorted({self.model[i].subscriber for i in expected})
            named = {(by_id[i] if i < len(by_id) else None) or far[i] for i in got}
            assert self.table.subscribers(found) == names == sorted(named)
        assert at == len(ids)

    def _matches(self, pattern: str, topic: str) -> bool:
        self.naive.subscribe(1, pattern)
        try:
            return bool(self.naive.match(topic))
        finally:
            self.naive.unsubscribe(1)

    @invariant()
    def catalog_is_the_model(self) -> None:
        entries = self.table.snapshot().entries
        assert len(entries) == len(self.model) == len(self.table)
        assert dict(entries.items()) == self.model
        for sub_id in (0, 5, 2**31):
            assert entries.get(sub_id) == self.model.get(sub_id)
            assert (sub_id in entries) == (sub_id in self.model)
        assert self.table.seq == self.seq or not self.seq

    @invariant()
    def checksums_and_group_sizes_follow_the_model(self) -> None:
        """What the reconciler compares with the store, kept incrementally (cached for the
        columns, adjusted by the delta), equals a count over the model."""
        ranges: dict[int, tuple[int, int, int]] = {}
        groups: dict[tuple[str, str], int] = {}
        for sub_id, e in self.model.items():
            rows, ids, size = ranges.get(sub_id // 16, (0, 0, 0))
            length = len(e.tenant) + len(e.subscriber) + len(e.dialect) + len(e.pattern)
            ranges[sub_id // 16] = (rows + 1, ids + sub_id, size + length)
            groups[(e.tenant, e.dialect)] = groups.get((e.tenant, e.dialect), 0) + 1
        entries = self.table.snapshot().entries
        assert range_stats(entries, 16) == ranges
        assert group_sizes(entries) == groups

    @invariant()
    def snapshots_neveras_change(self) -> None:
        for view, model in self.kept:
            assert dict(view.entries.items()) == model

    @invariant()
    def engines_hold_the_catalog(self) -> None:
        self.table._check()


@pytest.fixture
def folds_often(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fold the delta into the columns after a handful of changes, not thousands."""
    monkeypatch.setattr(loader.catalog, "FOLD_MIN", 3)
    monkeypatch.setattr(loader.catalog, "FOLD_SHARE", 2)
    yield


def test_table_agrees_with_a_dict(folds_often: None) -> None:
    machine = TableAgrees.TestCase
    machine.settings = settings(
        max_examples=60,
        stateful_step_count=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    machine().runTest()


def test_load_columns_builds_the_native_engine_from_buffers() -> None:
    """The Arrow path: unsorted ids are sorted, names coded, patterns handed to the native
    engine as buffers (non-ASCII and non-AMQP rows through the general path)."""
    rows = pa.table(
        {
            "id": [5, 1, 3, 2],
            "tenant": ["t", "t", "u", "t"],
            "subscriber": ["s1", "s2", "s1", "s3"],
            "dialect": ["amqp", "amqp", "amqp", "mqtt"],
            "pattern": ["a.*", "a.#", "é.b", "a/+"],
        }
    )
    table = RoutingTable(("native",))
    table.load_columns(rows, 7)
    assert table.seq == 7
    assert sorted(table.match("t", "amqp", "a.b")) == [1, 5]
    assert table.subscribers([1, 5, 99]) == ["s1", "s2"]
    assert sorted(table.match("u", "amqp", "é.b")) == [3]
    assert sorted(table.match("t", "mqtt", "a/b")) == [2]
    assert list(table.snapshot().entries) == [1, 2, 3, 5]
    assert table.snapshot().entries[3] == Entry("u", "s1", "amqp", "é.b")
    table._check()
    with pytest.raises(RuntimeError):
        table.load_columns(rows, 8)


def test_a_capacity_refusal_is_not_served_and_the_applier_goes_on() -> None:
    """An engine that refuses a stored subscription for a fixed capacity (the native
    trie's nodes here, lowered so that a few patterns reach it): the id is served by no
    engine and left out of the catalog (so the reconciler's next pass offers it again),
    it is counted, later changes still apply, and once removals make room the same adds
    go in. The bulk startup build refuses the same way, row by row."""

    def adds(seq: int, ids: range, tenant: str = "t") -> list[Change]:
        return [as_change(seq, "add", i, Entry(tenant, f"s{i}", "amqp", f"w{i}.#")) for i in ids]

    def lowered(table: RoutingTable) -> None:
        # The root and 2 nodes a pattern: 20 fit.
        lower_capacity(table._matchers("t", "amqp")["native"], 41)

    table = RoutingTable(("native", "trie"))
    lowered(table)
    assert table.apply([*adds(1, range(30)), *adds(2, range(100, 102), "u")]) == 22
    assert table.refused == 10 and table.seq == 2
    entries = table.snapshot().entries
    assert sorted(entries) == [*range(20), 100, 101]
    assert not table.match("t", "amqp", "w25.x") and list(table.match("t", "amqp", "w5.x")) == [5]
    assert list(table.match("u", "amqp", "w100")) == [100]
    table._check()  # both engines hold exactly the catalog
    removes = [as_change(3, "remove", i, entries[i]) for i in range(10)]
    assert table.apply(removes) == 10
    assert table.apply(adds(4, range(20, 30))) == 10 and table.refused == 10
    assert list(table.match("t", "amqp", "w25.x")) == [25]
    table._check()
    # A refused member of a shared subscription keeps its membership, as the store has
    # it (so the reconciler's group check finds no drift), until its removal.
    grouped = replace(adds(5, range(40, 41))[0], group="g")
    assert table.apply([grouped]) == 0 and table.refused == 11
    key, policy = table.groups.state()[40]
    assert key == ("t", "g")
    assert table.repair_members([(40, "t", "g", policy)]) == 0
    assert table.apply([grouped]) == 0 and table.refused == 12  # offered again
    assert table.repair_members([(40, "t", "g", policy)]) == 0
    assert table.apply([replace(grouped, seq=6, op="remove")]) == 0
    assert table.repair_members([]) == 0 and table.seq == 6
    table._check()

    fresh = RoutingTable(("native", "trie"))
    lowered(fresh)
    rows = pa.table(
        {
            "id": list(range(30)),
            "tenant": ["t"] * 30,
            "subscriber": [f"s{i}" for i in range(30)],
            "dialect": ["amqp"] * 30,
            "pattern": [f"w{i}.#" for i in range(30)],
        }
    )
    fresh.load_columns(rows, 9)
    assert fresh.refused == 10 and sorted(fresh.snapshot().entries) == list(range(20))
    assert fresh.subscribers([25, 5]) == ["s5"]
    fresh._check()


def test_capacity_checks_reach_the_engine_behind_a_result_cache() -> None:
    """With the result cache on, the admin writes' room check and the capacity metric ask
    the native engine behind it."""
    table = RoutingTable(("native",), cache_size=16)
    table.apply([as_change(1, "add", 1, Entry("t", "s", "amqp", "w1.#"))])
    cached = table._matchers("t", "amqp")["native"]
    assert isinstance(cached, CachedMatcher)
    engine = cached.engine
    assert table.capacity_fill()["trie_nodes"] == 3 / engine.capacity()["trie_nodes"][1]
    table.check_room([("t", "amqp", "w2.#"), ("u", "amqp", "w2.#")])  # fits; u: no engine yet
    lower_capacity(engine, 4)
    with pytest.raises(CapacityError) as refused:
        table.check_room([("t", "amqp", "w2.#")])
    assert refused.value.code == "too_many_trie_nodes"
    table.check_room([("t", "headers", "x"), ("u", "amqp", "w2.#")])  # other groups


@pytest.mark.parametrize("compact", [False, True], ids=["changes", "removals"])
@pytest.mark.parametrize("fold_min", [loader.catalog.FOLD_MIN, 500])
def test_a_mass_removal_applies_in_slices_and_leaves_exactly_the_rest(
    monkeypatch: pytest.MonkeyPatch, fold_min: int, compact: bool
) -> None:
    """A run of adds (one already present, one twice), then thousands of removes in one
    ``apply`` (ids of the bulk-built base and of the delta, one removed twice, one never
    present, an add in between): applied in slices, each
    published at its last seq and reported to ``progress``; afterwards the catalog, the
    names and both engines hold exactly what a plain dict says is left. With a low
    ``FOLD_MIN`` the catalog folds its delta into the base between slices too."""
    monkeypatch.setattr(loader.catalog, "FOLD_MIN", fold_min)
    size = 3 * APPLY_SLICE + 500
    table = RoutingTable(("native", "optimized_inverted_bitmap"))
    table.load_columns(
        pa.table(
            {
                "id": list(range(size)),
                "tenant": ["t"] * size,
                "subscriber": ["heavy" if i % 2 == 0 else f"s{i}" for i in range(size)],
                "dialect": ["amqp"] * size,
                "pattern": [f"w{i % 7}.{i}.#" for i in range(size)],
            }
        ),
        1,
    )
    late = {
        i: Entry("t", "heavy" if i % 2 == 0 else "late", "amqp", f"w{i % 7}.*")
        for i in range(size, size + 100)
    }
    adds = [as_change(2, "add", i, entry) for i, entry in late.items()]
    present = as_change(2, "add", 0, Entry("t", "heavy", "amqp", "w0.0.#"))
    assert table.apply([present, *adds, adds[5]]) == len(late)  # one run of adds
    expected = dict(table.snapshot().entries.items())
    assert len(expected) == size + 100 and expected[size + 1] == late[size + 1]
    doomed = [i for i in expected if i % 2 == 0]
    changes = [as_change(3 + k, "remove", i, expected[i]) for k, i in enumerate(doomed)]
    extra = Entry("t", "new", "amqp", "w1.#")
    changes.insert(len(changes) // 2, as_change(0, "add", size + 500, extra))
    changes.insert(10, changes[3])  # removed twice
    changes.append(as_change(0, "remove", 10**6, extra))  # never present
    for k, change in enumerate(changes):
        changes[k] = replace(change, seq=3 + k)
    published: list[int] = []
    given: list[Change | Removals] = list(changes)
    if compact:  # each run of removes as the loader reads it (RoutingReads.changes_in)
        given = []
        for change in changes:
            last = given[-1] if given else None
            if change.op == "add":
                given.append(change)
            elif isinstance(last, Removals):
                last.seqs.append(change.seq)
                last.ids.append(change.subscription_id)
            else:
                given.append(Removals([change.seq], [change.subscription_id]))
        assert len(given) == 3

    assert table.apply(given, lambda: published.append(table.seq)) == len(doomed) + 1

    for i in doomed:
        del expected[i]
    expected[size + 500] = extra
    assert dict(table.snapshot().entries.items()) == expected
    assert table.seq == changes[-1].seq == published[-1]
    assert len(published) == -(-len(changes) // APPLY_SLICE)
    assert published == sorted(published) and len(set(published)) == len(published)
    assert table.subscribers(doomed) == [] and table.subscribers([1, size + 500]) == ["new", "s1"]
    for topic in ("w1.x", "w2.15", "w1.1.y"):
        naive = create_matcher("naive")
        naive.subscribe_many((i, e.pattern) for i, e in expected.items())
        assert set(table.match("t", "amqp", topic)) == set(naive.match(topic)), topic
    table._check()
