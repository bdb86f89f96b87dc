"""Applying changes to the routing table: in slices, runs of removes or of topic adds at
once (``RoutingTable.apply``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final, cast

from loader.catalog import Entry
from loader.engines import subscribe_everywhere
from loader.groups import Class
from loader.state import Snapshot, TableState
from matcher import CapacityError
from store.records import HEADERS_DIALECT, Change, Removals, headers_from_pattern

#: Changes ``apply`` applies per hold of the applier lock, and the pause between two
#: slices: a slice of removals takes a few milliseconds, so a match waiting for the GIL
#: meanwhile waits about that long, never for a whole mass removal.
APPLY_SLICE: Final = 1_000
APPLY_PAUSE_S: Final = 0.001


class Applying(TableState):
    """The writes of a ``RoutingTable``, one applier at a time."""

    def apply(
        self,
        changes: Iterable[Change | Removals],
        progress: Callable[[], object] | None = None,
    ) -> int:
        """Apply changes in order; returns how many changed something. Idempotent: an add
        already present or a remove of an absent id is skipped (only its seq is recorded,
        and the add's expiry: an expiry set or cleared is logged as an add of the row).
        ``Removals`` are removes read as ids (``RoutingReads.changes_in``).

        The catalog learns of an add before the matchers and forgets a remove after them,
        so an id a reader gets from a match always has its subscriber in the catalog.

        In slices of ``APPLY_SLICE`` changes: after each the catalog is published at the
        slice's last seq, the applier lock is released and this thread sleeps
        ``APPLY_PAUSE_S`` (the GIL goes to the matches waiting for it) before the next, so
        a mass removal never holds matching for longer than one slice. A run of removes or
        of topic adds within a slice is applied at once (``_remove_ids``, ``_add_run``: the
        catalog searched and mutated once for all of them, each engine told in one call per
        (tenant, dialect)). ``progress`` is called after every slice.
        """
        applied = 0
        refused: list[int] = []
        error: CapacityError | None = None
        for k, part in enumerate(_slices(changes, APPLY_SLICE)):
            if k:
                time.sleep(APPLY_PAUSE_S)
            with self._apply_lock:
                i = 0
                while i < len(part):
                    item = part[i]
                    if isinstance(item, Removals):
                        applied += self._remove_ids(item.ids, item.seqs[-1])
                        i += 1
                        continue
                    kind = _run_kind(item)
                    end = i + 1
                    while kind != "headers" and end < len(part):
                        following = part[end]
                        if isinstance(following, Removals) or _run_kind(following) != kind:
                            break
                        end += 1
                    run = cast(list[Change], part[i:end])
                    if kind == "remove":
                        applied += self._remove_ids([c.subscription_id for c in run], run[-1].seq)
                    else:
                        added, not_served, last_error = (
                            self._add_run(run) if kind == "add" else self._add(run[0])
                        )
                        applied += added
                        refused += not_served
                        error = last_error or error
                    i = end
                catalog = self._catalog
                settled = catalog.entries.settled()
                if settled is not catalog.entries:
                    self._catalog = Snapshot(catalog.seq, settled)
            if progress is not None:
                progress()
        if error is not None:
            self._refuse(refused, error)
        return applied

    def _add(self, change: Change) -> tuple[int, list[int], CapacityError | None]:
        """One add (under the applier lock; a headers subscription): like ``_add_run``."""
        catalog = self._catalog
        sub_id = change.subscription_id
        if sub_id in catalog.entries:
            self._expiry_changed(change)
            if change.seq > catalog.seq:
                self._catalog = Snapshot(change.seq, catalog.entries)
            return 0, [], None
        entries = catalog.entries.with_add(
            sub_id, Entry(change.tenant, change.subscriber, change.dialect, change.pattern)
        )
        self._set_subscriber(sub_id, entries[sub_id].subscriber, len(entries))
        self._catalog = Snapshot(max(catalog.seq, change.seq), entries)
        self.groups.add(change)  # groups: before the matchers see the id
        if change.expires_at is not None:  # so is its expiry
            self.expiry.set(sub_id, change.expires_at)
        served = (sub_id, change.tenant, change.dialect, change.pattern)
        if self.groups.serve([served]):
            return 1, [], None  # its group's route for these criteria serves it
        try:
            self._index_headers(change)
        except CapacityError as e:
            # Not served, and out of the catalog again, so the store's range and the
            # catalog's differ: each reconciliation offers it anew, and it goes in once
            # removals make room. The applier goes on. (Its group membership stays, as
            # the store has it: see _remove_ids.)
            self.groups.unserve([sub_id])
            self._catalog = Snapshot(max(catalog.seq, change.seq), catalog.entries)
            self._set_subscriber(sub_id, None, 0)
            self.expiry.drop([sub_id])
            return 0, [sub_id], e
        return 1, [], None

    def _add_run(self, run: Sequence[Change]) -> tuple[int, list[int], CapacityError | None]:
        """Consecutive topic adds (under the applier lock): the catalog searched once and
        published with every new one first (with their names and groups, so an id a reader
        gets from a match is always named), then each (tenant, dialect)'s engines given
        theirs in one ``subscribe_many``. Returns how many were indexed, the ids an engine
        refused for a capacity (taken out of the catalog again, as ``_add`` does) and the
        last refusal."""
        catalog = self._catalog
        new: dict[int, Change] = {}
        #: The last expiry of a new id added again in the run (set after its first add).
        later: dict[int, Change] = {}
        for change, here in zip(
            run, catalog.entries.present([c.subscription_id for c in run]), strict=True
        ):
            if here:
                self._expiry_changed(change)
            elif change.subscription_id in new:
                later[change.subscription_id] = change
            else:
                new[change.subscription_id] = change
        seq = max(catalog.seq, run[-1].seq)
        if not new:
            self._catalog = Snapshot(seq, catalog.entries)
            return 0, [], None
        entries = catalog.entries.with_adds(
            [(i, Entry(c.tenant, c.subscriber, c.dialect, c.pattern)) for i, c in new.items()]
        )
        names = self._names
        size = len(entries)
        for sub_id, change in new.items():
            self._set_subscriber(sub_id, names.names[names.code(change.subscriber)], size)
        self._catalog = Snapshot(seq, entries)
        groups = self.groups
        expiry = self.expiry
        for sub_id, change in new.items():
            groups.add(change)  # groups: before the matchers see the ids
            expires_at = later.get(sub_id, change).expires_at
            if expires_at is not None:  # so are their expiries
                expiry.set(sub_id, expires_at)
        hidden = groups.serve(
            (i, c.tenant, c.dialect, c.pattern) for i, c in new.items() if c.group is not None
        )
        by_key: dict[tuple[str, str], list[tuple[int, str]]] = {}
        for sub_id, change in new.items():
            if sub_id not in hidden:
                key = (change.tenant, change.dialect)
                by_key.setdefault(key, []).append((sub_id, change.pattern))
        refused: list[int] = []
        error: CapacityError | None = None
        for (tenant, dialect), items in by_key.items():
            not_served, last_error = self._index_many(tenant, dialect, items)
            refused += not_served
            error = last_error or error
        if refused:
            # A refused route leaves its whole class unserved (its members came with it).
            known = set(refused)
            refused += [i for i in groups.unserve(refused) if i not in known]
            self._catalog = Snapshot(seq, entries.without(refused))
            for sub_id in refused:
                self._set_subscriber(sub_id, None, 0)
            expiry.drop(refused)
        return len(new) - len(refused), refused, error

    def _index_many(
        self, tenant: str, dialect: str, items: list[tuple[int, str]]
    ) -> tuple[list[int], CapacityError | None]:
        """Subscribe ``items`` in every engine of (tenant, dialect) at once; when one
        refuses for a capacity (a bulk write is all or nothing), one by one, each in every
        engine or in none. Returns the refused ids and the last refusal."""
        key = (tenant, dialect)
        matchers = self._matchers(tenant, dialect, len(items))
        engines = list(matchers.values())
        refused: list[int] = []
        error: CapacityError | None = None
        for k, matcher in enumerate(engines):
            try:
                matcher.subscribe_many(items)
            except CapacityError:
                for sub_id, pattern in items:
                    try:
                        subscribe_everywhere(engines, sub_id, pattern, k)
                    except CapacityError as e:
                        refused.append(sub_id)
                        error = e
                break
        if len(matchers) > 1 and len(matchers[self._primary]) > self.shadow_max:
            # Grown past the bound: from now on only the answering engine (a new dict, so
            # a reader iterating the old one finishes undisturbed).
            self._topic[key] = {self._primary: matchers[self._primary]}
        return refused, error

    def _remove_ids(self, ids: Sequence[int], seq: int) -> int:
        """Consecutive removes of ``ids``, the last at ``seq`` (under the applier lock): the
        catalog searched once for all of them (it says each one's tenant and dialect: a
        remove needs nothing else), the engines told per (tenant, dialect), then the
        catalog without them published at ``seq``. Returns how many were present."""
        catalog = self._catalog
        groups = self.groups
        by_key = catalog.entries.tables_of(ids)
        gone = [sub_id for same in by_key.values() for sub_id in same]
        if len(gone) < len(ids):
            here = set(gone)
            # A refused add, whose group membership the store still had.
            groups.remove_many([sub_id for sub_id in ids if sub_id not in here])
        quiet, swaps = groups.leaving(gone)
        unserved: list[int] = []
        for found, route in swaps:  # a class's route leaves, its other members stay
            unserved += self._swap_route(found, route)
        for (tenant, dialect), same in by_key.items():
            kind = "headers" if dialect == HEADERS_DIALECT else "topic"
            if quiet:
                same = [sub_id for sub_id in same if sub_id not in quiet]
            self._unindex_many(kind, tenant, dialect, same)
        entries = catalog.entries
        if gone or unserved:
            removed = sorted(gone)
            groups.left(removed, swaps)
            groups.remove_many(removed)  # groups: after the matchers forgot them
            entries = entries.without(sorted({*removed, *unserved}))
        self._catalog = Snapshot(max(catalog.seq, seq), entries)
        by_id, far = self._by_id, self._far
        size = len(by_id)
        for sub_id in [*gone, *unserved]:  # _set_subscriber(sub_id, None, 0), inlined
            if sub_id < size:
                by_id[sub_id] = None
            if far:
                far.pop(sub_id, None)
        if len(self.expiry):  # after the engines forgot them
            self.expiry.drop([*gone, *unserved])
        return len(gone)

    def _expiry_changed(self, change: Change) -> None:
        """An ``add`` of an id this table holds: its expiry set or cleared
        (``SubscriptionRepository.set_expiry``); nothing else of it changes."""
        sub_id = change.subscription_id
        if change.expires_at is not None or sub_id in self.expiry:
            self.expiry.set(sub_id, change.expires_at)

    def _swap_route(self, found: Class, route: int) -> list[int]:
        """Give the engines ``route`` for ``found``'s pattern before its old route leaves
        them (a reader meanwhile gets both, which name one class). When an engine is full,
        the old route leaves first; when even then the new one does not fit, the class is
        not served: its members (but the old route) are returned, to leave the catalog as
        any refused add does (the reconciler offers them again)."""
        tenant, dialect = found.table
        kind = "headers" if dialect == HEADERS_DIALECT else "topic"
        try:
            self._index_route(tenant, dialect, route, found.pattern)
        except CapacityError:
            self._unindex_many(kind, tenant, dialect, [found.route])
            try:
                self._index_route(tenant, dialect, route, found.pattern)
            except CapacityError as e:
                old = found.route
                members = [i for i in self.groups.unserve([old]) if i != old]
                self._refuse(members, e)
                return members
        return []

    def _index_route(self, tenant: str, dialect: str, route: int, pattern: str) -> None:
        if dialect == HEADERS_DIALECT:
            criteria, mode = headers_from_pattern(pattern)
            self._headers_of(tenant).subscribe(route, criteria, mode)  # type: ignore[arg-type]
        else:
            subscribe_everywhere(list(self._matchers(tenant, dialect).values()), route, pattern)

    def _index_headers(self, change: Change) -> None:
        assert change.criteria is not None and change.mode is not None
        self._headers_of(change.tenant).subscribe(
            change.subscription_id, change.criteria, change.mode
        )

    def _unindex_many(self, kind: str, tenant: str, dialect: str, ids: Sequence[int]) -> None:
        """Unsubscribe ``ids`` of one (tenant, dialect) (or headers) from its engines."""
        if kind == "headers":
            headers = self._headers.get(tenant)
            if headers is not None:
                for sub_id in ids:
                    headers.unsubscribe(sub_id)
            return
        for matcher in self._topic.get((tenant, dialect), {}).values():
            unsubscribe = matcher.unsubscribe
            for sub_id in ids:
                unsubscribe(sub_id)


def _slices(changes: Iterable[Change | Removals], size: int) -> Iterator[list[Change | Removals]]:
    """``changes`` in lists of ``size`` changes (a ``Removals`` counts its ids, and is cut
    where a slice ends)."""
    part: list[Change | Removals] = []
    room = size
    for item in changes:
        if not isinstance(item, Removals):
            part.append(item)
            room -= 1
        else:
            while len(item) > room:
                part.append(item[:room])
                yield part
                item = item[room:]
                part, room = [], size
            if len(item):
                part.append(item)
                room -= len(item)
        if not room:
            yield part
            part, room = [], size
    if part:
        yield part


def _run_kind(change: Change) -> str:
    """What ``apply`` batches a change with: removes with removes, topic adds with topic
    adds; a headers add goes alone."""
    if change.op == "remove":
        return "remove"
    return "add" if change.kind != "headers" else "headers"
