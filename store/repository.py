"""The subscription repository: builds statements on a session it is given, never commits.

Callers write inside ``Database.write()`` (serialized writers, so change_log sequence
numbers commit in order) and commit there. Every add and remove also appends a change_log
row in the same transaction and, on PostgreSQL, rings the ``topicstore_changes`` doorbell
(delivered only if the transaction commits).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, cast

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import aggregate_order_by

from store import deferred, pending, pg_write
from store.models import ChangeLog, Subscription
from store.records import NewSubscription, StoredSubscription
from store.routing_reads import CHANGE_COLUMNS
from store.selection import Selection
from store.staging import (
    NEW_COLUMNS,
    QUOTE,
    SAME_KEY,
    insert_new,
    stage,
    staged_rows,
    unstage,
)
from store.stats import forget
from store.subscription_reads import SubscriptionReads, stored

_SUBSCRIPTION: Final = Subscription.__table__
_TABLE: Final = cast(sa.Table, _SUBSCRIPTION)
_CHANGE_SQL: Final = ", ".join(map(QUOTE, CHANGE_COLUMNS))


#: One subscription's delete, and of one tenant's: built once, so a single delete pays no
#: statement construction (its compiled form is cached by the engine).
_REMOVE: Final = (
    _TABLE.delete().where(_SUBSCRIPTION.c.id == sa.bindparam("id")).returning(*_SUBSCRIPTION.c)
)
_REMOVE_OF_TENANT: Final = _REMOVE.where(_SUBSCRIPTION.c.tenant == sa.bindparam("tenant"))


@dataclass(frozen=True, slots=True)
class AddedMany:
    """What ``add_many`` created: the new ids per tenant (ascending), and each item's
    (id, created) when asked for."""

    created: dict[str, list[int]]
    items: list[tuple[int, bool]] | None

    @property
    def count(self) -> int:
        return sum(map(len, self.created.values()))


def _key(new: NewSubscription) -> tuple[sa.ColumnElement[bool], ...]:
    """``new``'s key (tenant, subscriber, dialect, pattern) as conditions on the table."""
    return (
        _SUBSCRIPTION.c.tenant == new.tenant,
        _SUBSCRIPTION.c.subscriber == new.subscriber,
        _SUBSCRIPTION.c.dialect == new.dialect,
        _SUBSCRIPTION.c.pattern == new.pattern,
    )


def _values(new: NewSubscription) -> dict[str, Any]:
    """Column values of ``new``; criteria pairs as JSON lists."""
    values = {name: getattr(new, name) for name in NEW_COLUMNS}
    if new.criteria is not None:
        values["criteria"] = [list(c) for c in new.criteria]
    return values


