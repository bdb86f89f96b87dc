"""Multi-row inserts of the single-write path on DuckDB, as one constant statement each.

A multi-row ``VALUES`` is compiled afresh by SQLAlchemy on every call (about as costly as
running it), and an ``executemany`` runs its statement once per row; both are paid
inside the serialized write transaction. Here a group's rows go as one list parameter per
column, unnested in order (``INSERT ... SELECT unnest(...), unnest(...)``), so a group of
any size sends the same text, compiled once (as ``store.pg_write`` does for PostgreSQL).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from store.staging import QUOTE


def insert_rows(
    connection: sa.Connection,
    table: sa.Table,
    rows: Sequence[Mapping[str, Any]],
    returning: str = "",
) -> sa.CursorResult[Any]:
    """Insert ``rows`` (dicts with the same keys: column names) into ``table`` in their
    order, with ``RETURNING returning`` when given."""
    names = tuple(rows[0])
    statement, json_columns = _statement(table, names, returning)
    params: dict[str, list[Any]] = {}
    for i, name in enumerate(names):
        values = [row[name] for row in rows]
        if name in json_columns:
            values = [None if value is None else json.dumps(value) for value in values]
        params[f"c{i}"] = values
    return connection.execute(statement, params)


@functools.cache
def _statement(
    table: sa.Table, names: tuple[str, ...], returning: str
) -> tuple[sa.TextClause, frozenset[str]]:
    """The statement inserting lists of ``names`` into ``table``, and which of them are
    JSON (sent as their text)."""
    lists = ", ".join(
        f"unnest(CAST(:c{i} AS {_list_type(table.c[name].type)}[]))" for i, name in enumerate(names)
    )
    text = f"INSERT INTO {table.name} ({', '.join(map(QUOTE, names))}) SELECT {lists}"
    if returning:
        text += f" RETURNING {returning}"
    json_columns = frozenset(name for name in names if isinstance(table.c[name].type, sa.JSON))
    return sa.text(text), json_columns


def _list_type(column_type: sa.types.TypeEngine[Any]) -> str:
    """The DuckDB type of a list element for a column of ``column_type`` (JSON as its
    text, which the column parses)."""
    if isinstance(column_type, sa.DateTime):
        return "TIMESTAMPTZ" if column_type.timezone else "TIMESTAMP"
    if isinstance(column_type, sa.Integer):
        return "BIGINT"
    if isinstance(column_type, sa.String | sa.JSON):
        return "VARCHAR"
    raise TypeError(f"no list type for {column_type!r}")
