"""audit_log table with its sequence

Revision ID: 0002_audit
Revises: 0001
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002_audit"
down_revision = "0001"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    # An explicit sequence, as for the other tables: DuckDB has neither SERIAL nor IDENTITY.
    op.execute(sa.schema.CreateSequence(sa.Sequence("audit_log_seq", start=1)))
    op.create_table(
        "audit_log",
        sa.Column(
            "id",
            sa.BigInteger(),
            server_default=sa.text("nextval('audit_log_seq')"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tenant", sa.String(255), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("ids", Json, nullable=False),
        sa.Column("caller_tenant", sa.String(255), nullable=True),
        sa.Column("caller_name", sa.String(255), nullable=False),
        sa.Column("request_id", sa.String(255), nullable=False),
        sa.Column("address", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_audit_log"),
        sa.CheckConstraint(
            "action IN ('create', 'delete', 'bulk_create', 'delete_subscriber')",
            name="ck_audit_log_action",
        ),
    )
    op.create_index("ix_audit_log_tenant_id", "audit_log", ["tenant", "id"])
    op.create_index("ix_audit_log_created_at", "audit_log", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_audit_log_created_at", table_name="audit_log")
    op.drop_index("ix_audit_log_tenant_id", table_name="audit_log")
    op.drop_table("audit_log")
    op.execute(sa.schema.DropSequence(sa.Sequence("audit_log_seq")))
