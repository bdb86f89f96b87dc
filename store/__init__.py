"""Durable subscriptions: SQLAlchemy 2 models, the repositories (subscriptions, audit log),
engine setup and migrations, on PostgreSQL (production, several replicas) or DuckDB
(embedded, one file)."""

from __future__ import annotations

from store.audit import MAX_AUDIT_PAGE, AuditEntry, AuditRepository
from store.db import (
    CHANGES_CHANNEL,
    DEFAULT_DATABASE_URL,
    Backend,
    Database,
    backend_of,
    duckdb_file,
)
from store.errors import (
    UNAVAILABLE_ERRORS,
    DatabaseLockedError,
    InvalidSubscriptionError,
    NoSchemaError,
    StoreError,
    UnsupportedDatabaseError,
)
from store.records import (
    DEFAULT_TENANT,
    HEADERS_DIALECT,
    Change,
    NewSubscription,
    StoredSubscription,
    validate,
)
from store.repository import SubscriptionRepository

__all__ = [
    "CHANGES_CHANNEL",
    "DEFAULT_DATABASE_URL",
    "DEFAULT_TENANT",
    "HEADERS_DIALECT",
    "MAX_AUDIT_PAGE",
    "UNAVAILABLE_ERRORS",
    "AuditEntry",
    "AuditRepository",
    "Backend",
    "Change",
    "Database",
    "DatabaseLockedError",
    "InvalidSubscriptionError",
    "NewSubscription",
    "NoSchemaError",
    "StoreError",
    "StoredSubscription",
    "SubscriptionRepository",
    "UnsupportedDatabaseError",
    "backend_of",
    "duckdb_file",
    "validate",
]
