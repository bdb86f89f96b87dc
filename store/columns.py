"""The startup read: every live subscription's id, tenant, subscriber, dialect and pattern
as one Arrow table in id order, without a Python object or a protocol message per row (the
loader builds the engines from the Arrow buffers). Live: not expired at the instant the
caller gives (``store.expiry``; an expired row waits for the sweep, and is never loaded).

DuckDB gives its own Arrow result. PostgreSQL aggregates ``_CHUNK_ROWS`` rows at a time
into one text value, parsed by Arrow (``_postgres_chunks``), with a quoted CSV ``COPY`` as
the exact fallback.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

import pyarrow as pa
import pyarrow.csv as pa_csv

#: What a loader builds from: the columns, and their Arrow types.
COLUMNS: Final = ("id", "tenant", "subscriber", "dialect", "pattern")
SCHEMA: Final = pa.schema([("id", pa.int64()), *((name, pa.string()) for name in COLUMNS[1:])])
#: The PostgreSQL startup read (``_postgres_chunks``): rows per statement, the field
#: separator (a control character: refused in names and patterns), the statement, and how
#: Arrow splits its answer (no quoting, and an empty line is a line: see there).
_CHUNK_ROWS: Final = 65_536
_SEPARATOR: Final = "\x1f"
_CHUNK_QUERY: Final = (
    "SELECT count(*), max(id), convert_to(string_agg(concat_ws(E'\\x1f', "
    + ", ".join(COLUMNS)
    + ", ''), E'\\n'), 'UTF8') FROM (SELECT "
    + ", ".join(COLUMNS)
    + " FROM subscription WHERE id > %s AND "
    + "(expires_at IS NULL OR expires_at > %s) ORDER BY id LIMIT %s) AS chunk"
)
#: The rows the startup read takes: those not expired at its instant (a parameter).
_LIVE: Final = "WHERE expires_at IS NULL OR expires_at > $1"
_CHUNK_FIELDS: Final = (*COLUMNS, "end")
_CHUNK_PARSE: Final = pa_csv.ParseOptions(
    delimiter=_SEPARATOR,
    quote_char=False,
    double_quote=False,
    escape_char=False,
    ignore_empty_lines=False,
)


def read_columns(raw: Any, postgres: bool, now: datetime) -> pa.Table:
    """The table of the rows live at ``now`` (aware), read on ``raw`` (the DBAPI
    connection of a session's transaction: a psycopg one when ``postgres``, else
    DuckDB's)."""
    if not postgres:
        query = f"SELECT {', '.join(COLUMNS)} FROM subscription {_LIVE} ORDER BY id"
        # In chunks, combined into one copy in Arrow's pool: DuckDB's own buffers are
        # then all freed here, and its allocator hands them back (store.db).
        result: pa.Table = raw.execute(query, [now]).to_arrow_table(_CHUNK_ROWS)
        return result.cast(SCHEMA).combine_chunks()
    chunks = _postgres_chunks(raw, now)
    if chunks is None:
        chunks = [_postgres_csv(raw, now)]
    return pa.concat_tables(chunks) if chunks else SCHEMA.empty_table()


def _parse(data: bytes, parse: pa_csv.ParseOptions, names: Sequence[str]) -> pa.Table:
    """Arrow's CSV reader on ``data``, whose lines hold ``names`` (of which it keeps
    ``COLUMNS``)."""
    return pa_csv.read_csv(
        pa.py_buffer(data),
        read_options=pa_csv.ReadOptions(column_names=list(names)),
        parse_options=parse,
        convert_options=pa_csv.ConvertOptions(
            column_types=SCHEMA,
            include_columns=list(COLUMNS),
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )


def _postgres_chunks(raw: Any, now: datetime) -> list[pa.Table] | None:
    """The startup read of ``columns`` on PostgreSQL: one statement per ``_CHUNK_ROWS``
    rows (keyset on id) answering one value, their lines joined by PostgreSQL, fields
    separated by ``_SEPARATOR`` and one more after the last, no quoting, parsed by Arrow.
    A CSV ``COPY`` sends a protocol message per row, and taking each of them in Python
    (psycopg's generator, holding the GIL) costs more than PostgreSQL's own work, so the
    read could not overlap with anything; here Python waits with the GIL released and
    parses one value per chunk.

    Exact or nothing: a value holding a line break or the separator (validation refuses
    both, ``store.records``, but a row written by hand could) makes a line too many or a
    field too many, so anything but ``count`` lines of six fields is refused, and None
    sends the caller to the quoted CSV ``COPY``. (The empty sixth field keeps a value's
    ``\\r`` off the line's ``\\n``: Arrow would read the two as one line break. An empty
    line is a line here, so a value's trailing break is counted too.)"""
    tables: list[pa.Table] = []
    last = -(2**63)
    with raw.cursor(binary=True) as cursor:
        while True:
            cursor.execute(_CHUNK_QUERY, (last, now, _CHUNK_ROWS), binary=True)
            count, last, data = cursor.fetchone()
            if not count:
                return tables
            try:
                table = _parse(data, _CHUNK_PARSE, _CHUNK_FIELDS)
            except pa.ArrowInvalid:
                return None
            if table.num_rows != count:
                return None
            tables.append(table)
            if count < _CHUNK_ROWS:
                return tables


def _postgres_csv(raw: Any, now: datetime) -> pa.Table:
    """Every live row as one quoted CSV ``COPY``, parsed by Arrow: exact for any text,
    slower (a protocol message per row); see ``_postgres_chunks``."""
    live = _LIVE.replace("$1", "%s")
    query = f"SELECT {', '.join(COLUMNS)} FROM subscription {live} ORDER BY id"
    chunks: list[bytes] = []
    statement = f"COPY ({query}) TO STDOUT (FORMAT csv)"
    with raw.cursor() as cursor, cursor.copy(statement, (now,)) as copy:
        chunks.extend(bytes(chunk) for chunk in copy)
    return _parse(b"".join(chunks), pa_csv.ParseOptions(), COLUMNS)
