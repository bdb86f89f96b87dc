"""What several commands share: the ``--api`` and ``--json`` options, the way to the store
(``store_admin``), the ``--dialect`` check, and printing (a table, JSON or text for people).

Only typer and the matcher's grammar load here: a command imports the store, httpx or
FastAPI when it runs, so ``topicstore --help`` stays quick."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from app.cli.errors import UsageError
from matcher.grammar import DIALECTS

if TYPE_CHECKING:
    from app.cli.protocol import Admin

ApiOption = Annotated[
    str | None,
    typer.Option(
        "--api",
        help="Go through the service at this URL (its token: TOPICSTORE_ADMIN_TOKEN, else "
        "the one `serve --dev` made). Default: the store itself, or the local service if "
        "it holds it.",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]

#: What ``--dialect`` may name where a topic is matched: the matcher's topic dialects.
TOPIC_DIALECTS: Final = tuple(DIALECTS)
#: ``amqp, mqtt or nats``: the topic dialects for a help text.
TOPIC_DIALECTS_TEXT: Final = f"{', '.join(TOPIC_DIALECTS[:-1])} or {TOPIC_DIALECTS[-1]}"


@contextmanager
def store_admin(api: str | None, *, create: bool = False, bulk: bool = False) -> Iterator[Admin]:
    """The store or the running service (see ``app.cli.connect``). ``create``: a command
    that writes may create and migrate a store that is not there yet; one that only reads
    refuses it (``no_schema``). ``bulk``: it writes in bulk (an import)."""
    from app.cli.connect import connect
    from app.settings import get_settings

    with connect(get_settings(), api, create=create, bulk=bulk) as admin:
        yield admin


def check_dialect(value: str | None, known: Sequence[str] = TOPIC_DIALECTS) -> None:
    """Refuse an unknown ``--dialect`` (it once listed nothing and exited 0)."""
    if value is not None and value not in known:
        raise UsageError("invalid_dialect", f"unknown dialect {value!r}; known: {', '.join(known)}")


def emit(data: object, as_json: bool, human: str) -> None:
    """``data`` as one line of JSON with ``--json``, else the text for people."""
    if as_json:
        typer.echo(json.dumps(data, ensure_ascii=False))
    else:
        typer.echo(human)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Rows in columns as wide as their widest cell, under a header."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    )


#: ``--expires-in``'s units (a bare number is seconds).
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_DURATION: Final = re.compile(r"([0-9]{1,12})([smhd]?)")

ExpiresInOption = Annotated[
    str | None,
    typer.Option(help="Stop matching this long from now: 3600, 90s, 15m, 2h or 7d."),
]
ExpiresAtOption = Annotated[
    str | None,
    typer.Option(help="Stop matching at this RFC 3339 instant (2027-01-01T00:00:00Z)."),
]


def expiry_options(expires_in: str | None, expires_at: str | None) -> tuple[int | None, str | None]:
    """(ttl seconds, expires_at) of ``--expires-in`` / ``--expires-at`` (at most one; the
    service checks the bounds and names them: ``store.expiry``)."""
    if expires_in is not None and expires_at is not None:
        raise UsageError("expiry_conflict", "give --expires-in or --expires-at, not both")
    if expires_in is not None:
        found = _DURATION.fullmatch(expires_in.strip())
        if found is None:
            raise UsageError(
                "invalid_duration", f"{expires_in!r} is not a duration (3600, 90s, 15m, 2h, 7d)"
            )
        return int(found.group(1)) * _UNITS[found.group(2) or "s"], None
    if expires_at is not None:
        from topicstore.times import parse

        try:
            parse(expires_at)
        except ValueError as e:
            raise UsageError("invalid_time", str(e)) from e
    return None, expires_at


def labels_text(labels: dict[str, Any] | None) -> str:
    """Labels as ``key=value,...`` (a value that is not a string as JSON); ``-`` for none."""
    if not labels:
        return "-"
    return ",".join(
        f"{key}={value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}"
        for key, value in labels.items()
    )
