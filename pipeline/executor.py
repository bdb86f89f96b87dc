"""The executor side of routing: engines built from a broadcast plan, and Arrow batches of
messages routed through them. Plain Python and Arrow, no Spark, so it is tested directly.

Each Python worker builds its engines once per plan (``router_for``; Spark reuses workers
across tasks), lazily per (tenant, dialect), so a worker only builds what its messages need.
A stream's changes since the plan (``pipeline.changes``) are applied to the kept router: only
the operations it has not applied yet, each O(1) on the engines.
The per-message loop does nothing but match; the output columns are gathered vectorized
(Arrow ``take`` over message rows and subscription positions).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain, compress
from typing import Final, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from matcher import EMPTY, HeadersMatcher, Matcher, MatcherError, MatchResult, create_matcher
from matcher.groups import Ring, pick_hash, select, stable_hash
from pipeline.changes import Add, PlanChanges, Remove
from pipeline.codes import DEFAULT_DIALECT, DELIVERY, MAX_OUTPUT_ROWS, REJECTED, UNMATCHED
from pipeline.schema import ROUTED_NAMES
from pipeline.subscriptions import SubscriptionPlan
from store import DEFAULT_TENANT
from store.records import Criteria, Mode

#: A message's matches: an engine's result, or a tuple when headers matches were added.
Hits: TypeAlias = MatchResult | tuple[int, ...]
Rows: TypeAlias = npt.NDArray[np.int64]
_NO_HITS: Final[Hits] = EMPTY
#: Hash rings a router keeps (``Router._choose_members``) before it starts afresh.
RINGS_KEPT: Final = 256


class Router:
    """Routes message batches for one plan and the changes applied since. Not thread-safe:
    one per Python worker."""

    def __init__(self, plan: SubscriptionPlan) -> None:
        self.plan = plan
        self._ids = pa.array(plan.ids, pa.int64())
        self._subscribers = pa.array(plan.subscribers, pa.string())
        self._topic: dict[tuple[str, str], Matcher] = {}
        self._headers: dict[str, HeadersMatcher] = {}
        # The hash rings of the members sets messages matched, kept: messages with the
        # same topic match the same members, and a ring costs O(members x log) to build.
        self._rings: dict[tuple[int, ...], Ring] = {}
        # The changes since the plan (``pipeline.changes``): how many operations are
        # applied, the plan's positions removed, and the positions added after the plan's
        # (their ids and subscribers by position - len(plan), removed ones kept).
        self.applied = 0
        self._removed: set[int] = set()
        self._added_topics: dict[tuple[str, str], dict[int, str]] = {}
        self._added_headers: dict[str, dict[int, tuple[Criteria, Mode]]] = {}
        self._added_ids: list[int] = []
        self._added_subscribers: list[str] = []
        self._added_arrays: tuple[pa.Array, pa.Array] | None = None
        self._groups: Mapping[int, tuple[str, str]] = plan.groups

    def apply(self, changes: PlanChanges) -> None:
        """Apply the operations of ``changes`` not applied yet (``changes`` extends what
        was applied: ``router_for``). O(new operations): engines built already are
        updated in place, the others are built with them when first used."""
        base = len(self.plan)
        for op in changes.ops[self.applied :]:
            if isinstance(op, Add):
                assert op.position == base + len(self._added_ids)
                self._added_ids.append(op.sub_id)
                self._added_subscribers.append(op.subscriber)
                if op.dialect is None:
                    assert op.criteria is not None and op.mode is not None
                    added = self._added_headers.setdefault(op.tenant, {})
                    added[op.position] = (op.criteria, op.mode)
                    headers = self._headers.get(op.tenant)
                    if headers is not None:
                        headers.subscribe(op.position, op.criteria, op.mode)
                else:
                    key = (op.tenant, op.dialect)
                    self._added_topics.setdefault(key, {})[op.position] = op.pattern
                    engine = self._topic.get(key)
                    if engine is not None:
                        engine.subscribe(op.position, op.pattern)
                if op.group is not None:
                    if self._groups is self.plan.groups:
                        self._groups = dict(self._groups)  # the plan's is shared: copy once
                    self._groups[op.position] = (op.tenant, op.group)  # type: ignore[index]
            elif op.position < base:
                self._removed.add(op.position)
                self._unsubscribe(op)
            else:
                if op.dialect is None:
                    self._added_headers[op.tenant].pop(op.position)
                else:
                    self._added_topics[(op.tenant, op.dialect)].pop(op.position)
                self._unsubscribe(op)
        self.applied = len(changes.ops)
        self._added_arrays = None

    def _unsubscribe(self, op: Remove) -> None:
        if op.dialect is None:
            headers = self._headers.get(op.tenant)
            if headers is not None:
                headers.unsubscribe(op.position)
        else:
            engine = self._topic.get((op.tenant, op.dialect))
            if engine is not None:
                engine.unsubscribe(op.position)

    def engine(self, tenant: str, dialect: str) -> Matcher:
        """The engine of (tenant, dialect), built on first use. Tenants without
        subscriptions share one empty engine per dialect, which still validates topics (a
        message is refused by the same rules whoever it is for) and keeps a worker's engines
        bounded by the plan, whatever tenants the messages name."""
        key = (tenant, dialect)
        engine = self._topic.get(key)
        if engine is None:
            plan = self.plan
            items = plan.topics.get(key)
            added = self._added_topics.get(key)
            if items is None and added is None:
                key = ("", dialect)  # tenant names are never empty
                engine = self._topic.get(key)
                if engine is not None:
                    return engine
            engine = create_matcher(plan.engine, dialect, plan.limits)
            removed = self._removed
            engine.subscribe_many(
                (item for item in items if item[0] not in removed)
                if items and removed
                else items or ()
            )
            if added:
                engine.subscribe_many(added.items())
            self._topic[key] = engine
        return engine

    def headers_engine(self, tenant: str) -> HeadersMatcher:
        """The headers engine of ``tenant``; tenants without any share one empty engine."""
        own = tenant in self.plan.headers or tenant in self._added_headers
        key = tenant if own else ""
        engine = self._headers.get(key)
        if engine is None:
            engine = HeadersMatcher(self.plan.header_limits)
            removed = self._removed
            for position, criteria, mode in self.plan.headers.get(key, ()):
                if position not in removed:
                    engine.subscribe(position, criteria, mode)
            for position, (criteria, mode) in self._added_headers.get(key, {}).items():
                engine.subscribe(position, criteria, mode)
            self._headers[key] = engine
        return engine

    def engine_count(self) -> int:
        """Engines built so far (topic and headers)."""
        return len(self._topic) + len(self._headers)

    def route_batch(
        self, batch: pa.RecordBatch, max_rows: int = MAX_OUTPUT_ROWS
    ) -> Iterator[pa.RecordBatch]:
        """Routed rows (``schema.ROUTED``) for a batch in the ``schema.ROUTE_INPUT`` layout;
        each output batch holds at most ``max_rows`` deliveries plus one message's fan-out.

        Rows that arrive with a ``reason`` were rejected upstream and pass through; a topic
        or headers the matcher refuses becomes a reject carrying the matcher's error code.
        """
        counts, positions, rejected, codes, details = self._matches(batch)
        ends = np.cumsum(counts)
        start, n = 0, len(counts)
        while start < n:
            # Cut after the first message whose deliveries reach max_rows.
            done = int(ends[start - 1]) if start else 0
            stop = min(n, start + int(np.searchsorted(ends[start:] - done, max_rows)) + 1)
            yield self._emit(
                batch.slice(start, stop - start),
                counts[start:stop],
                positions[done : int(ends[stop - 1])],
                rejected[start:stop],
                codes[start:stop],
                details[start:stop],
            )
            start = stop

    def _matches(
        self, batch: pa.RecordBatch
    ) -> tuple[Rows, Rows, npt.NDArray[np.bool_], list[str | None], list[str | None]]:
        """Per message its number of deliveries (0 for a rejected one), the plan positions
        of all of them in message order, which messages are rejected, and the reject codes
        and details. One engine, no headers and no groups (the common case): one
        ``Matcher.match_ids`` call (on ``native`` without a Python object per match);
        otherwise ``_match``'s per-message results."""
        n = batch.num_rows
        reasons = batch.column("reason")
        tenants = _values(batch, "tenant", DEFAULT_TENANT)
        dialects = _values(batch, "dialect", DEFAULT_DIALECT)
        plain = (
            reasons.null_count == n
            and len(tenants) == len(dialects) == 1
            and not self._groups
            and ("headers" not in batch.schema.names or batch.column("headers").null_count == n)
        )
        if plain:
            engine = self.engine(tenants[0], dialects[0])
            found, ids, errors = engine.match_ids(batch.column("topic").to_pylist())
            codes: list[str | None] = [None] * n
            details: list[str | None] = [None] * n
            for i, e in errors.items():
                codes[i], details[i] = e.code, e.message
            rejected = np.zeros(n, dtype=np.bool_)
            rejected[list(errors)] = True
            counts = np.frombuffer(found, dtype=np.uint32).astype(np.int64)
            positions = np.frombuffer(ids, dtype=np.uint32).astype(np.int64)
            return counts, positions, rejected, codes, details
        hits, codes, details = self._match(batch, tenants, dialects)
        rejected = np.fromiter((c is not None for c in codes), dtype=np.bool_, count=n)
        counts = np.fromiter(map(len, hits), dtype=np.int64, count=n)
        counts[rejected] = 0
        positions = np.fromiter(
            chain.from_iterable(compress(hits, ~rejected)), dtype=np.int64, count=int(counts.sum())
        )
        return counts, positions, rejected, codes, details

    def _match(
        self, batch: pa.RecordBatch, tenants: list[str], dialects: list[str]
    ) -> tuple[list[Hits], list[str | None], list[str | None]]:
        """A result per message (``tenants``/``dialects``: ``_values`` of the batch)."""
        n = batch.num_rows
        topics = batch.column("topic").to_pylist()
        reasons = batch.column("reason")
        hits: list[Hits] = [_NO_HITS] * n
        codes: list[str | None] = reasons.to_pylist()
        details: list[str | None] = batch.column("detail").to_pylist()
        if reasons.null_count == n and len(tenants) == len(dialects) == 1:
            # The common case: one engine, and a loop with nothing in it but the match.
            match = self.engine(tenants[0], dialects[0]).match
            for i, topic in enumerate(topics):
                try:
                    hits[i] = match(topic)
                except MatcherError as e:
                    codes[i], details[i] = e.code, e.message
        else:
            engine = self.engine
            tenant_of = _per_row(tenants, n)
            dialect_of = _per_row(dialects, n)
            for i, topic in enumerate(topics):
                if codes[i] is None:
                    try:
                        hits[i] = engine(tenant_of[i], dialect_of[i]).match(topic)
                    except MatcherError as e:
                        codes[i], details[i] = e.code, e.message
        if "headers" in batch.schema.names and batch.column("headers").null_count < n:
            self._match_headers(
                batch.column("headers").to_pylist(), _per_row(tenants, n), hits, codes, details
            )
        if self.plan.groups:
            self._choose_members(batch.column("message_id").to_pylist(), hits)
        return hits, codes, details

    def _choose_members(self, message_ids: list[str | None], hits: list[Hits]) -> None:
        """Shared subscriptions: one member per group, by ``hash(message_id)`` whatever the
        group's policy (``matcher.groups.pick_hash`` over subscription ids, a hash that is
        the same in every process), so a rerun writes the same deliveries; the service's
        ``hash`` policy with the message id as key chooses the same member. Only messages
        whose matches include a member pay for it."""
        group_of = self._groups
        ids = self.plan.ids
        base, added_ids = len(ids), self._added_ids
        rings = self._rings

        def id_of(position: int) -> int:
            return ids[position] if position < base else added_ids[position - base]

        for i, found in enumerate(hits):
            if not found or group_of.keys().isdisjoint(found):
                continue
            key = stable_hash(message_ids[i] or "")

            def pick(_: object, members: Sequence[int], key: int = key) -> int:
                positions = tuple(members)
                ring = rings.get(positions)
                if ring is None:
                    if len(rings) >= RINGS_KEPT:
                        rings.clear()
                    ring = rings[positions] = Ring.of(id_of(p) for p in positions)
                chosen = pick_hash([ring], key)[0]
                return next(p for p in members if id_of(p) == chosen)

            hits[i] = tuple(select(found, group_of, pick)[0])

    def _match_headers(
        self,
        headers: list[str | None],
        tenants: Sequence[str],
        hits: list[Hits],
        codes: list[str | None],
        details: list[str | None],
    ) -> None:
        """Add headers matches to the topic matches: a message reaches both kinds."""
        for i, text in enumerate(headers):
            if text is None or codes[i] is not None:
                continue
            try:
                found = self.headers_engine(tenants[i]).match(json.loads(text))
            except MatcherError as e:
                codes[i], details[i] = e.code, e.message
                continue
            if found:
                hits[i] = (*hits[i], *found)

    def _emit(
        self,
        part: pa.RecordBatch,
        counts: Rows,
        positions: Rows,
        rejected: npt.NDArray[np.bool_],
        codes: Sequence[str | None],
        details: Sequence[str | None],
    ) -> pa.RecordBatch:
        """One output batch: the deliveries, then the unmatched, then the rejected rows."""
        rows = np.arange(len(counts), dtype=np.int64)
        first = np.zeros(len(positions), dtype=np.bool_)
        first[(np.cumsum(counts) - counts)[counts > 0]] = True
        unmatched = rows[(counts == 0) & ~rejected]
        rejects = rows[rejected]
        ids, subscribers = self._catalog(positions)
        sections = [
            _section(part, DELIVERY, np.repeat(rows, counts), ids, subscribers, pa.array(first)),
            _section(part, UNMATCHED, unmatched),
            _section(
                part,
                REJECTED,
                rejects,
                reasons=pa.array([codes[j] for j in rejects], pa.string()),
                details=pa.array([details[j] for j in rejects], pa.string()),
            ),
        ]
        columns = [pa.concat_arrays(list(parts)) for parts in zip(*sections, strict=True)]
        return pa.RecordBatch.from_arrays(columns, names=list(ROUTED_NAMES))

    def _catalog(self, positions: Rows) -> tuple[pa.Array, pa.Array]:
        """The subscription ids and subscribers at ``positions``: the plan's arrays, and for
        positions added since, the changes' own (never one array of both: that would copy
        the plan's at every change). O(positions)."""
        base = len(self.plan)
        added = positions >= base
        if not self._added_ids or not added.any():
            by_position = pa.array(positions, pa.int64())
            return self._ids.take(by_position), self._subscribers.take(by_position)
        if self._added_arrays is None:
            self._added_arrays = (
                pa.array(self._added_ids, pa.int64()),
                pa.array(self._added_subscribers, pa.string()),
            )
        in_plan, later = np.flatnonzero(~added), np.flatnonzero(added)
        from_plan = pa.array(positions[in_plan], pa.int64())
        from_changes = pa.array(positions[later] - base, pa.int64())
        # Gathered plan first, then changes; ``order`` puts each back at its position.
        order = np.empty(len(positions), dtype=np.int64)
        order[np.concatenate([in_plan, later])] = np.arange(len(positions))
        back = pa.array(order, pa.int64())
        ids, subscribers = self._added_arrays
        return (
            pa.concat_arrays([self._ids.take(from_plan), ids.take(from_changes)]).take(back),
            pa.concat_arrays(
                [self._subscribers.take(from_plan), subscribers.take(from_changes)]
            ).take(back),
        )


