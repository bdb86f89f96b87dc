"""What a command asks of the store, whichever way the command line reaches it: the store
itself (``app.cli.direct``) or a running service's API (``app.cli.http``). Both answer with
the API's JSON shapes, so a command prints the same fields either way."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from app.bulk import Items

#: One JSON object of the API (a subscription, a result, a match).
Item = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Added:
    """What a batch of an import did: how many items were created, how many were there
    already, and each failed item's (index in the batch, code, message)."""

    created: int
    exists: int
    errors: list[tuple[int, str, str]]


class Admin(Protocol):
    """What the CLI does, whichever way it reaches the store."""

    def add(self, item: Item) -> Item:
        """One subscription (``POST /v1/subscriptions``): its fields and ``status``."""
        ...

    def prepare_import(self, items: Items) -> Callable[[], Added]:
        """One batch of an import in two steps: what can be done before the store is
        free (validating, encoding) now; the call stores it."""
        ...

    def remove(self, sub_id: int) -> bool: ...
    def remove_selection(self, **filters: str | None) -> Item:
        """One ``DELETE /v1/subscriptions``: ``deleted`` (ids) and ``more``."""
        ...

    def set_expiry(self, sub_id: int, expires_at: str | None, ttl: int | None) -> Item | None:
        """``PATCH /v1/subscriptions/{id}``: the row, or None when there is none (or it
        has expired)."""
        ...

    def get(self, sub_id: int) -> Item | None: ...
    def page(self, **filters: Any) -> list[Item]: ...
    def match(
        self, topic: str, dialect: str, tenant: str | None, key: str | None = None
    ) -> Item: ...
    def explain(
        self, topic: str, dialect: str, tenant: str | None, subscribers: Sequence[str]
    ) -> Item: ...
    def redundant(self, subscriber: str, dialect: str, tenant: str | None) -> Item: ...
    def export(self, path: Path, tenant: str | None) -> int: ...
    def audit(self, **filters: Any) -> list[Item]: ...
