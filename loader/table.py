"""The in-memory routing table: every tenant's matchers plus the catalog they answer from.

Tenants are isolated by construction: each (tenant, dialect) has its own topic matchers and
each tenant its own headers matcher, so a match can only ever see its own tenant's ids.
The catalog (id -> subscription facts, ``loader.catalog``: compact columns plus a small
persistent delta) is published together with the sequence number it reflects, so
``snapshot()`` is O(1) and always consistent. Matches name their subscribers from a plain
list indexed by id (``_by_id``), the cheapest lookup Python has: no map walk per id.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

import numpy as np
import pyarrow as pa

from loader.catalog import Catalog, Entry, Names, numpy_view
from loader.groups import Delivery, GroupIndex
from loader.shadow import ShadowCheck
from matcher import (
    EMPTY,
    BatchIds,
    CapacityError,
    HeadersMatcher,
    Limits,
    Matcher,
    MatchResult,
    create_matcher,
)
from matcher.overlap import Found, Relation, search
from store.records import HEADERS_DIALECT, Change, headers_from_pattern

log = logging.getLogger(__name__)

#: The compiled walk answers; ``optimized_inverted_bitmap``, an independent algorithm, is
#: kept current beside it and checks a sample of its answers (``loader.shadow``).
DEFAULT_ENGINES: Final = ("native", "optimized_inverted_bitmap")
#: A (tenant, dialect) holding more subscriptions than this keeps only the answering engine:
#: the others exist only for the shadow check, and at a million subscriptions they would
#: double the table's memory and build time (see docs/architecture.md, "Shadow checks").
SHADOW_MAX: Final = 100_000
#: Subscriber names are kept in a list indexed by id while ids stay below this many per
#: subscription (ids come from a sequence, so they are dense); sparser ids go to a dict.
DENSE_FACTOR: Final = 4
DENSE_SLACK: Final = 1 << 16
#: Changes ``apply`` applies per hold of the applier lock, and the pause between two
#: slices: a slice of removals takes a few milliseconds, so a match waiting for the GIL
#: meanwhile waits about that long, never for a whole mass removal.
APPLY_SLICE: Final = 1_000
APPLY_PAUSE_S: Final = 0.001
#: The columns ``load_columns`` reads.
COLUMNS: Final = ("id", "tenant", "subscriber", "dialect", "pattern")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every subscription as of change ``seq``; later changes never alter it."""

    seq: int
    entries: Catalog