def _section(
    part: pa.RecordBatch,
    output: int,
    rows: Rows,
    subscription_ids: pa.Array | None = None,
    subscribers: pa.Array | None = None,
    first: pa.Array | None = None,
    *,
    reasons: pa.Array | None = None,
    details: pa.Array | None = None,
) -> list[pa.Array]:
    """The ``ROUTED`` columns of one output kind; message columns gathered from ``rows``,
    the columns not given are null."""
    index = pa.array(rows, pa.int64())
    k = len(rows)
    string = pa.string()
    if "tenant" in part.schema.names:
        tenants = part.column("tenant").take(index)
    else:
        tenants = pa.repeat(pa.scalar(DEFAULT_TENANT, string), k)
    return [
        pa.array(np.full(k, output, dtype=np.int8)),
        part.column("message_id").take(index),
        subscription_ids if subscription_ids is not None else pa.nulls(k, pa.int64()),
        subscribers if subscribers is not None else pa.nulls(k, string),
        tenants,
        part.column("topic").take(index),
        part.column("ts").take(index),
        first if first is not None else pa.nulls(k, pa.bool_()),
        reasons if reasons is not None else pa.nulls(k, string),
        details if details is not None else pa.nulls(k, string),
        part.column("raw").take(index) if reasons is not None else pa.nulls(k, string),
    ]


