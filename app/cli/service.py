"""``topicstore serve`` (the API) and ``topicstore migrate`` (the schema): the commands that
run or prepare the service itself."""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli.errors import UsageError


def migrate(
    database_url: Annotated[
        str | None,
        typer.Option("--database-url", help="Default: TOPICSTORE_DATABASE_URL or the DuckDB file."),
    ] = None,
    revision: Annotated[str, typer.Option(help="Target revision.")] = "head",
) -> None:
    """Apply the database migrations (PostgreSQL or DuckDB; idempotent). Creates the DuckDB
    file if there is none (and says so)."""
    from app.cli.connect import announce_new_store
    from app.settings import get_settings
    from migrations.runner import upgrade
    from store import Database

    url = database_url or get_settings().database_url
    announce_new_store(url)
    db = Database(url)
    try:
        upgrade(db.url, revision)
    finally:
        db.dispose()
    typer.echo(f"migrated {db.backend.value} database to {revision}")


def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (TOPICSTORE_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (TOPICSTORE_PORT).")] = None,
    dev: Annotated[
        bool, typer.Option("--dev", help="Development mode: make an admin token if none is set.")
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1, max=64, help="Processes, each with its own loader (TOPICSTORE_WORKERS)."
        ),
    ] = None,
) -> None:
    """Run the API (migrations are applied at startup)."""
    from app.auth import secure
    from app.settings import Settings

    settings = Settings()
    updates: dict[str, object] = {"dev": settings.dev or dev}
    if host is not None:
        updates["host"] = host
    if port is not None:
        updates["port"] = port
    if workers is not None:
        updates["workers"] = workers
    settings = settings.model_copy(update=updates)
    if settings.workers > 1:
        from store import Backend, backend_of

        if backend_of(settings.database_url) is not Backend.POSTGRES:
            raise UsageError(
                "workers_need_postgres",
                "--workers above 1 needs PostgreSQL: a DuckDB file has one owning process "
                "(run one worker, or set TOPICSTORE_DATABASE_URL to a PostgreSQL database)",
            )
    settings = secure(settings)
    # The service loads only once its settings are known to be usable: a refused start
    # answers in the time the settings take to read.
    from app.cli.connect import announce_new_store
    from app.serving import serve as run

    announce_new_store(settings.database_url)
    run(settings, announce_token=settings.dev)
