"""The ``topicstore`` command line. One typer app; each feature adds its own command.

Only typer loads up front: every command imports what it needs (the store, FastAPI, Spark,
the bench suite) when it runs, so ``topicstore --help`` and ``sub ls`` stay quick."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from app.cli_backend import Admin

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


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def bench(ctx: typer.Context) -> None:
    """Run the benchmark tables beside the dict-trie baseline (`topicstore bench --help`)."""
    from bench.cli import main as bench_main  # the bench suite loads only for this command

    bench_main(ctx.args, prog_name="topicstore bench")


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
    from migrations.runner import upgrade
    from store import Database

    db = Database(database_url or get_settings().database_url)
    try:
        upgrade(db.url, revision)
    finally:
        db.dispose()
    typer.echo(f"migrated {db.backend.value} database to {revision}")


sub = typer.Typer(
    help="Manage subscriptions (through the running service when it holds the store)."
)
app.add_typer(sub, name="sub")

ApiOption = Annotated[
    str | None,
    typer.Option(
        "--api",
        help="Service URL. Default: the store itself, or the local service if it holds it.",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


@contextmanager
def _admin(api: str | None) -> Iterator[Admin]:
    """The store or the running service (see ``app.cli_backend``); a refusal (quota,
    batch size, a service's error) ends the command with one line, not a traceback."""
    from app.cli_backend import connect
    from app.refusals import ServiceError
    from app.settings import get_settings

    try:
        with connect(get_settings(), api) as admin:
            yield admin
    except ServiceError as e:
        typer.echo(f"error: {e.code}: {e.message}", err=True)
        raise typer.Exit(1) from e


def _emit(data: object, as_json: bool, human: str) -> None:
    if as_json:
        typer.echo(json.dumps(data, ensure_ascii=False))
    else:
        typer.echo(human)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (TOPICSTORE_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (TOPICSTORE_PORT).")] = None,
    dev: Annotated[
        bool, typer.Option("--dev", help="Development mode: make an admin token if none is set.")
    ] = False,
) -> None:
    """Run the API (migrations are applied at startup)."""
    import uvicorn
    from pydantic import ValidationError

    from app.auth import ConfigurationError, secure
    from app.main import create_app
    from app.settings import Settings

    try:
        settings = Settings()
    except ValidationError as e:
        for problem in e.errors():
            name = "TOPICSTORE_" + "_".join(map(str, problem["loc"])).upper()
            typer.echo(f"error: {name}: {problem['msg']}", err=True)
        raise typer.Exit(2) from e
    updates: dict[str, object] = {"dev": settings.dev or dev}
    if host is not None:
        updates["host"] = host
    if port is not None:
        updates["port"] = port
    settings = settings.model_copy(update=updates)
    try:
        settings = secure(settings)
    except ConfigurationError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    url = f"http://{settings.host}:{settings.port}"
    typer.echo(f"topicstore on {settings.database_url}")
    typer.echo(f"  API:   {url}")
    typer.echo(f"  docs:  {url}/docs")
    if dev or settings.dev:
        typer.secho(
            f"  DEVELOPMENT MODE — admin token: {settings.admin_token}", fg="yellow", bold=True
        )
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level="info",
        access_log=settings.access_log,
    )


