"""``topicstore sub ...``: add, remove, list and import subscriptions, find a subscriber's
redundant patterns; and ``topicstore export`` (the subscriptions as Parquet)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from app.cli.errors import REFUSED, UsageError
from app.cli.options import (
    TOPIC_DIALECTS,
    TOPIC_DIALECTS_TEXT,
    ApiOption,
    JsonOption,
    check_dialect,
    emit,
    labels_text,
    store_admin,
    table,
)

sub = typer.Typer(
    help="Manage subscriptions (through the running service when it holds the store)."
)


@sub.command("add")
def sub_add(
    subscriber: str,
    pattern: str,
    dialect: Annotated[str, typer.Option(help=f"{TOPIC_DIALECTS_TEXT}.")] = "amqp",
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
    check_dialect(dialect)
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
    with store_admin(api, create=True) as admin:
        result = admin.add(item)
    emit(result, as_json, f"{result['status']} subscription {result['id']}")


@sub.command("rm")
def sub_rm(sub_id: int, api: ApiOption = None, as_json: JsonOption = False) -> None:
    """Remove one subscription by id."""
    with store_admin(api) as admin:
        removed = admin.remove(sub_id)
    if removed or as_json:
        emit({"id": sub_id, "removed": removed}, as_json, "removed")
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
    if dialect is not None:
        from store.records import HEADERS_DIALECT  # listings know headers subscriptions too

        check_dialect(dialect, (*TOPIC_DIALECTS, HEADERS_DIALECT))
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
    with store_admin(api) as admin:
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
            labels_text(r["labels"]),
        )
        for r in rows
    ]
    emit(rows, as_json, table(header, cells) if cells else "(none)")


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
    check_dialect(dialect)
    with store_admin(api) as admin:
        result = admin.redundant(subscriber, dialect, tenant)
    header = ("ID", "PATTERN", "COVERED BY", "ITS PATTERN")
    cells = [
        (str(r["id"]), r["pattern"], str(r["covered_by"]), r["covered_by_pattern"])
        for r in result["redundant"]
    ]
    if not result["patterns"]:
        if as_json:
            emit(result, as_json, "")
        else:
            typer.echo(
                f"error: not_found: {subscriber!r} has no {dialect} subscriptions "
                f"(tenant {result['tenant']})",
                err=True,
            )
        raise typer.Exit(REFUSED)
    human = table(header, cells) if cells else f"(none of {result['patterns']} redundant)"
    emit(result, as_json, human)


@sub.command("import")
def sub_import(
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    batch: Annotated[
        int, typer.Option(min=1, max=10_000, help="Items per transaction (or request).")
    ] = 10_000,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """Import a CSV (subscriber,pattern[,dialect,tenant,group,group_policy]) or JSON-lines
    file; every bad line is reported with its line number, the good ones are stored. The
    file is read as it is stored, a batch at a time: a file of any size takes the memory of
    one batch."""
    from concurrent.futures import Future, ThreadPoolExecutor

    from app.cli.protocol import Added
    from app.imports import Batch, read_batches

    report: list[dict[str, object]] = []
    created = exists = 0

    def settle(chunk: Batch, future: Future[Added]) -> None:
        nonlocal created, exists
        added = future.result()
        created += added.created
        exists += added.exists
        report.extend(
            {"line": chunk.lines[index], "code": code, "message": message}
            for index, code, message in added.errors
        )

    with (
        store_admin(api, create=True, bulk=True) as admin,
        typer.progressbar(length=path.stat().st_size, label="importing", file=sys.stderr) as bar,
        ThreadPoolExecutor(1, thread_name_prefix="topicstore-import") as writer,
    ):
        # One batch is stored while the next is read and validated: the store's work
        # (waiting on PostgreSQL or in DuckDB, the GIL released) overlaps them. Batches are
        # stored in order.
        done = 0
        writing: tuple[Batch, Future[Added]] | None = None
        for chunk in read_batches(path, batch):
            report += chunk.problems
            write = admin.prepare_import(chunk.items)
            if writing is not None:
                settle(*writing)
                writing = None
            if chunk.items.size:
                writing = chunk, writer.submit(write)
            bar.update(chunk.position - done)
            done = chunk.position
        if writing is not None:
            settle(*writing)
    report.sort(key=lambda problem: int(str(problem["line"])))
    summary = {"created": created, "exists": exists, "failed": len(report), "errors": report}
    human = [f"created {created}, already there {exists}, failed {len(report)}"]
    human += [f"  line {p['line']}: {p['code']}: {p['message']}" for p in report]
    emit(summary, as_json, "\n".join(human))
    if report:
        raise typer.Exit(REFUSED)


def export(
    path: Path,
    tenant: Annotated[str | None, typer.Option()] = None,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """Write the subscriptions to a Parquet file (the input of `topicstore route`); a store
    that was never migrated is refused, not created empty."""
    with store_admin(api) as admin:
        rows = admin.export(path, tenant)
    emit({"path": str(path), "rows": rows}, as_json, f"wrote {rows} subscriptions to {path}")
