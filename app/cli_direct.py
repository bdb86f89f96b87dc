"""The command line's direct mode: admin operations on the store itself, as the operator,
through the same ``AdminOperations`` the HTTP routes call (same limits, quota and results)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.auth import OPERATOR
from app.cli_backend import Item
from app.operations import AdminOperations
from app.refusals import NotFoundError
from app.schemas import BulkItem, ErrorBody, SubscriptionIn
from app.settings import Settings
from store import Database


class DirectAdmin:
    """Works on the store itself (nothing else may hold a DuckDB file meanwhile)."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self.operations = AdminOperations(db, settings)

    def add_many(self, items: Sequence[Item]) -> list[Item]:
        """A result per item, as ``POST /v1/subscriptions/bulk`` gives them; an item that
        does not fit the request schema gets its own error instead of failing the rest."""
        parsed: list[tuple[int, SubscriptionIn]] = []
        results: list[BulkItem] = []
        for index, item in enumerate(items):
            try:
                parsed.append((index, SubscriptionIn.model_validate(item)))
            except ValidationError as e:
                results.append(BulkItem(index=index, status="error", error=_schema_error(e)))
        stored = self.operations.create_many([item for _, item in parsed], OPERATOR)
        for (index, _), result in zip(parsed, stored.results, strict=True):
            results.append(result.model_copy(update={"index": index}))
        results.sort(key=lambda r: r.index)
        return [r.model_dump(mode="json") for r in results]

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


#: Schema problems that have a rule of their own (the store's code for the same rule).
_SCHEMA_CODES = {"finite_number": "invalid_number"}


def _schema_error(error: ValidationError) -> ErrorBody:
    """The first problem of an item that does not fit the request schema."""
    problem = error.errors()[0]
    where = ".".join(str(part) for part in problem.get("loc", ()))
    message = f"{where}: {problem['msg']}" if where else str(problem["msg"])
    return ErrorBody(code=_SCHEMA_CODES.get(problem["type"], "invalid_request"), message=message)
