"""Group commit: writes that arrive together share one transaction and one flush.

Every write to the store is serialized (``store.db``: the change log's order must be the
order followers apply), so a write's cost is its own statements plus a commit (a WAL
flush) and, on PostgreSQL, a round of the cluster-wide writer lock. Writes queued behind
a running transaction are taken together by the next leader (the first writer in the
queue, as in LevelDB's and RocksDB's write groups): one transaction, one flush, one
after-commit catch-up for the whole group, and each caller still gets its own result.

A write is a ``Job`` in two phases, so that a refusal never rolls back its neighbours:

* ``job(session)`` only reads and checks. It returns the write phase as a callable, or
  raises its refusal: that exception is the caller's outcome, nothing was written, and
  the group goes on.
* the write phase writes and returns the caller's result. It should not refuse; if it (or
  any statement) raises, the group's transaction is rolled back and every job of the group
  runs again alone, in its own transaction, so only the one that fails fails.

A failed commit fails every job of its group with the commit's error: whether it was
applied is unknown (the connection may have dropped after the flush), so nothing is run
again behind the caller's back.

Each job runs in its caller's context (``contextvars``), whichever thread leads the group:
what the caller's context carries (a trace's current span: ``app.tracing``) covers the
job's statements, while the transaction's own (PostgreSQL's writer lock, the rows written
once per group before the commit: ``store.pending``; the commit) run in the leader's. A
job run alone runs its whole transaction in its caller's context.

Once a group has committed, the lead passes to the next caller in the queue *before* the
group's after-commit work (applying its changes to this process's routing table) runs, so
that work overlaps the next group's statements; the group's callers are answered after it,
so a caller still finds its own write in the routing table (``Database.transaction``
keeps the hooks in commit order).

A job may say ahead what it will touch (``Announced``: a create its key, a removal its
id); a transaction holds its jobs' hints (``HINTS``) before the first runs, so the store
can read for all of them at once and write their rows in one statement each
(``store.deferred``), which it does before the commit (``Transaction.flush``) so that a
failing statement still fails the group, not the commit. A job run alone holds its own
hint too (on PostgreSQL its read ahead also reads its tenant's count).

A caller on an event loop (``run_async``) waits without a thread of its own: its write is
queued like any other, and a group that holds it is led by one of the group commit's own
threads (``LEADERS``), which resolves the caller's future once the group is applied. A
thread per waiting write cost every write a hand-off to the thread pool and back and a
wake-up of its thread: as much CPU as the write's statements.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, Generic, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.orm import Session

T = TypeVar("T")
#: The read-and-check phase of a write; returns the write phase.
Job = Callable[[Session], Callable[[], T]]
#: Jobs one transaction takes at most (a bulk job counts as one: its items are bounded by
#: the batch limit).
MAX_GROUP: Final = 256
#: Threads that lead groups of writes whose callers wait on an event loop: one leads while
#: the one before applies its group to the routing table.
LEADERS: Final = 2
#: Where a transaction holds its jobs' hints (``Announced``), in queue order.
HINTS: Final = "topicstore.hints"


class Transaction(Protocol):
    """What ``begin`` yields (``store.db.Committed``): the session, and once it has
    committed, ``apply()`` to run its after-commit hooks."""

    @property
    def session(self) -> Session: ...

    def apply(self) -> None: ...

    def flush(self) -> None:
        """Write what the transaction's statements left for its commit."""


class Announced(Generic[T]):
    """A job and what it says ahead it will touch (``hint``: see the module docstring)."""

    __slots__ = ("hint", "job")

    def __init__(self, job: Job[T], hint: object) -> None:
        self.job = job
        self.hint = hint

    def __call__(self, session: Session) -> Callable[[], T]:
        return self.job(session)


class _Pending(Generic[T]):
    """One caller's job, its outcome, and how its caller learns of it: the event its
    thread waits on, or (``done``) a call that resolves its future on its event loop."""

    __slots__ = ("context", "done", "error", "job", "lead", "result", "wake")

    def __init__(self, job: Job[T], done: Callable[[], object] | None = None) -> None:
        self.job = job
        #: The caller's context, which the job runs in (see the module docstring).
        self.context = contextvars.copy_context()
        self.result: T | None = None
        self.error: BaseException | None = None
        #: Set (before ``wake``) when this caller's thread is to lead the next group.
        self.lead = False
        self.wake = threading.Event()
        self.done = done

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


class _GroupAbortError(Exception):
    """A write phase or a statement failed: roll the group back, run each job alone."""


