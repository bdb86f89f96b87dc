"""Timing helpers shared by the benchmarks: the garbage collector is paused while a loop is
timed (as ``timeit`` does), so a collection triggered by earlier work is not billed to it."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from time import perf_counter


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic garbage collector for the block, restoring its previous state."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def timed(loop: Callable[[], object]) -> float:
    """Seconds ``loop()`` takes, with the garbage collector paused."""
    with gc_paused():
        start = perf_counter()
        loop()
        return perf_counter() - start
