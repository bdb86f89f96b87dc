"""match statistics: subscription_stats, each subscription's deliveries and last one

Serving processes count deliveries in memory and add them to this table in batches
(``store.stats``), apart from ``subscription`` so that a flush never rewrites subscription
rows nor writes the change log. On PostgreSQL the row goes with its subscription by
``ON DELETE CASCADE``; DuckDB refuses cascading foreign keys (and its foreign keys would
refuse deleting a subscription that has a row), so there the table has none and the
removal deletes the row in its own transaction.

Revision ID: 0006_match_stats
Revises: 0005_expiry
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_match_stats"
down_revision = "0005_expiry"
branch_labels = None
depends_on = None


def upgrade() -> None:
    constraints: list[sa.Constraint] = [
        sa.PrimaryKeyConstraint("subscription_id", name="pk_subscription_stats")
    ]
    if op.get_bind().dialect.name == "postgresql":
        constraints.append(
            sa.ForeignKeyConstraint(
                ["subscription_id"],
                ["subscription.id"],
                name="fk_subscription_stats_subscription_id_subscription",
                ondelete="CASCADE",
            )
        )
    op.create_table(
        "subscription_stats",
        sa.Column("subscription_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("matches", sa.BigInteger(), nullable=False),
        sa.Column("last_matched_at", sa.DateTime(timezone=True), nullable=False),
        *constraints,
    )


def downgrade() -> None:
    op.drop_table("subscription_stats")
