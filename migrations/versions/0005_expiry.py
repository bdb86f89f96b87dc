"""expiry: expires_at on subscription and change_log, its index, two audit actions

A subscription may end by itself at ``expires_at`` (null: never). The change log carries
it like every other column a loader needs; ``ix_subscription_expires_at`` serves the sweep
(``store.expiry``) and the startup read, which skips expired rows. The audit log's action
check gains ``expire`` (a sweep) and ``update`` (an expiry set or cleared).

DuckDB can neither alter nor drop a CHECK constraint: there the audit table is rebuilt
with the new check (its rows copied, ids and sequence kept); and it cannot drop a column
of a table that has an index, so the downgrade drops the indexes around the column drops,
as ``0003_groups`` does. The downgrade deletes the audit rows of the two new actions (the
old check refuses them).

Revision ID: 0005_expiry
Revises: 0004_tenant_usage
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0005_expiry"
down_revision = "0004_tenant_usage"
branch_labels = None
depends_on = None

_TABLES = ("subscription", "change_log")
_INDEX = "ix_subscription_expires_at"
_ACTIONS_CHECK = "ck_audit_log_action"
_OLD_ACTIONS = ("create", "delete", "bulk_create", "delete_subscriber")
_NEW_ACTIONS = (*_OLD_ACTIONS, "expire", "update")
_AUDIT_INDEXES = {
    "ix_audit_log_tenant_id": ["tenant", "id"],
    "ix_audit_log_created_at": ["created_at"],
}
Json = sa.JSON().with_variant(JSONB(), "postgresql")


def _check(actions: tuple[str, ...]) -> str:
    return "action IN (" + ", ".join(f"'{a}'" for a in actions) + ")"


def upgrade() -> None:
    for table in _TABLES:
        op.add_column(table, sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(_INDEX, "subscription", ["expires_at"])
    _audit_actions(_NEW_ACTIONS)


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM audit_log WHERE action IN ('expire', 'update')"))
    _audit_actions(_OLD_ACTIONS)
    op.drop_index(_INDEX, table_name="subscription")
    if op.get_bind().dialect.name == "duckdb":
        indexes = {"ix_subscription_tenant_id": ["tenant", "id"]}
        indexes["ix_subscription_tenant_group"] = ["tenant", "group"]
        for name in indexes:
            op.drop_index(name, table_name="subscription")
        # An index dropped in the same transaction still counts as depending on the
        # columns (see 0003_groups): commit the drops first.
        op.execute("COMMIT")
        op.execute("BEGIN")
        _drop_columns()
        for name, columns in indexes.items():
            op.create_index(name, "subscription", columns)
    else:
        _drop_columns()


def _drop_columns() -> None:
    for table in _TABLES:
        op.drop_column(table, "expires_at")


def _audit_actions(actions: tuple[str, ...]) -> None:
    """The audit log's action check, allowing ``actions``."""
    if op.get_bind().dialect.name != "duckdb":
        op.drop_constraint(_ACTIONS_CHECK, "audit_log", type_="check")
        op.create_check_constraint(_ACTIONS_CHECK, "audit_log", _check(actions))
        return
    # DuckDB: a new table with the new check, the rows copied (the sequence stays).
    for name in _AUDIT_INDEXES:
        op.drop_index(name, table_name="audit_log")
    op.execute("COMMIT")
    op.execute("BEGIN")
    op.rename_table("audit_log", "audit_log_old")
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
        sa.CheckConstraint(_check(actions), name=_ACTIONS_CHECK),
    )
    op.execute("INSERT INTO audit_log SELECT * FROM audit_log_old")
    op.drop_table("audit_log_old")
    for name, columns in _AUDIT_INDEXES.items():
        op.create_index(name, "audit_log", columns)
