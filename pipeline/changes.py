"""Incremental shipping of a store's subscriptions to a stream's executors: a base plan,
broadcast once, and the changes since it, broadcast small.

The driver keeps a ``Tracker``: the base (a full read of the store at change seq S0, built
into a ``SubscriptionPlan``) and the changes applied since, as an append-only list of
operations on plan positions (``Add``, ``Remove``). Before a batch it reads only the store's
change log after the last seq it applied (``io.store_changes``, the store's own
``RoutingReads.changes_since``) and appends what those changes do:

* a change of an id the plan holds removes its position (the base's, or an earlier
  change's); an ``add`` then adds the id at a new position, after every position used so
  far: positions are never reused within a base, so an operation never has to be undone;
* ``add`` rows are validated together by ``build_plan``, with the same rules as a full
  read, so the rows a plan refuses (rejects) are the same too;
* a subscription whose ``expires_at`` has passed is removed at the first batch after it
  (a full read leaves it out the same way), change or not.

Executors (``pipeline.executor.router_for``) keep their router for the base and apply the
operations they have not applied yet: the list only grows, so a router that applied its
first ``k`` applies ``ops[k:]``; one that applied more (another run of the same base) or
none rebuilds from the base and the whole list.

Cost per change: the driver reads it once (one indexed range of the change log; a batch
with no change costs one query that returns no row); each executor deserializes the
change set, O(operations since the base), once per new change set, and applies only the
new operations, O(1) engine work each. The re-base rule bounds the change set: when the
operations since the base would pass ``rebase_bound`` (a tenth of the base, at least
``REBASE_MIN``), the stream reads and broadcasts the whole store again instead, so a change
set is never more than about a tenth of a full one, and a re-base's O(subscriptions) cost is
paid at most once per ``rebase_bound`` operations.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from matcher import HeaderLimits, Limits
from pipeline.subscriptions import SubscriptionPlan, SubscriptionReject, build_plan
from store import HEADERS_DIALECT
from store.records import Change, Criteria, Mode

#: The fewest operations since the base that trigger a re-base (small stores re-read in
#: milliseconds anyway; this keeps them from re-basing at every other change).
REBASE_MIN: Final = 1_000
#: A re-base once the operations since the base pass ``1 / REBASE_DIVISOR`` of it.
REBASE_DIVISOR: Final = 10


class Add(NamedTuple):
    """A subscription at a new position (``dialect`` None: a headers subscription)."""

    position: int
    sub_id: int
    subscriber: str
    tenant: str
    dialect: str | None
    pattern: str
    criteria: Criteria | None
    mode: Mode | None
    group: str | None


class Remove(NamedTuple):
    """A position that no longer matches, and the engine that holds it (``dialect`` None:
    the tenant's headers engine)."""

    position: int
    tenant: str
    dialect: str | None


Op = Add | Remove


@dataclass(frozen=True, slots=True)
class PlanChanges:
    """What a batch routes to beyond its base plan: every operation since the base, in
    order, as of change seq ``seq``; ``net``: how many subscriptions they add (or remove,
    below zero)."""

    base_id: str
    seq: int
    ops: tuple[Op, ...]
    net: int


def rebase_bound(base: int, minimum: int = REBASE_MIN) -> int:
    """The most operations a change set holds before the stream re-bases."""
    return max(minimum, base // REBASE_DIVISOR)


def _key(tenant: str, dialect: str, kind: str) -> tuple[str, str | None]:
    return tenant, None if kind == "headers" or dialect == HEADERS_DIALECT else dialect


def _row(change: Change) -> dict[str, Any]:
    """A change-log row in the export layout ``build_plan`` reads (labels and created_at
    are not in the change log: a reject's ``raw`` lacks them)."""
    criteria = change.criteria
    return {
        "id": change.subscription_id,
        "tenant": change.tenant,
        "subscriber": change.subscriber,
        "pattern": change.pattern,
        "dialect": change.dialect,
        "kind": change.kind,
        "criteria": None if criteria is None else json.dumps([list(c) for c in criteria]),
        "mode": change.mode,
        "group": change.group,
        "group_policy": change.group_policy,
        "expires_at": change.expires_at,
    }


class Tracker:
    """The driver's side: a base plan and the operations since it. Not thread-safe."""

    def __init__(
        self,
        table: pa.Table,
        seq: int,
        *,
        engine: str,
        limits: Limits,
        header_limits: HeaderLimits,
        rebase_min: int = REBASE_MIN,
    ) -> None:
        """``table``: the store's subscriptions at change ``seq`` (``io.store_subscriptions``:
        the export layout, expired rows left out, id order)."""
        self._engine, self._limits, self._header_limits = engine, limits, header_limits
        self.base, rejects = self._plan(table)
        self.seq = seq
        self.bound = rebase_bound(len(self.base), rebase_min)
        # The table is in id order, so the plan's ids are sorted: a position is a bisection.
        self._base_ids = np.asarray(self.base.ids, dtype=np.int64)
        self._base_rejects = {r.subscription_id: r for r in rejects}
        self._gone: set[int] = set()  # base ids whose position or reject no longer holds
        self._added: dict[int, tuple[int, tuple[str, str | None]]] = {}  # id -> position, key
        self._added_rejects: dict[int, SubscriptionReject] = {}
        self._next = len(self.base)
        self.ops: list[Op] = []
        self._net = 0
        # Expiry: the instant of every id that has one, and a heap of (instant, id); a heap
        # entry whose instant is no longer the id's is stale and skipped.
        self._expires: dict[int, datetime] = {}
        self._keys: dict[int, tuple[str, str | None]] = {}  # of the base's expiring ids
        self._heap: list[tuple[datetime, int]] = []
        expiring = table.filter(pc.is_valid(table.column("expires_at")))
        for row in expiring.select(["id", "tenant", "dialect", "kind", "expires_at"]).to_pylist():
            self._expire_at(row["id"], row["expires_at"])
            self._keys[row["id"]] = _key(row["tenant"], row["dialect"], row["kind"])
        self.changes = self._changes()

    def __len__(self) -> int:
        """Subscriptions in the plan with the changes applied."""
        return len(self.base) + self._net

    def room(self) -> int:
        """How many more changes can be read before the change set could pass the bound
        (a change is at least one operation)."""
        return max(0, self.bound - len(self.ops))

    def full(self) -> bool:
        """Whether the operations since the base have passed the bound: time to re-base."""
        return len(self.ops) > self.bound

    def rejects(self) -> list[SubscriptionReject]:
        """The rows the plan refuses, as a full read at the same seq would: the base's not
        changed since, then those of the changes, in id order."""
        kept = [r for i, r in self._base_rejects.items() if i not in self._gone]
        return sorted([*kept, *self._added_rejects.values()], key=_reject_order)

    def advance(self, changes: Sequence[Change], now: datetime) -> bool:
        """Apply ``changes`` (oldest first, after ``seq``) and the expiries due at ``now``;
        whether the plan or its rejects changed (``changes`` is then renewed)."""
        before = (len(self.ops), len(self._added_rejects), len(self._gone))
        adds: dict[int, Change] = {}
        for change in changes:
            self._drop(change.subscription_id, _key(change.tenant, change.dialect, change.kind))
            adds.pop(change.subscription_id, None)
            if change.op == "add":
                adds[change.subscription_id] = change
        if changes:
            self.seq = changes[-1].seq
        self._add(c for c in adds.values() if c.expires_at is None or c.expires_at > now)
        while self._heap and self._heap[0][0] <= now:
            at, sub_id = heapq.heappop(self._heap)
            if self._expires.get(sub_id) == at:
                self._drop(sub_id, None)
        moved = before != (len(self.ops), len(self._added_rejects), len(self._gone))
        if moved or changes:
            self.changes = self._changes()
        return moved or bool(changes)

    def _plan(self, table: pa.Table) -> tuple[SubscriptionPlan, list[SubscriptionReject]]:
        return build_plan(
            table, engine=self._engine, limits=self._limits, header_limits=self._header_limits
        )

    def _changes(self) -> PlanChanges:
        return PlanChanges(self.base.plan_id, self.seq, tuple(self.ops), self._net)

    def _expire_at(self, sub_id: int, at: datetime) -> None:
        self._expires[sub_id] = at
        heapq.heappush(self._heap, (at, sub_id))

    def _base_position(self, sub_id: int) -> int | None:
        ids = self._base_ids
        position = int(np.searchsorted(ids, sub_id))
        return position if position < len(ids) and ids[position] == sub_id else None

    def _drop(self, sub_id: int, key: tuple[str, str | None] | None) -> None:
        """Whatever the plan holds for ``sub_id`` no longer holds (``key``: its engine,
        from its change; None for an expiry, whose key the tracker kept)."""
        self._expires.pop(sub_id, None)
        self._added_rejects.pop(sub_id, None)
        added = self._added.pop(sub_id, None)
        if added is not None:
            self.ops.append(Remove(added[0], *added[1]))
            self._net -= 1
        if sub_id in self._gone:
            return
        position = self._base_position(sub_id)
        if position is not None:
            key = key if key is not None else self._keys[sub_id]
            self.ops.append(Remove(position, *key))
            self._net -= 1
            self._gone.add(sub_id)
        elif sub_id in self._base_rejects:
            self._gone.add(sub_id)

    def _add(self, changes: Iterable[Change]) -> None:
        """Validate ``changes`` (``add``s of ids the plan no longer holds) as a full read
        would, and add the valid ones at new positions."""
        rows = sorted((_row(c) for c in changes), key=lambda row: row["id"])
        if not rows:
            return
        plan, rejects = self._plan(pa.Table.from_pylist(rows))
        for reject in rejects:
            assert reject.subscription_id is not None  # the change log has every id
            self._added_rejects[reject.subscription_id] = reject
        first = self._next
        adds = [
            _added(plan, first, p, tenant, dialect, pattern, None, None)
            for (tenant, dialect), items in plan.topics.items()
            for p, pattern in items
        ]
        adds += [
            _added(plan, first, p, tenant, None, "", criteria, mode)
            for tenant, entries in plan.headers.items()
            for p, criteria, mode in entries
        ]
        adds.sort()
        self.ops.extend(adds)
        self._net += len(adds)
        self._next += len(plan)
        for add in adds:
            self._added[add.sub_id] = (add.position, (add.tenant, add.dialect))
        expiring = {row["id"]: row["expires_at"] for row in rows if row["expires_at"] is not None}
        for sub_id, at in expiring.items():
            if sub_id in self._added or sub_id in self._added_rejects:
                self._expire_at(sub_id, at)


def _added(
    plan: SubscriptionPlan,
    first: int,
    position: int,
    tenant: str,
    dialect: str | None,
    pattern: str,
    criteria: Criteria | None,
    mode: Mode | None,
) -> Add:
    """Position ``position`` of ``plan`` (built from changes) as an ``Add`` after ``first``."""
    grouped = plan.groups.get(position)
    return Add(
        first + position,
        plan.ids[position],
        plan.subscribers[position],
        tenant,
        dialect,
        pattern,
        criteria,
        mode,
        None if grouped is None else grouped[1],
    )


def _reject_order(reject: SubscriptionReject) -> int:
    return reject.subscription_id if reject.subscription_id is not None else -1