class SubscriptionRepository(SubscriptionReads):
    """Reads and writes subscriptions on ``session`` (validated input: see ``validate``);
    the admin reads are ``SubscriptionReads``', the loader's ``RoutingReads``'."""

    # -- writes -------------------------------------------------------------------------

    def add(self, new: NewSubscription) -> tuple[StoredSubscription, bool]:
        """Create ``new``, or return the row of its (tenant, subscriber, dialect, pattern);
        the flag says whether a row was created. In a group that read ahead
        (``store.deferred``) no statement; else one on PostgreSQL
        (``store.pg_write.add_if_absent``), ``find`` then ``insert`` on DuckDB."""
        known, found = deferred.find(self.session, new)
        if known or not self._postgres:
            existing = stored(found) if known and found is not None else None
            if not known:
                existing = self.find(new)
            if existing is not None:
                return existing, False
            return self.insert(new), True
        deferred.flush(self.session)  # a statement through the driver skips its listener
        row = pg_write.add_if_absent(self.session.connection(), _values(new))
        if not row.created:
            return stored(row), False
        self._log_rows("add", [row])
        self._count({new.tenant: 1})
        return stored(row), True

    def find(self, new: NewSubscription) -> StoredSubscription | None:
        """The stored row with ``new``'s key, if any: one index probe, O(log n), or none
        in a group that read ahead (``store.deferred``). DuckDB probes an ART index only
        for a one-column equality: it looks up the pattern's index (``0007``) in a
        materialized CTE (else the other conditions merge into a table scan) and filters
        those rows; a pattern on over 2,048 rows (``index_scan_max_count``) is scanned
        for."""
        known, found = deferred.find(self.session, new)
        if known:
            return None if found is None else stored(found)
        if self._postgres:
            query = sa.select(_SUBSCRIPTION).where(*_key(new))
        else:
            same = (
                sa.select(_SUBSCRIPTION)
                .where(_SUBSCRIPTION.c.pattern == new.pattern)
                .cte("same_pattern")
                .prefix_with("MATERIALIZED")
            )
            query = sa.select(same).where(
                same.c.tenant == new.tenant,
                same.c.subscriber == new.subscriber,
                same.c.dialect == new.dialect,
            )
        row = self._core(query).first()
        return None if row is None else stored(row)

    def insert(self, new: NewSubscription) -> StoredSubscription:
        """Insert ``new``, whose key ``find`` found absent in this transaction (writers are
        serialized, so nothing inserts it in between; the unique constraint would refuse a
        second one). Looking up first keeps a repeated subscription from drawing an id from
        the sequence: an insert that conflicts has drawn one already, and skips it."""
        values = _values(new)
        # In a group, inserted with the group's other rows at commit.
        row = deferred.insert(self.session, values)
        if row is None:
            row = self._core(_TABLE.insert().values(**values).returning(*_SUBSCRIPTION.c)).one()
        self._log_rows("add", [row])
        self._count({new.tenant: 1})
        return stored(row)

    def add_many(self, items: Sequence[NewSubscription], *, ids: bool = True) -> AddedMany:
        """``add_rows`` of ``items`` (validated records), in order."""
        return self.add_rows(staged_rows(items), ids=ids)

    def add_rows(self, rows: pa.Table, *, ids: bool = True) -> AddedMany:
        """Create every row of ``rows`` (a staged batch of validated subscriptions:
        ``store.staging.STAGED``) in one statement; what was created, and (``ids``) each
        row's (id, created), in ``ord`` order.

        Rows are staged first (``store.staging.stage``: COPY on PostgreSQL, the Arrow table
        itself on DuckDB), then one ``INSERT ... SELECT`` of the first of each key that is
        not stored yet: duplicates, in the batch or already stored, resolve to the existing
        id without drawing one from the sequence (a conflicting insert would, and skip it).
        Without ``ids`` no row is joined back to its stored one (an import needs only the
        counts).
        """
        if not rows.num_rows:
            return AddedMany({}, [] if ids else None)
        session = self.session
        before = session.execute(sa.select(sa.func.coalesce(sa.func.max(Subscription.id), 0)))
        max_before = int(before.scalar_one())
        stage(session, rows, postgres=self._postgres)
        try:
            added = self._insert_staged(rows, max_before, ids=ids)
        finally:
            if not self._postgres:  # PostgreSQL's table goes with a failed transaction
                unstage(session, postgres=False)
        if self._postgres:
            unstage(session, postgres=True)
        return added

    def _insert_staged(self, rows: pa.Table, max_before: int, *, ids: bool) -> AddedMany:
        """``add_rows`` once ``rows`` are staged."""
        session = self.session
        insert = insert_new(rows, postgres=self._postgres)
        pending.flush_changes(session)  # the changes before these come first
        created: dict[str, list[int]] = {}
        if self._postgres:
            # One statement: the change rows are written from the inserted ones as they
            # come back, not read again from the table; the new ids come back as one array
            # per tenant, not a row each.
            statement = sa.text(
                f"WITH added AS ({insert} RETURNING id, {_CHANGE_SQL}), "
                f"logged AS (INSERT INTO change_log (op, subscription_id, {_CHANGE_SQL}) "
                f"SELECT 'add', id, {_CHANGE_SQL} FROM added ORDER BY id) "
                "SELECT tenant, array_agg(id ORDER BY id) FROM added GROUP BY tenant"
            )
            created.update((tenant, made) for tenant, made in session.execute(statement))
        else:
            for sub_id, tenant in session.execute(sa.text(f"{insert} RETURNING id, tenant")):
                created.setdefault(tenant, []).append(sub_id)
            for made in created.values():
                made.sort()
            # Writers are serialized and ids come from a sequence: the new rows are
            # exactly those above the previous maximum.
            self._log("add", sa.select(Subscription).where(Subscription.id > max_before))
        inserted = sum(map(len, created.values()))
        self._count({tenant: len(made) for tenant, made in created.items()})
        per_item = self._item_ids(rows.num_rows, max_before, inserted) if ids else None
        return AddedMany(created, per_item)

    def _item_ids(self, count: int, max_before: int, inserted: int) -> list[tuple[int, bool]]:
        """Each staged item's (id, created), in order. Usually every item is new, and the
        join need only read the rows just inserted (an id range: zone maps on DuckDB, the
        primary key on PostgreSQL), not the whole table (which made a 1M-row import
        quadratic); otherwise the whole table is joined."""
        joined = f"SELECT st.ord, s.id FROM staging st JOIN subscription s ON {SAME_KEY}"
        if inserted == count:
            rows = self.session.execute(
                sa.text(f"{joined} WHERE s.id > :max_before ORDER BY st.ord"),
                {"max_before": max_before},
            ).all()
        else:
            rows = self.session.execute(sa.text(f"{joined} ORDER BY st.ord")).all()
        result: list[tuple[int, bool]] = []
        first_seen: set[int] = set()
        for _, sub_id in rows:
            result.append((sub_id, sub_id > max_before and sub_id not in first_seen))
            first_seen.add(sub_id)
        return result

    def remove(self, sub_id: int, tenant: str | None = None) -> StoredSubscription | None:
        """Delete subscription ``sub_id`` (of ``tenant``, when given); the row it was, or
        None if absent. The delete returns the row, which the change log then records (at
        commit, with the transaction's other changes)."""
        # In a group, the row as read ahead, deleted with the group's others.
        known, row = deferred.row_of(self.session, sub_id)
        if known:
            if row is None or (tenant is not None and row.tenant != tenant):
                return None
            deferred.delete(self.session, row)
        elif tenant is None:
            row = self.session.connection().execute(_REMOVE, {"id": sub_id}).first()
        else:
            values = {"id": sub_id, "tenant": tenant}
            row = self.session.connection().execute(_REMOVE_OF_TENANT, values).first()
        if row is None:
            return None
        pending.forget(self.session, [sub_id])
        self._log_rows("remove", [row])
        self._count({row.tenant: -1})
        return stored(row)

    def remove_selection(
        self, selection: Selection, limit: int | None = None
    ) -> tuple[dict[str, list[int]], bool]:
        """Delete what ``selection`` selects, at most ``limit`` rows (the lowest ids; None:
        all); the ids removed per tenant, and whether the selection holds more."""
        where = selection.where()
        if limit is None:
            return self._remove_where(*where), False
        first = sa.select(Subscription.id).where(*where).order_by(Subscription.id).limit(limit)
        removed = self._remove_where(Subscription.id.in_(first.scalar_subquery()))
        if sum(map(len, removed.values())) < limit:
            return removed, False
        more = self.session.execute(sa.select(sa.exists().where(*where))).scalar()
        return removed, bool(more)

    def _remove_where(self, *where: sa.ColumnElement[bool]) -> dict[str, list[int]]:
        """Delete what ``where`` selects, with a change row for each; the ids removed per
        tenant, ascending. On PostgreSQL one statement: the change rows are written from
        the deleted ones as they come back, and the ids come back as one array per tenant
        (no row per subscription travels to Python); on DuckDB the change rows are copied
        first, then the rows go."""
        removed_rows = _TABLE.delete().where(*where)
        removed: dict[str, list[int]] = {}
        if self._postgres:
            pending.flush_changes(self.session)  # the changes before these come first
            gone = removed_rows.returning(
                _TABLE.c.id, *(_TABLE.c[name] for name in CHANGE_COLUMNS)
            ).cte("gone")
            # In the order the rows are deleted (no sort: a mass removal's rows, wide with
            # their patterns, spilled a sort to disk, and its cost estimate had PostgreSQL
            # compile the statement with JIT; together some 0.2 CPU s per 100,000 rows).
            logged = sa.insert(ChangeLog).from_select(
                ["op", "subscription_id", *CHANGE_COLUMNS],
                sa.select(
                    sa.literal("remove"), gone.c.id, *(gone.c[name] for name in CHANGE_COLUMNS)
                ),
            )
            ids = sa.func.array_agg(aggregate_order_by(gone.c.id, gone.c.id))
            query = (
                sa.select(gone.c.tenant, ids).group_by(gone.c.tenant).add_cte(logged.cte("logged"))
            )
            removed.update((str(t), list(made)) for t, made in map(tuple, self._core(query)))
            for made in removed.values():
                pending.forget(self.session, made)
        else:
            self._log("remove", sa.select(Subscription).where(*where))
            forget(self.session, sa.select(Subscription.id).where(*where))
            returned = self._core(removed_rows.returning(_TABLE.c.id, _TABLE.c.tenant))
            for sub_id, tenant in map(tuple, returned):
                removed.setdefault(str(tenant), []).append(int(sub_id))
            for made in removed.values():
                made.sort()
        self._count({tenant: -len(made) for tenant, made in removed.items()})
        return removed

    def usage(self, tenant: str) -> int:
        """How many subscriptions ``tenant`` holds: one row of ``tenant_usage``, which
        every write here keeps equal to the count (``store.pending``), plus this
        transaction's writes."""
        return pending.usage(self.session, tenant)

    def _count(self, deltas: dict[str, int]) -> None:
        """Move each tenant's ``tenant_usage`` row by its delta at commit (exact at every
        commit: writers are serialized)."""
        pending.move(self.session, deltas)

    def _log_rows(self, op: str, rows: Sequence[Any]) -> None:
        """A change for each of ``rows`` (holding the change columns, in id order), from
        the values at hand, inserted at commit with the transaction's other changes."""
        waiting = pending.pending(self.session)
        waiting.changes.extend(
            {
                "op": op,
                "subscription_id": row.id,
                **{name: getattr(row, name) for name in CHANGE_COLUMNS},
            }
            for row in rows
        )
        waiting.ring = True

    def _log(self, op: str, rows: sa.Select[Any]) -> None:
        """Append a change for each row ``rows`` selects, in id order, and ring the bell."""
        pending.flush_changes(self.session)  # the changes before these come first
        source = rows.subquery()
        selected = sa.select(
            sa.literal(op), source.c.id, *(source.c[name] for name in CHANGE_COLUMNS)
        ).order_by(source.c.id)
        self._core(
            sa.insert(ChangeLog).from_select(["op", "subscription_id", *CHANGE_COLUMNS], selected)
        )

    def remove_expired(self, now: datetime, limit: int) -> dict[str, list[int]]:
        """Delete at most ``limit`` subscriptions expired at ``now`` (the earliest first),
        with a change row each; their ids per tenant (ascending). Idempotent: rows another
        writer deleted first are simply not found (writers are serialized)."""
        due = (
            sa.select(Subscription.id)
            .where(Subscription.expires_at <= now)
            .order_by(Subscription.expires_at, Subscription.id)
            .limit(limit)
        )
        if self.session.execute(due.limit(1)).first() is None:
            return {}
        # The ids as a subquery, not a list: DuckDB would bind them one by one in each of
        # its three statements (``store.duckdb_write`` says what that costs).
        return self._remove_where(Subscription.id.in_(due.scalar_subquery()))

    def remove_expired_keys(
        self, keys: Iterable[tuple[str, str, str, str]], now: datetime
    ) -> dict[str, list[int]]:
        """Delete the rows expired at ``now`` that hold the key of one of ``items`` (about
        to be created again: the expired row would otherwise answer for them, and never
        match); their ids per tenant. First the earliest expiry stored (PostgreSQL reads it
        off the index's end, DuckDB from one column): usually none has passed, and that is
        all; else the expired rows, no more than the sweep has yet to delete."""
        earliest = self.session.execute(sa.select(sa.func.min(Subscription.expires_at))).scalar()
        if earliest is None or earliest > now:
            return {}
        rows = self.session.execute(
            sa.select(
                Subscription.id,
                Subscription.tenant,
                Subscription.subscriber,
                Subscription.dialect,
                Subscription.pattern,
            ).where(Subscription.expires_at <= now)
        ).all()
        if not rows:
            return {}
        wanted = set(keys)  # (tenant, subscriber, dialect, pattern)
        found = [int(r[0]) for r in rows if tuple(r[1:]) in wanted]
        if not found:
            return {}
        return self._remove_where(Subscription.id.in_(found))

    def set_expiry(
        self, sub_id: int, expires_at: datetime | None, tenant: str | None = None
    ) -> StoredSubscription | None:
        """Set (or, None, clear) the expiry of subscription ``sub_id`` (of ``tenant``, when
        given); the row as it is now, or None if absent. Logged as an ``add`` of the row:
        a loader that holds the id takes only its new expiry from it, one that does not
        (its old expiry passed there) indexes it again."""
        where = [_SUBSCRIPTION.c.id == sub_id]
        if tenant is not None:
            where.append(_SUBSCRIPTION.c.tenant == tenant)
        statement = (
            _TABLE.update().where(*where).values(expires_at=expires_at).returning(*_SUBSCRIPTION.c)
        )
        row = self._core(statement).first()
        if row is None:
            return None
        self._log_rows("add", [row])
        return stored(row)
