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
    # Settings gives `route` its defaults here (only then are they read): the store and
    # the class archive, and for --api the token as every command finds it.
    if ctx.invoked_subcommand == "route":
        from app.auth import dev_token
        from app.settings import get_settings

        settings = get_settings()
        ctx.default_map = {
            "route": {
                "class_archive": settings.spark_class_archive,
                "database_url": settings.database_url,
                "token": settings.admin_token or dev_token(settings),
            }
        }


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
    short_help="Run the benchmark tables beside the dict-trie baseline.",
)
def bench(ctx: typer.Context) -> None:
    """Run the benchmark tables beside the dict-trie baseline (`topicstore bench --help`)."""
    from bench.cli import main as bench_main  # the bench suite loads only for this command

    bench_main(ctx.args, prog_name="topicstore bench")


app.command(short_help="Apply the database migrations (idempotent).")(migrate)
app.add_typer(sub, name="sub")
app.command()(serve)
app.command("audit", short_help="List admin changes: when, what, by whom, from where.")(audit_log)
app.command("match", short_help="Which subscribers receive a message on TOPIC.")(match_topic)
app.command(short_help="Write the subscriptions to a Parquet file.")(export)
# The Spark job and the analytics live in pipeline/ (``pipeline.cli`` loads neither Spark
# nor DuckDB until one runs); they are commands of this one CLI.
app.command(short_help="Route a table of messages to the subscriptions (Spark).")(route)
app.command(short_help="Query a routed table with DuckDB.")(analytics)
app.add_typer(table, name="table")


def main() -> None:
    """Console entry point (``topicstore``)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # We report what ran ourselves; these libraries log every step at INFO.
    for chatty in ("alembic", "httpx"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    app()