class GroupCommit:
    """Runs jobs in shared transactions opened by ``begin`` (``Database.transaction``:
    it serializes writers and commits; the after-commit hooks run once per group)."""

    def __init__(
        self,
        begin: Callable[[], contextlib.AbstractContextManager[Transaction]],
        max_group: int = MAX_GROUP,
    ) -> None:
        self._begin = begin
        self._max_group = max_group
        self._lock = threading.Lock()
        self._queue: deque[_Pending[Any]] = deque()
        self._leading = False
        #: Transactions committed and jobs they held (``/metrics``, the benchmarks).
        self.groups = 0
        self.jobs = 0
        #: Where groups are led for callers on an event loop (made at the first).
        self._leaders: ThreadPoolExecutor | None = None

    def run(self, job: Job[T]) -> T:
        """Run ``job`` in the next group; its result, or its refusal raised here."""
        pending: _Pending[T] = _Pending(job)
        with self._lock:
            self._queue.append(pending)
            if not self._leading:
                self._leading = pending.lead = True
        if not pending.lead:
            pending.wake.wait()
        if pending.lead:
            self._lead()
        return pending.outcome()

    async def run_async(self, job: Job[T]) -> T:
        """``run`` for a caller on an event loop: its result, or its refusal raised here.
        The caller waits on a future, and one of the group commit's threads leads its group
        (see the module docstring)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def done() -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(_resolve, future)

        pending: _Pending[T] = _Pending(job, done)
        with self._lock:
            self._queue.append(pending)
            if not self._leading:
                self._leading = pending.lead = True
                self._hand_lead(pending)
        await future
        return pending.outcome()

    def _hand_lead(self, pending: _Pending[Any]) -> None:
        """Let ``pending`` lead the next group (under ``_lock``): its own thread, or for a
        caller on an event loop one of the leaders."""
        if pending.done is None:
            pending.wake.set()
            return
        if self._leaders is None:
            self._leaders = ThreadPoolExecutor(LEADERS, thread_name_prefix="group-commit")
        self._leaders.submit(self._lead)

    def close(self) -> None:
        """Stop the leaders' threads once their groups are done."""
        if self._leaders is not None:
            self._leaders.shutdown(wait=True)

    def waiting(self) -> int:
        """Jobs queued behind the running group."""
        with self._lock:
            return len(self._queue)

    def _lead(self) -> None:
        """Run one group, then hand the lead to the first caller still queued (so no
        thread serves others for long after its own write is done)."""
        with self._lock:
            group = [self._queue.popleft() for _ in range(min(len(self._queue), self._max_group))]
        committed: list[Transaction] = []
        try:
            self._commit(group, committed)
        finally:
            with self._lock:
                if self._queue:
                    following = self._queue[0]
                    following.lead = True
                    self._hand_lead(following)
                else:
                    self._leading = False
            try:
                for transaction in committed:
                    transaction.apply()
            finally:
                for pending in group:
                    pending.lead = False
                    if pending.done is None:
                        pending.wake.set()
                    else:
                        pending.done()

    def _commit(self, group: list[_Pending[Any]], committed: list[Transaction]) -> None:
        """Run ``group``; each transaction that committed goes to ``committed`` (its hooks
        are yet to run)."""
        if len(group) > 1:
            try:
                with self._begin() as transaction:
                    transaction.session.info[HINTS] = [
                        p.job.hint for p in group if isinstance(p.job, Announced)
                    ]
                    for pending in group:
                        _run(pending, transaction.session, alone=False)
                    try:
                        transaction.flush()
                    except sa.exc.SQLAlchemyError:
                        raise _GroupAbortError from None
            except _GroupAbortError:
                pass  # rolled back: every job again, alone
            except BaseException as e:  # the commit (or the lock) failed: every job with it
                for pending in group:
                    pending.result, pending.error = None, e
                return
            else:
                committed.append(transaction)
                self._count(len(group))
                return
            for pending in group:
                pending.result = pending.error = None
        for pending in group:
            pending.context.run(self._commit_alone, pending, committed)

    def _commit_alone(self, pending: _Pending[Any], committed: list[Transaction]) -> None:
        """Run ``pending`` in a transaction of its own, all of it in the caller's context
        (its statements, the transaction's own ones too, are the caller's: a trace shows
        them under its request)."""
        try:
            with self._begin() as transaction:
                if isinstance(pending.job, Announced):
                    transaction.session.info[HINTS] = [pending.job.hint]
                _run(pending, transaction.session, alone=True)
        except BaseException as e:
            pending.result, pending.error = None, e
        else:
            committed.append(transaction)
            if pending.error is None:
                self._count(1)

    def _count(self, jobs: int) -> None:
        self.groups += 1
        self.jobs += jobs


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():  # its caller may have been cancelled meanwhile
        future.set_result(None)


def _run(pending: _Pending[Any], session: Session, *, alone: bool) -> None:
    """One job in ``session``. A refusal from the read phase is the job's outcome (nothing
    was written); in a group, a failed statement or write phase fails the group. Alone,
    every exception is the job's own and propagates, so the transaction rolls back (and
    the job runs in the caller's context already: ``_commit_alone``)."""
    run = _call if alone else pending.context.run
    try:
        write = run(pending.job, session)
    except sa.exc.SQLAlchemyError:
        if not alone:
            raise _GroupAbortError from None
        raise
    except Exception as e:  # the job's refusal: nothing written, the group goes on
        pending.error = e
        return
    try:
        pending.result = run(write)
    except Exception:
        if not alone:
            raise _GroupAbortError from None
        raise


def _call(function: Callable[..., T], *args: Any) -> T:
    return function(*args)