class RoutingTable:
    """Matchers for every (tenant, dialect), kept current by one applier thread at a time.

    ``engines`` are all built and kept current (up to ``shadow_max`` subscriptions per
    (tenant, dialect) for all but the first); the first answers matches, and with a
    ``shadow`` check the others answer a sample of matches too (see ``loader.shadow``).
    """

    def __init__(
        self,
        engines: Sequence[str] = DEFAULT_ENGINES,
        limits: Limits | None = None,
        cache_size: int = 0,
        shadow: ShadowCheck | None = None,
        shadow_max: int = SHADOW_MAX,
    ) -> None:
        if not engines:
            raise ValueError("at least one engine is needed")
        self.engines = tuple(engines)
        self._primary = self.engines[0]
        self.shadow = shadow if len(self.engines) > 1 else None
        self.shadow_max = shadow_max
        self.limits = limits
        self.cache_size = cache_size
        self._topic: dict[tuple[str, str], dict[str, Matcher]] = {}
        self._headers: dict[str, HeadersMatcher] = {}
        self._names = Names()
        self._catalog = Snapshot(0, Catalog.empty(self._names))
        # Live subscriber name per id: set before the matchers learn of an id, cleared
        # after they forget it (the catalog's snapshot is the consistent view).
        self._by_id: list[str | None] = []
        self._far: dict[int, str] = {}
        self._apply_lock = threading.Lock()
        self.groups = GroupIndex()  # shared subscriptions (loader.groups)
        # Stored subscriptions an engine refused for a capacity (CapacityError), counted
        # each time: not served; the reconciler offers them again (see apply).
        self.refused = 0

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
        shadow = self.shadow
        if shadow is None or len(matchers) == 1 or not shadow.due():
            return matchers[self._primary].match(topic)
        return self._shadow_match(matchers, shadow, tenant, dialect, topic)

    def _shadow_match(
        self,
        matchers: dict[str, Matcher],
        shadow: ShadowCheck,
        tenant: str,
        dialect: str,
        topic: str,
    ) -> MatchResult:
        primary = self._primary
        seq, writing = self._catalog.seq, self._apply_lock.locked()
        answer = matchers[primary].match(topic)
        others = {name: m for name, m in matchers.items() if name != primary}
        wrong = [name for name, m in others.items() if set(m.match(topic)) != set(answer)]
        if not writing and not self._apply_lock.locked() and self._catalog.seq == seq:
            shadow.record(wrong, topic, f"tenant {tenant!r}, {dialect}")
        return answer

    def match_ids(self, tenant: str, dialect: str, topics: Iterable[str]) -> BatchIds:
        """``match`` for each of ``topics``, answered in arrays by the answering engine's
        ``Matcher.match_ids`` (``native``: the walks in C without the GIL, no Python object
        per id), with one matcher look-up per batch. With a shadow check each topic counts
        as one match toward the sample (``_shadow_batch``). Invalid topics get their error,
        also for a tenant with no subscriptions. ``subscriber_names`` names the ids."""
        matchers = self._topic.get((tenant, dialect))
        if matchers is None:
            return _validator(dialect, self.limits).match_ids(topics)
        shadow = self.shadow
        if shadow is None or not shadow.every or len(matchers) == 1:
            return matchers[self._primary].match_ids(topics)
        topics = topics if isinstance(topics, Sequence) else list(topics)
        seq, writing = self._catalog.seq, self._apply_lock.locked()
        found = matchers[self._primary].match_ids(topics)
        self._shadow_batch(matchers, shadow, (tenant, dialect), topics, found, seq, writing)
        return found

    def subscriber_names(self) -> tuple[list[str | None], dict[int, str]]:
        """Who holds each id, as the answer encoder reads it (``app.delivery``): the name
        at index id of the list when it reaches that far and is set, else in the dict, else
        none (removed since the match). Live views, changed by the applier with the GIL
        held: read them with the GIL held, never keep them."""
        return self._by_id, self._far

    def _shadow_batch(
        self,
        matchers: dict[str, Matcher],
        shadow: ShadowCheck,
        key: tuple[str, str],
        topics: Sequence[str],
        found: BatchIds,
        seq: int,
        writing: bool,
    ) -> None:
        """The shadow check of a batch ``match_ids`` answered: each topic counts as one
        match toward the sample, and those due are answered by the other engines too and
        compared (``_shadow_match`` for one topic; ``seq``/``writing`` were read before the
        batch, so a batch that raced a write records nothing)."""
        counts, ids, errors = found
        due: list[tuple[str, set[int]]] = []
        for k in shadow.due_among(len(counts)):
            if k not in errors:
                at = sum(counts[:k])
                due.append((topics[k], set(ids[at : at + counts[k]])))
        others = {name: m for name, m in matchers.items() if name != self._primary}
        for topic, answer in due:
            wrong = [name for name, m in others.items() if set(m.match(topic)) != answer]
            if not writing and not self._apply_lock.locked() and self._catalog.seq == seq:
                shadow.record(wrong, topic, f"tenant {key[0]!r}, {key[1]}")

    def match_headers(self, tenant: str, headers: Mapping[str, str]) -> MatchResult:
        matcher = self._headers.get(tenant)
        if matcher is None:
            _HEADERS_VALIDATOR.match(headers)
            return EMPTY
        return matcher.match(headers)

    def sizes(self) -> dict[tuple[str, str], int]:
        """Subscriptions per (tenant, dialect) now, ``headers`` included: O(tenants x
        dialects), read from the matchers' own counts (the metrics scrape calls it)."""
        primary = self._primary
        # tuple(): one C-level copy, so the applier adding a tenant meanwhile cannot break
        # the iteration ("dictionary changed size").
        sizes = {key: len(matchers[primary]) for key, matchers in tuple(self._topic.items())}
        for tenant, headers in tuple(self._headers.items()):
            sizes[(tenant, HEADERS_DIALECT)] = len(headers)
        return {key: size for key, size in sizes.items() if size}

    def check_room(self, items: Iterable[tuple[str, str, str]]) -> None:
        """Raise CapacityError when subscribing ``items`` ((tenant, dialect, pattern),
        valid and new) might not fit their groups' answering engine now (its
        ``Matcher.check_room``): the admin writes ask before they store, so a full engine
        refuses a write (403) instead of leaving it unserved (see apply). Advisory: the
        applier decides. O(items)."""
        groups: dict[tuple[str, str], list[str]] = {}
        for tenant, dialect, pattern in items:
            if dialect != HEADERS_DIALECT:
                groups.setdefault((tenant, dialect), []).append(pattern)
        for key, patterns in groups.items():
            matchers = self._topic.get(key)
            if matchers:
                matchers[self._primary].check_room(patterns)

    def capacity_fill(self) -> dict[str, float]:
        """Per fixed capacity of the answering engine (``Matcher.capacity()``; ``native``'s:
        trie nodes, tail words, text bytes), the fullest matcher's used share, 0 to 1; empty
        for an engine without such capacities. O(tenants x dialects) (the metrics scrape
        calls it: past 1, that matcher's writes are refused)."""
        fill: dict[str, float] = {}
        for matchers in tuple(self._topic.values()):
            for name, (used, limit) in matchers[self._primary].capacity().items():
                fill[name] = max(fill.get(name, 0.0), used / limit)
        return fill

    def deliver(self, tenant: str, ids: Iterable[int], key: str) -> Delivery:
        """Who of a match's ``ids`` receives the message: the ungrouped ones plus one
        member per group (``loader.groups``; ``key`` for the ``hash`` policy)."""
        return self.groups.deliver(tenant, ids, key)

    def subscribers(self, ids: Iterable[int]) -> list[str]:
        """Distinct subscriber names of ``ids`` (those this table holds), sorted."""
        by_id, far = self._by_id, self._far
        size = len(by_id)
        names: set[str] = set()
        for i in ids:
            if type(i) is not int or i < 0:
                continue
            name = by_id[i] if i < size else None
            if name is None:
                name = far.get(i)
            if name is not None:
                names.add(name)
        return sorted(names)

    def entries(self, ids: Iterable[int]) -> dict[int, Entry]:
        """The catalog's entry of each of ``ids`` still present (explain shows patterns)."""
        entries = self._catalog.entries
        return {i: entry for i in ids if (entry := entries.get(i)) is not None}

    def patterns_of(
        self, tenant: str, dialect: str, subscribers: Iterable[str]
    ) -> dict[str, dict[int, str]]:
        """For each of ``subscribers``: id -> pattern of its subscriptions in ``dialect``
        (empty when it has none). One scan of the snapshot, O(catalog), for all of them: no
        per-subscriber index is kept, as explain and redundancy are rare, operator-driven
        reads."""
        out: dict[str, dict[int, str]] = {name: {} for name in subscribers}
        for sub_id, entry in self._catalog.entries.items():
            if entry.tenant == tenant and entry.dialect == dialect:
                mine = out.get(entry.subscriber)
                if mine is not None:
                    mine[sub_id] = entry.pattern
        return out

    def related(
        self,
        tenant: str,
        dialect: str,
        pattern: str,
        relation: Relation,
        after: int | None = None,
        limit: int = 100,
    ) -> Found:
        """Ids of ``tenant``'s subscriptions in ``dialect``, in id order after ``after``, at
        most ``limit``, whose pattern overlaps ``pattern`` or is covered by it, and where to
        resume (``matcher.overlap.search``: pruned by ``optimized_inverted_bitmap``'s rows when
        that engine is built, which it is by default). Raises the matcher's errors for an
        invalid pattern, even with no subscription."""
        matchers = self._topic.get((tenant, dialect))
        if matchers is None:
            validator = _validator(dialect, self.limits)
            validator.dialect.parse_pattern(pattern, validator.limits)
            return Found([], None)
        engine = matchers.get("optimized_inverted_bitmap", matchers[self._primary])
        return search(engine, pattern, relation, after, limit)

    # -- writes (one applier at a time) -------------------------------------------------

    def apply(self, changes: Iterable[Change], progress: Callable[[], object] | None = None) -> int:
        """Apply changes in order; returns how many changed something. Idempotent: an add
        already present or a remove of an absent id is skipped (only its seq is recorded).

        The catalog learns of an add before the matchers and forgets a remove after them,
        so an id a reader gets from a match always has its subscriber in the catalog.

        In slices of ``APPLY_SLICE`` changes: after each the catalog is published at the
        slice's last seq, the applier lock is released and this thread sleeps
        ``APPLY_PAUSE_S`` (the GIL goes to the matches waiting for it) before the next, so
        a mass removal never holds matching for longer than one slice. A run of removes or
        of topic adds within a slice is applied at once (``_remove_run``, ``_add_run``: the
        catalog searched and mutated once for all of them, each engine told in one call per
        (tenant, dialect)). ``progress`` is called after every slice.
        """
        batch = changes if isinstance(changes, Sequence) else list(changes)
        applied = 0
        refused: list[int] = []
        error: CapacityError | None = None
        for start in range(0, len(batch), APPLY_SLICE):
            if start:
                time.sleep(APPLY_PAUSE_S)
            part = batch[start : start + APPLY_SLICE]
            with self._apply_lock:
                k = 0
                while k < len(part):
                    kind = _run_kind(part[k])
                    end = k + 1
                    while kind != "headers" and end < len(part) and _run_kind(part[end]) == kind:
                        end += 1
                    if kind == "remove":
                        applied += self._remove_run(part[k:end])
                    else:
                        run = part[k:end]
                        added, not_served, last_error = (
                            self._add_run(run) if kind == "add" else self._add(run[0])
                        )
                        applied += added
                        refused += not_served
                        error = last_error or error
                    k = end
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
            if change.seq > catalog.seq:
                self._catalog = Snapshot(change.seq, catalog.entries)
            return 0, [], None
        entries = catalog.entries.with_add(
            sub_id, Entry(change.tenant, change.subscriber, change.dialect, change.pattern)
        )
        self._set_subscriber(sub_id, entries[sub_id].subscriber, len(entries))
        self._catalog = Snapshot(max(catalog.seq, change.seq), entries)
        self.groups.add(change)  # groups: before the matchers see the id
        try:
            self._index_headers(change)
        except CapacityError as e:
            # Not served, and out of the catalog again, so the store's range and the
            # catalog's differ: each reconciliation offers it anew, and it goes in once
            # removals make room. The applier goes on. (Its group membership stays, as
            # the store has it: see _remove_run.)
            self._catalog = Snapshot(max(catalog.seq, change.seq), catalog.entries)
            self._set_subscriber(sub_id, None, 0)
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
        for change, here in zip(
            run, catalog.entries.present([c.subscription_id for c in run]), strict=True
        ):
            if not here:
                new.setdefault(change.subscription_id, change)
        seq = max(catalog.seq, run[-1].seq)
        if not new:
            self._catalog = Snapshot(seq, catalog.entries)
            return 0, [], None
        entries = catalog.entries.with_adds(
            [(i, Entry(c.tenant, c.subscriber, c.dialect, c.pattern)) for i, c in new.items()]
        )
        names = self._names
        size = len(entries)
        by_key: dict[tuple[str, str], list[tuple[int, str]]] = {}
        for sub_id, change in new.items():
            self._set_subscriber(sub_id, names.names[names.code(change.subscriber)], size)
            by_key.setdefault((change.tenant, change.dialect), []).append((sub_id, change.pattern))
        self._catalog = Snapshot(seq, entries)
        for change in new.values():
            self.groups.add(change)  # groups: before the matchers see the ids
        refused: list[int] = []
        error: CapacityError | None = None
        for (tenant, dialect), items in by_key.items():
            not_served, last_error = self._index_many(tenant, dialect, items)
            refused += not_served
            error = last_error or error
        if refused:
            self._catalog = Snapshot(seq, entries.without(refused))
            for sub_id in refused:
                self._set_subscriber(sub_id, None, 0)
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
                        _subscribe_everywhere(engines, sub_id, pattern, k)
                    except CapacityError as e:
                        refused.append(sub_id)
                        error = e
                break
        if len(matchers) > 1 and len(matchers[self._primary]) > self.shadow_max:
            # Grown past the bound: from now on only the answering engine (a new dict, so
            # a reader iterating the old one finishes undisturbed).
            self._topic[key] = {self._primary: matchers[self._primary]}
        return refused, error

    def _remove_run(self, run: Sequence[Change]) -> int:
        """Consecutive removes (under the applier lock): the catalog searched once for all
        of them, the engines told per (tenant, dialect), then the catalog without them
        published at the run's last seq. Returns how many were present."""
        catalog = self._catalog
        groups = self.groups
        by_key: dict[tuple[str, str, str], list[int]] = {}
        gone: set[int] = set()
        for change, here in zip(
            run, catalog.entries.present([c.subscription_id for c in run]), strict=True
        ):
            sub_id = change.subscription_id
            if not here:  # a refused add, whose group membership the store still had
                groups.remove(sub_id)
            elif sub_id not in gone:
                gone.add(sub_id)
                key = (change.kind, change.tenant, change.dialect)
                same = by_key.get(key)
                if same is None:
                    by_key[key] = [sub_id]
                else:
                    same.append(sub_id)
        for (kind, tenant, dialect), ids in by_key.items():
            self._unindex_many(kind, tenant, dialect, ids)
        entries = catalog.entries
        if gone:
            removed = sorted(gone)
            for sub_id in removed:
                groups.remove(sub_id)  # groups: after the matchers forgot it
            entries = entries.without(removed)
        self._catalog = Snapshot(max(catalog.seq, run[-1].seq), entries)
        by_id, far = self._by_id, self._far
        size = len(by_id)
        for sub_id in gone:  # _set_subscriber(sub_id, None, 0), inlined
            if sub_id < size:
                by_id[sub_id] = None
            if far:
                far.pop(sub_id, None)
        return len(gone)

    def _refuse(self, ids: Sequence[int], error: CapacityError) -> None:
        """Count and log (one line) the ids an engine refused, ``error`` the last refusal."""
        self.refused += len(ids)
        log.error("%d subscription(s) not served, ids %s: %s", len(ids), _some(ids), error)

    def _set_subscriber(self, sub_id: int, name: str | None, count: int) -> None:
        by_id = self._by_id
        if sub_id < len(by_id):
            by_id[sub_id] = name
        elif name is not None and sub_id < DENSE_FACTOR * count + DENSE_SLACK:
            by_id.extend([None] * (sub_id + 1 - len(by_id)))
            by_id[sub_id] = name
            self._far.pop(sub_id, None)
            return
        if name is None:
            self._far.pop(sub_id, None)
        elif sub_id >= len(by_id):
            self._far[sub_id] = name

    def load(self, rows: Iterable[Change], seq: int) -> None:
        """Bulk-build from every subscription as of change ``seq`` (a fresh table only)."""
        ids: list[int] = []
        columns: dict[str, list[str]] = {name: [] for name in COLUMNS[1:]}
        members: list[tuple[int, str, str, str | None]] = []
        for row in rows:
            ids.append(row.subscription_id)
            for name, values in columns.items():
                values.append(getattr(row, name))
            if row.group is not None:
                members.append((row.subscription_id, row.tenant, row.group, row.group_policy))
        self.load_columns(
            pa.table({"id": pa.array(ids, pa.int64()), **columns}, schema=_SCHEMA), seq, members
        )

    def load_columns(
        self,
        rows: pa.Table,
        seq: int,
        members: Iterable[tuple[int, str, str, str | None]] = (),
    ) -> None:
        """Bulk-build from an Arrow table of ``COLUMNS`` holding every subscription as of
        change ``seq`` (a fresh table only), and ``members`` ((id, tenant, group, policy)
        of the grouped ones, ``SubscriptionRepository.members``). No Python object per
        row: names are coded per distinct value, patterns go to the catalog as one Arrow
        column and to the engines as its buffers (``Matcher.subscribe_arrays``, read in C by
        ``native``)."""
        with self._apply_lock:
            if len(self._catalog.entries):
                raise RuntimeError("load() builds a fresh table; use apply() for changes")
            for member in members:  # groups: before the matchers see the ids
                self.groups.add_member(*member)
            if not rows.num_rows:
                self._catalog = Snapshot(seq, self._catalog.entries)
                return
            rows = rows.select(list(COLUMNS)).combine_chunks()
            ids = numpy_view(rows.column("id").chunk(0), np.int64)
            if len(ids) > 1 and not bool(np.all(ids[1:] > ids[:-1])):
                order = np.argsort(ids, kind="stable")
                rows, ids = rows.take(pa.array(order)), ids[order]
                if bool(np.any(ids[1:] == ids[:-1])):
                    raise ValueError("load() was given the same subscription id twice")
            names = self._names
            tenant = names.codes(rows.column("tenant").chunk(0))
            subscriber = names.codes(rows.column("subscriber").chunk(0))
            dialect = names.codes(rows.column("dialect").chunk(0))
            patterns = _strings(rows.column("pattern"))
            catalog = Catalog.from_columns(names, ids, tenant, subscriber, dialect, patterns)
            self._fill_subscribers(ids, subscriber)
            groups = tenant.astype(np.int64) << 32 | dialect
            refused: list[int] = []
            if bool(np.all(groups == groups[0])):  # one (tenant, dialect): no regrouping
                refused += self._load_group(
                    names.names[tenant[0]], names.names[dialect[0]], ids, patterns
                )
                self._catalog = Snapshot(seq, self._without(catalog, refused))
                return
            order = np.argsort(groups, kind="stable")
            starts = np.flatnonzero(np.diff(groups[order], prepend=-1)).tolist()
            for start, end in zip(starts, [*starts[1:], len(order)][: len(starts)], strict=True):
                rows_of = order[start:end]
                first = int(rows_of[0])
                refused += self._load_group(
                    names.names[tenant[first]],
                    names.names[dialect[first]],
                    ids[rows_of],
                    patterns.take(pa.array(rows_of)),
                )
            self._catalog = Snapshot(seq, self._without(catalog, refused))

    def _without(self, catalog: Catalog, refused: Sequence[int]) -> Catalog:
        """``catalog`` less the ids the engines refused (``_load_group``; their group
        memberships stay, as the store has them, see ``apply``)."""
        for sub_id in refused:
            catalog = catalog.with_remove(sub_id)
            self._set_subscriber(sub_id, None, 0)
        return catalog

    def _fill_subscribers(self, ids: np.ndarray, subscriber: np.ndarray) -> None:
        if not len(ids):
            return
        names = np.array(self._names.names, dtype=object)[subscriber]
        if int(ids[-1]) < DENSE_FACTOR * len(ids) + DENSE_SLACK and int(ids[0]) >= 0:
            dense = np.full(int(ids[-1]) + 1, None, dtype=object)
            dense[ids] = names
            self._by_id = dense.tolist()
        else:
            self._far = dict(zip(ids.tolist(), names.tolist(), strict=True))

    def _load_group(
        self, tenant: str, dialect: str, ids: np.ndarray, patterns: pa.Array
    ) -> list[int]:
        """Index one (tenant, dialect)'s rows in bulk; returns the ids an engine refused
        for a capacity (then the group is indexed one by one, less those)."""
        if dialect == HEADERS_DIALECT:
            headers = self._headers.get(tenant)
            if headers is None:
                headers = self._headers[tenant] = HeadersMatcher()
            for sub_id, text in zip(ids.tolist(), patterns.to_pylist(), strict=True):
                criteria, mode = headers_from_pattern(text)
                headers.subscribe(sub_id, criteria, mode)  # type: ignore[arg-type]
            return []
        engines = list(self._matchers(tenant, dialect, len(ids)).values())
        offsets, data = _buffers(patterns)
        for k, matcher in enumerate(engines):
            try:
                matcher.subscribe_arrays(ids, offsets, data)
            except CapacityError:  # (a bulk write is all or nothing)
                return self._load_one_by_one(engines, k, ids, patterns)
        return []

    def _load_one_by_one(
        self, engines: list[Matcher], k: int, ids: np.ndarray, patterns: pa.Array
    ) -> list[int]:
        """``_load_group`` once engine ``k`` refused the bulk write (the engines before it
        hold every row, the others none): the rows one at a time, each in every engine or
        in none; returns the refused ids."""
        refused = []
        error: CapacityError | None = None
        for sub_id, text in zip(ids.tolist(), patterns.to_pylist(), strict=True):
            try:
                _subscribe_everywhere(engines, sub_id, text, k)
            except CapacityError as e:
                refused.append(sub_id)
                error = e
        if error is not None:
            self._refuse(refused, error)
        return refused

    def _matchers(self, tenant: str, dialect: str, size: int = 1) -> dict[str, Matcher]:
        key = (tenant, dialect)
        matchers = self._topic.get(key)
        if matchers is None:
            engines = self.engines if size <= self.shadow_max else self.engines[:1]
            matchers = {
                name: create_matcher(name, dialect, self.limits, self.cache_size)
                for name in engines
            }
            self._topic[key] = matchers
        return matchers

    def _index_headers(self, change: Change) -> None:
        headers = self._headers.get(change.tenant)
        if headers is None:
            headers = self._headers[change.tenant] = HeadersMatcher()
        assert change.criteria is not None and change.mode is not None
        headers.subscribe(change.subscription_id, change.criteria, change.mode)

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

    # -- repairs (the reconciler's) ------------------------------------------------------

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
        table's seq); returns 1 if it had drifted (and was replaced), else 0."""
        expected = {sub_id: ((tenant, group), policy) for sub_id, tenant, group, policy in members}
        with self._apply_lock:
            if dict(self.groups.state()) == expected:
                return 0
            self.groups = GroupIndex.of(members)
            return 1

    def repair_groups(self) -> int:
        """Rebuild the engines of every (tenant, dialect) whose engines hold another count
        than the catalog says, from the catalog; returns how many groups were rebuilt."""
        with self._apply_lock:
            expected = self._catalog.entries.group_sizes()
            sizes = {
                key: {name: len(m) for name, m in matchers.items()}
                for key, matchers in self._topic.items()
            }
            sizes.update(
                {(t, HEADERS_DIALECT): {"headers": len(h)} for t, h in self._headers.items()}
            )
            wrong = [
                key
                for key in sizes.keys() | expected.keys()
                if any(n != expected.get(key, 0) for n in sizes.get(key, {"": 0}).values())
            ]
            if not wrong:
                return 0
            members: dict[tuple[str, str], list[tuple[int, str]]] = {key: [] for key in wrong}
            for sub_id, entry in self._catalog.entries.items():
                group = members.get((entry.tenant, entry.dialect))
                if group is not None:
                    group.append((sub_id, entry.pattern))
            for (tenant, dialect), items in members.items():
                if dialect == HEADERS_DIALECT:
                    headers = HeadersMatcher()
                    for sub_id, text in items:
                        criteria, mode = headers_from_pattern(text)
                        headers.subscribe(sub_id, criteria, mode)  # type: ignore[arg-type]
                    self._headers[tenant] = headers
                    continue
                fresh = {
                    name: create_matcher(name, dialect, self.limits, self.cache_size)
                    for name in (
                        self.engines if len(items) <= self.shadow_max else self.engines[:1]
                    )
                }
                try:
                    for matcher in fresh.values():
                        matcher.subscribe_many(items)
                except CapacityError as e:  # the engines serving now stay
                    log.error("engines of tenant %r (%s) not rebuilt: %s", tenant, dialect, e)
                    continue
                self._topic[(tenant, dialect)] = fresh
            return len(wrong)

    # -- checks -------------------------------------------------------------------------

    def group_sizes(self) -> dict[tuple[str, str], int]:
        """Subscriptions each (tenant, dialect) matcher holds (headers: per tenant), read
        from the engines: O(groups). The reconciler compares these with the catalog."""
        sizes = {key: len(m[self._primary]) for key, m in self._topic.items()}
        sizes.update({(t, HEADERS_DIALECT): len(h) for t, h in self._headers.items()})
        return {key: n for key, n in sizes.items() if n}

    def consistent(self) -> bool:
        """Whether every engine holds exactly the catalog's subscriptions, and the
        subscriber list agrees with the catalog (drift check, O(n))."""
        expected: dict[tuple[str, str], dict[int, str]] = {}
        for sub_id, entry in self._catalog.entries.items():
            if self.subscribers([sub_id]) != [entry.subscriber]:
                return False
            if entry.dialect != HEADERS_DIALECT:
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
        for matchers in self._topic.values():
            for matcher in matchers.values():
                matcher._check()


