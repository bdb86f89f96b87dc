"""The catalog's columns: interned names (``Names``) and the never-modified ``Base`` of
subscriptions sorted by id, plus the Arrow/NumPy conversions that build them without pandas
(Arrow's own ``to_numpy`` and ``pa.array`` of NumPy import pandas the first time, when it is
installed: 0.25-0.45 s of CPU, holding the GIL, on the service's startup path)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa

IdArray = npt.NDArray[np.int64]
CodeArray = npt.NDArray[np.int32]

_Int = TypeVar("_Int", bound=np.integer)


def numpy_view(array: pa.Array, dtype: type[_Int]) -> npt.NDArray[_Int]:
    """A fixed-width Arrow array without nulls as a NumPy view of its values (no copy)."""
    width = np.dtype(dtype).itemsize
    if array.null_count or array.type.bit_width != 8 * width:
        raise TypeError(f"no {np.dtype(dtype)} view of {array.type} with nulls or of another width")
    values = array.buffers()[1]
    if values is None or not len(array):
        return np.zeros(0, dtype)
    return np.frombuffer(values, dtype, len(array), array.offset * width)


def arrow_mask(keep: npt.NDArray[np.bool_]) -> pa.BooleanArray:
    """A NumPy mask as an Arrow one, built from its bits."""
    bits = pa.py_buffer(np.packbits(keep, bitorder="little"))
    return pa.BooleanArray.from_buffers(pa.bool_(), len(keep), [None, bits])


def arrow_indices(order: npt.NDArray[np.intp]) -> pa.Int64Array:
    """NumPy positions as an Arrow array."""
    values = np.ascontiguousarray(order, np.int64)
    return pa.Int64Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def arrow_strings(texts: list[str]) -> pa.StringArray:
    """Python strings as an Arrow string array, built from its buffers."""
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
    #: range checksums and group sizes (``loader.reconcile_figures``), so a check costs
    #: O(delta), not O(n), in this process.
    memo: dict[object, object] = field(default_factory=dict, compare=False, repr=False)

    @staticmethod
    def empty() -> Base:
        """No rows (``pa.nulls``, not ``pa.array([])``, which imports pandas: every new
        table starts empty)."""
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
