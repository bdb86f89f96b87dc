"""DuckDB: an index on subscription.pattern, so a write's presence check is a probe

A single write asks whether its (tenant, subscriber, dialect, pattern) is stored. On
PostgreSQL the unique constraint's index answers that. DuckDB answers only an equality on
one column from an ART index, so the four-column question was a scan of the table, whose
cost grew with it (30-50 ms at 1,000,000 rows); ``SubscriptionRepository.find`` looks up
the pattern here instead and filters its few rows. PostgreSQL gets nothing: its unique
index serves, and another index would only slow its writes.

Revision ID: 0007_duckdb_pattern_index
Revises: 0006_match_stats
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = "0007_duckdb_pattern_index"
down_revision = "0006_match_stats"
branch_labels = None
depends_on = None

_NAME = "ix_subscription_pattern"


def upgrade() -> None:
    if op.get_bind().dialect.name == "duckdb":
        op.create_index(_NAME, "subscription", ["pattern"])


def downgrade() -> None:
    if op.get_bind().dialect.name == "duckdb":
        op.drop_index(_NAME, "subscription")
