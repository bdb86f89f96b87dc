"""The ``topicstore`` command line: one typer app whose commands live in this package's
modules (``service``, ``subs``, ``reads``) and in ``pipeline.cli`` (``route``,
``analytics``) and ``pipeline.table_cli`` (``table``), registered here.

Only typer loads up front: every command imports what it needs (the store, FastAPI, Spark,
the bench suite) when it runs, so ``topicstore --help`` and ``sub ls`` stay quick. A known
error ends a command with one line and a documented exit status (``app.cli.errors``)."""

from __future__ import annotations

import logging

import typer

from app.cli.errors import ReportingGroup
from app.cli.reads import audit_log, match_topic
from app.cli.service import migrate, serve
from app.cli.subs import export, sub
from pipeline.cli import analytics, route
from pipeline.table_cli import table

app = typer.Typer(
    cls=ReportingGroup,
    help="topicstore: topic-matching subscription store.",
    no_args_is_help=True,
    add_completion=False,
    # Plain help, as click writes it: paragraphs re-wrapped to the terminal (rich mode keeps
    # the docstrings' line breaks and breaks sentences mid-way) and flags without a type.
    rich_markup_mode=None,
)


@app.callback()
def _root(ctx: typer.Context) -> None:
    """topicstore: topic-matching subscription store."""
    # A callback keeps the app a command group, so `topicstore bench` stays a subcommand
    # even while it is the only command. pipeline/ reads no settings of ours: the one
    # Settings gives `route` its class archive's default here (only then are they read).
    if ctx.invoked_subcommand == "route":
        from app.settings import get_settings

        archive = get_settings().spark_class_archive
        ctx.default_map = {"route": {"class_archive": archive}}


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def bench(ctx: typer.Context) -> None:
    """Run the benchmark tables beside the dict-trie baseline (`topicstore bench --help`)."""
    from bench.cli import main as bench_main  # the bench suite loads only for this command

    bench_main(ctx.args, prog_name="topicstore bench")


app.command()(migrate)
app.add_typer(sub, name="sub")
app.command()(serve)
app.command("audit")(audit_log)
app.command("match")(match_topic)
app.command()(export)
# The Spark job and the analytics live in pipeline/ (``pipeline.cli`` loads neither Spark
# nor DuckDB until one runs); they are commands of this one CLI.
app.command()(route)
app.command()(analytics)
app.add_typer(table, name="table")


def main() -> None:
    """Console entry point (``topicstore``)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # We report what ran ourselves; these libraries log every step at INFO.
    for chatty in ("alembic", "httpx"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    app()
