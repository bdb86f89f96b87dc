"""Reading subscriptions to import: CSV (``subscriber,pattern[,dialect,tenant,group,
group_policy,expires_at]``, optional header) or JSON lines (objects with the API's fields).
Unreadable lines become problems with their line number; nothing is silently dropped."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

Item = dict[str, Any]
Problem = dict[str, object]
#: One record as read: its line, and its item or the problem that kept it from being one.
Record = tuple[int, Item | None, Problem | None]
#: Files read as JSON lines (any other is CSV).
JSON_SUFFIXES: Final = frozenset((".jsonl", ".ndjson", ".json"))
_NOT_AN_OBJECT: Final = "each line must be a JSON object"

#: A CSV record's columns, in order; the first two are required, an empty one is left out
#: (the API's default applies). The console's reader (``console.js``) names the same.
CSV_FIELDS: Final = (
    "subscriber",
    "pattern",
    "dialect",
    "tenant",
    "group",
    "group_policy",
    "expires_at",
)
_LAYOUT: Final = "expected subscriber,pattern[,dialect,tenant,group,group_policy,expires_at]"


#: Records per batch ``read_batches`` yields by default (the API's default batch limit).
BATCH: Final = 10_000


@dataclass(slots=True)
class Batch:
    """Up to a batch of records as read: (line number, item) for the readable ones, a
    problem for each unreadable one, and how far into the file (bytes) the reader is."""

    items: list[tuple[int, Item]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    position: int = 0


def read_batches(path: Path, size: int = BATCH) -> Iterator[Batch]:
    """The file's records in batches of ``size`` readable items, read as it goes (a file
    of any length takes the memory of one batch).

    A record's number is the physical line it starts on (a quoted CSV field may span
    lines; a JSON line ends at "\n" only, so a raw U+2028 or "\r" in it does not split
    it). A leading byte-order mark is skipped; bytes that are not UTF-8 are kept (escaped)
    so the validation reports them as ``invalid_utf8`` on their line instead of failing the
    file."""
    json_lines = path.suffix.lower() in JSON_SUFFIXES
    with path.open("rb") as raw:
        # CSV: newline="", the csv module handles line ends itself, inside quoted fields
        # too. JSON lines: "\n" alone ends a line.
        text = io.TextIOWrapper(
            raw,
            encoding="utf-8-sig",
            errors="surrogateescape",
            newline="\n" if json_lines else "",
        )
        batch = Batch()
        for number, item, problem in _json_lines(text) if json_lines else _csv(text):
            if problem is not None:
                batch.problems.append(problem)
                continue
            assert item is not None
            batch.items.append((number, item))
            if len(batch.items) >= size:
                batch.position = raw.tell()
                yield batch
                batch = Batch()
        batch.position = raw.tell()
        yield batch


def read_items(path: Path) -> tuple[list[tuple[int, Item]], list[Problem]]:
    """Every record of the file at once (``read_batches``, joined)."""
    items: list[tuple[int, Item]] = []
    problems: list[Problem] = []
    for batch in read_batches(path):
        items += batch.items
        problems += batch.problems
    return items, problems


def _json_lines(lines: Iterable[str]) -> Iterator[Record]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line, parse_constant=_not_json)
        except ValueError as e:
            message = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
            yield number, None, {"line": number, "code": "invalid_json", "message": message}
            continue
        if not isinstance(item, dict):
            problem = {"line": number, "code": "not_an_object", "message": _NOT_AN_OBJECT}
            yield number, None, problem
            continue
        yield number, item, None


def _not_json(constant: str) -> Any:
    """Python's parser reads NaN and Infinity, which JSON has not (nor has any store)."""
    raise ValueError(f"{constant} is not JSON")


def _csv(file: Iterable[str]) -> Iterator[Record]:
    fields = CSV_FIELDS
    reader = csv.reader(file, strict=True)
    start = 1  # the physical line the next record starts on
    try:
        for row in reader:
            number, start = start, reader.line_num + 1
            if not row or (
                number == 1 and [c.strip().lower() for c in row[:2]] == ["subscriber", "pattern"]
            ):
                continue
            if not 2 <= len(row) <= len(fields):
                yield number, None, {"line": number, "code": "bad_columns", "message": _LAYOUT}
                continue
            if len(row) == 2 and row[0]:  # the common record: subscriber,pattern
                yield number, {"subscriber": row[0], "pattern": row[1]}, None
                continue
            item: Item = dict(zip(fields, row, strict=False))
            yield number, {k: v for k, v in item.items() if v != "" or k == "pattern"}, None
    except csv.Error as e:  # e.g. a quote left open until the end of the file
        yield start, None, {"line": start, "code": "invalid_csv", "message": str(e)}
