"""The loader: builds the in-memory matchers from the store and keeps them current."""

from __future__ import annotations

from loader.catalog import Entry
from loader.loader import Loader
from loader.state import Snapshot
from loader.table import RoutingTable

__all__ = ["Entry", "Loader", "RoutingTable", "Snapshot"]
