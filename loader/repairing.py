"""The routing table's repairs (the reconciler's) and its consistency checks."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace

from loader import reconcile_figures
from loader.applying import Applying
from loader.catalog import Entry
from loader.engines import headers_matcher
from loader.groups import GroupIndex
from matcher import CapacityError
from store.records import HEADERS_DIALECT, Change, headers_from_pattern

log = logging.getLogger(__name__)


class Repairing(Applying):
    """Repairs (through ``apply``) and checks of a ``RoutingTable``."""

    def repair(
        self,
        stored: Sequence[Change],
        ranges: Iterable[int],
        size: int,
        keep: Collection[int] = (),
    ) -> int:
        """Make the id ranges ``[k * size, (k + 1) * size)`` of ``ranges`` hold exactly
        ``stored`` (the store's rows of those ranges as of some seq S), except the ids of
        ``keep`` (those changes after S set: this table has applied them): what differs is
        removed and re-added through ``apply``. Returns how many subscriptions changed."""
        wanted = {row.subscription_id: row for row in stored}
        seq = self.seq
        removes: list[Change] = []
        adds: list[Change] = []
        entries = self._catalog.entries
        entry: Entry | None
        for k in ranges:
            for sub_id, entry in entries.between(k * size, (k + 1) * size).items():
                row = wanted.get(sub_id)
                if sub_id not in keep and (
                    row is None
                    or Entry(row.tenant, row.subscriber, row.dialect, row.pattern) != entry
                ):
                    removes.append(as_change(seq, "remove", sub_id, entry))
        for sub_id, row in wanted.items():
            entry = entries.get(sub_id)
            if sub_id not in keep and (
                entry is None
                or Entry(row.tenant, row.subscriber, row.dialect, row.pattern) != entry
            ):
                adds.append(replace(row, seq=seq, op="add"))  # with its group, if any
        self.apply(removes)
        self.apply(adds)
        return len({c.subscription_id for c in removes + adds})

    def repair_members(self, members: Sequence[tuple[int, str, str, str | None]]) -> int:
        """Make the shared-subscription index hold exactly ``members`` (the store's, at this
        table's seq); returns 1 if it had drifted (and was replaced, with the engines of
        every (tenant, dialect) holding a group rebuilt for the new routes), else 0."""
        expected = {sub_id: ((tenant, group), policy) for sub_id, tenant, group, policy in members}
        with self._apply_lock:
            if dict(self.groups.state()) == expected:
                return 0
            old = self.groups
            fresh = GroupIndex.of(members)
            entries = self._catalog.entries
            fresh.serve(
                (sub_id, entry.tenant, entry.dialect, entry.pattern)
                for sub_id in expected
                if (entry := entries.get(sub_id)) is not None
            )
            self.groups = fresh
            self._rebuild(old.tables() | fresh.tables())
            return 1

    def repair_groups(self) -> int:
        """Rebuild the engines of every (tenant, dialect) whose engines hold another count
        than the catalog says (less the group members they need not hold), from the
        catalog; returns how many were rebuilt."""
        with self._apply_lock:
            expected = reconcile_figures.group_sizes(self._catalog.entries)
            sizes = {
                key: {name: len(m) for name, m in matchers.items()}
                for key, matchers in self._topic.items()
            }
            sizes.update(
                {(t, HEADERS_DIALECT): {"headers": len(h)} for t, h in self._headers.items()}
            )
            hidden = self.groups.hidden
            wrong = [
                key
                for key in sizes.keys() | expected.keys()
                if any(
                    n + hidden(key) != expected.get(key, 0)
                    for n in sizes.get(key, {"": 0}).values()
                )
            ]
            self._rebuild(wrong)
            return len(wrong)

    def _rebuild(self, keys: Collection[tuple[str, str]]) -> None:
        """Fresh engines for each (tenant, dialect) of ``keys``, from the catalog less the
        group members the engines need not hold (under the applier lock)."""
        if not keys:
            return
        hidden = self.groups.hidden_ids()
        members: dict[tuple[str, str], list[tuple[int, str]]] = {key: [] for key in keys}
        for sub_id, entry in self._catalog.entries.items():
            group = members.get((entry.tenant, entry.dialect))
            if group is not None and sub_id not in hidden:
                group.append((sub_id, entry.pattern))
        for (tenant, dialect), items in members.items():
            if dialect == HEADERS_DIALECT:
                self._headers[tenant] = headers_matcher(items)
                continue
            fresh = self._engine_set(dialect, len(items))
            try:
                for matcher in fresh.values():
                    matcher.subscribe_many(items)
            except CapacityError as e:  # the engines serving now stay
                log.error("engines of tenant %r (%s) not rebuilt: %s", tenant, dialect, e)
                continue
            self._topic[(tenant, dialect)] = fresh

    # -- checks -------------------------------------------------------------------------

    def group_sizes(self) -> dict[tuple[str, str], int]:
        """Subscriptions each (tenant, dialect) matcher serves (headers: per tenant), read
        from the engines plus the group members their routes stand for: O(groups). The
        reconciler compares these with the catalog."""
        hidden = self.groups.hidden
        sizes = {key: len(m[self._primary]) + hidden(key) for key, m in self._topic.items()}
        sizes.update(
            {
                (t, HEADERS_DIALECT): len(h) + hidden((t, HEADERS_DIALECT))
                for t, h in self._headers.items()
            }
        )
        return {key: n for key, n in sizes.items() if n}

    def consistent(self) -> bool:
        """Whether every engine holds exactly the catalog's subscriptions (less the group
        members a route stands for), and the subscriber list agrees with the catalog
        (drift check, O(n))."""
        hidden = self.groups.hidden_ids()
        expected: dict[tuple[str, str], dict[int, str]] = {}
        for sub_id, entry in self._catalog.entries.items():
            if self.subscribers([sub_id]) != [entry.subscriber]:
                return False
            if entry.dialect != HEADERS_DIALECT and sub_id not in hidden:
                expected.setdefault((entry.tenant, entry.dialect), {})[sub_id] = entry.pattern
        for key, matchers in self._topic.items():
            wanted = expected.pop(key, {})
            for matcher in matchers.values():
                if dict(matcher.subscriptions()) != wanted:
                    return False
        named = sum(1 for name in self._by_id if name is not None) + len(self._far)
        return not expected and named == len(self._catalog.entries)

    def _check(self) -> None:
        """Tests call this: consistent, and every engine's own invariants hold."""
        assert self.consistent()
        self.groups._check()
        for matchers in self._topic.values():
            for matcher in matchers.values():
                matcher._check()


def as_change(seq: int, op: str, sub_id: int, row: Entry) -> Change:
    """A change re-stating catalog entry ``row`` as ``op`` (a stored row is already a
    ``Change``: ``repair`` re-adds it with ``dataclasses.replace``, group included)."""
    headers = row.dialect == HEADERS_DIALECT
    criteria, mode = headers_from_pattern(row.pattern) if headers else (None, None)
    return Change(
        seq,
        op,  # type: ignore[arg-type]
        sub_id,
        row.tenant,
        row.subscriber,
        row.pattern,
        row.dialect,
        "headers" if headers else "topic",
        criteria,
        mode,  # type: ignore[arg-type]
    )
