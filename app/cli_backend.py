"""How the command line reaches the store: directly (``cli_direct``) when nothing else holds
it, or through the running service's API (``cli_http``). DuckDB lets one process own its
file, so while the server runs the CLI must go through it. Both answer with the API's JSON
shapes, so a command prints the same fields either way."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from app.settings import Settings

Item = dict[str, Any]


class Admin(Protocol):
    """What the CLI does, whichever way it reaches the store."""

    def add_many(self, items: Sequence[Item]) -> list[Item]: ...
    def remove(self, sub_id: int) -> bool: ...
    def page(self, **filters: Any) -> list[Item]: ...
    def match(self, topic: str, dialect: str, tenant: str | None) -> Item: ...
    def export(self, path: Path, tenant: str | None) -> int: ...


@contextmanager
def connect(settings: Settings, api_url: str | None = None) -> Iterator[Admin]:
    """The store directly when nothing else holds it; otherwise the running service (at
    ``api_url``, or the configured host and port)."""
    from store import Database, DatabaseLockedError

    if api_url is None:
        try:
            db = Database(settings.database_url)
        except DatabaseLockedError:
            api_url = f"http://{settings.host}:{settings.port}"
        else:
            from app.cli_direct import DirectAdmin
            from migrations.runner import upgrade

            try:
                upgrade(db.url)
                yield DirectAdmin(db, settings)
            finally:
                db.dispose()
            return
    from app.auth import dev_token
    from app.cli_http import HttpAdmin

    with HttpAdmin(api_url, settings.admin_token or dev_token(settings)) as admin:
        yield admin
