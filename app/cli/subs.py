"""``topicstore sub ...``: add, remove, list and import subscriptions, find a subscriber's
redundant patterns; and ``topicstore export`` (the subscriptions as Parquet)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Final

import typer

from app.cli.errors import REFUSED, UsageError
from app.cli.options import (
    TOPIC_DIALECTS,
    TOPIC_DIALECTS_TEXT,
    ApiOption,
    ExpiresAtOption,
    ExpiresInOption,
    JsonOption,
    check_dialect,
    emit,
    expiry_options,
    labels_text,
    store_admin,
    table,
)
from app.cli.reads import _time

sub = typer.Typer(
    help="Manage subscriptions (through the running service when it holds the store).",
    short_help="Add, remove, list and import subscriptions.",
    no_args_is_help=True,
)


@sub.command("add", short_help="Add one subscription.")
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
    expires_in: ExpiresInOption = None,
    expires_at: ExpiresAtOption = None,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """Add one subscription (creates and migrates the store if there is none). An MQTT
    filter $share/GROUP/FILTER is a shared subscription, like --group GROUP. With
    --expires-in or --expires-at it stops matching at that instant."""
    check_dialect(dialect)
    ttl, instant = expiry_options(expires_in, expires_at)
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
        "ttl": ttl,
        "expires_at": instant,
    }
    with store_admin(api, create=True) as admin:
        result = admin.add(item)
    expiry = f", expires {result['expires_at']}" if result.get("expires_at") else ""
    emit(result, as_json, f"{result['status']} subscription {result['id']}{expiry}")


@sub.command("expire", short_help="Set, extend or clear one subscription's expiry.")
def sub_expire(
    sub_id: int,
    expires_in: Annotated[
        str | None,
        typer.Option("--in", help="Expire this long from now: 3600, 90s, 15m, 2h or 7d."),
    ] = None,
    expires_at: Annotated[
        str | None,
        typer.Option("--at", help="Expire at this RFC 3339 instant (2027-01-01T00:00:00Z)."),
    ] = None,
    never: Annotated[bool, typer.Option("--never", help="Clear its expiry.")] = False,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """Set, extend or clear one subscription's expiry (one of --in, --at, --never)."""
    if sum((expires_in is not None, expires_at is not None, never)) != 1:
        raise UsageError("expiry_options", "give exactly one of --in, --at and --never")
    ttl, instant = expiry_options(expires_in, expires_at)
    with store_admin(api) as admin:
        result = admin.set_expiry(sub_id, instant, ttl)
    if result is None:
        typer.echo(f"error: not_found: no subscription {sub_id}", err=True)
        raise typer.Exit(REFUSED)
    when = result["expires_at"] or "never"
    emit(result, as_json, f"subscription {sub_id} expires {when}")


