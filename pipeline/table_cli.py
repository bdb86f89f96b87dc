"""``topicstore table``: maintenance of a routed table (``pipeline.maintenance``) and its
history. Plain delta-rs calls, no Spark; each is safe while a stream appends to the table."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from pipeline.errors import PipelineError
from pipeline.maintenance import DEFAULT_RETAIN_HOURS, DEFAULT_TARGET_BYTES, Outcome

table = typer.Typer(
    help="Maintain a routed table: compaction, retention, vacuum, history.",
    no_args_is_help=True,
    add_completion=False,
)

T = TypeVar("T")

TablePath = Annotated[
    Path, typer.Argument(help="The routed table (a route --out directory).", show_default=False)
]


def _call(work: Callable[[], T]) -> T:
    """``work``'s result; a ``PipelineError`` becomes the CLI's ``error: code: message``
    line and exit status 2."""
    try:
        return work()
    except PipelineError as e:
        typer.echo(f"error: {e.code}: {e.message}", err=True)
        raise typer.Exit(2) from e


def _report(work: Callable[[], Outcome]) -> None:
    typer.echo(_call(work).line())


@table.command()
def compact(
    path: TablePath,
    target_mb: Annotated[
        int,
        typer.Option("--target-mb", min=1, max=4096, help="Size of the files written, in MiB."),
    ] = DEFAULT_TARGET_BYTES // (1024 * 1024),
) -> None:
    """Rewrite each partition's small files into large ones (one commit; same rows)."""
    from pipeline.maintenance import compact as run

    _report(lambda: run(path, target_mb * 1024 * 1024))


@table.command()
def expire(
    path: TablePath,
    days: Annotated[
        int, typer.Option("--days", min=0, max=100_000, help="Keep this many days (UTC).")
    ],
) -> None:
    """Delete the rows of days older than --days (whole files; rows without a date stay)."""
    from pipeline.maintenance import expire as run

    _report(lambda: run(path, days))


@table.command()
def vacuum(
    path: TablePath,
    retain_hours: Annotated[
        int,
        typer.Option(
            "--retain-hours",
            min=1,
            max=100_000,
            help="Keep every file a version of the last N hours needs; longer than any batch.",
        ),
    ] = DEFAULT_RETAIN_HOURS,
) -> None:
    """Delete the files no recent version needs (removed ones, uncommitted leftovers)."""
    from pipeline.maintenance import vacuum as run

    _report(lambda: run(path, retain_hours))


@table.command()
def history(
    path: TablePath,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000, help="Commits.")] = 20,
) -> None:
    """The table's commits, newest first, as JSON lines (version, operation, and what
    route or the stream recorded: batch, change_seq, counts)."""
    from pipeline import delta

    entries = _call(lambda: delta.history(delta.locate_table(path), limit))
    for entry in entries:
        typer.echo(json.dumps(entry, sort_keys=True, default=str))
