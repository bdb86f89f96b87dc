"""Reading subscriptions to import: CSV (``subscriber,pattern[,dialect,tenant,group,
group_policy]``, optional header) or JSON lines (objects with the API's fields).
Unreadable lines become problems with their line number; nothing is silently dropped."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

Item = dict[str, Any]
Problem = dict[str, object]

#: A CSV record's columns, in order; the first two are required, an empty one is left out
#: (the API's default applies). The console's reader (``console.js``) names the same.
CSV_FIELDS: Final = ("subscriber", "pattern", "dialect", "tenant", "group", "group_policy")
_LAYOUT: Final = "expected subscriber,pattern[,dialect,tenant,group,group_policy]"


def read_items(path: Path) -> tuple[list[tuple[int, Item]], list[Problem]]:
    """(line number, item) for every readable record, and a problem for every other one.

    A record's number is the physical line it starts on (a quoted CSV field may span
    lines; a JSON line ends at "\n" only, so a raw U+2028 in a string does not split it).
    A leading byte-order mark is skipped; bytes that are not UTF-8 are kept (escaped) so the
    validation reports them as ``invalid_utf8`` on their line instead of failing the file.
    """
    # newline="": the csv module handles line ends itself, inside quoted fields too.
    with path.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as file:
        if path.suffix.lower() in {".jsonl", ".ndjson", ".json"}:
            return _json_lines(file.read())
        return _csv(file)


def _json_lines(text: str) -> tuple[list[tuple[int, Item]], list[Problem]]:
    items: list[tuple[int, Item]] = []
    problems: list[Problem] = []
    # Split on "\n" alone: str.splitlines() also breaks at U+2028, U+0085 and other
    # characters that JSON strings may hold raw, which would misnumber every later line.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line, parse_constant=_not_json)
        except ValueError as e:
            message = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
            problems.append({"line": number, "code": "invalid_json", "message": message})
            continue
        if not isinstance(item, dict):
            problems.append(
                {
                    "line": number,
                    "code": "not_an_object",
                    "message": "each line must be a JSON object",
                }
            )
            continue
        items.append((number, item))
    return items, problems


def _not_json(constant: str) -> Any:
    """Python's parser reads NaN and Infinity, which JSON has not (nor has any store)."""
    raise ValueError(f"{constant} is not JSON")


def _csv(file: Iterable[str]) -> tuple[list[tuple[int, Item]], list[Problem]]:
    items: list[tuple[int, Item]] = []
    problems: list[Problem] = []
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
                problems.append({"line": number, "code": "bad_columns", "message": _LAYOUT})
                continue
            item: Item = dict(zip(fields, row, strict=False))
            items.append((number, {k: v for k, v in item.items() if v != "" or k == "pattern"}))
    except csv.Error as e:  # e.g. a quote left open until the end of the file
        problems.append({"line": start, "code": "invalid_csv", "message": str(e)})
    return items, problems
