"""Building the routing table in bulk from every subscription at a seq
(``RoutingTable.load``, ``RoutingTable.load_columns``): columns in, no Python object per
row."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

import numpy as np
import pyarrow as pa

from loader.catalog import Catalog
from loader.columns import numpy_view
from loader.engines import add_headers, subscribe_everywhere
from loader.state import DENSE_FACTOR, DENSE_SLACK, Snapshot, TableState
from matcher import CapacityError, Matcher
from store.columns import COLUMNS, SCHEMA
from store.records import HEADERS_DIALECT, Change


class Building(TableState):
    """The bulk build of a fresh ``RoutingTable``."""

    def load(self, rows: Iterable[Change], seq: int) -> None:
        """Bulk-build from every subscription as of change ``seq`` (a fresh table only)."""
        ids: list[int] = []
        columns: dict[str, list[str]] = {name: [] for name in COLUMNS[1:]}
        members: list[tuple[int, str, str, str | None]] = []
        expiring: list[tuple[int, datetime]] = []
        for row in rows:
            ids.append(row.subscription_id)
            for name, values in columns.items():
                values.append(getattr(row, name))
            if row.group is not None:
                members.append((row.subscription_id, row.tenant, row.group, row.group_policy))
            if row.expires_at is not None:
                expiring.append((row.subscription_id, row.expires_at))
        self.load_columns(
            pa.table({"id": pa.array(ids, pa.int64()), **columns}, schema=SCHEMA),
            seq,
            members,
            expiring,
        )

    def load_columns(
        self,
        rows: pa.Table,
        seq: int,
        members: Iterable[tuple[int, str, str, str | None]] = (),
        expiring: Iterable[tuple[int, datetime]] = (),
    ) -> None:
        """Bulk-build from an Arrow table of ``COLUMNS`` holding every subscription as of
        change ``seq`` (a fresh table only), ``members`` ((id, tenant, group, policy)
        of the grouped ones, ``SubscriptionRepository.members``) and ``expiring`` ((id,
        expires_at) of the rows that expire, ``SubscriptionRepository.expiring``; the
        rows must not hold expired ones, ``columns``). No Python object per
        row: names are coded per distinct value, patterns go to the catalog as one Arrow
        column and to the engines as its buffers (``Matcher.subscribe_arrays``, read in C by
        ``native``)."""
        with self._apply_lock:
            if len(self._catalog.entries):
                raise RuntimeError("load() builds a fresh table; use apply() for changes")
            grouped: list[int] = []
            for member in members:  # groups: before the matchers see the ids
                self.groups.add_member(*member)
                grouped.append(member[0])
            for sub_id, expires_at in expiring:  # so are expiries
                self.expiry.set(sub_id, expires_at)
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
            served = self._serve_members(grouped, ids, tenant, dialect, patterns)
            if len(served):  # members whose group's route for their pattern serves them
                keep = ~np.isin(ids, served)
                ids, tenant, dialect = ids[keep], tenant[keep], dialect[keep]
                patterns = patterns.filter(pa.array(keep))
            groups = tenant.astype(np.int64) << 32 | dialect
            refused: list[int] = []
            if len(ids) and bool(np.all(groups == groups[0])):  # one (tenant, dialect)
                refused += self._load_group(
                    names.names[tenant[0]], names.names[dialect[0]], ids, patterns
                )
            elif len(ids):
                order = np.argsort(groups, kind="stable")
                starts = np.flatnonzero(np.diff(groups[order], prepend=-1)).tolist()
                ends = [*starts[1:], len(order)]
                for start, end in zip(starts, ends, strict=True):
                    rows_of = order[start:end]
                    first = int(rows_of[0])
                    refused += self._load_group(
                        names.names[tenant[first]],
                        names.names[dialect[first]],
                        ids[rows_of],
                        patterns.take(pa.array(rows_of)),
                    )
            if refused:  # a refused route leaves its whole class unserved
                known = set(refused)
                unserved = [i for i in self.groups.unserve(refused) if i not in known]
                self.refused += len(unserved)
                refused += unserved
            self._catalog = Snapshot(seq, self._without(catalog, refused))

    def _serve_members(
        self,
        grouped: list[int],
        ids: np.ndarray,
        tenant: np.ndarray,
        dialect: np.ndarray,
        patterns: pa.StringArray,
    ) -> np.ndarray:
        """Serve the ``grouped`` ids among the rows (``GroupIndex.serve``, one Python
        object per grouped row only); returns those the engines must not be given."""
        if not grouped:
            return np.zeros(0, np.int64)
        wanted = np.unique(np.asarray(grouped, np.int64))
        at = np.minimum(np.searchsorted(ids, wanted), len(ids) - 1)
        rows_of = at[ids[at] == wanted]
        codes = self._names.names
        texts = patterns.take(pa.array(rows_of)).to_pylist()
        hidden = self.groups.serve(
            (int(ids[r]), codes[tenant[r]], codes[dialect[r]], text)
            for r, text in zip(rows_of.tolist(), texts, strict=True)
        )
        return np.asarray(sorted(hidden), np.int64)

    def _without(self, catalog: Catalog, refused: Sequence[int]) -> Catalog:
        """``catalog`` less the ids the engines refused (``_load_group``; their group
        memberships stay, as the store has them, see ``apply``)."""
        for sub_id in refused:
            catalog = catalog.with_remove(sub_id)
            self._set_subscriber(sub_id, None, 0)
        self.expiry.drop(refused)
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
            add_headers(
                self._headers_of(tenant), zip(ids.tolist(), patterns.to_pylist(), strict=True)
            )
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
                subscribe_everywhere(engines, sub_id, text, k)
            except CapacityError as e:
                refused.append(sub_id)
                error = e
        if error is not None:
            self._refuse(refused, error)
        return refused


def _strings(column: pa.ChunkedArray) -> pa.StringArray:
    """One contiguous ``string`` array (32-bit offsets) of a column."""
    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if array.type != pa.string():
        array = array.cast(pa.string())
    return array


def _buffers(patterns: pa.StringArray) -> tuple[np.ndarray, np.ndarray]:
    """The offsets (int32, one more than rows) and the UTF-8 bytes of a string array."""
    _, offsets, data = patterns.buffers()
    start = patterns.offset
    offset_view = np.frombuffer(offsets, np.int32, len(patterns) + 1, start * 4)
    raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return offset_view, raw
