"""subscription and change_log tables with their sequences

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

SUB_ID_MAX = 2**32 - 1  # the matcher indexes ids below 2**32
Json = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    # Explicit sequences: DuckDB has neither SERIAL nor IDENTITY.
    op.execute(
        sa.schema.CreateSequence(sa.Sequence("subscription_id_seq", start=1, maxvalue=SUB_ID_MAX))
    )
    op.execute(sa.schema.CreateSequence(sa.Sequence("change_log_seq", start=1)))
    op.create_table(
        "subscription",
        sa.Column(
            "id",
            sa.BigInteger(),
            server_default=sa.text("nextval('subscription_id_seq')"),
            nullable=False,
        ),
        sa.Column("tenant", sa.String(255), nullable=False),
        sa.Column("subscriber", sa.String(255), nullable=False),
        sa.Column("pattern", sa.Text(), nullable=False),
        sa.Column("dialect", sa.String(16), nullable=False),
        sa.Column("kind", sa.String(16), server_default="topic", nullable=False),
        sa.Column("criteria", Json, nullable=True),
        sa.Column("mode", sa.String(8), nullable=True),
        sa.Column("labels", Json, nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name="pk_subscription"),
        sa.UniqueConstraint(
            "tenant",
            "subscriber",
            "dialect",
            "pattern",
            name="uq_subscription_tenant_subscriber_dialect_pattern",
        ),
        sa.CheckConstraint("kind IN ('topic', 'headers')", name="ck_subscription_kind"),
        sa.CheckConstraint("mode IS NULL OR mode IN ('all', 'any')", name="ck_subscription_mode"),
    )
    op.create_index("ix_subscription_tenant_id", "subscription", ["tenant", "id"])
    op.create_table(
        "change_log",
        sa.Column(
            "seq",
            sa.BigInteger(),
            server_default=sa.text("nextval('change_log_seq')"),
            nullable=False,
        ),
        sa.Column("op", sa.String(8), nullable=False),
        sa.Column("subscription_id", sa.BigInteger(), nullable=False),
        sa.Column("tenant", sa.String(255), nullable=False),
        sa.Column("subscriber", sa.String(255), nullable=False),
        sa.Column("pattern", sa.Text(), nullable=False),
        sa.Column("dialect", sa.String(16), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("criteria", Json, nullable=True),
        sa.Column("mode", sa.String(8), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("seq", name="pk_change_log"),
        sa.CheckConstraint("op IN ('add', 'remove')", name="ck_change_log_op"),
    )


def downgrade() -> None:
    op.drop_table("change_log")
    op.drop_index("ix_subscription_tenant_id", table_name="subscription")
    op.drop_table("subscription")
    op.execute(sa.schema.DropSequence(sa.Sequence("change_log_seq")))
    op.execute(sa.schema.DropSequence(sa.Sequence("subscription_id_seq")))
