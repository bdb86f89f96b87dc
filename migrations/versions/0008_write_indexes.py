"""write indexes: only the index entries a read can use, the unique key's most selective
column first

Every subscription written pays for each index of its table, and most never hold a group
or an expiry. On PostgreSQL the unique key is ordered (subscriber, pattern, tenant,
dialect): a bulk add probes it and inserts into it once per row, and with the tenant and
the dialect first (the same in nearly every row) each comparison in the tree read two equal
strings before the one that decides; subscriber first decides most comparisons at once
(the bulk add's statement a sixth cheaper at 300,000 rows). A look-up by tenant and
subscriber still uses its prefix. ``ix_subscription_tenant_group`` and
``ix_subscription_expires_at`` become partial (``IS NOT NULL``): their readers (the group
policy look-up, the sweep, the earliest expiry) ask only for non-null values, which the
planner proves from their conditions, and a plain subscription adds no entry to either.
DuckDB's planner scans through an ART index only for a filter on one column, so
``ix_subscription_tenant_id`` and ``ix_subscription_tenant_group`` served no read there
while every write and checkpoint kept them: they go (its unique key, primary key, pattern
and expiry indexes stay).

Revision ID: 0008_write_indexes
Revises: 0007_duckdb_pattern_index
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_write_indexes"
down_revision = "0007_duckdb_pattern_index"
branch_labels = None
depends_on = None

#: PostgreSQL's partial indexes: name, columns, the column that must be set.
_PARTIAL = (
    ("ix_subscription_tenant_group", ["tenant", "group"], "group"),
    ("ix_subscription_expires_at", ["expires_at"], "expires_at"),
)
#: The unique key, as 0001 made it and as it is now (PostgreSQL; DuckDB cannot alter a
#: constraint, and its ART index compares whole keys at once).
_OLD_KEY = (
    "uq_subscription_tenant_subscriber_dialect_pattern",
    ["tenant", "subscriber", "dialect", "pattern"],
)
_NEW_KEY = (
    "uq_subscription_subscriber_pattern_tenant_dialect",
    ["subscriber", "pattern", "tenant", "dialect"],
)
#: DuckDB's composite indexes no query scans through.
_COMPOSITE = (
    ("ix_subscription_tenant_id", ["tenant", "id"]),
    ("ix_subscription_tenant_group", ["tenant", "group"]),
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "duckdb":
        for name, _ in _COMPOSITE:
            op.drop_index(name, table_name="subscription")
        return
    for name, columns, column in _PARTIAL:
        op.drop_index(name, table_name="subscription")
        where = sa.text(f'"{column}" IS NOT NULL')
        op.create_index(name, "subscription", columns, postgresql_where=where)
    _replace_key(_OLD_KEY, _NEW_KEY)


def downgrade() -> None:
    if op.get_bind().dialect.name == "duckdb":
        for name, columns in _COMPOSITE:
            op.create_index(name, "subscription", columns)
        return
    for name, columns, _ in _PARTIAL:
        op.drop_index(name, table_name="subscription")
        op.create_index(name, "subscription", columns)
    _replace_key(_NEW_KEY, _OLD_KEY)


def _replace_key(old: tuple[str, list[str]], new: tuple[str, list[str]]) -> None:
    """The unique key ``new`` in place of ``old`` (the new one first: never a moment
    without one)."""
    op.create_unique_constraint(new[0], "subscription", new[1])
    op.drop_constraint(old[0], "subscription", type_="unique")
