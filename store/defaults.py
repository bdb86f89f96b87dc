"""The store's defaults that settings and callers name before (or without) opening a
store: here, apart from the modules that need SQLAlchemy and the drivers, so that reading
them loads nothing else (``store`` itself loads its parts when first asked for one)."""

from __future__ import annotations

from typing import Final

#: The embedded default store: one DuckDB file, no server to run.
DEFAULT_DATABASE_URL: Final = "duckdb:///./data/topicstore.duckdb"
#: The tenant of a subscription, a token or a request that names none.
DEFAULT_TENANT: Final = "default"
