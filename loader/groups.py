"""The routing table's shared subscriptions: who is in which group (as the store has it),
each group's policy and round-robin counter, and the served members of every group, one
``Ring`` per pattern.

Members of one group with the same pattern in the same dialect (a *class*: 20,000 workers
on ``jobs.#``) match together or not at all, so the engines hold only one of them, the
class's *route*. A match that returns the route stands for every member, and the group's
choice reads the class's ring (its members sorted, and their ring points for ``hash``) in
O(log members): the engines never return, and the choice never scans, every member. The
table asks this index which ids its engines need (``serve``, ``leaving``) and tells it what
they did (``unserve``, ``left``). Kept apart from the catalog (``loader.table``): it holds
grouped subscriptions only, so a tenant without groups costs one dict lookup per match.

Readers and the one applier share it without a lock: every read is a single dict lookup
or attribute read (atomic under the GIL), and a ring is replaced whole, never changed in
place. A member removed mid-match is chosen at worst once more, as a match started just
before the remove would have.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, NamedTuple

import numpy as np

from matcher import MatchResult
from matcher.groups import (
    DEFAULT_POLICY,
    POINTS,
    Ring,
    choose,
    member_points,
    new_counter,
    select,
    stable_hash,
)
from store.records import Change

GroupKey = tuple[str, str]  # (tenant, group)
TableKey = tuple[str, str]  # (tenant, dialect): one set of engines
#: A served grouped subscription: (id, tenant, dialect, pattern).
Served = tuple[int, str, str, str]
#: A ring of at most this many members is built by ``Ring.of`` (stdlib, no per-call
#: numpy overhead: a group whose members each hold their own pattern has many tiny rings);
#: a larger one is changed in numpy (copies, never a re-sort).
SMALL_RING: Final = 64


@dataclass(slots=True, eq=False)
class _Group:
    policy: str
    members: int = 0
    counter: Iterator[int] = field(default_factory=new_counter)


@dataclass(slots=True, eq=False)
class Class:
    """The served members of one group that share one pattern in one dialect: the engines
    hold ``route`` (one of them) for all of them."""

    table: TableKey
    group: str
    pattern: str
    route: int
    ring: Ring


class Chosen(NamedTuple):
    """One group's choice for one message."""

    group: str
    policy: str
    subscription: int
    candidates: int


class Delivery(NamedTuple):
    """Who receives a message: ``ids`` (sorted; ungrouped matches plus one per group), the
    choice each matching group made, and the candidates the choices examined (what a batch
    counts toward its bound besides the ids, ``app.delivery``)."""

    ids: list[int]
    chosen: list[Chosen]
    examined: int = 0


def _policy(group: _Group | None) -> str:
    return DEFAULT_POLICY if group is None else group.policy


