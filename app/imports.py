"""Reading subscriptions to import: CSV (``subscriber,pattern[,dialect,tenant,group,
group_policy,expires_at]``, optional header) or JSON lines (objects with the API's fields).
Unreadable lines become problems with their line number; nothing is silently dropped."""

from __future__ import annotations

import bisect
import csv
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import JsonValue

from app.bulk import Items

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
#: Bytes of a CSV file read at a time (cut at the last line break in them).
_BLOCK: Final = 1 << 20
_BOM: Final = b"\xef\xbb\xbf"


@dataclass(slots=True)
class Batch:
    """Up to a batch of records as read: the readable ones as ``Items`` (a CSV file's
    common rows as columns) with each one's line number, a problem for each unreadable
    one, and how far into the file (bytes) the reader is."""

    items: Items
    lines: list[int]
    problems: list[Problem] = field(default_factory=list)
    position: int = 0

    def records(self) -> list[tuple[int, Item]]:
        """(line number, item) of every readable record, in order."""
        values = self.items.json_values()
        return [(line, value) for line, value in zip(self.lines, values, strict=True)]  # type: ignore[misc]


def read_batches(path: Path, size: int = BATCH) -> Iterator[Batch]:
    """The file's records in batches of ``size`` readable items, read as it goes (a file
    of any length takes the memory of one batch).

    A record's number is the physical line it starts on (a quoted CSV field may span
    lines; a JSON line ends at "\n" only, so a raw U+2028 or "\r" in it does not split
    it). A leading byte-order mark is skipped; bytes that are not UTF-8 are kept (escaped)
    so the validation reports them as ``invalid_utf8`` on their line instead of failing the
    file.

    CSV is read a block of lines at a time: while the blocks hold no quote, no carriage
    return but in CRLF line ends and only UTF-8 (so every line is one record split at its
    commas), Arrow splits them and the ``subscriber,pattern`` rows stay columns, never
    Python objects; the first block that holds one of those, and the rest of the file after
    it, go through the csv module's reader. ``tests/app/test_imports.py`` holds the two
    ways to the same records."""
    batches = _Batches(size)
    with path.open("rb") as raw:
        if path.suffix.lower() in JSON_SUFFIXES:
            records: Iterable[Record | _Run] = _json_lines(raw)
        else:
            records = _csv_blocks(raw)
        for record in records:
            batches.position = raw.tell()
            if isinstance(record, _Run):
                yield from batches.columns(record)
                continue
            number, item, problem = record
            if problem is not None:
                batches.problems.append(problem)
            else:
                assert item is not None
                yield from batches.add(number, item)
        batches.position = raw.tell()
        yield batches.flush()


def _text(raw: BinaryIO, *, json_lines: bool, start: bool = True) -> io.TextIOWrapper:
    """``raw`` as text from where it is (``start``: the file's start, whose byte-order
    mark is skipped). CSV: newline="", the csv module handles line ends itself, inside
    quoted fields too. JSON lines: "\n" alone ends a line."""
    return io.TextIOWrapper(
        raw,
        encoding="utf-8-sig" if start else "utf-8",
        errors="surrogateescape",
        newline="\n" if json_lines else "",
    )


