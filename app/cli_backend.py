"""How the command line reaches the store: directly (``cli_direct``) when nothing else holds
it, or through the running service's API (``cli_http``). DuckDB lets one process own its
file, so while the server runs the CLI must go through it. Both answer with the API's JSON
shapes, so a command prints the same fields either way."""

from __future__ import annotations

import sys
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
    def match(
        self, topic: str, dialect: str, tenant: str | None, key: str | None = None
    ) -> Item: ...
    def explain(
        self, topic: str, dialect: str, tenant: str | None, subscribers: Sequence[str]
    ) -> Item: ...
    def redundant(self, subscriber: str, dialect: str, tenant: str | None) -> Item: ...
    def export(self, path: Path, tenant: str | None) -> int: ...
    def audit(self, **filters: Any) -> list[Item]: ...


def announce_new_store(url: str) -> None:
    """Say on stderr which DuckDB file a command is about to create (run outside the
    clone, ``export`` once made an empty ``./data/topicstore.duckdb`` without a word)."""
    from store import duckdb_file

    path = duckdb_file(url)
    if path is not None and not path.exists():
        print(f"creating a new store: {path.resolve()}", file=sys.stderr)


@contextmanager
def connect(settings: Settings, api_url: str | None = None, *, create: bool) -> Iterator[Admin]:
    """The store directly when nothing else holds it; otherwise the running service (at
    ``api_url``, or the configured host and port). ``create``: a store that is not there
    is created and migrated (said on stderr); otherwise it must have been migrated, to the
    current schema (``NoSchemaError``), and is used as it is."""
    from store import Database, DatabaseLockedError

    if api_url is None:
        if create:
            announce_new_store(settings.database_url)
        try:
            db = Database(settings.database_url, create=create)
        except DatabaseLockedError:
            api_url = f"http://{settings.host}:{settings.port}"
        else:
            from app.cli_direct import DirectAdmin
            from migrations.runner import upgrade
            from store.models import Base

            try:
                if create:
                    upgrade(db.url)
                else:
                    # Every table: a write records its audit row (``sub rm`` on a store
                    # of an older release would otherwise fail half way).
                    db.require_schema(Base.metadata.tables)
                yield DirectAdmin(db, settings)
            finally:
                db.dispose()
            return
    from app.auth import dev_token
    from app.cli_http import HttpAdmin

    with HttpAdmin(api_url, settings.admin_token or dev_token(settings)) as admin:
        yield admin