class GroupIndex:
    """id -> (tenant, group) for grouped subscriptions, per group its policy, and the
    served members per (tenant, dialect, group, pattern) (see the module docstring)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._group_of: dict[int, GroupKey] = {}
        self._groups: dict[GroupKey, _Group] = {}
        self._tenants: dict[str, int] = {}  # grouped subscriptions per tenant
        self._class_of: dict[int, Class] = {}  # every served member
        self._classes: dict[TableKey, dict[tuple[str, str], Class]] = {}
        self._hidden: dict[TableKey, int] = {}  # served members the engines do not hold
        self._rng = rng or random.Random()

    def __len__(self) -> int:
        return len(self._group_of)

    # -- membership, as the store has it -----------------------------------------------

    def add(self, change: Change) -> None:
        """Index an ``add``'s membership (called before the matchers see the id, so a
        reader never takes a member for an ungrouped subscription). Ungrouped: nothing."""
        if change.group is not None:
            self.add_member(
                change.subscription_id, change.tenant, change.group, change.group_policy
            )

    def add_member(self, sub_id: int, tenant: str, group: str, policy: str | None) -> None:
        """``add`` from the columns of a grouped row (the startup build reads only those:
        ``SubscriptionRepository.members``)."""
        if sub_id in self._group_of:
            return
        key = (tenant, group)
        found = self._groups.get(key)
        if found is None:
            found = self._groups[key] = _Group(policy or DEFAULT_POLICY)
        found.members += 1
        self._tenants[tenant] = self._tenants.get(tenant, 0) + 1
        self._group_of[sub_id] = key

    @classmethod
    def of(cls, members: Iterable[tuple[int, str, str, str | None]]) -> GroupIndex:
        """An index holding exactly ``members`` ((id, tenant, group, policy)), none of them
        served yet (``serve``): what reconciliation builds when the live one drifted from
        the store (a new object, so a reader sees the old index or the new one)."""
        index = cls()
        for member in members:
            index.add_member(*member)
        return index

    def remove_many(self, ids: Iterable[int]) -> None:
        """``remove`` of each of ``ids`` (nothing to do when no subscription is in a
        group: a mass removal of ungrouped ones pays no lookup per id)."""
        if self._group_of:
            for sub_id in ids:
                self.remove(sub_id)

    def remove(self, sub_id: int) -> None:
        """Forget a removed subscription's membership (after the matchers did, and after
        ``left``)."""
        key = self._group_of.pop(sub_id, None)
        if key is None:
            return
        group = self._groups[key]
        group.members -= 1
        if not group.members:
            del self._groups[key]
        left = self._tenants[key[0]] - 1
        if left:
            self._tenants[key[0]] = left
        else:
            del self._tenants[key[0]]

    def has_groups(self, tenant: str) -> bool:
        return tenant in self._tenants

    def state(self) -> Mapping[int, tuple[GroupKey, str]]:
        """Every grouped id with its group and policy (drift checks and tests)."""
        return {i: (k, self._groups[k].policy) for i, k in self._group_of.items()}

    # -- serving: which ids the engines hold -------------------------------------------

    def serve(self, items: Iterable[Served]) -> set[int]:
        """Put ``items`` (subscriptions new in the catalog) that are members into their
        classes; returns those the engines must not be given: every one but the route of
        each class made here (made before the engines see that route)."""
        new: dict[tuple[TableKey, str, str], list[int]] = {}
        group_of, class_of = self._group_of, self._class_of
        for sub_id, tenant, dialect, pattern in items:
            member = group_of.get(sub_id)
            if member is not None and sub_id not in class_of:
                new.setdefault(((tenant, dialect), member[1], pattern), []).append(sub_id)
        hidden: set[int] = set()
        for (table, group, pattern), ids in new.items():
            classes = self._classes.setdefault(table, {})
            found = classes.get((group, pattern))
            hashed = self._groups[(table[0], group)].policy == "hash"
            ring = _changed(None if found is None else found.ring, ids, (), hashed)
            assert ring is not None
            if found is None:
                route = min(ids)
                found = Class(table, group, pattern, route, ring)
                hidden.update(i for i in ids if i != route)
            else:
                found.ring = ring
                hidden.update(ids)
            for sub_id in ids:
                class_of[sub_id] = found
            classes[(group, pattern)] = found
        self._count_hidden(new, hidden)
        return hidden

    def _count_hidden(
        self, new: Mapping[tuple[TableKey, str, str], list[int]], hidden: set[int]
    ) -> None:
        for (table, _, _), ids in new.items():
            count = sum(1 for i in ids if i in hidden)
            if count:
                self._hidden[table] = self._hidden.get(table, 0) + count

    def unserve(self, routes: Iterable[int]) -> list[int]:
        """Forget the classes whose route the engines refused (only a class made by the
        last ``serve`` can be: its members came with it); returns all their members."""
        dropped: list[int] = []
        for route in routes:
            found = self._class_of.get(route)
            if found is None or found.route != route:
                continue
            members = list(found.ring.ids)
            dropped += members
            for sub_id in members:
                del self._class_of[sub_id]
            del self._classes[found.table][(found.group, found.pattern)]
            self._less_hidden(found.table, len(members) - 1)
        return dropped

    def leaving(self, ids: Iterable[int]) -> tuple[set[int], list[tuple[Class, int]]]:
        """For removed ``ids``: those the engines do not hold (nothing to unsubscribe), and
        each class whose route leaves while members stay, with its next route: the table
        subscribes that one, then unsubscribes the old, then calls ``left``."""
        gone: dict[Class, set[int]] = {}
        if not self._class_of:
            return set(), []
        for sub_id in ids:
            served = self._class_of.get(sub_id)
            if served is not None:
                gone.setdefault(served, set()).add(sub_id)
        quiet: set[int] = set()
        swaps: list[tuple[Class, int]] = []
        for found, out in gone.items():
            quiet.update(i for i in out if i != found.route)
            if found.route in out and len(found.ring) > len(out):
                swaps.append((found, next(m for m in found.ring.ids if m not in out)))
        return quiet, swaps

    def left(self, ids: Iterable[int], swaps: Iterable[tuple[Class, int]]) -> None:
        """After the engines did what ``leaving`` said: the removed ``ids`` out of their
        rings, each swapped class's route the new one, empty classes gone."""
        for found, route in swaps:
            found.route = route
        if not self._class_of:
            return
        gone: dict[Class, list[int]] = {}
        for sub_id in ids:
            served = self._class_of.get(sub_id)
            if served is not None:
                gone.setdefault(served, []).append(sub_id)
        for found, out in gone.items():
            before = len(found.ring)
            ring = _changed(found.ring, (), out, hashed=bool(found.ring.points))
            if ring is None:
                del self._classes[found.table][(found.group, found.pattern)]
            else:
                found.ring = ring
            for sub_id in out:
                del self._class_of[sub_id]
            self._less_hidden(found.table, (before - 1) - (0 if ring is None else len(ring) - 1))

    def _less_hidden(self, table: TableKey, count: int) -> None:
        left = self._hidden.get(table, 0) - count
        if left:
            self._hidden[table] = left
        else:
            self._hidden.pop(table, None)
            if not self._classes.get(table, True):
                del self._classes[table]

    def hidden(self, table: TableKey) -> int:
        """Served members of ``table`` the engines do not hold (the table's sizes add them)."""
        return self._hidden.get(table, 0)

    def tables(self) -> set[TableKey]:
        """Every (tenant, dialect) with a served member."""
        return set(self._classes)

    def hidden_ids(self) -> set[int]:
        """Every served member the engines do not hold: O(members) (drift checks)."""
        return {i for i, found in self._class_of.items() if i != found.route}

    def classes(self, table: TableKey) -> list[Class]:
        """``table``'s classes of more than one member (the overlap search's aliases)."""
        return [c for c in self._classes.get(table, {}).values() if len(c.ring) > 1]

    # -- reads --------------------------------------------------------------------------

    def expand(self, table: TableKey, ids: MatchResult) -> MatchResult:
        """A match's ``ids`` (routes) with every member each route stands for: what every
        reader but the delivery sees (explain, the CLI). O(ids + members of their
        classes); ``ids`` unchanged where no member is hidden."""
        if table not in self._hidden:
            return ids
        class_of = self._class_of
        out: set[int] = set()
        for sub_id in ids:
            found = class_of.get(sub_id)
            if found is None:
                out.add(sub_id)
            else:
                out.update(found.ring.ids)
        return frozenset(out)

    def stands_for_others(self, sub_id: int) -> bool:
        """Whether ``sub_id`` is the route of a class with other members (an expired
        route still finds them: ``deliver``)."""
        found = self._class_of.get(sub_id)
        return found is not None and len(found.ring) > 1

    def deliver(
        self, tenant: str, ids: Iterable[int], key: str, expired: frozenset[int] = frozenset()
    ) -> Delivery:
        """Who of ``ids`` (one match of ``tenant``: routes, or members) receives the
        message; ``key`` is the ``hash`` policy's key (bounded by the caller when a request
        gave it). A tenant without groups: ``ids`` sorted, nothing else. A group's
        candidates are the members of its classes that matched, one ring each, chosen
        among in O(classes x log members) (``matcher.groups.choose``); none of
        ``expired`` (``loader.expiry``): a class holding one of them is chosen among its
        other members, in O(members), and a group left with none delivers to nobody."""
        if tenant not in self._tenants:
            return Delivery(sorted(ids), [])
        groups = self._groups
        class_of = self._class_of
        rng = self._rng
        key_hash: list[int] = []
        sizes: dict[GroupKey, int] = {}
        examined = [0]

        def hashed() -> int:
            if not key_hash:
                key_hash.append(stable_hash(key))
            return key_hash[0]

        def pick(group_key: GroupKey, found: Sequence[int]) -> int | None:
            group = groups.get(group_key)  # None: its last member left meanwhile
            if group is None:
                sizes[group_key] = len(found)
                return found[0]
            rings: dict[int, Ring] = {}
            loose: list[int] = []  # not served (yet): each its own candidate
            for sub_id in found:
                served = class_of.get(sub_id)
                if served is None:
                    loose.append(sub_id)
                else:
                    rings[id(served)] = served.ring
            chosen = list(rings.values())
            if expired:
                chosen, loose = _unexpired(chosen, loose, expired)
                if not chosen and not loose:
                    return None
            if loose:
                chosen.append(Ring.of(loose, group.policy == "hash"))
            sizes[group_key] = sum(len(ring) for ring in chosen)
            member, steps = choose(
                group.policy, chosen, key_hash=hashed, counter=group.counter, rng=rng
            )
            examined[0] += steps
            return member

        delivered, chosen = select(ids, self._group_of, pick)
        choices = [
            Chosen(g[1], _policy(groups.get(g)), sub_id, sizes[g]) for sub_id, g in chosen.items()
        ]
        choices.sort(key=lambda c: c.group)
        return Delivery(delivered, choices, examined[0])

    def _check(self) -> None:
        """Counts agree with the members, every class with its ring and every served
        member with its class (tests call it after mutations)."""
        members: dict[GroupKey, int] = {}
        tenants: dict[str, int] = {}
        for key in self._group_of.values():
            members[key] = members.get(key, 0) + 1
            tenants[key[0]] = tenants.get(key[0], 0) + 1
        assert members == {k: g.members for k, g in self._groups.items()}
        assert tenants == self._tenants
        served: dict[int, Class] = {}
        hidden: dict[TableKey, int] = {}
        for table, classes in self._classes.items():
            assert classes, table
            for (group, pattern), found in classes.items():
                assert (found.table, found.group, found.pattern) == (table, group, pattern)
                ids = list(found.ring.ids)
                assert ids and ids == sorted(set(ids)) and found.route in ids
                hashed = self._groups[(table[0], group)].policy == "hash"
                reference = Ring.of(ids, hashed)
                assert list(found.ring.points) == list(reference.points)
                assert list(found.ring.owners) == list(reference.owners)
                for sub_id in ids:
                    assert self._group_of[sub_id] == (table[0], group)
                    served[sub_id] = found
                if len(ids) > 1:
                    hidden[table] = hidden.get(table, 0) + len(ids) - 1
        assert served == self._class_of
        assert hidden == self._hidden


