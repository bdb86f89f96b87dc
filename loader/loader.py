"""The live link from store to matchers: build at startup, then follow the change log.

* Startup: every subscription is read in one consistent snapshot together with the newest
  change seq in that snapshot, bulk-built into a fresh ``RoutingTable``, then caught up.
  ``ready`` is set only then: nobody is served a half-built table.
* Changes: the change log is the source of truth; notifications are only a doorbell. Writes
  made through this process apply right after their commit (``Database.on_commit``), so the
  service answers its own writes at once. On PostgreSQL a listener thread LISTENs on
  ``topicstore_changes`` (payload: the newest seq) for other replicas' writes and catches up;
  on every (re)connect it LISTENs first, then catches up, so nothing falls in between.
* Reconciliation: periodically the store's per-range counts and checksums (rows, sum of
  ids, summed text lengths per ``RANGE`` ids) are compared with the catalog's at the same
  seq, and the engines' sizes with the catalog's; only ranges or (tenant, dialect) groups
  that differ are read and repaired in place. Matching never waits for it: the comparison
  reads a snapshot, and a repair is an ordinary ``apply``. Writes never hold it up either:
  the catalog is brought to the snapshot's seq on a persistent copy (``_reconcile``), so a
  pass completes under sustained writes. A periodic pass is spread over its interval in
  slices of a few ranges, each compared in its own snapshot.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Final

import psycopg
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import make_url

from loader.catalog import Catalog, Entry
from loader.reconcile_figures import range_stats
from loader.shadow import ShadowCheck
from loader.table import RoutingTable
from matcher import Limits
from matcher.base import gc_paused
from matcher.registry import DEFAULT_ENGINES
from store.db import Database
from store.keys import CHANGES_CHANNEL
from store.records import Change, Removals
from store.repository import SubscriptionRepository

log = logging.getLogger(__name__)

PAGE: Final = 10_000
#: Ids per range the reconciler checksums (a differing range is read whole).
RANGE: Final = 65_536
#: Ids ranges per reconciliation slice: 131,072 ids, one short index range scan in the store.
RECONCILE_SLICE: Final = 2
#: A slice's ``stop`` meaning "no upper bound" (the pass's last slice).
_OPEN: Final = sys.maxsize
#: A table further behind the store than this many changes is not compared (it is still
#: catching up: the comparison would read and replay that many changes itself).
RECONCILE_BEHIND: Final = PAGE
#: Changes applied incrementally before the heap is settled again (at least), and the size
#: of a built table (or of the one it replaces) below which it is not settled.
SETTLE_EVERY: Final = 50_000


def _last_seq(change: Change | Removals) -> int:
    """The newest seq of one item of ``RoutingReads.changes_in``."""
    return change.seqs[-1] if isinstance(change, Removals) else change.seq


def _follow(seq: int, changes: Sequence[Change]) -> bool:
    """Whether ``changes`` are exactly the ones after ``seq``, without a gap."""
    return all(change.seq == seq + i for i, change in enumerate(changes, start=1))


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
        settle: Callable[[], None] | None = None,
    ) -> None:
        """``settle``: the process's memory policy, called once a table is built (when it,
        or the one it replaces, holds ``SETTLE_EVERY`` subscriptions or more) and when
        changes have grown it by a quarter (a serving process freezes and trims its heap:
        ``app.heap.settle``); None leaves the process as it is."""
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
        #: ``time.monotonic()`` of the listener's last completed catch-up (readiness).
        self.listener_beat: float | None = None
        self._settle = settle
        #: ``time.monotonic()`` of the last slice of changes applied by any applier
        #: (readiness: a replica working through a backlog is making progress).
        self.progress_beat: float | None = None
        self._settled_size = 0  # the table's size when the heap was last settled
        #: Completed reconciliation passes, and the repairs they made (``/metrics``).
        self.reconcile_passes = 0
        self.reconcile_repairs = 0
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
        self.listener_beat = time.monotonic()  # listening, and caught up just now
        self.progress_beat = self.listener_beat
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
            now = datetime.now(UTC)  # expired rows are not loaded (loader.expiry)
            columns = repo.columns(now)
            members = repo.members()
            expiring = repo.expiring(now)
        table.load_columns(columns, seq, members, expiring)
        del columns
        self._catch_up_table(table)
        return table

    def rebuild(self) -> RoutingTable:
        """Build a new table off to the side and swap it in atomically."""
        started = time.perf_counter()
        table = self.build()
        with self._catch_up_lock:
            self._catch_up_table(table)  # changes that landed while building
            self.table = table
            previous, self._settled_size = self._settled_size, len(table)
        self.db.release_memory()  # before the heap is trimmed: what DuckDB frees goes too
        # A full collection rescans every object of the process: worth it to freeze a large
        # table or to let go of one, not for a small table replacing another (what is left
        # to collect then is as little as any write leaves).
        if self._settle is not None and max(previous, len(table)) >= SETTLE_EVERY:
            self._settle()
        self.rebuild_seconds = time.perf_counter() - started
        log.info(
            "routing table built: %d subscriptions in %.2f s", len(table), self.rebuild_seconds
        )
        return table

    # -- following changes --------------------------------------------------------------

    def catch_up(self, changes: Sequence[Change] | None = None, announced: int = 0) -> int:
        """Apply every change past the table's seq; returns how many were applied.
        ``changes``: a transaction this process just committed (``Database.on_commit``),
        applied as they are when they are exactly the next ones, read from the log
        otherwise. ``announced``: the seq a doorbell rang with (read up to it at least)."""
        with self._catch_up_lock:
            table = self.table
            if changes and changes[-1].seq <= table.seq:
                return 0  # read from the log already, at their doorbell
            if changes and _follow(table.seq, changes):
                applied = table.apply(changes, self._progressed)
                self._progressed()
            else:
                applied = self._catch_up_table(table, announced)
            if len(table) - self._settled_size > max(SETTLE_EVERY, self._settled_size // 4):
                # Bulk writes grew the table by a quarter: freeze it again (see
                # app.heap.settle), or full collections keep rescanning it. (Not after
                # removals: what they free goes by reference counting, and a full
                # collection would hold the GIL, and every match, for a tenth of a second.)
                if self._settle is not None:
                    self._settle()
                self._settled_size = len(table)
            return applied

    def _catch_up_table(self, table: RoutingTable, announced: int = 0) -> int:
        """Apply the changes past ``table.seq`` in windows of ``PAGE`` seqs: a bounded range
        is an index range scan whatever the planner's statistics say (a log that grew by
        100,000 rows since they were taken was read with a full scan and a sort per page).
        A window short of ``PAGE`` rows may sit before a gap in the seqs (a rolled-back
        write), so the newest seq says when to stop; a window that reached the seq a
        doorbell ``announced`` needs no such read (a later change rings again). Each read
        is one statement in a session of its own (``Database.read_alone``): a follower
        catches up at every doorbell, and a transaction around it cost two more round
        trips each time."""
        applied = 0
        cursor = table.seq
        while True:
            end = cursor + PAGE
            # A page's changes die with it, by reference counting; with the collector on,
            # each page of them lived through collections into the oldest generation, and
            # every few pages a full collection held the GIL (and every match) for tens of
            # milliseconds.
            with gc_paused():
                with self.db.read_alone() as session:
                    repo = SubscriptionRepository(session)
                    changes = repo.changes_in(cursor, end)
                    read = sum(len(c) if isinstance(c, Removals) else 1 for c in changes)
                    last = _last_seq(changes[-1]) if changes else 0
                    if read == PAGE:
                        newest = None
                    elif announced and last >= announced:
                        newest = last
                    else:
                        newest = repo.last_seq()
                if changes:
                    applied += table.apply(changes, self._progressed)
                del changes
            if newest is not None and newest <= end:
                break
            cursor = end  # a full window ends at its end; a short one before a gap
        self._progressed()
        return applied

    def _progressed(self) -> None:
        self.progress_beat = time.monotonic()

    def applying(self) -> bool:
        """Whether an applier is catching up now (readiness)."""
        return self._catch_up_lock.locked()

    def lag(self) -> int:
        """Changes committed to the store but not yet applied here."""
        with self.db.read() as session:
            return max(0, SubscriptionRepository(session).last_seq() - self.table.seq)

    def _listen(self, listening: threading.Event) -> None:
        """LISTEN, then catch up at every doorbell past the table's seq and at least every
        ``poll_interval`` (a safety net: a doorbell is never the data). Reconnects with
        backoff; after each (re)connect it LISTENs first and then catches up, so no change
        falls in between."""
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
                    rang: int | None = None  # the seq a doorbell announced; None: a poll
                    while not self._stop.is_set():
                        if self.ready.is_set():
                            # This process's own writes are applied as they commit (or
                            # are about to be: ``committing_seq``): their doorbells need no
                            # read of the log.
                            if rang is None or rang > max(self.table.seq, self.db.committing_seq):
                                self.catch_up(announced=rang or 0)
                            self.listener_beat = time.monotonic()
                        rang = None
                        for note in conn.notifies(timeout=self.poll_interval, stop_after=1):
                            rang = int(note.payload) if note.payload.isdigit() else None
            except (psycopg.Error, sa.exc.SQLAlchemyError) as e:
                log.warning("change listener lost its connection (%s); reconnecting", e)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    # -- reconciliation -----------------------------------------------------------------

    def reconcile(self, keys: range | None = None) -> bool:
        """Compare the live table with the store cheaply and repair what differs; True if
        anything was repaired. See the module docstring.

        ``keys``: check only these id ranges (``id // RANGE``; a ``stop`` of
        ``sys.maxsize`` means no upper bound), and not the groups (the periodic loop checks
        them with a pass's last slice). None checks everything in one snapshot, and counts
        as a pass (``reconcile_passes``) when it completes."""
        repaired = self._reconcile(keys, groups=keys is None)
        if keys is None and repaired is not None:
            self.reconcile_passes += 1
        return bool(repaired)

    def _reconcile(self, keys: range | None, *, groups: bool) -> bool | None:
        """One check of ``keys`` (see ``reconcile``); None when it could not complete (the
        table was rebuilt meanwhile, or is more than ``RECONCILE_BEHIND`` changes behind).

        No quiet moment is needed. The store is read in one snapshot, at change seq S; the
        table's catalog taken just before is at some V <= S, and as it is persistent, the
        changes (V, S] of that same snapshot are applied to a copy of it, which gives the
        table's contents at S without touching the live table. What differs at S is then
        repaired in the live table, which meanwhile moved on to some T >= S: the ids that
        changes (S, T] touched are left alone (those changes set them), and so are their
        group memberships."""
        low = 0 if keys is None else keys.start * RANGE
        high = None if keys is None or keys.stop >= _OPEN else keys.stop * RANGE
        table = self.table
        view = table.snapshot()
        with self.db.sessions() as session:
            if self.db.is_postgres:
                session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            repo = SubscriptionRepository(session)
            seq = repo.last_seq()  # fixes this transaction's snapshot: seq >= view.seq
            if seq - view.seq > RECONCILE_BEHIND:
                return None  # catching up: the change log will do for now
            entries = _with_changes(view.entries, repo.changes_since(view.seq, PAGE, upto=seq))
            # Both sides as live at one instant: expired rows wait in the store for the
            # sweep, and in the table for its remove (a restart does not load them).
            now = datetime.now(UTC)
            due = table.expiry.due(now.timestamp())
            if due:
                entries = entries.without(sorted(i for i in due if i in entries))
            theirs = repo.range_stats(RANGE, low, high, now)
            ours = range_stats(entries, RANGE)
            if keys is not None:
                ours = {k: v for k, v in ours.items() if k in keys}
            ranges = sorted(k for k in theirs.keys() | ours.keys() if theirs.get(k) != ours.get(k))
            stored = [row for k in ranges for row in repo.between(k * RANGE, (k + 1) * RANGE, now)]
            # shared subscriptions: few rows, compared whole
            members = repo.members() if groups else None
        repaired = 0
        if ranges or members is not None:
            with self._catch_up_lock:
                if table is not self.table:
                    return None  # rebuilt meanwhile: compared with a table no longer served
                self._catch_up_table(table)  # at least to seq, so (seq, T] is all there is
                with self.db.read() as session:
                    later = SubscriptionRepository(session).changes_since(
                        seq, sys.maxsize, upto=table.seq
                    )
                touched = {change.subscription_id for change in later}
                repaired = table.repair(stored, ranges, RANGE, keep=touched)
                if members is not None:
                    repaired += table.repair_groups()
                    repaired += table.repair_members(_members_after(members, later))
        self.reconcile_repairs += repaired
        if repaired:
            log.warning("routing table drifted from the store: %d repairs", repaired)
        return bool(repaired)

    def reconcile_slices(self) -> list[range]:
        """One pass's slices: ``RECONCILE_SLICE`` id ranges each over the table's ranges,
        the last one open-ended (it also covers store rows above the table's highest id)."""
        ranges = range_stats(self.table.snapshot().entries, RANGE)
        last = max(ranges, default=0)
        starts = range(0, last + 1, RECONCILE_SLICE)
        slices = [range(k, k + RECONCILE_SLICE) for k in starts]
        slices[-1] = range(slices[-1].start, _OPEN)
        return slices

    def _reconcile_loop(self) -> None:
        """Every ``reconcile_interval`` one whole pass, spread evenly over the interval in
        slices of ``RECONCILE_SLICE`` ranges: the store checksums a few hundred thousand ids
        at a time (an index range scan) instead of every row at once, so a co-located
        PostgreSQL never takes a core for long (a whole 1M check took one core for
        0.25 to 1.3 s and tripled the match p99 beside it)."""
        assert self.reconcile_interval
        while True:
            slices = self.reconcile_slices()
            pause = self.reconcile_interval / len(slices)
            complete = True
            for i, keys in enumerate(slices):
                if self._stop.wait(pause):
                    return
                try:
                    complete &= self._reconcile(keys, groups=i == len(slices) - 1) is not None
                except (sa.exc.SQLAlchemyError, psycopg.Error) as e:
                    log.warning("reconciliation failed (%s); will retry", e)
                    complete = False
            if complete:
                self.reconcile_passes += 1


def _with_changes(entries: Catalog, changes: Sequence[Change]) -> Catalog:
    """``entries`` with ``changes`` applied as ``RoutingTable.apply`` applies them (an add
    already present or a remove of an absent id changes nothing); the persistent catalog
    returns a new one and ``entries`` stays as it was."""
    for change in changes:
        sub_id = change.subscription_id
        if change.op == "add":
            if sub_id not in entries:
                entry = Entry(change.tenant, change.subscriber, change.dialect, change.pattern)
                entries = entries.with_add(sub_id, entry)
        elif sub_id in entries:
            entries = entries.with_remove(sub_id)
    return entries


def _members_after(
    members: Sequence[tuple[int, str, str, str | None]], changes: Sequence[Change]
) -> list[tuple[int, str, str, str | None]]:
    """The stored group memberships ``members`` with ``changes`` (later ones) applied."""
    by_id = {member[0]: member for member in members}
    for change in changes:
        sub_id = change.subscription_id
        if change.op == "add" and change.group is not None:
            by_id[sub_id] = (sub_id, change.tenant, change.group, change.group_policy)
        elif change.op == "remove":
            by_id.pop(sub_id, None)
    return [by_id[sub_id] for sub_id in sorted(by_id)]
