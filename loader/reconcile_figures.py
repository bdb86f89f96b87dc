"""The figures of a catalog the reconciler compares with other accounts of the same
subscriptions: per id range with the store's (``range_stats``), per (tenant, dialect) with
the engines' sizes (``group_sizes``). The base's figures are computed once (vectorized) and
kept in its memo, as it never changes; the delta adjusts them, so a check costs O(delta
log n), not O(n)."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc

from loader.catalog import Catalog, Entry
from loader.columns import Base, Names, numpy_view

#: Per range: rows, sum of ids, sum of the lengths of tenant, subscriber, dialect, pattern.
RangeStats = dict[int, tuple[int, int, int]]


def range_stats(catalog: Catalog, bucket: int) -> RangeStats:
    """Per id range (``id // bucket``): (rows, sum of ids, sum of the lengths of tenant,
    subscriber, dialect and pattern). The store computes the same in SQL
    (``store.routing_reads.RoutingReads.range_stats``); ranges that differ are read and
    compared."""
    key = ("ranges", bucket)
    memo = catalog.base.memo
    cached = memo.get(key)
    if cached is None:
        cached = memo[key] = _base_ranges(catalog.base, catalog.names, bucket)
    stats: RangeStats = dict(cached)  # type: ignore[call-overload]

    def count(sub_id: int, entry: Entry, sign: int) -> None:
        k = sub_id // bucket
        rows, ids, total = stats.get(k, (0, 0, 0))
        size = len(entry.tenant) + len(entry.subscriber) + len(entry.dialect)
        size += len(entry.pattern)
        if rows + sign:
            stats[k] = (rows + sign, ids + sign * sub_id, total + sign * size)
        else:
            stats.pop(k, None)

    for sub_id, entry in catalog.delta.items():
        old = catalog.base_entry(sub_id)
        if old is not None:
            count(sub_id, old, -1)
        if entry is not None:
            count(sub_id, entry, 1)
    return stats


def _base_ranges(base: Base, names: Names, bucket: int) -> RangeStats:
    if not len(base.ids):
        return {}
    lengths = np.array([len(n) for n in names.names], np.int64)
    pattern_lengths = numpy_view(pc.utf8_length(base.patterns), np.int32).astype(np.int64)
    total = (
        lengths[base.tenant] + lengths[base.subscriber] + lengths[base.dialect] + pattern_lengths
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


def group_sizes(catalog: Catalog) -> dict[tuple[str, str], int]:
    """Subscriptions per (tenant, dialect)."""
    memo = catalog.base.memo
    cached = memo.get("groups")
    if cached is None:
        cached = memo["groups"] = _base_groups(catalog.base, catalog.names)
    sizes: dict[tuple[str, str], int] = dict(cached)  # type: ignore[call-overload]
    for sub_id, entry in catalog.delta.items():
        old = catalog.base_entry(sub_id)
        if old is not None:
            sizes[(old.tenant, old.dialect)] -= 1
        if entry is not None:
            group = (entry.tenant, entry.dialect)
            sizes[group] = sizes.get(group, 0) + 1
    return {group: n for group, n in sizes.items() if n}


def _base_groups(base: Base, names: Names) -> dict[tuple[str, str], int]:
    if not len(base.ids):
        return {}
    keys = base.tenant.astype(np.int64) << 32 | base.dialect
    uniq, counts = np.unique(keys, return_counts=True)
    return {
        (names.names[int(k) >> 32], names.names[int(k) & 0xFFFFFFFF]): int(n)
        for k, n in zip(uniq, counts, strict=True)
    }
