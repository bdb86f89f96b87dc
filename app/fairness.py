"""Long work shared fairly between tenants: at most N pieces at once, granted in turns.

A batch match is cut into slices (``routers.match``); each slice waits here for one of
``slots`` places before it runs in a worker thread. Places are handed out round-robin over
the tenants that wait: a tenant with a hundred slices queued gets one turn per round, as a
tenant with one does, so a flood of batches from one tenant delays another tenant's batch by
at most one slice per waiting tenant, not by the whole flood. Bounding the places also
bounds the threads that compete with the event loop for the GIL (and the cores), so single
matches and health probes keep answering whatever the batch load.

Used on the event loop only (one per process): no locking. Cost O(1) per grant.

A process has two sets of places: ``batch_concurrency`` for batch slices matched in C
without the GIL (they use the cores), and ``PYTHON_PLACES`` for work that runs Python and
holds the GIL (large single matches, explains, searches, batches into groups): a second
such thread adds no throughput, only another thread the event loop must wrest the GIL from
for every request it serves.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

#: Places for work that holds the GIL (see the module docstring; with two, one tenant's
#: flood of matches into a big group raised another tenant's match p50 several times over:
#: docs/benchmarks.md, ``topicstore bench hostile``).
PYTHON_PLACES: Final = 1


class FairSlots:
    """``slots`` places, granted in turns across tenants (see the module docstring)."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("at least one slot")
        self._free = slots
        # Tenants waiting, in turn order (a dict keeps insertion order: the tenant served
        # moves to the end if it still waits), each with its waiters in arrival order.
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}

    @property
    def free(self) -> int:
        """Places not taken now."""
        return self._free

    def waiting(self, tenant: str) -> int:
        """Pieces of ``tenant`` waiting for a place."""
        return len(self._waiting.get(tenant, ()))

    @asynccontextmanager
    async def slot(self, tenant: str) -> AsyncIterator[None]:
        """Hold one place for the body; waits for ``tenant``'s turn when none is free."""
        await self._acquire(tenant)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, tenant: str) -> None:
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(tenant, deque()).append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # granted, then cancelled before it ran: pass it on
            else:
                self._forget(tenant, waiter)
            raise

    def _forget(self, tenant: str, waiter: asyncio.Future[None]) -> None:
        queue = self._waiting.get(tenant)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del self._waiting[tenant]

    def _release(self) -> None:
        """Hand the place to the first waiter of the tenant whose turn it is, or free it."""
        while self._waiting:
            tenant = next(iter(self._waiting))
            queue = self._waiting.pop(tenant)
            waiter = queue.popleft()
            if queue:
                self._waiting[tenant] = queue  # its next piece waits for its next turn
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1
