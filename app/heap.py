"""How a serving process hands memory back: the loader's builds and reconciliations free
hundreds of MB of transient buffers, and each allocator in the process would otherwise keep
them resident. One place for the process's memory policy and its one handle on glibc, set by
the serving entry point (``app.serving``, ``app.services``) and, while it runs, an import
(``sub import``): the loader, a library, only calls the ``settle`` it is given."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import importlib.abc
import logging
import sys
from collections.abc import Iterable, Iterator
from typing import Final

import pyarrow as pa

log = logging.getLogger(__name__)

#: ``mallopt`` parameter number (glibc's malloc.h) and the value ``fix_mmap_threshold`` sets.
M_MMAP_THRESHOLD: Final = -3
MMAP_THRESHOLD: Final = 256 * 1024


def _libc() -> ctypes.CDLL | None:
    """glibc, for ``malloc_trim`` and ``mallopt``; None elsewhere (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if sys.platform != "linux" or name is None:
        return None
    libc = ctypes.CDLL(name)
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


_LIBC: Final = _libc()


def arrow_on_malloc() -> None:
    """Put Arrow on the C heap (``malloc``) for this process. Its default pool, mimalloc,
    keeps what the startup read freed: at 1M subscriptions about 85 MB of the resident set
    for good (smaps of a ready server: 422 MB on PostgreSQL, 338 MB with this). On the C
    heap, ``settle`` after the build hands it back. Before any Arrow allocation: buffers go
    back to the pool they came from."""
    pa.set_memory_pool(pa.system_memory_pool())


def fix_mmap_threshold() -> None:
    """Fix glibc's mmap threshold at ``MMAP_THRESHOLD``. By default it rises to the largest
    block freed so far, so after the startup read every later large temporary (each
    reconciliation pass's per-range arrays) comes from the heap and stays there once freed:
    at 1M subscriptions with a pass every 2 s, 360 MB resident against 330 MB with the
    threshold fixed (PostgreSQL; DuckDB 422 against 387). Fixed, blocks of 256 KiB and up
    are mapped on their own and go back to the system when freed."""
    if _LIBC is not None and not _LIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD):
        log.warning("mallopt(M_MMAP_THRESHOLD) refused: freed memory may stay resident")


def settle() -> None:
    """Collect what the old table left, then freeze the heap (``gc.freeze``): a routing table
    is millions of long-lived objects, and without this every later collection rescans all
    of them (it made one-at-a-time writes several times slower at 100k subscriptions).
    Then hand freed memory back to the system: the startup read's buffers (Arrow's pool,
    the C heap's free pages) would otherwise stay in the resident set for good."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    pa.default_memory_pool().release_unused()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


class _KeptOut(importlib.abc.MetaPathFinder):
    """Refuses the modules it names, and their submodules. A finder that raises, not a
    ``None`` in ``sys.modules``: Cython's import (pyarrow's) returns that None instead of
    raising."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = tuple(names)

    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if any(fullname == n or fullname.startswith(n + ".") for n in self.names):
            raise ImportError(f"{fullname} is kept out of this process")


#: Modules DuckDB's client imports only to ask whether a value is one of theirs.
PANDAS: Final = "pandas"
#: And ``pyarrow.dataset``, imported the first time it scans an Arrow table (an import's
#: every staged batch), to ask whether the table is a dataset: with it come Acero,
#: Substrait and Parquet, 45 MB of the importing process's resident set. Without it
#: DuckDB scans the table the same way.
ARROW_DATASET: Final = "pyarrow.dataset"


def keep_pandas_out() -> None:
    """Make ``import pandas`` fail in this process, for good. The service never uses pandas,
    but DuckDB's Python client imports it the first time a statement binds a parameter,
    only to ask whether the value is a pandas object: 50 MB of a 1M-subscription server's
    resident set on the embedded default. Without pandas DuckDB binds every Python value
    the store passes the same way (numpy scalars it refuses either way), and pyarrow takes
    the ImportError as "no pandas". Only in a serving process: tests and the Spark job
    share their interpreter with code that uses pandas."""
    kept = any(isinstance(f, _KeptOut) and PANDAS in f.names for f in sys.meta_path)
    if PANDAS not in sys.modules and not kept:
        sys.meta_path.insert(0, _KeptOut([PANDAS]))


@contextlib.contextmanager
def kept_out(*names: str) -> Iterator[None]:
    """While the block runs, the modules ``names`` (those not imported already) cannot be
    imported; undone after, so an interpreter that runs a command among others (tests) is
    left as it was: DuckDB asks for a module again once it is importable. A command that
    opens the store directly keeps pandas out this way: DuckDB would import it (a good
    part of a short command's start) only to ask whether a value is a pandas object."""
    finder = _KeptOut(name for name in names if name not in sys.modules)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


@contextlib.contextmanager
def lean_import() -> Iterator[None]:
    """While an import (``sub import``) runs: pandas and ``pyarrow.dataset`` kept out
    (``kept_out``), and Arrow's buffers on the C heap (mimalloc, Arrow's default pool, kept
    some 40 MB of freed batches resident). Both undone after."""
    pool = pa.default_memory_pool()
    with kept_out(PANDAS, ARROW_DATASET):
        arrow_on_malloc()
        try:
            yield
        finally:
            pa.set_memory_pool(pool)
