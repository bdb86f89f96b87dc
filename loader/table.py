"""The in-memory routing table: every tenant's matchers plus the catalog they answer from.

Tenants are isolated by construction: each (tenant, dialect) has its own topic matchers and
each tenant its own headers matcher, so a match can only ever see its own tenant's ids.
The catalog (id -> subscription facts) is a persistent map published together with the
sequence number it reflects, so ``snapshot()`` is O(1) and always consistent.
"""

from __future__ import annotations

import sys
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from immutables import Map

from loader.shadow import ShadowCheck
from matcher import EMPTY, HeadersMatcher, Limits, Matcher, MatchResult, create_matcher
from store.records import HEADERS_DIALECT, Change

#: The compiled walk answers; ``optimized_inverted_bitmap``, an independent algorithm, is
#: kept current beside it and checks a sample of its answers (``loader.shadow``).
DEFAULT_ENGINES: Final = ("native", "optimized_inverted_bitmap")


class Entry(NamedTuple):
    """What the catalog keeps per subscription."""

    tenant: str
    subscriber: str
    dialect: str
    pattern: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every subscription as of change ``seq``; later changes never alter it."""

    seq: int
    entries: Map[int, Entry]


class RoutingTable:
    """Matchers for every (tenant, dialect), kept current by one applier thread at a time.

    ``engines`` are all built and kept current; the first answers matches, and with a
    ``shadow`` check the others answer a sample of matches too (see ``loader.shadow``).
    """

    def __init__(
        self,
        engines: Sequence[str] = DEFAULT_ENGINES,
        limits: Limits | None = None,
        cache_size: int = 0,
        shadow: ShadowCheck | None = None,
    ) -> None:
        if not engines:
            raise ValueError("at least one engine is needed")
        self.engines = tuple(engines)
        self._primary = self.engines[0]
        self.shadow = shadow if len(self.engines) > 1 else None
        self.limits = limits
        self.cache_size = cache_size
        self._topic: dict[tuple[str, str], dict[str, Matcher]] = {}
        self._headers: dict[str, HeadersMatcher] = {}
        self._catalog = Snapshot(0, Map())
        self._apply_lock = threading.Lock()

    @property
    def seq(self) -> int:
        """The newest change applied."""
        return self._catalog.seq

    def snapshot(self) -> Snapshot:
        return self._catalog

    def __len__(self) -> int:
        return len(self._catalog.entries)

    # -- reads --------------------------------------------------------------------------

    def match(self, tenant: str, dialect: str, topic: str) -> MatchResult:
        """Ids of ``tenant``'s subscriptions in ``dialect`` whose pattern matches ``topic``.
        Raises the matcher's errors for an invalid topic, even with no subscription."""
        matchers = self._topic.get((tenant, dialect))
        if matchers is None:
            _validator(dialect, self.limits).match(topic)
            return EMPTY
        primary = self._primary
        shadow = self.shadow
        if shadow is None or not shadow.due():
            return matchers[primary].match(topic)
        seq, writing = self._catalog.seq, self._apply_lock.locked()
        answer = matchers[primary].match(topic)
        others = {name: m for name, m in matchers.items() if name != primary}
        wrong = [name for name, m in others.items() if set(m.match(topic)) != set(answer)]
        if not writing and not self._apply_lock.locked() and self._catalog.seq == seq:
            shadow.record(wrong, topic, f"tenant {tenant!r}, {dialect}")
        return answer

    def match_headers(self, tenant: str, headers: Mapping[str, str]) -> MatchResult:
        matcher = self._headers.get(tenant)
        if matcher is None:
            _HEADERS_VALIDATOR.match(headers)
            return EMPTY
        return matcher.match(headers)

    def subscribers(self, ids: Iterable[int]) -> list[str]:
        """Distinct subscriber names of ``ids``, sorted."""
        entries = self._catalog.entries
        names = {entry.subscriber for i in ids if (entry := entries.get(i)) is not None}
        return sorted(names)

    # -- writes (one applier at a time) -------------------------------------------------

    def apply(self, changes: Iterable[Change]) -> int:
        """Apply changes in order; returns how many changed something. Idempotent: an add
        already present or a remove of an absent id is skipped (only its seq is recorded).

        The catalog learns of an add before the matchers and forgets a remove after them,
        so an id a reader gets from a match always has its subscriber in the catalog.
        """
        applied = 0
        with self._apply_lock:
            for change in changes:
                catalog = self._catalog
                sub_id = change.subscription_id
                if change.op == "add" and sub_id not in catalog.entries:
                    self._catalog = Snapshot(
                        max(catalog.seq, change.seq), catalog.entries.set(sub_id, _entry(change))
                    )
                    self._index(change)
                    applied += 1
                elif change.op == "remove" and sub_id in catalog.entries:
                    self._unindex(change)
                    self._catalog = Snapshot(
                        max(catalog.seq, change.seq), catalog.entries.delete(sub_id)
                    )
                    applied += 1
                elif change.seq > catalog.seq:
                    self._catalog = Snapshot(change.seq, catalog.entries)
        return applied

    def load(self, rows: Iterable[Change], seq: int) -> None:
        """Bulk-build from every subscription as of change ``seq`` (a fresh table only)."""
        with self._apply_lock:
            if self._catalog.entries:
                raise RuntimeError("load() builds a fresh table; use apply() for changes")
            topic: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
            headers: list[Change] = []
            empty: Map[int, Entry] = Map()
            with empty.mutate() as catalog:
                for row in rows:
                    catalog[row.subscription_id] = _entry(row)
                    if row.kind == "headers":
                        headers.append(row)
                    else:
                        topic[(row.tenant, row.dialect)].append((row.subscription_id, row.pattern))
                entries = catalog.finish()
            for (tenant, dialect), items in topic.items():
                for matcher in self._matchers(tenant, dialect).values():
                    matcher.subscribe_many(items)
            for row in headers:
                self._index(row)
            self._catalog = Snapshot(seq, entries)

    def _matchers(self, tenant: str, dialect: str) -> dict[str, Matcher]:
        key = (tenant, dialect)
        matchers = self._topic.get(key)
        if matchers is None:
            matchers = {
                name: create_matcher(name, dialect, self.limits, self.cache_size)
                for name in self.engines
            }
            self._topic[key] = matchers
        return matchers

    def _index(self, change: Change) -> None:
        if change.kind == "headers":
            headers = self._headers.get(change.tenant)
            if headers is None:
                headers = self._headers[change.tenant] = HeadersMatcher()
            assert change.criteria is not None and change.mode is not None
            headers.subscribe(change.subscription_id, change.criteria, change.mode)
        else:
            for matcher in self._matchers(change.tenant, change.dialect).values():
                matcher.subscribe(change.subscription_id, change.pattern)

    def _unindex(self, change: Change) -> None:
        if change.kind == "headers":
            headers = self._headers.get(change.tenant)
            if headers is not None:
                headers.unsubscribe(change.subscription_id)
            return
        for matcher in self._topic.get((change.tenant, change.dialect), {}).values():
            matcher.unsubscribe(change.subscription_id)

    def consistent(self) -> bool:
        """Whether every engine holds exactly the catalog's subscriptions (drift check)."""
        expected: dict[tuple[str, str], dict[int, str]] = defaultdict(dict)
        for sub_id, entry in self._catalog.entries.items():
            if entry.dialect != HEADERS_DIALECT:
                expected[(entry.tenant, entry.dialect)][sub_id] = entry.pattern
        for key, matchers in self._topic.items():
            wanted = expected.pop(key, {})
            for matcher in matchers.values():
                if dict(matcher.subscriptions()) != wanted:
                    return False
        return not expected  # no (tenant, dialect) lacks its matchers

    def _check(self) -> None:
        """Tests call this: consistent, and every engine's own invariants hold."""
        assert self.consistent()
        for matchers in self._topic.values():
            for matcher in matchers.values():
                matcher._check()


def _entry(change: Change) -> Entry:
    """The catalog's entry; tenant, subscriber and dialect names repeat across many
    subscriptions, so one string each is kept (the driver makes a new one per row)."""
    return Entry(
        sys.intern(change.tenant),
        sys.intern(change.subscriber),
        sys.intern(change.dialect),
        change.pattern,
    )


_VALIDATORS: dict[tuple[str, Limits | None], Matcher] = {}
_HEADERS_VALIDATOR: Final = HeadersMatcher()


def _validator(dialect: str, limits: Limits | None) -> Matcher:
    """An empty matcher, so that a topic for a tenant with no subscriptions is still
    validated exactly like any other (bad input is refused, whoever sends it)."""
    key = (dialect, limits)
    matcher = _VALIDATORS.get(key)
    if matcher is None:
        matcher = _VALIDATORS[key] = create_matcher("naive", dialect, limits)
    return matcher
