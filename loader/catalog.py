"""The catalog: id -> (tenant, subscriber, dialect, pattern) for every subscription, compact
and persistent.

A million subscriptions as a map of Python tuples cost about a kilobyte each (a map node, a
tuple, an int and a pattern string per row). Here the bulk of them lives in a ``Base`` of
columns (``loader.columns``: sorted ids, name codes into one append-only ``Names`` table,
the patterns in one Arrow string buffer: about 45 bytes a row) that is never modified, plus
a small persistent ``delta`` (immutables.Map: id -> ``Entry``, or None for a removed base
row) for the changes since. ``with_add``/``with_remove`` return a new ``Catalog`` in
O(log delta), so a published catalog is a snapshot in O(1); when the delta outgrows a
sixteenth of the base it is folded into a new base (O(n), vectorized), which keeps every
operation amortized cheap.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Final, NamedTuple

import numpy as np
import pyarrow as pa
from immutables import Map

from loader.columns import (
    Base,
    CodeArray,
    IdArray,
    Names,
    arrow_indices,
    arrow_mask,
    arrow_strings,
)

#: The delta is folded into the base once it holds more than this share of it...
FOLD_SHARE: Final = 16
#: ... and at least this many entries.
FOLD_MIN: Final = 4_096
#: ``Map.get``'s default that no entry can be (an entry of None is a removed base row).
_ABSENT: Final = object()


class Entry(NamedTuple):
    """What the catalog keeps per subscription."""

    tenant: str
    subscriber: str
    dialect: str
    pattern: str


class Catalog(Mapping[int, Entry]):
    """A persistent map id -> ``Entry``: ``base`` minus the ids the delta overrides, plus
    the delta's entries. Iterates in id order."""

    __slots__ = ("_count", "base", "delta", "names")

    def __init__(self, names: Names, base: Base, delta: Map[int, Entry | None], count: int) -> None:
        self.names = names
        self.base = base
        self.delta = delta
        self._count = count

    @staticmethod
    def empty(names: Names | None = None) -> Catalog:
        return Catalog(names or Names(), Base.empty(), Map(), 0)

    @staticmethod
    def from_columns(
        names: Names,
        ids: IdArray,
        tenant: CodeArray,
        subscriber: CodeArray,
        dialect: CodeArray,
        patterns: pa.StringArray,
    ) -> Catalog:
        """A catalog of columns sorted by strictly increasing id."""
        return Catalog(names, Base(ids, tenant, subscriber, dialect, patterns), Map(), len(ids))

    # -- reads ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._count

    def get(self, sub_id: object, default: object = None) -> Entry | None:  # type: ignore[override]
        entry = self._lookup(sub_id)
        return default if entry is None else entry  # type: ignore[return-value]

    def __getitem__(self, sub_id: int) -> Entry:
        entry = self._lookup(sub_id)
        if entry is None:
            raise KeyError(sub_id)
        return entry

    def __contains__(self, sub_id: object) -> bool:
        return self._lookup(sub_id) is not None

    def _lookup(self, sub_id: object) -> Entry | None:
        if type(sub_id) is not int:
            return None
        delta = self.delta
        if sub_id in delta:
            return delta[sub_id]
        base = self.base
        row = base.position(sub_id)
        if row < 0:
            return None
        return self._row(row)

    def _row(self, row: int) -> Entry:
        base, names = self.base, self.names.names
        return Entry(
            names[base.tenant[row]],
            names[base.subscriber[row]],
            names[base.dialect[row]],
            base.patterns[row].as_py(),
        )

    def base_entry(self, sub_id: int) -> Entry | None:
        """The base's entry of ``sub_id`` whatever the delta says of it (None: no row), for
        figures kept for the base and adjusted by the delta. O(log n)."""
        row = self.base.position(sub_id)
        return None if row < 0 else self._row(row)

    def __iter__(self) -> Iterator[int]:
        return iter(self._folded().base.ids.tolist())

    def items(self) -> Iterator[tuple[int, Entry]]:  # type: ignore[override]
        """Every (id, entry) in id order: the base's rows and the delta's, merged."""
        folded = self._folded()
        names = folded.names.names
        base = folded.base
        for sub_id, t, s, d, p in zip(
            base.ids.tolist(),
            base.tenant.tolist(),
            base.subscriber.tolist(),
            base.dialect.tolist(),
            base.patterns.to_pylist(),
            strict=True,
        ):
            yield sub_id, Entry(names[t], names[s], names[d], p)

    def patterns_of(
        self, tenant: str, dialect: str, subscribers: Iterable[str]
    ) -> dict[str, dict[int, str]]:
        """For each of ``subscribers``: id -> pattern of its rows in ``tenant`` and
        ``dialect`` (empty when it has none). O(n) vectorized (three comparisons of code
        columns), then O(rows found) in Python."""
        out: dict[str, dict[int, str]] = {name: {} for name in subscribers}
        folded = self._folded()
        find = folded.names.find
        t, d = find(tenant), find(dialect)
        wanted = [code for name in out if (code := find(name)) is not None]
        if t is None or d is None or not wanted:
            return out
        base, names = folded.base, folded.names.names
        rows = np.flatnonzero(
            (base.tenant == t) & (base.dialect == d) & np.isin(base.subscriber, wanted)
        )
        for sub_id, s, pattern in zip(
            base.ids[rows].tolist(),
            base.subscriber[rows].tolist(),
            base.patterns.take(arrow_indices(rows)).to_pylist(),
            strict=True,
        ):
            out[names[s]][sub_id] = pattern
        return out

    def present(self, ids: Sequence[int]) -> list[bool]:
        """Whether each of ``ids`` is in the catalog: the base's searched at once
        (vectorized), the delta's looked up one by one (it is small). O(k log n)."""
        in_base = self.base.contains(ids)
        delta = self.delta
        if not len(delta):
            return in_base
        return [
            in_base[k] if (entry := delta.get(sub_id, _ABSENT)) is _ABSENT else entry is not None
            for k, sub_id in enumerate(ids)
        ]

    def tables_of(self, ids: Iterable[int]) -> dict[tuple[str, str], list[int]]:
        """The present ones of ``ids`` (each once, in order) by (tenant, dialect): the delta's
        looked up one by one (it is small), the base's searched and grouped at once
        (vectorized). O(k log n)."""
        out: dict[tuple[str, str], list[int]] = {}
        wanted = list(dict.fromkeys(ids))
        delta = self.delta
        if len(delta):
            based: list[int] = []
            for sub_id in wanted:
                entry = delta.get(sub_id, _ABSENT)
                if entry is _ABSENT:
                    based.append(sub_id)
                elif isinstance(entry, Entry):
                    out.setdefault((entry.tenant, entry.dialect), []).append(sub_id)
            wanted = based
        base = self.base
        if not wanted or not len(base.ids):
            return out
        asked = np.asarray(wanted, np.int64)
        rows = np.minimum(np.searchsorted(base.ids, asked), len(base.ids) - 1)
        found = base.ids[rows] == asked
        rows, asked = rows[found], asked[found]
        if not len(asked):
            return out
        pairs = (base.tenant[rows].astype(np.int64) << 32) | base.dialect[rows]
        keys, which, counts = np.unique(pairs, return_inverse=True, return_counts=True)
        grouped = np.split(asked[np.argsort(which, kind="stable")], np.cumsum(counts)[:-1])
        names = self.names.names
        for pair, same in zip(keys.tolist(), grouped, strict=True):
            table = (names[pair >> 32], names[pair & 0xFFFFFFFF])
            out.setdefault(table, []).extend(same.tolist())
        return out

    def between(self, low: int, high: int) -> dict[int, Entry]:
        """Every entry with ``low <= id < high``."""
        base = self.base
        lo, hi = np.searchsorted(base.ids, [low, high])
        out = {
            int(base.ids[row]): self._row(row)
            for row in range(int(lo), int(hi))
            if int(base.ids[row]) not in self.delta
        }
        out.update(
            (sub_id, entry)
            for sub_id, entry in self.delta.items()
            if entry is not None and low <= sub_id < high
        )
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]

    # -- writes (a new catalog each time) -------------------------------------------------

    def with_add(self, sub_id: int, entry: Entry) -> Catalog:
        """This catalog plus ``sub_id`` (which must be absent)."""
        names = self.names
        interned = Entry(
            names.names[names.code(entry.tenant)],
            names.names[names.code(entry.subscriber)],
            names.names[names.code(entry.dialect)],
            entry.pattern,
        )
        return Catalog(names, self.base, self.delta.set(sub_id, interned), self._count + 1)

    def with_adds(self, entries: Sequence[tuple[int, Entry]]) -> Catalog:
        """This catalog plus each (id, entry) of ``entries`` (ids distinct and absent): one
        delta mutation. O(k log delta)."""
        names = self.names
        interned, code = names.names, names.code
        mutation = self.delta.mutate()
        for sub_id, entry in entries:
            mutation[sub_id] = Entry(
                interned[code(entry.tenant)],
                interned[code(entry.subscriber)],
                interned[code(entry.dialect)],
                entry.pattern,
            )
        return Catalog(names, self.base, mutation.finish(), self._count + len(entries))

    def without(self, ids: Sequence[int]) -> Catalog:
        """This catalog without ``ids`` (distinct, each present): one delta mutation, the
        base searched once for all of them. O(k log n)."""
        in_base = self.base.contains(ids)
        mutation = self.delta.mutate()
        for sub_id, based in zip(ids, in_base, strict=True):
            if based:
                mutation[sub_id] = None
            else:
                del mutation[sub_id]
        return Catalog(self.names, self.base, mutation.finish(), self._count - len(ids))

    def with_remove(self, sub_id: int) -> Catalog:
        """This catalog without ``sub_id`` (which must be present)."""
        if self.base.position(sub_id) >= 0:
            delta = self.delta.set(sub_id, None)
        else:
            delta = self.delta.delete(sub_id)
        return Catalog(self.names, self.base, delta, self._count - 1)

    def settled(self) -> Catalog:
        """This catalog, its delta folded into the base if it grew large (amortized O(1)
        per change: a fold costs O(n) and happens once per n / ``FOLD_SHARE`` changes)."""
        if len(self.delta) > max(FOLD_MIN, len(self.base.ids) // FOLD_SHARE):
            return self._folded()
        return self

    def _folded(self) -> Catalog:
        """The same contents with an empty delta. O(n) vectorized, O(delta) in Python."""
        if not len(self.delta):
            return self
        base, names = self.base, self.names
        changed = np.sort(np.fromiter(self.delta.keys(), np.int64, len(self.delta)))
        keep = np.ones(len(base.ids), np.bool_)
        keep[base.rows_of(changed)] = False
        added = sorted((i, e) for i, e in self.delta.items() if e is not None)
        new_ids = np.array([i for i, _ in added], np.int64)
        kept_ids = base.ids[keep]
        ids = np.concatenate([kept_ids, new_ids])
        # Ids come from a sequence: new ones usually sort after every kept one, and then
        # the concatenation is already in order (no sort, no take of the patterns).
        ordered = not len(new_ids) or not len(kept_ids) or bool(new_ids[0] > kept_ids[-1])
        order = None if ordered else np.argsort(ids, kind="stable")

        def column(old: CodeArray, field: int) -> CodeArray:
            fresh = np.array([names.code(e[field]) for _, e in added], np.int32)
            joined = np.concatenate([old[keep], fresh])
            return joined if order is None else joined[order]

        patterns = pa.concat_arrays(
            [
                base.patterns.filter(arrow_mask(keep)),
                arrow_strings([e.pattern for _, e in added]),
            ]
        )
        if order is not None:
            patterns = patterns.take(arrow_indices(order))
        return Catalog(
            names,
            Base(
                ids if order is None else ids[order],
                column(base.tenant, 0),
                column(base.subscriber, 1),
                column(base.dialect, 2),
                patterns,
            ),
            Map(),
            self._count,
        )
