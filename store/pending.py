"""Rows a write transaction appends (change log, audit, tenant counts), written once, just
before it commits.

A group of writes (``store.group_commit``) shares one transaction; were each write to
insert its own change-log row, audit row and counter update, a group of eight single
writes would cost some thirty statements. Kept here until the commit, they are one
statement on PostgreSQL (data-modifying CTEs: the change rows, the counters, the audit
rows and the doorbell in one round trip, which the serialized writers would otherwise
wait out four times per group), and on DuckDB (in process: no round trips) one multi-row
insert each, one counter update per tenant.

Order is kept: change rows go in in the order they were appended, so their sequence
numbers follow the transaction's own order of changes; a statement that writes change rows
itself (``SubscriptionRepository._log``) flushes those pending first. A rollback drops what
is pending.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from store import deferred, pg_write
from store.duckdb_write import insert_rows
from store.keys import COMMITTED, COMMITTING
from store.models import AuditLog, ChangeLog, TenantUsage
from store.records import Change, criteria_tuple
from store.stats import STATS

#: Where a session keeps its pending rows (``Session.info``).
_KEY: Final = "topicstore.pending"
_USAGE: Final = TenantUsage.__table__
_CHANGE_LOG: Final = cast(sa.Table, ChangeLog.__table__)
_AUDIT_LOG: Final = cast(sa.Table, AuditLog.__table__)
_CHANGE_FIELDS: Final = tuple(name for name in Change.__dataclass_fields__ if name != "seq")
#: A tenant's count moved, or (no row yet) its first row, on DuckDB. Not one ``ON CONFLICT``
#: upsert there: DuckDB checks those against the index several times slower than an
#: ``UPDATE``.
_USAGE_UPDATE: Final = sa.text(
    "UPDATE tenant_usage SET subscriptions = subscriptions + :delta WHERE tenant = :tenant "
    "RETURNING tenant"
)
#: Runs with a group's subscription rows waiting (``store.deferred``): they leave it as is.
_USAGE_OF: Final = (
    sa.select(_USAGE.c.subscriptions)
    .where(_USAGE.c.tenant == sa.bindparam("tenant"))
    .execution_options(**{deferred.KEEP: True})
)
_FORGET: Final = STATS.delete().where(
    STATS.c.subscription_id.in_(sa.bindparam("ids", expanding=True))
)
_USAGE_INSERT: Final = sa.text(
    "INSERT INTO tenant_usage (tenant, subscriptions) VALUES (:tenant, :delta)"
)


@dataclass
class Pending:
    """What one transaction has yet to write."""

    changes: list[dict[str, Any]] = field(default_factory=list)
    audit: list[dict[str, Any]] = field(default_factory=list)
    #: Each tenant's count as stored when this transaction first read it, and the moves
    #: since (``usage`` = stored + moved).
    stored: dict[str, int] = field(default_factory=dict)
    moved: dict[str, int] = field(default_factory=dict)
    #: Removed subscriptions whose statistics rows go at commit: one statement for all of
    #: a group's removals (on PostgreSQL the commit's own, after the removals took their
    #: rows' locks), not one per removal.
    forget: list[int] = field(default_factory=list)
    #: Ring the doorbell at commit (a change was logged).
    ring: bool = False
    #: Changes were logged by a statement of their own, not from ``changes``.
    logged_elsewhere: bool = False


def pending(session: Session) -> Pending:
    """The pending rows of ``session``'s transaction."""
    found = session.info.get(_KEY)
    if found is None:
        found = session.info[_KEY] = Pending()
    return found


def usage(session: Session, tenant: str) -> int:
    """How many subscriptions ``tenant`` holds in this transaction: its stored count (read
    once per transaction: one primary-key probe, or none when a group read it ahead) plus
    this transaction's moves."""
    rows = pending(session)
    if tenant not in rows.stored:
        held = deferred.usage(session, tenant)  # read ahead with the group's rows
        if held is None:
            held = session.connection().execute(_USAGE_OF, {"tenant": tenant}).scalar()
        rows.stored[tenant] = int(held or 0)
    return rows.stored[tenant] + rows.moved.get(tenant, 0)


