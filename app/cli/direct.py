"""The command line's direct mode: admin operations on the store itself, as the operator,
through the same ``AdminOperations`` the HTTP routes call (same limits, quota and results,
and the same audit rows: the caller is ``cli:<user>`` from ``local``, one request id per
command)."""

from __future__ import annotations

import getpass
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.auth import OPERATOR, Caller, Origin
from app.bulk import Items, parse_item
from app.cli.protocol import Added, Item
from app.operations import AdminOperations
from app.refusals import NotFoundError
from app.settings import Settings
from store import Database

if TYPE_CHECKING:
    from loader import RoutingTable


class DirectAdmin:
    """Works on the store itself (nothing else may hold a DuckDB file meanwhile)."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self.operations = AdminOperations(db, settings)
        self.caller = Caller(None, name=f"cli:{_user()}", origin=Origin(uuid.uuid4().hex, "local"))

    def add(self, item: Item) -> Item:
        """One subscription, as ``POST /v1/subscriptions`` stores it (audited as
        ``create``): its fields and ``status`` (created, exists); a refusal raises."""
        stored, created = self.operations.create(parse_item(item), self.caller)
        return {"status": "created" if created else "exists", **stored.model_dump(mode="json")}

    def prepare_import(self, items: Items) -> Callable[[], Added]:
        """Validates ``items`` now; the call stores them, summed up without a result
        object per item."""
        store = self.operations.prepare_many(items, self.caller, results=False)

        def write() -> Added:
            stored = store()
            errors = [(i, e.code, e.message) for i, e in sorted(stored.errors.items())]
            return Added(stored.created, stored.exists, errors)

        return write

    def set_expiry(self, sub_id: int, expires_at: str | None, ttl: int | None) -> Item | None:
        from topicstore.models import ExpiryIn

        body = ExpiryIn.model_validate(
            {"ttl": ttl} if ttl is not None else {"expires_at": expires_at}
        )
        try:
            stored = self.operations.set_expiry(sub_id, body, self.caller)
        except NotFoundError:
            return None
        return stored.model_dump(mode="json")

    def remove(self, sub_id: int) -> bool:
        try:
            self.operations.remove(sub_id, self.caller)
        except NotFoundError:
            return False
        return True

    def remove_selection(self, **filters: str | None) -> Item:
        from app.admin_reads import selection_of

        deleted = self.operations.remove_selection(self.caller, selection_of(**filters))
        return deleted.model_dump(mode="json")

    def get(self, sub_id: int) -> Item | None:
        try:
            return self.operations.get(sub_id, self.caller).model_dump(mode="json")
        except NotFoundError:
            return None

    def page(self, **filters: Any) -> list[Item]:
        from app.table_reads import subscription_page

        page = subscription_page(self._table, self.operations, self.caller, **filters)
        return [row.model_dump(mode="json") for row in page.items]

    def _table(self) -> RoutingTable:
        """The whole routing table, built from the store: fine for a one-off command."""
        from loader import Loader

        return Loader(self.db, self.settings.engines, limits=self.settings.limits()).build()

    def match(self, topic: str, dialect: str, tenant: str | None, key: str | None = None) -> Item:
        from app.delivery import delivery, hash_key

        hashed = hash_key(key, topic)
        table = self._table()
        tenant = OPERATOR.tenant_for(tenant)
        ids = table.routes(tenant, dialect, topic)
        return delivery(table, tenant, ids, hashed)

    def explain(
        self, topic: str, dialect: str, tenant: str | None, subscribers: Sequence[str]
    ) -> Item:
        from app.table_reads import explain_topic
        from app.work import budget_for

        tenant = OPERATOR.tenant_for(tenant)
        budget = budget_for(self.settings, "explain_budget")
        explained = explain_topic(self._table(), tenant, dialect, topic, subscribers, budget)
        return explained.model_dump(mode="json")

    def redundant(self, subscriber: str, dialect: str, tenant: str | None) -> Item:
        from app.table_reads import redundant_patterns
        from app.work import budget_for

        tenant = OPERATOR.tenant_for(tenant)
        budget = budget_for(self.settings, "redundancy_budget")
        found = redundant_patterns(self._table(), tenant, subscriber, dialect, budget)
        return found.model_dump(mode="json")

    def export(self, path: Path, tenant: str | None) -> int:
        return self.operations.export(path, self.caller, tenant)

    def audit(self, **filters: Any) -> list[Item]:
        page = self.operations.audit_page(self.caller, **filters)
        return [row.model_dump(mode="json") for row in page.items]


def _user() -> str:
    """Who runs the command, as the operating system says (a container may not know)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown"
