"""``topicstore-bench`` (also ``topicstore bench``): the benchmark tables from the command
line. Its own entry point, so the product's command line never imports the bench suite
(or matplotlib) unless this command runs."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from bench.tables import TABLES
from matcher import ENGINES

#: Plain help, as the ``topicstore`` command line writes it (``app.cli``): no boxes, no
#: ``<bool>`` after a flag, paragraphs re-wrapped to the terminal.
app = typer.Typer(add_completion=False, rich_markup_mode=None)


def _tables_text() -> str:
    """The tables, one paragraph each (click re-wraps each to the terminal on its own)."""
    return "Tables:\n\n" + "\n\n".join(
        f"{name}: {table.description}" for name, table in TABLES.items()
    )


@app.command(epilog=_tables_text())
def bench(
    tables: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="TABLE",
            help="Tables to run (default all; listed below).",
            show_default=False,
        ),
    ] = None,
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
    """Run the benchmark tables beside the dict-trie baseline."""
    from bench.suite import run

    engines = engine or list(ENGINES)
    unknown = [name for name in engines if name not in ENGINES]
    if unknown:
        raise typer.BadParameter(
            f"unknown engine(s) {', '.join(unknown)}; known: {', '.join(ENGINES)}",
            param_hint="--engine",
        )
    unknown_tables = [name for name in tables or () if name not in TABLES]
    if unknown_tables:
        raise typer.BadParameter(
            f"unknown table(s) {', '.join(unknown_tables)}; known: {', '.join(TABLES)}",
            param_hint="TABLE",
        )
    run(out, engines, quick, tables=tables, messages=messages, repeats=repeats)


def main(args: list[str] | None = None, prog_name: str = "topicstore-bench") -> None:
    """Console entry point."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    app(args=args, prog_name=prog_name)
