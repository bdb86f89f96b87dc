"""How the command line reaches the store: directly (``app.cli.direct``) when nothing else
holds it, or through the running service's API (``app.cli.http``). DuckDB lets one process
own its file, so while the server runs the CLI must go through it."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Final

from app.cli.protocol import Admin
from app.settings import Settings
from store import DEFAULT_DATABASE_URL

#: What to do about a store never migrated (``no_schema``): it is most often not the store
#: the service runs on, and ``migrate`` would make a second, empty one.
NO_SCHEMA_HINT: Final = (
    "if a service runs on another store, run this in its directory, name its store in "
    "TOPICSTORE_DATABASE_URL, or go through it: --api URL (its token: "
    "TOPICSTORE_ADMIN_TOKEN); `topicstore migrate` makes a new, empty store here"
)


def store_origin(settings: Settings, environ: Mapping[str, str] = os.environ) -> str:
    """Which setting named ``settings.database_url``, for an error about that store: the
    environment, a ``.env`` file (both TOPICSTORE_DATABASE_URL), or the default (a path
    relative to the current directory)."""
    if "TOPICSTORE_DATABASE_URL" in environ:
        return "named by TOPICSTORE_DATABASE_URL"
    if "database_url" in settings.model_fields_set:
        return "named by TOPICSTORE_DATABASE_URL in ./.env"
    return f"the default store, {DEFAULT_DATABASE_URL}, relative to the current directory"


def announce_new_store(url: str) -> None:
    """Say on stderr which DuckDB file a command is about to create (run outside the
    clone, ``export`` once made an empty ``./data/topicstore.duckdb`` without a word)."""
    from store import duckdb_file

    path = duckdb_file(url)
    if path is not None and not path.exists():
        print(f"creating a new store: {path.resolve()}", file=sys.stderr)


@contextmanager
def connect(
    settings: Settings, api_url: str | None = None, *, create: bool, bulk: bool = False
) -> Iterator[Admin]:
    """The store directly when nothing else holds it; otherwise the running service (at
    ``api_url``, or the configured host and port). ``create``: a store that is not there
    is created and migrated (said on stderr); otherwise it must have been migrated, to the
    current schema (``NoSchemaError``), and is used as it is. ``bulk``: the command writes
    in bulk (an embedded DuckDB is then set for it: ``store.Database``)."""
    from app import heap
    from store import Database, DatabaseLockedError

    if api_url is None:
        if create:
            announce_new_store(settings.database_url)
        with heap.kept_out(heap.PANDAS):  # DuckDB would import it, unused (``kept_out``)
            try:
                db = Database(settings.database_url, create=create, bulk=bulk)
            except DatabaseLockedError:
                api_url = f"http://{settings.host}:{settings.port}"
            else:
                from app.cli.direct import DirectAdmin
                from migrations.runner import upgrade
                from store.models import Base

                try:
                    if create:
                        upgrade(db.url)
                    else:
                        # Every table: a write records its audit row (``sub rm`` on a
                        # store of an older release would otherwise fail half way).
                        db.require_schema(Base.metadata.tables)
                    yield DirectAdmin(db, settings)
                finally:
                    db.dispose()
                return
    from app.auth import dev_token
    from app.cli.http import HttpAdmin

    with HttpAdmin(api_url, settings.admin_token or dev_token(settings)) as admin:
        yield admin
