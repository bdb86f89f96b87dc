"""The command line's direct mode: admin operations on the store itself, as the operator,
through the same ``AdminOperations`` the HTTP routes call (same limits, quota and results)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.auth import OPERATOR
from app.cli_backend import Item
from app.operations import AdminOperations
from app.refusals import NotFoundError
from app.settings import Settings
from store import Database


class DirectAdmin:
    """Works on the store itself (nothing else may hold a DuckDB file meanwhile)."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self.operations = AdminOperations(db, settings)

    def add_many(self, items: Sequence[Item]) -> list[Item]:
        """A result per item, as ``POST /v1/subscriptions/bulk`` gives them."""
        stored = self.operations.create_many(items, OPERATOR)
        return [result.model_dump(mode="json") for result in stored.results]

    def remove(self, sub_id: int) -> bool:
        try:
            self.operations.remove(sub_id, OPERATOR)
        except NotFoundError:
            return False
        return True

    def page(self, **filters: Any) -> list[Item]:
        page = self.operations.page(OPERATOR, **filters)
        return [row.model_dump(mode="json") for row in page.items]

    def match(self, topic: str, dialect: str, tenant: str | None) -> Item:
        from loader import Loader  # builds the whole table: fine for a one-off command

        table = Loader(self.db, self.settings.engines, limits=self.settings.limits()).build()
        ids = table.match(OPERATOR.tenant_for(tenant), dialect, topic)
        return {"subscriptions": sorted(ids), "subscribers": table.subscribers(ids)}

    def export(self, path: Path, tenant: str | None) -> int:
        return self.operations.export(path, OPERATOR, tenant)
