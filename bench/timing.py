"""Timing helpers shared by the benchmarks.

* ``timed``: the garbage collector is paused while a loop is timed (as ``timeit`` does), so a
  collection triggered by earlier work is not billed to it.
* ``gc_on_isolated``: for the figures where the collector's cost *is* the point (loading
  many subscriptions), it runs, but blind to objects that existed before the block.
* ``cpu_budget``: a call that may never finish (the baseline's backtracking) is interrupted
  instead of hanging the suite.
"""

from __future__ import annotations

import gc
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from time import perf_counter
from types import FrameType

from matcher.base import gc_paused as gc_paused  # re-exported for the benchmarks


class BudgetExceededError(Exception):
    """Raised inside a ``cpu_budget`` block that used up its CPU time."""


@contextmanager
def gc_on_isolated() -> Iterator[None]:
    """Run the block with the cyclic collector enabled, every older object frozen out of
    its view (``gc.freeze``): the block pays for collecting its own objects, as it would in a
    fresh process, not for whatever earlier tables left alive."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.enable()
    try:
        yield
    finally:
        if not was_enabled:
            gc.disable()
        gc.unfreeze()


def timed(loop: Callable[[], object]) -> float:
    """Seconds ``loop()`` takes, with the garbage collector paused."""
    with gc_paused():
        start = perf_counter()
        loop()
        return perf_counter() - start


def cpu_budget_available() -> bool:
    """``cpu_budget`` needs SIGPROF (POSIX) and the main thread (where handlers run)."""
    return hasattr(signal, "SIGPROF") and threading.current_thread() is threading.main_thread()


def _expire(signum: int, frame: FrameType | None) -> None:
    raise BudgetExceededError


@contextmanager
def cpu_budget(seconds: float) -> Iterator[None]:
    """Raise ``BudgetExceededError`` in the block once the process has used ``seconds`` of CPU.

    Pure-Python code is interrupted between bytecodes. It uses the profiling timer
    (SIGPROF), not SIGALRM, which pytest-timeout owns. Main thread only (see
    ``cpu_budget_available``).
    """
    previous = signal.signal(signal.SIGPROF, _expire)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous if previous is not None else signal.SIG_DFL)
