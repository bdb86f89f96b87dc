"""The catalog: id -> (tenant, subscriber, dialect, pattern) for every subscription, compact
and persistent.

A million subscriptions as a map of Python tuples cost about a kilobyte each (a map node, a
tuple, an int and a pattern string per row). Here the bulk of them lives in a ``Base`` of
columns (sorted ids, name codes into one append-only ``Names`` table, the patterns in one
Arrow string buffer: about 45 bytes a row) that is never modified, plus a small persistent
``delta`` (immutables.Map: id -> ``Entry``, or None for a removed base row) for the changes
since. ``with_add``/``with_remove`` return a new ``Catalog`` in O(log delta), so a published
catalog is a snapshot in O(1); when the delta outgrows a sixteenth of the base it is folded
into a new base (O(n), vectorized), which keeps every operation amortized cheap.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from immutables import Map

#: The delta is folded into the base once it holds more than this share of it...
FOLD_SHARE: Final = 16
#: ... and at least this many entries.
FOLD_MIN: Final = 4_096
#: ``Map.get``'s default that no entry can be (an entry of None is a removed base row).
_ABSENT: Final = object()

IdArray = npt.NDArray[np.int64]
CodeArray = npt.NDArray[np.int32]


class Entry(NamedTuple):
    """What the catalog keeps per subscription."""

    tenant: str
    subscriber: str
    dialect: str
    pattern: str


_Int = TypeVar("_Int", bound=np.integer)


def numpy_view(array: pa.Array, dtype: type[_Int]) -> npt.NDArray[_Int]:
    """A fixed-width Arrow array without nulls as a NumPy view of its values (no copy).
    Arrow's own ``to_numpy`` (like ``pa.array``) imports pandas the first time, when it
    is installed: 0.25-0.45 s of CPU, holding the GIL, on the service's startup path."""
    width = np.dtype(dtype).itemsize
    if array.null_count or array.type.bit_width != 8 * width:
        raise TypeError(f"no {np.dtype(dtype)} view of {array.type} with nulls or of another width")
    values = array.buffers()[1]
    if values is None or not len(array):
        return np.zeros(0, dtype)
    return np.frombuffer(values, dtype, len(array), array.offset * width)


def _mask(keep: npt.NDArray[np.bool_]) -> pa.BooleanArray:
    """A NumPy mask as an Arrow one, built from its bits (``pa.array`` of a NumPy array
    imports pandas the first time: see ``numpy_view``)."""
    bits = pa.py_buffer(np.packbits(keep, bitorder="little"))
    return pa.BooleanArray.from_buffers(pa.bool_(), len(keep), [None, bits])


