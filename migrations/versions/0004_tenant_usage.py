"""tenant_usage: each tenant's subscription count, kept by every write

The quota check reads one row instead of counting the tenant's subscriptions (a count grew
with the table and made a 1M import quadratic). Every write that adds or removes
subscriptions updates the row in its own transaction, so it stays exact under concurrent
writers and replicas (writers are serialized: ``store.db``). The upgrade fills it from the
rows already stored.

Revision ID: 0004_tenant_usage
Revises: 0003_groups
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_tenant_usage"
down_revision = "0003_groups"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenant_usage",
        sa.Column("tenant", sa.String(255), nullable=False),
        sa.Column("subscriptions", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", name="pk_tenant_usage"),
    )
    op.execute(
        "INSERT INTO tenant_usage (tenant, subscriptions) "
        "SELECT tenant, count(*) FROM subscription GROUP BY tenant"
    )


def downgrade() -> None:
    op.drop_table("tenant_usage")