def _changed(
    ring: Ring | None, added: Collection[int], removed: Collection[int], hashed: bool
) -> Ring | None:
    """``ring`` (None: empty) with ``added`` members in and ``removed`` out, as a new ring
    (None when empty) equal to ``Ring.of`` of its members: small ones built by it, larger
    ones changed in numpy, O(members) copying and O(changes) points hashed, no re-sort."""
    before = [] if ring is None else ring.ids
    if len(before) + len(added) <= SMALL_RING:
        out = set(removed)
        small = Ring.of([*(m for m in before if m not in out), *added], hashed)
        if not small.ids:
            return None
        return Ring(array("I", small.ids), array("Q", small.points), array("I", small.owners))
    ids = np.asarray(before, np.uint32)
    gone = np.asarray(sorted(set(removed)), np.uint32)
    new = np.asarray(sorted(set(added)), np.uint32)
    if len(gone):
        gone = gone[_present(ids, gone)]
        ids = np.delete(ids, np.searchsorted(ids, gone))
    if len(new):
        new = new[~_present(ids, new)]
        ids = np.insert(ids, np.searchsorted(ids, new), new)
    if not len(ids):
        return None
    if not hashed:
        return Ring(ids.data)
    points = np.asarray(ring.points if ring is not None else [], np.uint64)
    owners = np.asarray(ring.owners if ring is not None else [], np.uint32)
    if len(gone):
        keep = ~np.isin(owners, gone)
        points, owners = points[keep], owners[keep]
    if len(new):
        fresh = np.array([member_points(m) for m in new.tolist()], np.uint64).reshape(-1)
        who = np.repeat(new, POINTS)
        order = np.argsort(fresh, kind="stable")
        fresh, who = fresh[order], who[order]
        at = np.searchsorted(points, fresh)
        points, owners = np.insert(points, at, fresh), np.insert(owners, at, who)
    return Ring(ids.data, points.data, owners.data)


def _unexpired(
    rings: list[Ring], loose: list[int], expired: frozenset[int]
) -> tuple[list[Ring], list[int]]:
    """The candidates less the ``expired`` members: a ring holding one gives its other
    members as loose candidates (O(its members); only until the sweep removes them)."""
    kept: list[Ring] = []
    alone = [sub_id for sub_id in loose if sub_id not in expired]
    for ring in rings:
        if expired.isdisjoint(ring.ids):
            kept.append(ring)
        else:
            alone.extend(sub_id for sub_id in ring.ids if sub_id not in expired)
    return kept, alone


def _present(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Which of ``wanted`` the sorted ``ids`` hold: O(wanted x log ids), no sort."""
    if not len(ids):
        return np.zeros(len(wanted), np.bool_)
    at = np.minimum(np.searchsorted(ids, wanted), len(ids) - 1)
    return np.asarray(ids[at] == wanted)