@sub.command("add")
def sub_add(
    subscriber: str,
    pattern: str,
    dialect: Annotated[str, typer.Option(help="amqp, mqtt or nats.")] = "amqp",
    tenant: Annotated[str | None, typer.Option()] = None,
    label: Annotated[list[str] | None, typer.Option(help="key=value (repeatable).")] = None,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """Add one subscription."""
    labels = dict(item.split("=", 1) for item in label or []) or None
    item = {
        "subscriber": subscriber,
        "pattern": pattern,
        "dialect": dialect,
        "tenant": tenant,
        "labels": labels,
    }
    with _admin(api) as admin:
        (result,) = admin.add_many([item])
    if result["status"] == "error":
        _emit(result, as_json, f"error: {result['error']['code']}: {result['error']['message']}")
        raise typer.Exit(1)
    _emit(result, as_json, f"{result['status']} subscription {result['id']}")


@sub.command("rm")
def sub_rm(sub_id: int, api: ApiOption = None, as_json: JsonOption = False) -> None:
    """Remove one subscription by id."""
    with _admin(api) as admin:
        removed = admin.remove(sub_id)
    _emit(
        {"id": sub_id, "removed": removed},
        as_json,
        "removed" if removed else f"no subscription {sub_id}",
    )
    if not removed:
        raise typer.Exit(1)


@sub.command("ls")
def sub_ls(
    subscriber: Annotated[str | None, typer.Option()] = None,
    pattern_prefix: Annotated[str | None, typer.Option()] = None,
    dialect: Annotated[str | None, typer.Option()] = None,
    tenant: Annotated[str | None, typer.Option(help="Default: the default tenant.")] = None,
    after: Annotated[int | None, typer.Option(help="Last id seen (pagination).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """List subscriptions in id order."""
    with _admin(api) as admin:
        rows = admin.page(
            tenant=tenant,
            subscriber=subscriber,
            pattern_prefix=pattern_prefix,
            dialect=dialect,
            after=after,
            limit=limit,
        )
    lines = [f"{r['id']:>10}  {r['subscriber']:<20} {r['dialect']:<6} {r['pattern']}" for r in rows]
    _emit(rows, as_json, "\n".join(lines) if lines else "(none)")


@sub.command("import")
def sub_import(
    path: Path,
    batch: Annotated[int, typer.Option(min=1, max=10_000, help="Items per request.")] = 1_000,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """Import a CSV (subscriber,pattern[,dialect,tenant]) or JSON-lines file; every bad line
    is reported with its line number, the good ones are stored."""
    from app.imports import read_items

    items, problems = read_items(path)
    report: list[dict[str, object]] = list(problems)
    created = exists = 0
    with (
        _admin(api) as admin,
        typer.progressbar(length=len(items), label="importing") as bar,
    ):
        for start in range(0, len(items), batch):
            chunk = items[start : start + batch]
            for (line, _), result in zip(
                chunk, admin.add_many([item for _, item in chunk]), strict=True
            ):
                if result["status"] == "error":
                    report.append({"line": line, **result["error"]})
                else:
                    created += result["status"] == "created"
                    exists += result["status"] == "exists"
            bar.update(len(chunk))
    report.sort(key=lambda problem: int(str(problem["line"])))
    summary = {"created": created, "exists": exists, "failed": len(report), "errors": report}
    human = [f"created {created}, already there {exists}, failed {len(report)}"]
    human += [f"  line {p['line']}: {p['code']}: {p['message']}" for p in report]
    _emit(summary, as_json, "\n".join(human))
    if report:
        raise typer.Exit(1)


@app.command("match")
def match_topic(
    topic: str,
    dialect: Annotated[str, typer.Option()] = "amqp",
    tenant: Annotated[str | None, typer.Option()] = None,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """Which subscriptions match TOPIC."""
    with _admin(api) as admin:
        result = admin.match(topic, dialect, tenant)
    ids, names = result["subscriptions"], ", ".join(result["subscribers"])
    human = f"{len(ids)} subscriptions: {ids}\nsubscribers: {names}"
    _emit(result, as_json, human)


@app.command()
def export(
    path: Path,
    tenant: Annotated[str | None, typer.Option()] = None,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """Write the subscriptions to a Parquet file (the input of `topicstore route`)."""
    with _admin(api) as admin:
        rows = admin.export(path, tenant)
    _emit({"path": str(path), "rows": rows}, as_json, f"wrote {rows} subscriptions to {path}")


def _register_pipeline_commands() -> None:
    """The Spark job and the analytics live in pipeline/; they are commands of this one CLI
    (``pipeline.cli`` loads neither Spark nor DuckDB until one runs)."""
    from pipeline.cli import analytics, route

    app.command()(route)
    app.command()(analytics)


_register_pipeline_commands()


def main() -> None:
    """Console entry point (``topicstore``)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # We report what ran ourselves; these libraries log every step at INFO.
    for chatty in ("alembic", "httpx"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    app()
