"""What a command asks of the store, whichever way the command line reaches it: the store
itself (``app.cli.direct``) or a running service's API (``app.cli.http``). Both answer with
the API's JSON shapes, so a command prints the same fields either way."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

#: One JSON object of the API (a subscription, a result, a match).
Item = dict[str, Any]


class Admin(Protocol):
    """What the CLI does, whichever way it reaches the store."""

    def add_many(self, items: Sequence[Item]) -> list[Item]: ...
    def remove(self, sub_id: int) -> bool: ...
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
