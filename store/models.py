"""Typed SQLAlchemy 2 models: the subscription table, its change log, the audit log, the
tenants' counts and the subscriptions' match statistics.

One naming convention on the metadata keeps constraint names identical on PostgreSQL and
DuckDB, so one alembic history serves both. Ids come from explicit sequences: DuckDB has no
SERIAL or IDENTITY, and the subscription id becomes the matcher's sub_id, which must stay
below 2**32.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from matcher import SUB_ID_LIMIT

NAMING_CONVENTION: Final = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

#: JSON on both backends, JSONB (indexable, compact) on PostgreSQL.
Json = sa.JSON().with_variant(JSONB(), "postgresql")


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)


subscription_id_seq = sa.Sequence(
    "subscription_id_seq", start=1, maxvalue=SUB_ID_LIMIT - 1, metadata=Base.metadata
)
change_seq = sa.Sequence("change_log_seq", start=1, metadata=Base.metadata)


class Subscription(Base):
    """One subscription. (tenant, subscriber, dialect, pattern) is unique: creating the same
    subscription again returns the existing row. For ``kind='headers'`` the pattern column
    holds the canonical text of the criteria and mode, so uniqueness covers them too."""

    __tablename__ = "subscription"
    __table_args__ = (
        # The most selective column first (``0008_write_indexes``: PostgreSQL; DuckDB keeps
        # 0001's order, which its ART index, comparing whole keys, does not feel).
        sa.UniqueConstraint("subscriber", "pattern", "tenant", "dialect"),
        # Every write pays for each index (``0008_write_indexes``): on PostgreSQL only a
        # row in a group or with an expiry has an entry in those two (their readers ask
        # for nothing else); DuckDB has neither composite one (its planner never scans
        # through an index on two columns).
        sa.Index(None, "tenant", "id"),
        sa.Index(None, "tenant", "group", postgresql_where=sa.text('"group" IS NOT NULL')),
        sa.Index(None, "expires_at", postgresql_where=sa.text("expires_at IS NOT NULL")),
        sa.CheckConstraint("kind IN ('topic', 'headers')", name="kind"),
        sa.CheckConstraint("mode IS NULL OR mode IN ('all', 'any')", name="mode"),
    )

    id: Mapped[int] = mapped_column(
        sa.BigInteger,
        subscription_id_seq,
        server_default=subscription_id_seq.next_value(),
        primary_key=True,
    )
    tenant: Mapped[str] = mapped_column(sa.String(255))
    subscriber: Mapped[str] = mapped_column(sa.String(255))
    pattern: Mapped[str] = mapped_column(sa.Text)
    dialect: Mapped[str] = mapped_column(sa.String(16))
    kind: Mapped[str] = mapped_column(sa.String(16), server_default="topic")
    criteria: Mapped[list[Any] | None] = mapped_column(Json, nullable=True)
    mode: Mapped[str | None] = mapped_column(sa.String(8), nullable=True)
    labels: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    # Shared subscriptions (``store.groups``): both null, or both set. PostgreSQL checks it
    # (``ck_subscription_group_policy``); DuckDB cannot add a CHECK to an existing table,
    # so there ``validate`` and ``store.groups`` are the guard (as on every write path).
    group: Mapped[str | None] = mapped_column(sa.String(128), nullable=True)
    group_policy: Mapped[str | None] = mapped_column(sa.String(16), nullable=True)
    created_at: Mapped[datetime] = mapped_column(
        sa.DateTime(timezone=True), server_default=sa.func.now()
    )
    # The instant it stops matching (``store.expiry``); null: never. The sweep reads the
    # expired ones through ``ix_subscription_expires_at``.
    expires_at: Mapped[datetime | None] = mapped_column(sa.DateTime(timezone=True), nullable=True)


class ChangeLog(Base):
    """Every add and remove, written in the same transaction as the change itself. An
    ``add`` of an id a loader already holds changes only its ``expires_at`` (an expiry set
    or cleared: ``SubscriptionRepository.set_expiry``).

    A row carries everything needed to apply it (the subscription row may be gone by the
    time a loader reads an old ``add``), so loaders never join back to ``subscription``.
    """

    __tablename__ = "change_log"
    __table_args__ = (sa.CheckConstraint("op IN ('add', 'remove')", name="op"),)

    seq: Mapped[int] = mapped_column(
        sa.BigInteger, change_seq, server_default=change_seq.next_value(), primary_key=True
    )
    op: Mapped[str] = mapped_column(sa.String(8))
    subscription_id: Mapped[int] = mapped_column(sa.BigInteger)
    tenant: Mapped[str] = mapped_column(sa.String(255))
    subscriber: Mapped[str] = mapped_column(sa.String(255))
    pattern: Mapped[str] = mapped_column(sa.Text)
    dialect: Mapped[str] = mapped_column(sa.String(16))
    kind: Mapped[str] = mapped_column(sa.String(16))
    criteria: Mapped[list[Any] | None] = mapped_column(Json, nullable=True)
    mode: Mapped[str | None] = mapped_column(sa.String(8), nullable=True)
    group: Mapped[str | None] = mapped_column(sa.String(128), nullable=True)
    group_policy: Mapped[str | None] = mapped_column(sa.String(16), nullable=True)
    created_at: Mapped[datetime] = mapped_column(
        sa.DateTime(timezone=True), server_default=sa.func.now()
    )
    expires_at: Mapped[datetime | None] = mapped_column(sa.DateTime(timezone=True), nullable=True)


class TenantUsage(Base):
    """How many subscriptions each tenant holds: the quota check reads this row instead of
    counting (O(1) per write however large the table). Every write that adds or removes
    subscriptions moves it in the same transaction (``store.repository``), and writers are
    serialized, so it equals ``count(*)`` per tenant at every commit."""

    __tablename__ = "tenant_usage"

    tenant: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    subscriptions: Mapped[int] = mapped_column(sa.BigInteger)


class SubscriptionStats(Base):
    """How many deliveries a subscription has had and when the last was: every serving
    process counts its own and adds them here every ``TOPICSTORE_STATS_FLUSH_INTERVAL``
    seconds (``store.stats``), so the row is the sum over replicas and workers. Apart from
    the subscription row on purpose: a flush touches neither the subscription table nor
    the change log, and takes no writer lock. A subscription never matched has no row. Its
    row goes with the subscription: the removal deletes it (``store.repository``), in one
    statement for all the ids it removed; no foreign key, whose cascade PostgreSQL runs
    as a statement per deleted subscription (``0009_stats_without_cascade``)."""

    __tablename__ = "subscription_stats"

    subscription_id: Mapped[int] = mapped_column(
        sa.BigInteger, primary_key=True, autoincrement=False
    )
    matches: Mapped[int] = mapped_column(sa.BigInteger)
    last_matched_at: Mapped[datetime] = mapped_column(sa.DateTime(timezone=True))


audit_seq = sa.Sequence("audit_log_seq", start=1, metadata=Base.metadata)

#: What an audit row may record (the admin changes).
#: ``expire``: a sweep removed expired subscriptions; ``update``: an expiry was set or
#: cleared (``store.expiry``).
AUDIT_ACTIONS: Final = (
    "create",
    "delete",
    "bulk_create",
    "delete_subscriber",
    "expire",
    "update",
)


class AuditLog(Base):
    """One admin change, written in the same transaction as the change: who (the caller's
    tenant and token name, never the token), what (action and subscription ids), on which
    tenant, from where (request id, client address) and when. Old rows are purged after the
    configured retention (``ix_audit_log_created_at`` keeps that delete cheap)."""

    __tablename__ = "audit_log"
    __table_args__ = (
        sa.Index(None, "tenant", "id"),
        sa.Index(None, "created_at"),
        sa.CheckConstraint(
            "action IN (" + ", ".join(f"'{a}'" for a in AUDIT_ACTIONS) + ")", name="action"
        ),
    )

    id: Mapped[int] = mapped_column(
        sa.BigInteger, audit_seq, server_default=audit_seq.next_value(), primary_key=True
    )
    created_at: Mapped[datetime] = mapped_column(sa.DateTime(timezone=True))
    tenant: Mapped[str] = mapped_column(sa.String(255))
    action: Mapped[str] = mapped_column(sa.String(32))
    ids: Mapped[list[Any]] = mapped_column(Json)
    caller_tenant: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    caller_name: Mapped[str] = mapped_column(sa.String(255))
    request_id: Mapped[str] = mapped_column(sa.String(255))
    address: Mapped[str] = mapped_column(sa.String(255))