def move(session: Session, deltas: dict[str, int]) -> None:
    """Count ``deltas`` (subscriptions added, negative for removed) per tenant."""
    moved = pending(session).moved
    for tenant, delta in deltas.items():
        moved[tenant] = moved.get(tenant, 0) + delta


def flush_changes(session: Session) -> None:
    """Insert the pending change rows now, before a statement that logs changes itself
    (the transaction's changes are then known only to the log: see ``flush``; the doorbell
    rings at commit)."""
    rows = pending(session)
    if rows.changes:
        session.connection().execute(sa.insert(ChangeLog), rows.changes)
        rows.changes.clear()
    rows.logged_elsewhere = rows.ring = True


def forget(session: Session, ids: Sequence[int]) -> None:
    """Delete the statistics rows of the removed subscriptions ``ids`` at commit (a
    removal by a selection on DuckDB deletes its own at once: ``store.stats.forget``)."""
    pending(session).forget.extend(ids)


def flush(session: Session) -> None:
    """Write everything pending: the group's subscription rows that wait
    (``store.deferred``), then change rows in order, the counters, audit rows, the removed
    subscriptions' statistics and the doorbell on PostgreSQL."""
    if _KEY not in session.info and not deferred.waits(session):
        return  # nothing written: no connection to open (a read's commit)
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        _flush_postgres(session, connection, deferred.take(connection))
        return
    deferred.flush(session)
    rows = session.info.pop(_KEY, None)
    if rows is None:
        return
    if rows.changes:
        # Their seqs come back, so the changes can be applied to this process's routing
        # table after the commit without reading them again (``Database.write``); a
        # transaction that logged other changes in SQL leaves that to the log.
        stored = insert_rows(
            connection, _CHANGE_LOG, rows.changes, "seq, subscription_id, op"
        ).all()
        if not rows.logged_elsewhere:
            _committed(session, rows, stored)
    for tenant, delta in sorted(rows.moved.items()):
        if delta:
            values = {"tenant": tenant, "delta": delta}
            if connection.execute(_USAGE_UPDATE, values).first() is None:
                connection.execute(_USAGE_INSERT, values)
    if rows.audit:
        insert_rows(connection, _AUDIT_LOG, rows.audit)
    if rows.forget:
        connection.execute(_FORGET, {"ids": rows.forget})


def _flush_postgres(session: Session, connection: sa.Connection, waiting: deferred.Waiting) -> None:
    """``flush`` as one round trip (``store.pg_write.flush``)."""
    rows = session.info.pop(_KEY, None) or Pending()
    if not (
        rows.changes
        or rows.audit
        or rows.ring
        or rows.forget
        or any(rows.moved.values())
        or waiting.deletes
        or waiting.inserts
    ):
        return
    stored = pg_write.flush(
        connection,
        rows.changes,
        rows.moved,
        rows.audit,
        rows.ring,
        rows.forget,
        waiting.deletes,
        waiting.inserts,
    )
    if rows.changes and not rows.logged_elsewhere:
        _committed(session, rows, stored)


def _committed(session: Session, rows: Pending, stored: Sequence[Any]) -> None:
    """Hand the transaction's changes, with the seqs ``stored`` gave them, to the
    after-commit hooks (``store.db.COMMITTED``)."""
    seqs = {(sub_id, op): seq for seq, sub_id, op in stored}
    changes = session.info[COMMITTED] = sorted(
        (_change(seqs[(row["subscription_id"], row["op"])], row) for row in rows.changes),
        key=lambda change: change.seq,
    )
    committing = session.info.get(COMMITTING)
    if committing is not None and changes:
        committing(changes[-1].seq)


def _change(seq: int, row: dict[str, Any]) -> Change:
    """The ``Change`` a pending change row became."""
    values = {name: row[name] for name in _CHANGE_FIELDS}
    values["criteria"] = criteria_tuple(values["criteria"])
    return Change(seq=seq, **values)


def _drop(session: Session, *_: object) -> None:
    deferred.drop(session)
    session.info.pop(_KEY, None)
    session.info.pop(COMMITTED, None)


sa.event.listen(Session, "before_commit", flush)
sa.event.listen(Session, "after_rollback", _drop)
