"""The ``topicstore`` command line. One typer app; each feature adds its own command."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from matcher import ENGINES

app = typer.Typer(
    help="topicstore: topic-matching subscription store.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """topicstore: topic-matching subscription store."""
    # A callback keeps the app a command group, so `topicstore bench` stays a subcommand
    # even while it is the only command.


@app.command()
def bench(
    out: Annotated[
        Path | None, typer.Option("--out", help="Write <table>.txt/.png and results.json here.")
    ] = None,
    engine: Annotated[
        list[str] | None,
        typer.Option("--engine", help=f"Engine to run (repeatable); default all: {ENGINES}."),
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Small sizes: a smoke test.")] = False,
    messages: Annotated[
        int | None, typer.Option("--messages", min=1, help="Throughput messages (100,000).")
    ] = None,
    repeats: Annotated[
        int | None, typer.Option("--repeats", min=1, help="Throughput passes; best kept (3).")
    ] = None,
) -> None:
    """Run seed 000's benchmark tables (throughput, micro, memory) beside the baseline."""
    from bench.suite import run  # matplotlib loads only for this command

    engines = engine or list(ENGINES)
    unknown = [name for name in engines if name not in ENGINES]
    if unknown:
        raise typer.BadParameter(
            f"unknown engine(s) {', '.join(unknown)}; known: {', '.join(ENGINES)}",
            param_hint="--engine",
        )
    run(out, engines, quick, messages=messages, repeats=repeats)


@app.command()
def migrate(
    database_url: Annotated[
        str | None,
        typer.Option("--database-url", help="Default: TOPICSTORE_DATABASE_URL or the DuckDB file."),
    ] = None,
    revision: Annotated[str, typer.Option(help="Target revision.")] = "head",
) -> None:
    """Apply the database migrations (PostgreSQL or DuckDB; idempotent)."""
    from app.settings import get_settings
    from store import Database

    db = Database(database_url or get_settings().database_url)
    try:
        db.migrate(revision)
    finally:
        db.dispose()
    typer.echo(f"migrated {db.backend.value} database to {revision}")


def main() -> None:
    """Console entry point (``topicstore``)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)  # we report what ran ourselves
    app()
