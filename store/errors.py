"""Exceptions of the store package, each with a machine-readable ``code``."""

from __future__ import annotations

from typing import Final

import psycopg
import sqlalchemy as sa

#: Errors that mean the database is not answering (server down or restarting, connection
#: lost), not that a statement was wrong: the service answers 503 ``store_unavailable`` and
#: keeps serving matches from memory; a caller may retry.
UNAVAILABLE_ERRORS: Final = (
    sa.exc.OperationalError,
    sa.exc.InterfaceError,
    psycopg.OperationalError,
)


class StoreError(Exception):
    code: str = "store_error"

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class InvalidSubscriptionError(StoreError, ValueError):
    """A subscription field breaks a rule (name length, labels size, kind, dialect)."""


class UnsupportedDatabaseError(StoreError, ValueError):
    """The database URL names a backend other than PostgreSQL or DuckDB."""


class DatabaseLockedError(StoreError):
    """The DuckDB file is owned by another process (DuckDB allows one writer process)."""


class NoSchemaError(StoreError):
    """The store has no tables yet (``topicstore migrate`` creates them); raised instead of
    creating an empty store for a command that only reads."""