def _values(batch: pa.RecordBatch, name: str, default: str) -> list[str]:
    """The column's one value when that is all it holds (or ``default`` when the input has
    no such column), else every row's value: one value means one engine for the batch."""
    if name not in batch.schema.names:
        return [default]
    column = batch.column(name)
    distinct = column.unique()
    if len(distinct) == 1 and distinct.null_count == 0:
        return [distinct[0].as_py()]
    return [default if v is None else v for v in column.to_pylist()]


def _per_row(values: list[str], n: int) -> Sequence[str]:
    return values * n if len(values) == 1 else values


_ROUTERS: dict[str, Router] = {}


def router_for(plan: SubscriptionPlan, changes: PlanChanges | None = None) -> Router:
    """This worker's router for ``plan`` with ``changes`` applied, built on first use. Only
    the newest plan is kept: a worker serves one job at a time. A router kept from an
    earlier batch applies only the operations it has not (``changes.ops`` only grows
    within a base); one that applied more than ``changes`` holds is built again."""
    router = _ROUTERS.get(plan.plan_id)
    target = 0 if changes is None else len(changes.ops)
    if router is None or router.applied > target:
        _ROUTERS.clear()
        router = _ROUTERS[plan.plan_id] = Router(plan)
    if changes is not None and router.applied < target:
        assert changes.base_id == plan.plan_id
        router.apply(changes)
    return router