@sub.command("rm", short_help="Remove one subscription, or every one of a selection.")
def sub_rm(
    sub_id: Annotated[int | None, typer.Argument(help="The subscription's id.")] = None,
    subscriber: Annotated[str | None, typer.Option()] = None,
    pattern_prefix: Annotated[str | None, typer.Option()] = None,
    dialect: Annotated[str | None, typer.Option()] = None,
    tenant: Annotated[str | None, typer.Option(help="Alone: the whole tenant.")] = None,
    group: Annotated[str | None, typer.Option(help="Members of this group.")] = None,
    label: Annotated[str | None, typer.Option(help="Those whose labels hold KEY=VALUE.")] = None,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """Remove one subscription by id; or, given filters instead (those of `sub ls`), every
    subscription they select in the tenant, a request of at most TOPICSTORE_MAX_DELETE
    (100,000) at a time until none is left."""
    filters = {
        "subscriber": subscriber,
        "pattern_prefix": pattern_prefix,
        "dialect": dialect,
        "tenant": tenant,
        "group": group,
        "label": label,
    }
    given = {name: value for name, value in filters.items() if value is not None}
    if sub_id is not None and given:
        raise UsageError("conflicting_filters", "give an id or filters, not both")
    if sub_id is None:
        if not given:
            raise UsageError(
                "selection_required", "give an id, or at least one filter (--tenant alone: all)"
            )
        _check_selection(dialect, label)
        _remove_selection(given, api, as_json)
        return
    with store_admin(api) as admin:
        removed = admin.remove(sub_id)
    if removed or as_json:
        emit({"id": sub_id, "removed": removed}, as_json, "removed")
    else:
        typer.echo(f"error: not_found: no subscription {sub_id}", err=True)
    if not removed:
        raise typer.Exit(REFUSED)


def _remove_selection(filters: dict[str, str], api: str | None, as_json: bool) -> None:
    """Every subscription ``filters`` select, one bounded request after another (each its
    own write and audit row) while the answer says ``more``."""
    deleted: list[int] = []
    with store_admin(api) as admin:
        while True:
            answer = admin.remove_selection(**filters)
            deleted += answer["deleted"]
            if not answer["more"]:
                break
    emit({"deleted": deleted, "more": False}, as_json, f"removed {len(deleted)} subscriptions")


def _check_selection(dialect: str | None, label: str | None) -> None:
    """Refuse a ``--dialect`` or ``--label`` of a selection that the API would refuse."""
    if dialect is not None:
        from store.records import HEADERS_DIALECT  # selections know headers subscriptions too

        check_dialect(dialect, (*TOPIC_DIALECTS, HEADERS_DIALECT))
    if label is not None and not all(label.partition("=")[:2]):
        raise UsageError("invalid_label", "--label takes KEY=VALUE, with a key")


@sub.command("ls", short_help="List subscriptions in id order.")
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
    sort: Annotated[
        str, typer.Option(help="id, or matches: most delivered first (ties by id).")
    ] = "id",
    after_matches: Annotated[
        int | None,
        typer.Option(help="With --sort matches: the MATCHES of the last row seen, with --after."),
    ] = None,
    unmatched_since: Annotated[
        str | None,
        typer.Option(help="Only those not matched since this ISO 8601 time (no offset: UTC)."),
    ] = None,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """List subscriptions in id order, or with --sort matches most matched first (the same
    fields, --json, direct or through the API). MATCHES counts deliveries over every
    replica as of their last flush. With --overlaps or --covered-by (in --dialect, default
    amqp) a page may hold fewer rows than --limit when other filters apply: continue with
    --after the last id seen."""
    if sort not in ORDERS:
        raise typer.BadParameter(f"one of {', '.join(ORDERS)}", param_hint="--sort")
    _check_selection(dialect, label)
    related = {
        name: value
        for name, value in (
            ("overlaps", overlaps),
            ("covered_by", covered_by),
            ("group", group),
            ("label", label),
            ("after_matches", after_matches),
            ("unmatched_since", _time(unmatched_since, "--unmatched-since")),
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
            sort=sort,
            **related,
        )
    emit(rows, as_json, _listing(rows))


#: What ``sub ls --sort`` takes (``topicstore.models.SubscriptionOrder``).
ORDERS: Final = ("id", "matches")


def _listing(rows: list[dict[str, Any]]) -> str:
    """Subscriptions as a table for people (``sub ls``, ``sub get``)."""
    header = (
        "ID",
        "SUBSCRIBER",
        "DIALECT",
        "PATTERN",
        "GROUP",
        "EXPIRES",
        "LABELS",
        "MATCHES",
        "LAST",
    )
    cells = [
        (
            str(r["id"]),
            r["subscriber"],
            r["dialect"],
            r["pattern"],
            f"{r['group']} ({r['group_policy']})" if r.get("group") else "-",
            r.get("expires_at") or "-",
            labels_text(r["labels"]),
            str(r["matches"]),
            (r["last_matched_at"] or "-")[:19].replace("T", " "),
        )
        for r in rows
    ]
    return table(header, cells) if cells else "(none)"


@sub.command("get", short_help="One subscription with its match statistics.")
def sub_get(sub_id: int, api: ApiOption = None, as_json: JsonOption = False) -> None:
    """One subscription with its match statistics (exit 1 when there is none)."""
    with store_admin(api) as admin:
        row = admin.get(sub_id)
    if row is None:
        typer.echo(f"error: not_found: no subscription {sub_id}", err=True)
        raise typer.Exit(REFUSED)
    emit(row, as_json, _listing([row]))


@sub.command("redundant", short_help="Patterns another of the subscriber's covers.")
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


@sub.command("import", short_help="Import subscriptions from CSV or JSON lines.")
def sub_import(
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    batch: Annotated[
        int, typer.Option(min=1, max=10_000, help="Items per transaction (or request).")
    ] = 10_000,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """Import a CSV (subscriber,pattern[,dialect,tenant,group,group_policy,expires_at])
    or JSON lines file (the API's fields, ttl too); every bad line is reported with its
    line number, the good ones are stored. The file is read as it is stored, a batch at a
    time: a file of any size takes the memory of one batch."""
    from concurrent.futures import Future, ThreadPoolExecutor

    from app import heap
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
        heap.lean_import(),  # the process streams: its resident set is its batches'
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