def _indices(order: npt.NDArray[np.intp]) -> pa.Int64Array:
    """NumPy positions as an Arrow array (no pandas: see ``_mask``)."""
    values = np.ascontiguousarray(order, np.int64)
    return pa.Int64Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def _texts(texts: list[str]) -> pa.StringArray:
    """Python strings as an Arrow string array, built from its buffers (no pandas: see
    ``_mask``)."""
    encoded = [text.encode() for text in texts]
    offsets = np.zeros(len(encoded) + 1, np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    data = pa.py_buffer(b"".join(encoded))
    return pa.StringArray.from_buffers(len(encoded), pa.py_buffer(offsets), data)


class Names:
    """Interned names (tenants, subscribers, dialects) and their codes. Append-only and
    shared by every catalog of a table: a code, once given, names the same string forever,
    so old snapshots stay valid while new names are added."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._codes: dict[str, int] = {}

    def code(self, name: str) -> int:
        code = self._codes.get(name)
        if code is None:
            name = sys.intern(name)
            code = self._codes[name] = len(self.names)
            self.names.append(name)
        return code

    def find(self, name: str) -> int | None:
        """The code of ``name``, or None when no row ever held it (nothing is added)."""
        return self._codes.get(name)

    def codes(self, names: pa.Array) -> CodeArray:
        """Codes of a whole Arrow string column (a name is looked up once, not per row)."""
        encoded = names.dictionary_encode()
        table = np.array([self.code(n) for n in encoded.dictionary.to_pylist()], np.int32)
        indices = numpy_view(encoded.indices, np.int32)
        return table[indices] if len(table) else np.zeros(0, np.int32)


@dataclass(frozen=True, slots=True)
class Base:
    """Columns of subscriptions sorted by id; never modified once built."""

    ids: IdArray
    tenant: CodeArray
    subscriber: CodeArray
    dialect: CodeArray
    patterns: pa.StringArray
    #: Figures computed from these columns once (they never change): the reconciler's per-
    #: range checksums and group sizes, so a check costs O(delta), not O(n), in this process.
    memo: dict[object, object] = field(default_factory=dict, compare=False, repr=False)

    @staticmethod
    def empty() -> Base:
        """No rows (``pa.nulls``, not ``pa.array([])``: see ``numpy_view``; every new table
        starts empty)."""
        none = np.zeros(0, np.int32)
        return Base(np.zeros(0, np.int64), none, none, none, pa.nulls(0, pa.string()))

    def position(self, sub_id: int) -> int:
        """Row of ``sub_id``, or -1. O(log n)."""
        ids = self.ids
        i = int(np.searchsorted(ids, sub_id))
        return i if i < len(ids) and ids[i] == sub_id else -1

    def contains(self, ids: Sequence[int]) -> list[bool]:
        """Whether each of ``ids`` has a row: one vectorized search. O(k log n)."""
        base_ids = self.ids
        if not len(base_ids) or not len(ids):
            return [False] * len(ids)
        wanted = np.asarray(ids, np.int64)
        rows = np.minimum(np.searchsorted(base_ids, wanted), len(base_ids) - 1)
        found: list[bool] = (base_ids[rows] == wanted).tolist()
        return found

    def rows_of(self, ids: IdArray) -> npt.NDArray[np.intp]:
        """Rows of ``ids`` (ascending) that have one, ascending. O(k log n)."""
        base_ids = self.ids
        if not len(base_ids) or not len(ids):
            return np.zeros(0, np.intp)
        rows = np.minimum(np.searchsorted(base_ids, ids), len(base_ids) - 1)
        found: npt.NDArray[np.intp] = rows[base_ids[rows] == ids]
        return found

    @property
    def nbytes(self) -> int:
        return int(
            self.ids.nbytes
            + self.tenant.nbytes
            + self.subscriber.nbytes
            + self.dialect.nbytes
            + self.patterns.nbytes
        )


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
            base.patterns.take(pa.array(rows)).to_pylist(),
            strict=True,
        ):
            out[names[s]][sub_id] = pattern
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
                base.patterns.filter(_mask(keep)),
                _texts([e.pattern for _, e in added]),
            ]
        )
        if order is not None:
            patterns = patterns.take(_indices(order))
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

    # -- cheap comparison with the store ---------------------------------------------------

    def range_stats(self, bucket: int) -> dict[int, tuple[int, int, int]]:
        """Per id range (``id // bucket``): (rows, sum of ids, sum of the lengths of
        tenant, subscriber, dialect and pattern). The store computes the same in SQL
        (``store.repository.range_stats``); ranges that differ are read and compared.
        The base's figures are computed once (vectorized) and kept; the delta adjusts
        them, O(delta log n)."""
        key = ("ranges", bucket)
        cached = self.base.memo.get(key)
        if cached is None:
            cached = self.base.memo[key] = self._base_ranges(bucket)
        stats: dict[int, tuple[int, int, int]] = dict(cached)  # type: ignore[call-overload]

        def count(sub_id: int, entry: Entry, sign: int) -> None:
            k = sub_id // bucket
            rows, ids, total = stats.get(k, (0, 0, 0))
            size = len(entry.tenant) + len(entry.subscriber) + len(entry.dialect)
            size += len(entry.pattern)
            if rows + sign:
                stats[k] = (rows + sign, ids + sign * sub_id, total + sign * size)
            else:
                stats.pop(k, None)

        for sub_id, entry in self.delta.items():
            row = self.base.position(sub_id)
            if row >= 0:
                count(sub_id, self._row(row), -1)
            if entry is not None:
                count(sub_id, entry, 1)
        return stats

    def _base_ranges(self, bucket: int) -> dict[int, tuple[int, int, int]]:
        base = self.base
        if not len(base.ids):
            return {}
        lengths = np.array([len(n) for n in self.names.names], np.int64)
        pattern_lengths = numpy_view(pc.utf8_length(base.patterns), np.int32).astype(np.int64)
        total = (
            lengths[base.tenant]
            + lengths[base.subscriber]
            + lengths[base.dialect]
            + pattern_lengths
        )
        keys = base.ids // bucket
        uniq, start = np.unique(keys, return_index=True)
        counts = np.diff(np.append(start, len(keys)))
        id_sums = np.add.reduceat(base.ids, start)
        len_sums = np.add.reduceat(total, start)
        return {
            int(k): (int(c), int(i), int(t))
            for k, c, i, t in zip(uniq, counts, id_sums, len_sums, strict=True)
        }

    def group_sizes(self) -> dict[tuple[str, str], int]:
        """Subscriptions per (tenant, dialect): the base's counted once (vectorized) and
        kept, adjusted by the delta."""
        cached = self.base.memo.get("groups")
        if cached is None:
            cached = self.base.memo["groups"] = self._base_groups()
        sizes: dict[tuple[str, str], int] = dict(cached)  # type: ignore[call-overload]
        for sub_id, entry in self.delta.items():
            row = self.base.position(sub_id)
            if row >= 0:
                old = self._row(row)
                sizes[(old.tenant, old.dialect)] -= 1
            if entry is not None:
                group = (entry.tenant, entry.dialect)
                sizes[group] = sizes.get(group, 0) + 1
        return {group: n for group, n in sizes.items() if n}

    def _base_groups(self) -> dict[tuple[str, str], int]:
        base = self.base
        if not len(base.ids):
            return {}
        keys = base.tenant.astype(np.int64) << 32 | base.dialect
        uniq, counts = np.unique(keys, return_counts=True)
        names = self.names.names
        return {
            (names[int(k) >> 32], names[int(k) & 0xFFFFFFFF]): int(n)
            for k, n in zip(uniq, counts, strict=True)
        }

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
