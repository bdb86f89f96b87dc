"""Multi-row inserts of the single-write path on DuckDB, as one constant statement each.

A multi-row ``VALUES`` is compiled afresh by SQLAlchemy on every call (about as costly as
running it), and an ``executemany`` runs its statement once per row; both are paid
inside the serialized write transaction. Here a group's rows go as one parameter, the
JSON array of them, which DuckDB reads back as rows of the columns' types (``from_json``)
and inserts in order: a group of any size sends the same text, compiled once (as
``store.pg_write`` does for PostgreSQL).

One parameter rather than a list per column: DuckDB's client inspects every Python value
it binds, and with pandas kept out of the process (``app.heap``) each inspection costs two
failed imports of it, so a list per column paid them for every field of every row. One
text is one value; DuckDB parses it in C++.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import sqlalchemy as sa

from store.staging import QUOTE


def insert_rows(
    connection: sa.Connection,
    table: sa.Table,
    rows: Sequence[Mapping[str, Any]],
    returning: str = "",
) -> sa.CursorResult[Any]:
    """Insert ``rows`` (dicts with the same keys: column names) into ``table`` in their
    order, with ``RETURNING returning`` when given. A JSON column's value goes as its
    ``json.dumps`` text (the column parses it), as the ORM would have written it."""
    names = tuple(rows[0])
    statement, json_columns = _statement(table, names, returning)
    if json_columns:
        rows = [
            {name: _json_text(row[name]) if name in json_columns else row[name] for name in names}
            for row in rows
        ]
    return connection.execute(statement, {"rows": orjson.dumps(rows).decode()})


def _json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


@functools.cache
def _statement(
    table: sa.Table, names: tuple[str, ...], returning: str
) -> tuple[sa.TextClause, frozenset[str]]:
    """The statement inserting a JSON array of rows with ``names`` into ``table``, and
    which of them are JSON columns (sent as their text)."""
    json_columns = frozenset(name for name in names if isinstance(table.c[name].type, sa.JSON))
    shape = json.dumps([{name: _field_type(table.c[name].type) for name in names}])
    selected = ", ".join(
        f"CAST(r.{QUOTE(name)} AS JSON)" if name in json_columns else f"r.{QUOTE(name)}"
        for name in names
    )
    text = (
        f"INSERT INTO {table.name} ({', '.join(map(QUOTE, names))}) SELECT {selected} "
        f"FROM (SELECT unnest(from_json(CAST(:rows AS JSON), '{shape}')) AS r)"
    )
    if returning:
        text += f" RETURNING {returning}"
    return sa.text(text), json_columns


def _field_type(column_type: sa.types.TypeEngine[Any]) -> str:
    """The DuckDB type a row's field is read as for a column of ``column_type`` (JSON as
    its text, cast by the statement)."""
    if isinstance(column_type, sa.DateTime):
        return "TIMESTAMPTZ" if column_type.timezone else "TIMESTAMP"
    if isinstance(column_type, sa.Integer):
        return "BIGINT"
    if isinstance(column_type, sa.String | sa.JSON):
        return "VARCHAR"
    raise TypeError(f"no field type for {column_type!r}")