_SCHEMA: Final = pa.schema([("id", pa.int64()), *((name, pa.string()) for name in COLUMNS[1:])])


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


def _strings(column: pa.ChunkedArray) -> pa.StringArray:
    """One contiguous ``string`` array (32-bit offsets) of a column."""
    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if array.type != pa.string():
        array = array.cast(pa.string())
    return array


def _run_kind(change: Change) -> str:
    """What ``apply`` batches a change with: removes with removes, topic adds with topic
    adds; a headers add goes alone."""
    if change.op == "remove":
        return "remove"
    return "add" if change.kind != "headers" else "headers"


def _some(ids: Sequence[int], shown: int = 5) -> str:
    """The first ``shown`` of ``ids`` for a log line."""
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(map(str, ids[:shown])) + more


def _subscribe_everywhere(engines: list[Matcher], sub_id: int, pattern: str, held: int = 0) -> None:
    """Subscribe ``sub_id`` in ``engines[held:]`` (``engines[:held]`` hold it already):
    in every engine or, when one raises CapacityError (re-raised), in none."""
    done = held
    try:
        for matcher in engines[held:]:
            matcher.subscribe(sub_id, pattern)
            done += 1
    except CapacityError:
        for matcher in engines[:done]:
            matcher.unsubscribe(sub_id)
        raise


def _buffers(patterns: pa.StringArray) -> tuple[np.ndarray, np.ndarray]:
    """The offsets (int32, one more than rows) and the UTF-8 bytes of a string array."""
    _, offsets, data = patterns.buffers()
    start = patterns.offset
    offset_view = np.frombuffer(offsets, np.int32, len(patterns) + 1, start * 4)
    raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return offset_view, raw


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
