"""Single writes of a group that share one statement: the group's plain creates in one
lookup-and-insert, its removals by id in one delete.

Writers are serialized (``store.db``), so each statement a write sends inside the group's
transaction is a round trip that every write queued behind it waits out, with the Python
around it. A group of four single writes sent four statements of its own besides the
transaction's; here they send two at most, whatever the group's size (PostgreSQL; on
DuckDB, in process, there is no round trip to save and each write runs at once).

A deferred write returns a ``Later``: its result once ``settle`` has run the statements.
The writes of a group are concurrent requests, so any order among them is a valid one;
the statements run the removals first, then the creates, each in its callers' order, and
the change log records exactly that order. Whatever must see the store as the group's
earlier writes left it (a write that is not deferred, a quota check that would refuse)
settles first (``store.group_commit`` does it for the jobs that are not deferred).

The quota stays exact: a deferred create counts as one more row of its tenant from the
moment it is queued (corrected when it finds its key already stored), a deferred removal
counts only once it has removed a row; so a check sees at least the usage the settled
writes would give, and a create refused on that count settles and checks again.
"""

from __future__ import annotations

import contextvars
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from store import pending, pg_write
from store.group_commit import SETTLE, Later
from store.records import NewSubscription, StoredSubscription
from store.repository import SubscriptionRepository, stored_row, values_of

Added = tuple[StoredSubscription, bool]


@dataclass
class _Queue:
    """A transaction's deferred writes (``Session.info[SETTLE]``); calling it runs them.
    Each statement runs in the context of the first write it carries (a trace's current
    span: ``app.tracing``), as a write run alone runs its own."""

    repo: SubscriptionRepository
    adds: list[tuple[NewSubscription, Later[Added]]] = field(default_factory=list)
    removes: list[tuple[int, str | None, Later[StoredSubscription | None]]] = field(
        default_factory=list
    )
    add_context: contextvars.Context | None = None
    remove_context: contextvars.Context | None = None

    def __call__(self) -> None:
        removes, self.removes = self.removes, []
        adds, self.adds = self.adds, []
        if removes and self.remove_context is not None:
            self.remove_context.run(_remove_all, self.repo, removes)
        if adds and self.add_context is not None:
            self.add_context.run(_add_all, self.repo, adds)
        self.add_context = self.remove_context = None


def _queue(repo: SubscriptionRepository) -> _Queue:
    found = repo.session.info.get(SETTLE)
    if found is None:
        found = repo.session.info[SETTLE] = _Queue(repo)
    return found


def deferred(repo: SubscriptionRepository) -> bool:
    """Whether writes on ``repo``'s transaction wait for their group's statement."""
    return repo.is_postgres


def add_later(repo: SubscriptionRepository, new: NewSubscription) -> Later[Added]:
    """``SubscriptionRepository.add`` in the group's one create statement."""
    if not deferred(repo):
        return Later.of(repo.add(new))
    later: Later[Added] = Later()
    queue = _queue(repo)
    if not queue.adds:
        queue.add_context = contextvars.copy_context()
    queue.adds.append((new, later))
    pending.move(repo.session, {new.tenant: 1})  # until it is known not to be new
    return later


def remove_later(
    repo: SubscriptionRepository, sub_id: int, tenant: str | None
) -> Later[StoredSubscription | None]:
    """``SubscriptionRepository.remove`` in the group's one delete statement."""
    if not deferred(repo):
        return Later.of(repo.remove(sub_id, tenant=tenant))
    later: Later[StoredSubscription | None] = Later()
    queue = _queue(repo)
    if not queue.removes:
        queue.remove_context = contextvars.copy_context()
    queue.removes.append((sub_id, tenant, later))
    return later


def waiting(session: Session) -> bool:
    """Whether ``session``'s transaction holds deferred writes."""
    queue = session.info.get(SETTLE)
    return queue is not None and bool(queue.adds or queue.removes)


def settle(session: Session) -> None:
    """Run ``session``'s deferred writes now."""
    queue = session.info.get(SETTLE)
    if queue is not None:
        queue()


def _remove_all(
    repo: SubscriptionRepository,
    removes: list[tuple[int, str | None, Later[StoredSubscription | None]]],
) -> None:
    rows = pg_write.remove_all(repo.session.connection(), [(i, t) for i, t, _ in removes])
    by_id = {row.id: row for row in rows}
    gone: list[Any] = []
    for sub_id, tenant, later in removes:
        row = by_id.get(sub_id)
        if row is not None and (tenant is None or row.tenant == tenant):
            del by_id[sub_id]  # a second removal of the same id in the group finds nothing
            gone.append(row)
            later.set(stored_row(row))
        else:
            later.set(None)
    repo.removed(gone)


def _add_all(
    repo: SubscriptionRepository, adds: list[tuple[NewSubscription, Later[Added]]]
) -> None:
    keys = [(new.tenant, new.subscriber, new.dialect, new.pattern) for new, _ in adds]
    first: dict[tuple[str, str, str, str], int] = {}  # a key's first item's position
    for position, key in enumerate(keys):
        first.setdefault(key, position)
    sent = list(first.values())
    rows = pg_write.add_all_if_absent(
        repo.session.connection(), [values_of(adds[p][0]) for p in sent]
    )
    row_at = {sent[row.ord - 1]: row for row in rows}
    # The provisional counts give way to the rows created, logged and counted before any
    # caller's step runs (its own statements come after).
    provisional = Counter(new.tenant for new, _ in adds)
    pending.move(repo.session, {tenant: -n for tenant, n in provisional.items()})
    repo.added([row_at[p] for p in sent if row_at[p].created])
    for position, ((_, later), key) in enumerate(zip(adds, keys, strict=True)):
        row = row_at[first[key]]
        later.set((stored_row(row), position == first[key] and bool(row.created)))


def _drop(session: Session, *_: object) -> None:
    session.info.pop(SETTLE, None)


sa.event.listen(Session, "after_rollback", _drop)
