"""DuckDB's SQLAlchemy dialect (``duckdb_engine``) with SQLAlchemy's statement cache on.

``duckdb_engine`` declares ``supports_statement_cache = False`` (a third-party dialect
must opt in), so SQLAlchemy compiled every statement again on every execution: a write to
the embedded store spent more of its Python time compiling its four or five statements
than running them. The dialect compiles with PostgreSQL's compiler, which is cacheable,
and adds no compiler state of its own (its one ``@compiles`` construct, ``TryCast``, takes
the cache key of its clause), so the cache is safe to turn on. Registered under the name
``duckdb`` for the process, so every ``duckdb:///`` URL (the store, migrations, the
analytics reader) gets it.
"""

from __future__ import annotations

from duckdb_engine import Dialect
from sqlalchemy.dialects import registry


class CachingDuckDBDialect(Dialect):
    """``duckdb_engine``'s dialect, its compiled statements cached (see the module)."""

    supports_statement_cache = True


def register() -> None:
    """Make ``duckdb:///`` URLs use ``CachingDuckDBDialect`` in this process."""
    registry.register("duckdb", __name__, CachingDuckDBDialect.__name__)
