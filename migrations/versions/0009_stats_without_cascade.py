"""statistics without a cascade: a removal deletes its subscriptions' statistics rows itself

PostgreSQL runs a foreign key's ``ON DELETE CASCADE`` as a trigger per deleted row, each a
statement of its own, whether the row has statistics or not: removing one subscriber's
100,000 subscriptions ran 100,000 of them, some 40% of the removal's time in the server.
Without the key, a removal deletes the statistics of the ids it removed in one statement at
its commit (``store.pending``), as DuckDB's removals always did (its table has no foreign
key). A flush of statistics still skips rows a removal holds and ids no longer stored
(``store.stats``), so no statistics row outlives its subscription.

Revision ID: 0009_stats_without_cascade
Revises: 0008_write_indexes
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = "0009_stats_without_cascade"
down_revision = "0008_write_indexes"
branch_labels = None
depends_on = None

_KEY = "fk_subscription_stats_subscription_id_subscription"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint(_KEY, "subscription_stats", type_="foreignkey")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        # Statistics of subscriptions gone meanwhile would fail the key: none are kept.
        op.execute(
            "DELETE FROM subscription_stats st WHERE NOT EXISTS "
            "(SELECT FROM subscription s WHERE s.id = st.subscription_id)"
        )
        op.create_foreign_key(
            _KEY,
            "subscription_stats",
            "subscription",
            ["subscription_id"],
            ["id"],
            ondelete="CASCADE",
        )
