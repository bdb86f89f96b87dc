"""The live link from store to matchers: build at startup, then follow the change log.

* Startup: every subscription is read in one consistent snapshot together with the newest
  change seq in that snapshot, bulk-built into a fresh ``RoutingTable``, then caught up.
  ``ready`` is set only then: nobody is served a half-built table.
* Changes: the change log is the source of truth; notifications are only a doorbell. Writes
  made through this process apply right after their commit (``Database.on_commit``), so the
  service answers its own writes at once. On PostgreSQL a listener thread LISTENs on
  ``topicstore_changes`` (payload: the newest seq) for other replicas' writes and catches up;
  on every (re)connect it LISTENs first, then catches up, so nothing falls in between.
* Reconciliation: periodically a new table is built off to the side and compared with the
  live one; on drift it is swapped in with one reference assignment.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Sequence
from typing import Final

import psycopg
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import make_url

from loader.shadow import ShadowCheck
from loader.table import DEFAULT_ENGINES, RoutingTable
from matcher import Limits
from store.db import CHANGES_CHANNEL, Database
from store.repository import SubscriptionRepository

log = logging.getLogger(__name__)

PAGE: Final = 10_000
#: Changes applied incrementally before the heap is settled again (at least).
SETTLE_EVERY: Final = 50_000


class Loader:
    """Keeps ``table`` equal to the store. Read ``table`` once per request: a rebuild swaps
    it whole, and the object a reader holds stays complete."""

    def __init__(
        self,
        db: Database,
        engines: Sequence[str] = DEFAULT_ENGINES,
        *,
        limits: Limits | None = None,
        cache_size: int = 0,
        poll_interval: float = 1.0,
        reconcile_interval: float | None = None,
        shadow_every: int = 0,
    ) -> None:
        self.db = db
        self.engines = tuple(engines)
        self.limits = limits
        self.cache_size = cache_size
        self.poll_interval = poll_interval
        self.reconcile_interval = reconcile_interval
        self.shadow = ShadowCheck(shadow_every)
        self.table = self._new_table()
        self.ready = threading.Event()
        self.rebuild_seconds = 0.0
        self.listener_connects = 0
        self.listener_pid: int | None = None
        self._unsettled = 0
        self._catch_up_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _new_table(self) -> RoutingTable:
        return RoutingTable(self.engines, self.limits, self.cache_size, self.shadow)

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Build, catch up, start following changes; returns once ``ready``."""
        self.db.on_commit(self.catch_up)
        if self.db.is_postgres:
            listening = threading.Event()
            self._spawn(self._listen, "topicstore-listener", listening)
            listening.wait(timeout=30)
        self.rebuild()
        if self.reconcile_interval:
            self._spawn(self._reconcile_loop, "topicstore-reconcile")
        self.ready.set()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        self._threads.clear()

    def _spawn(self, target: object, name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads.append(thread)

    # -- building -----------------------------------------------------------------------

    def build(self) -> RoutingTable:
        """A complete table from one consistent snapshot of the store, caught up."""
        table = self._new_table()
        with self.db.sessions() as session:
            if self.db.is_postgres:
                session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            repo = SubscriptionRepository(session)
            seq = repo.last_seq()  # same snapshot as the rows below
            table.load(repo.stream_all(PAGE), seq)
        self._catch_up_table(table)
        return table

    def rebuild(self) -> RoutingTable:
        """Build a new table off to the side and swap it in atomically."""
        started = time.perf_counter()
        table = self.build()
        with self._catch_up_lock:
            self._catch_up_table(table)  # changes that landed while building
            self.table = table
        _settle_heap()
        self.rebuild_seconds = time.perf_counter() - started
        log.info(
            "routing table built: %d subscriptions in %.2f s", len(table), self.rebuild_seconds
        )
        return table

    # -- following changes --------------------------------------------------------------

    def catch_up(self) -> int:
        """Apply every change past the table's seq; returns how many were applied."""
        with self._catch_up_lock:
            applied = self._catch_up_table(self.table)
            self._unsettled += applied
            if self._unsettled > max(SETTLE_EVERY, len(self.table) // 4):
                # Bulk writes grew the table by a quarter: freeze it again (see
                # _settle_heap), or full collections keep rescanning it.
                _settle_heap()
                self._unsettled = 0
            return applied

    def _catch_up_table(self, table: RoutingTable) -> int:
        applied = 0
        while True:
            with self.db.read() as session:
                changes = SubscriptionRepository(session).changes_since(table.seq, PAGE)
            if not changes:
                return applied
            applied += table.apply(changes)
            if len(changes) < PAGE:
                return applied

    def lag(self) -> int:
        """Changes committed to the store but not yet applied here."""
        with self.db.read() as session:
            return max(0, SubscriptionRepository(session).last_seq() - self.table.seq)

    def _listen(self, listening: threading.Event) -> None:
        """LISTEN, then catch up at every doorbell and at least every ``poll_interval`` (a
        safety net: a doorbell is never the data). Reconnects with backoff; after each
        (re)connect it LISTENs first and then catches up, so no change falls in between."""
        dsn = make_url(self.db.url).set(drivername="postgresql").render_as_string(False)
        listen = sql.SQL("LISTEN {}").format(sql.Identifier(CHANGES_CHANNEL))
        backoff = 0.1
        while not self._stop.is_set():
            try:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute(listen)
                    self.listener_pid = conn.info.backend_pid
                    self.listener_connects += 1
                    listening.set()
                    backoff = 0.1
                    while not self._stop.is_set():
                        if self.ready.is_set():
                            self.catch_up()
                        for _ in conn.notifies(timeout=self.poll_interval, stop_after=1):
                            pass
            except (psycopg.Error, sa.exc.SQLAlchemyError) as e:
                log.warning("change listener lost its connection (%s); reconnecting", e)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    # -- reconciliation -----------------------------------------------------------------

    def reconcile(self) -> bool:
        """Rebuild off to the side; swap it in if the live table drifted. True on drift."""
        fresh = self.build()
        with self._catch_up_lock:
            self._catch_up_table(fresh)
            live = self.table
            self._catch_up_table(live)
            drifted = live.snapshot().entries != fresh.snapshot().entries or not live.consistent()
            if drifted:
                log.warning("routing table drifted from the store; swapping in a rebuilt one")
                self.table = fresh
        if drifted:
            _settle_heap()
        return drifted

    def _reconcile_loop(self) -> None:
        assert self.reconcile_interval
        while not self._stop.wait(self.reconcile_interval):
            try:
                self.reconcile()
            except (sa.exc.SQLAlchemyError, psycopg.Error) as e:
                log.warning("reconciliation failed (%s); will retry", e)


def _settle_heap() -> None:
    """Collect what the old table left, then freeze the heap (``gc.freeze``): a routing table
    is millions of long-lived objects, and without this every later collection rescans all
    of them (it made one-at-a-time writes several times slower at 100k subscriptions)."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
