"""shared subscriptions: group and group_policy on subscription and change_log

Both columns are null for an ungrouped subscription and both set for a member of a group
(``store.groups``). The change log carries them like every other column the loader needs.

DuckDB cannot add a CHECK constraint to an existing table, nor drop a column of a table
that has an index: the both-or-neither check is PostgreSQL's only (``validate`` guards both
backends), and the downgrade drops the indexes around the column drops on DuckDB.

Revision ID: 0003_groups
Revises: 0002_audit
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_groups"
down_revision = "0002_audit"
branch_labels = None
depends_on = None

_TABLES = ("subscription", "change_log")
_CHECK = "ck_subscription_group_policy"


def upgrade() -> None:
    for table in _TABLES:
        op.add_column(table, sa.Column("group", sa.String(128), nullable=True))
        op.add_column(table, sa.Column("group_policy", sa.String(16), nullable=True))
    op.create_index("ix_subscription_tenant_group", "subscription", ["tenant", "group"])
    if op.get_bind().dialect.name == "postgresql":
        op.create_check_constraint(
            op.f(_CHECK),
            "subscription",
            '("group" IS NULL) = (group_policy IS NULL) AND '
            "(group_policy IS NULL OR group_policy IN ('random', 'round_robin', 'hash'))",
        )


def downgrade() -> None:
    duckdb = op.get_bind().dialect.name == "duckdb"
    if not duckdb:
        op.drop_constraint(op.f(_CHECK), "subscription", type_="check")
    op.drop_index("ix_subscription_tenant_group", table_name="subscription")
    if duckdb:
        op.drop_index("ix_subscription_tenant_id", table_name="subscription")
    if duckdb:
        # DuckDB still counts an index dropped in the same transaction as depending on
        # the table's columns: commit the drops first, then go on in a new transaction
        # (alembic's autocommit_block asks for an isolation level, which DuckDB lacks).
        op.execute("COMMIT")
        op.execute("BEGIN")
        _drop_columns()
        op.create_index("ix_subscription_tenant_id", "subscription", ["tenant", "id"])
    else:
        _drop_columns()


def _drop_columns() -> None:
    for table in _TABLES:
        op.drop_column(table, "group_policy")
        op.drop_column(table, "group")
