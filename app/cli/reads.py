"""``topicstore match`` (who receives a topic, and with ``--explain`` why) and ``topicstore
audit`` (who changed what): the commands that read what the store holds."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Final

import typer

from app.cli.errors import UsageError
from app.cli.options import ApiOption, JsonOption, check_dialect, emit, store_admin, table

#: What ``audit --action`` may name.
AUDIT_ACTIONS: Final = ("create", "delete", "bulk_create", "delete_subscriber")


def _time(value: str | None, option: str) -> datetime | None:
    """An ISO 8601 time option; without an offset, UTC (the API takes RFC 3339 times, which
    always carry one)."""
    if value is None:
        return None
    try:
        instant = datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(
            "invalid_time", f"{option} takes an ISO 8601 time, not {value!r}"
        ) from None
    return instant if instant.tzinfo is not None else instant.replace(tzinfo=UTC)


def _ids(ids: Sequence[int], shown: int = 5) -> str:
    text = ",".join(map(str, ids[:shown]))
    return f"{text},… (+{len(ids) - shown})" if len(ids) > shown else text


def audit_log(
    tenant: Annotated[str | None, typer.Option(help="Default: every tenant.")] = None,
    action: Annotated[str | None, typer.Option(help=", ".join(AUDIT_ACTIONS))] = None,
    since: Annotated[
        str | None, typer.Option("--from", help="ISO 8601 time (inclusive; no offset: UTC).")
    ] = None,
    until: Annotated[str | None, typer.Option("--to", help="ISO 8601 time (exclusive).")] = None,
    after: Annotated[int | None, typer.Option(help="Last id seen (pagination).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    newest_first: Annotated[
        bool, typer.Option("--newest-first", help="Newest first (pass --after on).")
    ] = False,
    api: ApiOption = None,
    as_json: JsonOption = False,
) -> None:
    """List admin changes in id order: when, which tenant, what, by whom, from where."""
    if action is not None and action not in AUDIT_ACTIONS:
        known = ", ".join(AUDIT_ACTIONS)
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
    with store_admin(api) as admin:
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
    emit(rows, as_json, table(header, cells) if cells else "(none)")


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
    check_dialect(dialect)
    if explain:
        with store_admin(api) as admin:
            explained = admin.explain(topic, dialect, tenant, subscriber or [])
        emit(explained, as_json, _explained(explained))
        return
    if subscriber:
        raise UsageError("explain_only", "--subscriber needs --explain")
    with store_admin(api) as admin:
        result = admin.match(topic, dialect, tenant, key)
    if as_json:
        emit(result, as_json, "")
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


def _where(failure: dict[str, Any]) -> str:
    """Where a closest pattern fails, counting topic words from 1."""
    if failure["reason"] == "too_short":
        return "after the topic's last word"
    return f"at topic word {failure['position'] + 1}"


def _explained(result: dict[str, Any]) -> str:
    """An explanation for people: one line per matched subscription, then the misses."""
    lines = []
    for m in result["matched"]:
        # Word numbers count from 1, as people count them (the JSON's indexes from 0).
        took = "; ".join(
            f"{c['wildcard']} (pattern word {c['token'] + 1}) took "
            f"{'.'.join(c['words']) or 'no words'}"
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
            f"{_where(failure)} ({failure['reason']}, expected {expected})"
        )
    return "\n".join(lines) if lines else "(no match)"
