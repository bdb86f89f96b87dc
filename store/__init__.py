"""Durable subscriptions: SQLAlchemy 2 models, the repositories (subscriptions, audit log),
engine setup and migrations, on PostgreSQL (production, several replicas) or DuckDB
(embedded, one file).

The names below load their module when first asked for (PEP 562): a command that only
reads a default (``store.defaults``) or is refused at its options does not pay for
SQLAlchemy, the drivers and Arrow, most of a command line's start."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

from store.defaults import DEFAULT_DATABASE_URL, DEFAULT_TENANT

if TYPE_CHECKING:
    from store.audit import MAX_AUDIT_PAGE, AuditEntry, AuditRepository
    from store.db import Backend, Database, backend_of, duckdb_file
    from store.errors import (
        UNAVAILABLE_ERRORS,
        DatabaseLockedError,
        InvalidSubscriptionError,
        NoSchemaError,
        StoreError,
        UnsupportedDatabaseError,
    )
    from store.keys import CHANGES_CHANNEL
    from store.records import (
        HEADERS_DIALECT,
        Change,
        NewSubscription,
        StoredSubscription,
        validate,
    )
    from store.repository import SubscriptionRepository

#: Where each name of the package lives.
_HOMES: Final = {
    **dict.fromkeys(("MAX_AUDIT_PAGE", "AuditEntry", "AuditRepository"), "store.audit"),
    **dict.fromkeys(("Backend", "Database", "backend_of", "duckdb_file"), "store.db"),
    "CHANGES_CHANNEL": "store.keys",
    **dict.fromkeys(
        (
            "UNAVAILABLE_ERRORS",
            "DatabaseLockedError",
            "InvalidSubscriptionError",
            "NoSchemaError",
            "StoreError",
            "UnsupportedDatabaseError",
        ),
        "store.errors",
    ),
    **dict.fromkeys(
        ("HEADERS_DIALECT", "Change", "NewSubscription", "StoredSubscription", "validate"),
        "store.records",
    ),
    "SubscriptionRepository": "store.repository",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'store' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


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
