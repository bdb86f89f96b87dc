"""The loader: builds the in-memory matchers from the store and keeps them current."""

from __future__ import annotations

from loader.catalog import Entry
from loader.loader import Loader
from loader.table import DEFAULT_ENGINES, RoutingTable, Snapshot

__all__ = ["DEFAULT_ENGINES", "Entry", "Loader", "RoutingTable", "Snapshot"]
