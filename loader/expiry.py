"""Which held subscriptions have expired: the routing table's filter, exact at the instant.

A subscription with ``expires_at`` stops matching at that instant on every replica
(``store.expiry``), but it leaves the engines only when the sweep's ``remove`` reaches the
change log, a sweep interval and a replication lag later. In between, the engines still
answer its id, and every read of the table drops it (``due``): a match never returns an
expired id, whether its replica heard of the sweep or not.

Cost: ``next`` is the earliest instant at which anything the table holds expires (-inf
while some expired id is still held, +inf when nothing expires). A read compares the
clock with it: one float comparison while nothing is due, whatever the number of expiring
subscriptions. Only while an expired id is still held (until the sweep's remove arrives)
does a read filter its answer against ``due`` (a frozenset: O(answer)). The heap keeps the
future instants; it is compacted when removed ids' stale entries outnumber the live ones.

Written by the one applier (``set``, ``drop``), read by every match (``due``); the lock is
taken only on the slow path and by the applier, never while nothing is due.
"""

from __future__ import annotations

import heapq
import math
import threading
from array import array
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Final

import numpy as np

from matcher import BatchIds, MatchResult

_NOTHING: Final[frozenset[int]] = frozenset()


class ExpiryIndex:
    """The expiry instants (seconds since the epoch) of the held subscriptions that have
    one, and which of them have passed. See the module docstring."""

    def __init__(self) -> None:
        self._at: dict[int, float] = {}
        self._heap: list[tuple[float, int]] = []
        self._due: frozenset[int] = _NOTHING
        #: The earliest instant of a held id not yet in ``_due``; -inf while ``_due`` holds
        #: any (every read filters then), +inf when nothing expires.
        self.next = math.inf
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._at)

    def __contains__(self, sub_id: object) -> bool:
        return sub_id in self._at

    def instant(self, sub_id: int) -> float | None:
        """When ``sub_id`` expires (seconds since the epoch), if it does and is held."""
        return self._at.get(sub_id)

    def set(self, sub_id: int, expires_at: datetime | None) -> None:
        """``sub_id``'s expiry is now ``expires_at`` (None: it never expires). Called by
        the applier before the engines learn of a new id, so no read sees it unfiltered."""
        with self._lock:
            if sub_id in self._due:
                self._due = self._due - {sub_id}
            if expires_at is None:
                self._at.pop(sub_id, None)
            else:
                instant = expires_at.timestamp()
                self._at[sub_id] = instant
                heapq.heappush(self._heap, (instant, sub_id))
                if len(self._heap) > 2 * len(self._at) + 64:
                    self._compact()
            self._rearm()

    def drop(self, ids: Iterable[int]) -> None:
        """``ids`` left the table (called after the engines forgot them)."""
        at = self._at
        if not at:
            return
        with self._lock:
            gone = [sub_id for sub_id in ids if at.pop(sub_id, None) is not None]
            if gone and self._due:
                self._due = self._due.difference(gone)
            if len(self._heap) > 2 * len(at) + 64:
                self._compact()
            self._rearm()

    def due(self, now: float) -> frozenset[int]:
        """The held ids expired at ``now`` (seconds since the epoch): at or after their
        instant. Empty at the cost of one comparison while nothing is due."""
        if now < self.next:
            return _NOTHING
        with self._lock:
            heap, at = self._heap, self._at
            passed = []
            while heap and heap[0][0] <= now:
                instant, sub_id = heapq.heappop(heap)
                if at.get(sub_id) == instant:
                    passed.append(sub_id)
            if passed:
                self._due = self._due.union(passed)
            self._rearm()
            return self._due

    def _rearm(self) -> None:
        """``next`` from the state (under the lock), stale entries (of ids moved or gone)
        first popped off the heap's top, so it is an instant something expires at."""
        heap, at = self._heap, self._at
        while heap and at.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        if self._due:
            self.next = -math.inf
        else:
            self.next = heap[0][0] if heap else math.inf

    def _compact(self) -> None:
        """The heap rebuilt from the live instants (under the lock): O(n)."""
        self._heap = [(instant, sub_id) for sub_id, instant in self._at.items()]
        heapq.heapify(self._heap)

    def _check(self) -> None:
        """Tests call this: every held instant is in the heap or already due."""
        live = {(instant, sub_id) for sub_id, instant in self._at.items()}
        queued = set(self._heap)
        for _, sub_id in live - queued:
            assert sub_id in self._due, sub_id
        assert self._due <= self._at.keys()


def without(
    ids: MatchResult, due: frozenset[int], keep: Callable[[int], bool] | None = None
) -> MatchResult:
    """``ids`` less the ``due`` ones (but those ``keep`` keeps: a group's route standing
    for members that have not expired); ``ids`` itself when none is due. O(ids)."""
    if not due or due.isdisjoint(ids):
        return ids
    if keep is None:
        return frozenset(i for i in ids if i not in due)
    return frozenset(i for i in ids if i not in due or keep(i))


def batch_without(found: BatchIds, due: frozenset[int]) -> BatchIds:
    """A batch answer (``Matcher.match_ids``) less the ``due`` ids: the same arrays when
    none of them is in it, else new ones (numpy: O(ids), no Python object per id)."""
    counts, ids, errors = found
    if not due or not len(ids):
        return found
    flat = np.frombuffer(ids, np.uint32)
    gone = np.isin(flat, np.fromiter(due, np.uint32, len(due)))
    if not gone.any():
        return found
    topic = np.repeat(np.arange(len(counts)), np.frombuffer(counts, np.uint32))
    kept = np.bincount(topic[~gone], minlength=len(counts)).astype(np.uint32)
    return array("I", kept.tobytes()), array("I", flat[~gone].tobytes()), errors
