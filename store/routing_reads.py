"""The routing table's reads of the store: what a loader builds from and follows (the
startup snapshot, the change log, reconciliation's range checks). Read-only, on a session it
is given; ``SubscriptionRepository`` adds the writes and the admin reads on top."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Final

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.orm import Session

from matcher.groups import Policy, check_policy
from store.columns import read_columns
from store.models import ChangeLog, Subscription
from store.records import Change, Removals, criteria_tuple
from store.staging import NEW_COLUMNS

#: Columns copied from a subscription into its change_log rows.
CHANGE_COLUMNS: Final = tuple(name for name in NEW_COLUMNS if name in ChangeLog.__table__.columns)


_LOG: Final = ChangeLog.__table__
_IS_ADD: Final = _LOG.c.op == "add"
#: ``changes_in``'s statement, built once: built per call (ten ``CASE`` columns) it cost
#: more CPU than running it, and a follower runs it at every doorbell.
_CHANGES_IN: Final = (
    sa.select(
        _LOG.c.seq,
        _IS_ADD,
        _LOG.c.subscription_id,
        *(sa.case((_IS_ADD, _LOG.c[n])) for n in CHANGE_COLUMNS),
    )
    .where(_LOG.c.seq > sa.bindparam("after"), _LOG.c.seq <= sa.bindparam("upto"))
    .order_by(_LOG.c.seq)
)
_LAST_SEQ: Final = sa.select(sa.func.max(_LOG.c.seq))


def live(now: datetime) -> sa.ColumnElement[bool]:
    """Not expired at ``now`` (``store.expiry``)."""
    return sa.or_(Subscription.expires_at.is_(None), Subscription.expires_at > now)


class RoutingReads:
    """The loader's reads of subscriptions and the change log on ``session``."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._postgres = session.get_bind().dialect.name == "postgresql"

    def stream_all(self, batch_size: int = 10_000) -> Iterator[Change]:
        """Every subscription, as ``add`` changes (seq 0), streamed in batches (a server-side
        cursor on PostgreSQL), for building matchers without holding every row at once.
        Core, not ORM: no identity map or entity rows for a million subscriptions."""
        table = Subscription.__table__
        query = sa.select(table.c.id, *(table.c[n] for n in CHANGE_COLUMNS)).order_by(table.c.id)
        result = (
            self.session.connection()
            .execution_options(stream_results=True, yield_per=batch_size)
            .execute(query)
        )
        for sub_id, tenant, subscriber, pattern, dialect, kind, criteria, mode, *grouped in result:
            yield Change(
                0,
                "add",
                sub_id,
                tenant,
                subscriber,
                pattern,
                dialect,
                kind,
                None if criteria is None else criteria_tuple(criteria),
                mode,
                *grouped,
            )

    def columns(self, now: datetime) -> pa.Table:
        """Every subscription live at ``now``: id, tenant, subscriber, dialect and pattern
        as one Arrow table in id order, without a Python object per row
        (``store.columns``), on the session's transaction: the same snapshot as its other
        reads."""
        raw = self.session.connection().connection.driver_connection
        return read_columns(raw, self._postgres, now)

    def expiring(self, now: datetime) -> list[tuple[int, datetime]]:
        """(id, expires_at) of every subscription that expires after ``now`` (those
        ``columns(now)`` holds that will expire): the loader's expiry index. An index
        range scan of ``ix_subscription_expires_at``."""
        query = sa.select(Subscription.id, Subscription.expires_at).where(
            Subscription.expires_at > now
        )
        return [(int(i), at) for i, at in self.session.execute(query) if at is not None]

    def range_stats(
        self, bucket: int, low: int = 0, high: int | None = None, now: datetime | None = None
    ) -> dict[int, tuple[int, int, int]]:
        """Per id range (``id // bucket``) of the ids in ``[low, high)`` (``high`` None: no
        upper bound): rows, sum of ids, and the summed lengths of tenant, subscriber,
        dialect and pattern; ``loader.reconcile_figures.range_stats`` computes the same in
        memory, and only ranges that differ are read row by row. A bounded window is an
        index range scan, so a check can be spread over several small queries."""
        # (id - id % b) / b: exact on both backends (DuckDB's '/' divides as a double).
        key = sa.cast((Subscription.id - Subscription.id % bucket) / bucket, sa.BigInteger)
        lengths = (
            sa.func.length(Subscription.tenant)
            + sa.func.length(Subscription.subscriber)
            + sa.func.length(Subscription.dialect)
            + sa.func.length(Subscription.pattern)
        )
        query = (
            sa.select(key, sa.func.count(), sa.func.sum(Subscription.id), sa.func.sum(lengths))
            .where(Subscription.id >= low)
            .group_by(key)
        )
        if high is not None:
            query = query.where(Subscription.id < high)
        if now is not None:
            query = query.where(live(now))
        return {
            int(k): (int(n), int(ids), int(total))
            for k, n, ids, total in self.session.execute(query)
        }

    def between(self, low: int, high: int, now: datetime | None = None) -> list[Change]:
        """Subscriptions with ``low <= id < high`` (live at ``now``, when given), as
        ``add`` changes (seq 0)."""
        table = Subscription.__table__
        query = (
            sa.select(table.c.id, *(table.c[n] for n in CHANGE_COLUMNS))
            .where(table.c.id >= low, table.c.id < high)
            .order_by(table.c.id)
        )
        if now is not None:
            query = query.where(live(now))
        return [
            Change(0, "add", sub_id, t, s, p, d, k, criteria_tuple(c), m, *grouped)
            for sub_id, t, s, p, d, k, c, m, *grouped in self.session.execute(query)
        ]

    def members(self) -> list[tuple[int, str, str, Policy]]:
        """(id, tenant, group, policy) of every subscription in a group, in id order: what
        the loader's group index needs beside ``columns()`` (grouped rows are few; the
        (tenant, group) index serves it)."""
        query = (
            sa.select(
                Subscription.id, Subscription.tenant, Subscription.group, Subscription.group_policy
            )
            .where(Subscription.group.is_not(None))
            .order_by(Subscription.id)
        )
        return [
            (int(sub_id), tenant, group, check_policy(policy))
            for sub_id, tenant, group, policy in self.session.execute(query)
            if group is not None  # the policy is set with it (store.groups)
        ]

    def changes_since(self, seq: int, limit: int = 10_000, upto: int | None = None) -> list[Change]:
        """Changes with a sequence number above ``seq`` (and at most ``upto``), oldest
        first. Plain rows fetched at once, not ORM objects nor one driver fetch per row: a
        loader reads a mass removal's 100,000 changes through here, and each of those cost
        about as much as the rest of the read."""
        table = ChangeLog.__table__
        query = sa.select(
            table.c.seq, table.c.op, table.c.subscription_id, *(table.c[n] for n in CHANGE_COLUMNS)
        ).where(table.c.seq > seq)
        if upto is not None:
            query = query.where(table.c.seq <= upto)
        rows = self.session.execute(query.order_by(table.c.seq).limit(limit)).all()
        return [
            Change(seq_, op, sub_id, t, s, p, d, k, criteria_tuple(c), m, *grouped)
            for seq_, op, sub_id, t, s, p, d, k, c, m, *grouped in rows
        ]

    def changes_in(self, after: int, upto: int) -> list[Change | Removals]:
        """The changes with ``after < seq <= upto``, oldest first, for a loader: each run of
        consecutive removes as one ``Removals`` (their seqs and ids only), the adds as
        ``Change``. One statement, so one snapshot: read in two, a remove committed between
        them could be missed while a later add was read, and the loader would step past it.
        A remove's other columns come back NULL: a mass removal's changes cost two ints
        each to read, not a row of every column and an object."""
        rows = self.session.execute(_CHANGES_IN, {"after": after, "upto": upto}).all()
        out: list[Change | Removals] = []
        seqs: list[int] = []
        ids: list[int] = []
        for seq_, added, sub_id, t, s, p, d, k, c, m, *grouped in rows:
            if not added:
                seqs.append(seq_)
                ids.append(sub_id)
                continue
            if ids:
                out.append(Removals(seqs, ids))
                seqs, ids = [], []
            out.append(Change(seq_, "add", sub_id, t, s, p, d, k, criteria_tuple(c), m, *grouped))
        if ids:
            out.append(Removals(seqs, ids))
        return out

    def last_seq(self) -> int:
        """The newest change's sequence number (0 when there is none)."""
        seq = self.session.execute(_LAST_SEQ).scalar()
        return int(seq or 0)

    def change_lag(self, applied: int) -> tuple[int, float]:
        """The newest change's seq and the age in seconds, by the database's clock, of the
        oldest change after ``applied`` (0.0 when there is none). The age counts from the
        change's ``created_at``, its transaction's start: one statement, two index probes."""
        oldest = (
            sa.select(ChangeLog.created_at)
            .where(ChangeLog.seq > applied)
            .order_by(ChangeLog.seq)
            .limit(1)
            .scalar_subquery()
        )
        newest, created_at, now = self.session.execute(
            sa.select(sa.func.max(ChangeLog.seq), oldest, sa.func.now())
        ).one()
        if created_at is None:
            return int(newest or 0), 0.0
        return int(newest or 0), max(0.0, (now - created_at).total_seconds())
