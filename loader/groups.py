"""The routing table's shared subscriptions: which ids are in a group, and each group's
policy and round-robin counter. Kept apart from the catalog (``loader.table``): it holds
grouped subscriptions only, so a tenant without groups costs one dict lookup per match.

Readers and the one applier share it without a lock: every read is a single dict lookup
(atomic under the GIL), and a member removed mid-match is chosen at worst once more, as a
match started just before the remove would have.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from matcher.groups import (
    DEFAULT_POLICY,
    check_key,
    choose,
    new_counter,
    select,
    stable_hash,
)
from store.records import Change

GroupKey = tuple[str, str]


@dataclass(slots=True, eq=False)
class _Group:
    policy: str
    members: int = 0
    counter: Iterator[int] = field(default_factory=new_counter)


class Chosen(NamedTuple):
    """One group's choice for one message."""

    group: str
    policy: str
    subscription: int
    candidates: int


class Delivery(NamedTuple):
    """Who receives a message: ``ids`` (sorted; ungrouped matches plus one per group) and
    the choice each matching group made."""

    ids: list[int]
    chosen: list[Chosen]


def _policy(group: _Group | None) -> str:
    return DEFAULT_POLICY if group is None else group.policy


class GroupIndex:
    """id -> (tenant, group) for grouped subscriptions, and per group its policy."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._group_of: dict[int, GroupKey] = {}
        self._groups: dict[GroupKey, _Group] = {}
        self._tenants: dict[str, int] = {}  # grouped subscriptions per tenant
        self._rng = rng or random.Random()

    def __len__(self) -> int:
        return len(self._group_of)

    def add(self, change: Change) -> None:
        """Index an ``add`` (called before the matchers see the id, so a reader never takes
        a member for an ungrouped subscription). Ungrouped: nothing to do."""
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
        """An index holding exactly ``members`` ((id, tenant, group, policy)): what
        reconciliation swaps in when the live one drifted from the store (a new object,
        so a reader sees the old index or the new one, never a half-filled one)."""
        index = cls()
        for member in members:
            index.add_member(*member)
        return index

    def remove(self, sub_id: int) -> None:
        """Forget a removed subscription (after the matchers did)."""
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

    def deliver(self, tenant: str, ids: Iterable[int], key: str) -> Delivery:
        """Who of ``ids`` (one match of ``tenant``) receives the message; ``key`` is the
        ``hash`` policy's key (checked when a ``hash`` group asks for it:
        ``InvalidGroupError``). A tenant without groups: ``ids`` sorted, nothing else."""
        if tenant not in self._tenants:
            return Delivery(sorted(ids), [])
        groups = self._groups
        rng = self._rng
        key_hash: list[int] = []
        sizes: dict[GroupKey, int] = {}

        def hashed() -> int:
            if not key_hash:
                key_hash.append(stable_hash(check_key(key)))
            return key_hash[0]

        def pick(group_key: GroupKey, members: Sequence[int]) -> int:
            sizes[group_key] = len(members)
            group = groups.get(group_key)  # None: its last member left meanwhile
            policy = DEFAULT_POLICY if group is None else group.policy
            counter = new_counter() if group is None else group.counter
            return choose(policy, members, key_hash=hashed, counter=counter, rng=rng)

        delivered, chosen = select(ids, self._group_of, pick)
        choices = [
            Chosen(g[1], _policy(groups.get(g)), sub_id, sizes[g]) for sub_id, g in chosen.items()
        ]
        choices.sort(key=lambda c: c.group)
        return Delivery(delivered, choices)

    def state(self) -> Mapping[int, tuple[GroupKey, str]]:
        """Every grouped id with its group and policy (drift checks and tests)."""
        return {i: (k, self._groups[k].policy) for i, k in self._group_of.items()}

    def _check(self) -> None:
        """Counts agree with the members (tests call it after mutations)."""
        members: dict[GroupKey, int] = {}
        tenants: dict[str, int] = {}
        for key in self._group_of.values():
            members[key] = members.get(key, 0) + 1
            tenants[key[0]] = tenants.get(key[0], 0) + 1
        assert members == {k: g.members for k, g in self._groups.items()}
        assert tenants == self._tenants
