"""Run jobs in threads that start together, for the concurrency tables.

Threads are created and started first, then released at once by a barrier, so thread
start-up is not timed; the garbage collector is paused throughout, as in every timing here.
An error in any thread is re-raised: a run that failed must not pass as a fast one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from time import perf_counter

from bench.subjects import BenchError
from bench.timing import gc_paused


def run_together(jobs: Sequence[Callable[[], object]]) -> float:
    """Seconds from releasing one thread per job until the last of them returns."""
    barrier = threading.Barrier(len(jobs) + 1)
    errors: list[BaseException] = []

    def start(job: Callable[[], object]) -> None:
        barrier.wait()
        try:
            job()
        except BaseException as e:
            errors.append(e)

    workers = [threading.Thread(target=start, args=(job,), daemon=True) for job in jobs]
    with gc_paused():
        for worker in workers:
            worker.start()
        barrier.wait()
        began = perf_counter()
        for worker in workers:
            worker.join()
        elapsed = perf_counter() - began
    if errors:
        raise BenchError("thread_failed", repr(errors[0])) from errors[0]
    return elapsed
