"""The ``topicstore`` command line. One typer app; each feature adds its own command.

Only typer loads up front: every command imports what it needs (the store, FastAPI, Spark,
the bench suite) when it runs, so ``topicstore --help`` and ``sub ls`` stay quick."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.cli_errors import REFUSED, ReportingGroup, UsageError

if TYPE_CHECKING:
    from app.cli_backend import Admin

app = typer.Typer(
    cls=ReportingGroup,  # a known error ends a command with one line (app/cli_errors.py)
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
    """Apply the database migrations (PostgreSQL or DuckDB; idempotent). Creates the DuckDB
    file if there is none (and says so)."""
    from app.cli_backend import announce_new_store
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
def _admin(api: str | None, *, create: bool = False) -> Iterator[Admin]:
    """The store or the running service (see ``app.cli_backend``). ``create``: a command
    that writes may create and migrate a store that is not there yet; one that only reads
    refuses it (``no_schema``)."""
    from app.cli_backend import connect
    from app.settings import get_settings

    with connect(get_settings(), api, create=create) as admin:
        yield admin


def _emit(data: object, as_json: bool, human: str) -> None:
    if as_json:
        typer.echo(json.dumps(data, ensure_ascii=False))
    else:
        typer.echo(human)


#: What ``--dialect`` may name: the topic dialects; listings also know ``headers``.
_TOPIC_DIALECTS = ("amqp", "mqtt", "nats")
_STORED_DIALECTS = (*_TOPIC_DIALECTS, "headers")


def _dialect(value: str | None, known: Sequence[str]) -> None:
    """Refuse an unknown ``--dialect`` (it once listed nothing and exited 0)."""
    if value is not None and value not in known:
        raise UsageError("invalid_dialect", f"unknown dialect {value!r}; known: {', '.join(known)}")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Rows in columns as wide as their widest cell, under a header."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    )


def _labels(labels: dict[str, Any] | None) -> str:
    if not labels:
        return "-"
    return ",".join(
        f"{key}={value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}"
        for key, value in labels.items()
    )


@app.command()
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
    from app.cli_backend import announce_new_store
    from app.serving import serve as run
    from app.settings import Settings
    from store import backend_of
    from store.db import Backend

    settings = Settings()
    updates: dict[str, object] = {"dev": settings.dev or dev}
    if host is not None:
        updates["host"] = host
    if port is not None:
        updates["port"] = port
    if workers is not None:
        updates["workers"] = workers
    settings = settings.model_copy(update=updates)
    if settings.workers > 1 and backend_of(settings.database_url) is not Backend.POSTGRES:
        raise UsageError(
            "workers_need_postgres",
            "--workers above 1 needs PostgreSQL: a DuckDB file has one owning process "
            "(run one worker, or set TOPICSTORE_DATABASE_URL to a PostgreSQL database)",
        )
    settings = secure(settings)
    announce_new_store(settings.database_url)
    run(settings, announce_token=settings.dev)


@sub.command("add")
def sub_add(
    subscriber: str,
    pattern: str,
    dialect: Annotated[str, typer.Option(help="amqp, mqtt or nats.")] = "amqp",
    tenant: Annotated[str | None, typer.Option()] = None,
    label: Annotated[list[str] | None, typer.Option(help="key=value (repeatable).")] = None,
    group: Annotated[
        str | None,
        typer.Option(help="Shared subscription: one member per group receives each message."),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(help="The group's policy: random, round_robin or hash (with --group)."),
    ] = None,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """Add one subscription (creates and migrates the store if there is none). An MQTT
    filter $share/GROUP/FILTER is a shared subscription, like --group GROUP."""
    _dialect(dialect, _TOPIC_DIALECTS)
    if any("=" not in item for item in label or []):
        raise UsageError("invalid_label", "--label takes key=value")
    labels = dict(item.split("=", 1) for item in label or []) or None
    item = {
        "subscriber": subscriber,
        "pattern": pattern,
        "dialect": dialect,
        "tenant": tenant,
        "labels": labels,
        "group": group,
        "group_policy": policy,
    }
    with _admin(api, create=True) as admin:
        (result,) = admin.add_many([item])
    if result["status"] == "error":
        if as_json:
            _emit(result, as_json, "")
        else:
            typer.echo(f"error: {result['error']['code']}: {result['error']['message']}", err=True)
        raise typer.Exit(REFUSED)
    _emit(result, as_json, f"{result['status']} subscription {result['id']}")


@sub.command("rm")
def sub_rm(sub_id: int, api: ApiOption = None, as_json: JsonOption = False) -> None:
    """Remove one subscription by id."""
    with _admin(api) as admin:
        removed = admin.remove(sub_id)
    if removed or as_json:
        _emit({"id": sub_id, "removed": removed}, as_json, "removed")
    else:
        typer.echo(f"error: not_found: no subscription {sub_id}", err=True)
    if not removed:
        raise typer.Exit(REFUSED)


@sub.command("ls")
def sub_ls(
    subscriber: Annotated[str | None, typer.Option()] = None,
    pattern_prefix: Annotated[str | None, typer.Option()] = None,
    dialect: Annotated[str | None, typer.Option()] = None,
    tenant: Annotated[str | None, typer.Option(help="Default: the default tenant.")] = None,
    after: Annotated[int | None, typer.Option(help="Last id seen (pagination).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    overlaps: Annotated[
        str | None, typer.Option(help="Only patterns sharing a topic with this one.")
    ] = None,
    covered_by: Annotated[
        str | None, typer.Option(help="Only patterns whose every topic this one matches.")
    ] = None,
    group: Annotated[
        str | None, typer.Option(help="Only members of this shared-subscription group.")
    ] = None,
    label: Annotated[
        str | None, typer.Option(help="Only subscriptions whose labels hold KEY=VALUE.")
    ] = None,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """List subscriptions in id order (the same fields, --json, direct or through the API).
    With --overlaps or --covered-by (in --dialect, default amqp) a page may hold fewer rows
    than --limit when other filters apply: continue with --after the last id seen."""
    _dialect(dialect, _STORED_DIALECTS)
    if label is not None and not label.partition("=")[0]:
        raise typer.BadParameter("KEY=VALUE, with a key", param_hint="--label")
    related = {
        name: value
        for name, value in (
            ("overlaps", overlaps),
            ("covered_by", covered_by),
            ("group", group),
            ("label", label),
        )
        if value is not None
    }
    with _admin(api) as admin:
        rows = admin.page(
            tenant=tenant,
            subscriber=subscriber,
            pattern_prefix=pattern_prefix,
            dialect=dialect,
            after=after,
            limit=limit,
            **related,
        )
    header = ("ID", "SUBSCRIBER", "DIALECT", "PATTERN", "GROUP", "LABELS")
    cells = [
        (
            str(r["id"]),
            r["subscriber"],
            r["dialect"],
            r["pattern"],
            f"{r['group']} ({r['group_policy']})" if r.get("group") else "-",
            _labels(r["labels"]),
        )
        for r in rows
    ]
    _emit(rows, as_json, _table(header, cells) if cells else "(none)")


@sub.command("redundant")
def sub_redundant(
    subscriber: str,
    dialect: Annotated[str, typer.Option()] = "amqp",
    tenant: Annotated[str | None, typer.Option()] = None,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """SUBSCRIBER's patterns that another of its patterns covers (safe to remove: it
    receives the same messages without them)."""
    _dialect(dialect, _TOPIC_DIALECTS)
    with _admin(api) as admin:
        result = admin.redundant(subscriber, dialect, tenant)
    header = ("ID", "PATTERN", "COVERED BY", "ITS PATTERN")
    cells = [
        (str(r["id"]), r["pattern"], str(r["covered_by"]), r["covered_by_pattern"])
        for r in result["redundant"]
    ]
    human = _table(header, cells) if cells else f"(none of {result['patterns']} redundant)"
    _emit(result, as_json, human)


@sub.command("import")
def sub_import(
    path: Path,
    batch: Annotated[int, typer.Option(min=1, max=10_000, help="Items per request.")] = 1_000,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """Import a CSV (subscriber,pattern[,dialect,tenant,group,group_policy]) or JSON-lines
    file; every bad line is reported with its line number, the good ones are stored."""
    from app.imports import read_items

    items, problems = read_items(path)
    report: list[dict[str, object]] = list(problems)
    created = exists = 0
    with (
        _admin(api, create=True) as admin,
        typer.progressbar(length=len(items), label="importing", file=sys.stderr) as bar,
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
        raise typer.Exit(REFUSED)


#: What ``audit --action`` may name.
_AUDIT_ACTIONS = ("create", "delete", "bulk_create", "delete_subscriber")


def _time(value: str | None, option: str) -> datetime | None:
    """An ISO 8601 time option (no offset: UTC, as the API reads it)."""
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(
            "invalid_time", f"{option} takes an ISO 8601 time, not {value!r}"
        ) from None


def _ids(ids: Sequence[int], shown: int = 5) -> str:
    text = ",".join(map(str, ids[:shown]))
    return f"{text},… (+{len(ids) - shown})" if len(ids) > shown else text


@app.command("audit")
def audit_log(
    tenant: Annotated[str | None, typer.Option(help="Default: every tenant.")] = None,
    action: Annotated[str | None, typer.Option(help=", ".join(_AUDIT_ACTIONS))] = None,
    since: Annotated[
        str | None, typer.Option("--from", help="ISO 8601 time (inclusive; no offset: UTC).")
    ] = None,
    until: Annotated[str | None, typer.Option("--to", help="ISO 8601 time (exclusive).")] = None,
    after: Annotated[int | None, typer.Option(help="Last id seen (pagination).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    newest_first: Annotated[bool, typer.Option(help="Newest first (pass --after on).")] = False,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """List admin changes in id order: when, which tenant, what, by whom, from where."""
    if action is not None and action not in _AUDIT_ACTIONS:
        known = ", ".join(_AUDIT_ACTIONS)
        raise UsageError("invalid_action", f"unknown action {action!r}; known: {known}")
    filters = {
        "tenant": tenant,
        "action": action,
        "since": _time(since, "--from"),
        "until": _time(until, "--to"),
        "after": after,
        "limit": limit,
        "order": "desc" if newest_first else "asc",
    }
    with _admin(api) as admin:
        rows = admin.audit(**filters)
    header = ("ID", "TIME", "TENANT", "ACTION", "IDS", "CALLER", "REQUEST", "ADDRESS")
    cells = [
        (
            str(r["id"]),
            r["created_at"],
            r["tenant"],
            r["action"],
            _ids(r["ids"]),
            r["caller_name"],
            r["request_id"],
            r["address"],
        )
        for r in rows
    ]
    _emit(rows, as_json, _table(header, cells) if cells else "(none)")


@app.command("match")
def match_topic(
    topic: str,
    dialect: Annotated[str, typer.Option()] = "amqp",
    tenant: Annotated[str | None, typer.Option()] = None,
    key: Annotated[
        str | None, typer.Option(help="Key of the groups' hash policy (default: the topic).")
    ] = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Show what each wildcard took.")
    ] = False,
    subscriber: Annotated[
        list[str] | None,
        typer.Option(help="With --explain: say why this subscriber did not match (repeatable)."),
    ] = None,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """Which subscribers receive a message on TOPIC: one per line (a count on stderr, and
    each group's choice). --explain: each matched subscription with the words each wildcard
    took, and for each --subscriber that did not match, its closest pattern and the word
    where it failed."""
    _dialect(dialect, _TOPIC_DIALECTS)
    if explain:
        with _admin(api) as admin:
            explained = admin.explain(topic, dialect, tenant, subscriber or [])
        _emit(explained, as_json, _explained(explained))
        return
    if subscriber:
        raise UsageError("explain_only", "--subscriber needs --explain")
    with _admin(api) as admin:
        result = admin.match(topic, dialect, tenant, key)
    if as_json:
        _emit(result, as_json, "")
        return
    for name in result["subscribers"]:
        typer.echo(name)
    typer.echo(
        f"matched: {len(result['subscriptions'])} subscriptions, "
        f"{len(result['subscribers'])} subscribers",
        err=True,
    )
    for choice in result.get("groups", []):
        typer.echo(
            f"group {choice['group']} ({choice['policy']}): {choice['subscriber']} "
            f"(subscription {choice['subscription']}, one of {choice['candidates']})",
            err=True,
        )


def _explained(result: dict[str, Any]) -> str:
    """An explanation for people: one line per matched subscription, then the misses."""
    lines = []
    for m in result["matched"]:
        took = ", ".join(
            f"{c['wildcard']}@{c['token']}={'.'.join(c['words']) or '(nothing)'}"
            for c in m["captures"]
        )
        lines.append(f"{m['id']}  {m['subscriber']}  {m['pattern']}  {took or '(exact)'}")
    if result["truncated"]:
        lines.append(f"... {result['matched_total']} matched in all")
    for u in result["unmatched"]:
        closest = u["closest"]
        if closest is None:
            lines.append(f"{u['subscriber']}: no subscription in this dialect")
            continue
        failure = closest["failure"]
        expected = ",".join(failure["expected"]) or "-"
        lines.append(
            f"{u['subscriber']}: no match; closest {closest['id']} {closest['pattern']} fails "
            f"at word {failure['position']} ({failure['reason']}, expected {expected})"
        )
    return "\n".join(lines) if lines else "(no match)"


@app.command()
def export(
    path: Path,
    tenant: Annotated[str | None, typer.Option()] = None,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """Write the subscriptions to a Parquet file (the input of `topicstore route`); a store
    that was never migrated is refused, not created empty."""
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