class _Batches:
    """Records gathered into batches of ``size`` items, in file order: items one at a
    time (``add``), or runs of plain CSV rows as columns (``columns``)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.position = 0
        self._start()

    def _start(self) -> None:
        self.count = 0
        self.lines: list[int] = []
        self.problems: list[Problem] = []
        self.at: list[pa.Array] = []
        self.subscribers: list[pa.Array] = []
        self.patterns: list[pa.Array] = []
        self.others: list[tuple[int, JsonValue]] = []

    def add(self, line: int, item: Item) -> Iterator[Batch]:
        self.others.append((self.count, item))
        self.lines.append(line)
        self.count += 1
        if self.count >= self.size:
            yield self.flush()

    def columns(self, run: _Run) -> Iterator[Batch]:
        """A run of ``subscriber,pattern`` rows on consecutive records."""
        lines, subscriber, pattern = run
        done = 0
        while done < len(lines):
            take = min(self.size - self.count, len(lines) - done)
            self.at.append(pa.array(range(self.count, self.count + take), pa.int64()))
            self.subscribers.append(subscriber.slice(done, take))
            self.patterns.append(pattern.slice(done, take))
            self.lines += lines[done : done + take]
            self.count += take
            done += take
            if self.count >= self.size:
                yield self.flush()

    def flush(self) -> Batch:
        """The batch gathered so far (perhaps empty), and a new one begun."""
        if self.at:
            items = Items(
                self.count,
                pa.concat_arrays(self.at),
                pa.concat_arrays(self.subscribers),
                pa.concat_arrays(self.patterns),
                pa.nulls(sum(map(len, self.at)), pa.string()),
                self.others,
            )
        else:
            items = Items.of([item for _, item in self.others])
        batch = Batch(items, self.lines, self.problems, self.position)
        self._start()
        return batch


def read_items(path: Path) -> tuple[list[tuple[int, Item]], list[Problem]]:
    """Every record of the file at once (``read_batches``, joined)."""
    items: list[tuple[int, Item]] = []
    problems: list[Problem] = []
    for batch in read_batches(path):
        items += batch.records()
        problems += batch.problems
    return items, problems


class _Run(NamedTuple):
    """Consecutive ``subscriber,pattern`` records of a CSV block, as columns."""

    lines: list[int]
    subscriber: pa.Array
    pattern: pa.Array


def _csv_blocks(raw: BinaryIO) -> Iterator[Record | _Run]:
    """The records of a CSV file, the runs of plain rows in the blocks Arrow splits as
    columns (see ``read_batches``)."""
    line = 1  # the physical line the next block starts on
    offset = 0  # and its byte offset
    tail = b""
    while True:
        data = raw.read(_BLOCK)
        block = tail + data
        if offset == 0 and block.startswith(_BOM):
            block = block[len(_BOM) :]
            offset = len(_BOM)
        cut = block.rfind(b"\n") + 1 if data else len(block)
        if not block:
            return
        if cut == 0:  # one line longer than a block: read on
            tail = block
            continue
        block, tail = block[:cut], block[cut:]
        text = _plain_text(block)
        if text is None:  # the csv module from here on
            raw.seek(offset)
            text_file = _text(raw, json_lines=False, start=offset == 0)
            try:
                yield from _csv(text_file, line)
            finally:
                text_file.detach()  # the file stays open for its caller
            return
        yield from _split_block(text, line)
        line += text.count("\n")
        offset += len(block)
        if not data:
            return


def _plain_text(block: bytes) -> str | None:
    """``block`` as text, its CRLF line ends as LF (the csv module reads either as one
    line end), if every line in it is one record split at its commas: no quote, no other
    carriage return, strict UTF-8."""
    if b'"' in block:
        return None
    if b"\r" in block:
        block = block.replace(b"\r\n", b"\n")
        if b"\r" in block:
            return None
    try:
        return block.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _split_block(text: str, line: int) -> Iterator[Record | _Run]:
    """The records of ``text`` (lines from ``line`` on, split at commas by Arrow): runs of
    plain rows (two fields, a subscriber) as columns, the other lines through the csv
    module one at a time (exact: a line without quotes or carriage returns is a record).
    O(text) in Arrow, plus Python work per line that is not a plain row."""
    lines = pc.split_pattern(pa.array([text], pa.large_string()), "\n").flatten()
    if text.endswith("\n"):
        lines = lines.slice(0, len(lines) - 1)
    fields = pc.split_pattern(lines, ",")
    plain = pc.and_(
        pc.equal(pc.list_value_length(fields), 2),
        pc.greater(pc.binary_length(pc.list_element(fields, 0)), 0),
    )
    if line == 1 and len(lines):  # perhaps the header
        plain = pa.concat_arrays([pa.array([False]), plain.slice(1)])
    others = pc.indices_nonzero(pc.invert(plain)).to_pylist()
    rows = pc.filter(fields, plain)
    numbers = [line + i for i in pc.indices_nonzero(plain).to_pylist()]
    subscriber = pc.list_element(rows, 0).cast(pa.string())
    pattern = pc.list_element(rows, 1).cast(pa.string())
    done = 0
    for index in [*others, len(lines)]:
        run = bisect.bisect_left(numbers, line + index, done)
        if run > done:
            count = run - done
            yield _Run(numbers[done:run], subscriber.slice(done, count), pattern.slice(done, count))
            done = run
        if index < len(lines):
            text_line = lines[index].as_py()
            if text_line:
                yield from _csv([text_line], line + index)


def _json_lines(raw: BinaryIO) -> Iterator[Record]:
    lines = _text(raw, json_lines=True)
    try:
        yield from _json_records(lines)
    finally:
        lines.detach()  # the file stays open for its caller


def _json_records(lines: Iterable[str]) -> Iterator[Record]:
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


def _csv(file: Iterable[str], start: int = 1) -> Iterator[Record]:
    """The records of ``file``, whose first line is line ``start`` of the file."""
    fields = CSV_FIELDS
    reader = csv.reader(file, strict=True)
    first = start - 1
    try:
        for row in reader:
            number, start = start, first + reader.line_num + 1
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
