"""The expiry sweep: deletes expired subscriptions from the store, a bounded batch at a
time, through the admin write path (``AdminOperations.sweep_expired``: a change each, one
``expire`` audit row per tenant and sweep, the tenants' counts moved).

Matching never waits for it: a subscription stops matching at its instant on every
replica whether swept or not (``loader.expiry``); the sweep only takes the row out of the
store and, through its changes, out of every replica's engines, so the set each read
filters stays small. It runs every ``expiry_sweep_interval`` seconds and as soon as a
subscription this replica holds expires (``ExpiryIndex.next``), at most every
``MIN_PAUSE_S``; a sweep that found its full ``expiry_sweep_rows`` goes on at once. Driven by
the stored column only, it survives restarts (expired rows are not loaded, and the next
sweep finds them); on several replicas each sweeps, and as writers are serialized a row
is deleted once (the others find nothing and write nothing).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Final

import psycopg
import sqlalchemy as sa

from app.operations import AdminOperations
from loader import Loader
from store import StoreError

log = logging.getLogger(__name__)

#: The shortest pause between two sweeps (while expired ids are still held here, each read
#: filters: a sweep of another replica may be on its way).
MIN_PAUSE_S: Final = 0.2
#: How often a waiting sweep looks again at what the table holds.
RECHECK_S: Final = 0.5
#: After its instant, how long a sweep waits for the expired row's writer to commit
#: around it (the clocks of the replicas and the store's commits are not one).
SLACK_S: Final = 0.05


class ExpirySweep:
    """The sweeping thread of one serving process (see the module docstring)."""

    def __init__(self, admin: AdminOperations, loader: Loader, interval: float, rows: int):
        self.admin = admin
        self.loader = loader
        self.interval = interval
        self.rows = rows
        #: Completed sweeps and the subscriptions they deleted (``/metrics``, tests).
        self.sweeps = 0
        self.swept = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.interval and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="topicstore-sweep", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def sweep(self) -> int:
        """One sweep now; how many subscriptions it deleted."""
        removed = self.admin.sweep_expired(self.rows)
        count = sum(map(len, removed.values()))
        self.sweeps += 1
        self.swept += count
        if count:
            log.info("expiry sweep deleted %d subscription(s)", count)
        return count

    def _run(self) -> None:
        self.loader.ready.wait()
        next_sweep = 0.0  # at once: rows may have expired while no service ran
        while not self._stop.is_set():
            due_in = self.loader.table.expiry.next - time.time() + SLACK_S
            wait = min(next_sweep - time.monotonic(), due_in)
            if wait > 0:
                # In short steps: a subscription added meanwhile may expire sooner.
                self._stop.wait(min(wait, RECHECK_S))
                continue
            try:
                full = self.sweep() >= self.rows
            except (StoreError, sa.exc.SQLAlchemyError, psycopg.Error) as e:
                log.warning("expiry sweep failed (%s); will retry", e)
                full = False
            next_sweep = time.monotonic() + (0.0 if full else self.interval)
            self._stop.wait(MIN_PAUSE_S)
