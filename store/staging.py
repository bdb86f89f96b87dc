"""A batch of new subscriptions into a temporary ``staging`` table, the first step of a
bulk add (``SubscriptionRepository.add_many``): COPY on PostgreSQL, one Arrow insert on
DuckDB (whose ``executemany`` goes row by row); then the statement that inserts the staged
rows not stored yet."""

from __future__ import annotations

import json
from collections.abc import Sequence
from operator import attrgetter
from typing import Any, Final

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from store.models import Subscription
from store.records import NewSubscription

_SUBSCRIPTION: Final = Subscription.__table__
#: Columns a new subscription sets (the others, id and created_at, the database fills).
NEW_COLUMNS: Final = tuple(
    c.name for c in _SUBSCRIPTION.columns if c.name in NewSubscription.__dataclass_fields__
)
_JSON_COLUMNS: Final = frozenset(
    c.name for c in _SUBSCRIPTION.columns if isinstance(c.type, sa.JSON)
)
#: Column names as SQL text, quoted where they are reserved words ("group").
QUOTE: Final = postgresql.dialect().identifier_preparer.quote  # type: ignore[no-untyped-call]
#: A new subscription's column values, in ``NEW_COLUMNS`` order (JSON ones as Python).
_ROW: Final = attrgetter(*NEW_COLUMNS)
#: Where the JSON columns sit in a staged row (after ``ord``).
_JSON_AT: Final = tuple(
    (i + 1, name) for i, name in enumerate(NEW_COLUMNS) if name in _JSON_COLUMNS
)


def _json_columns(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A staged row with its JSON columns as JSON text (criteria pairs as lists)."""
    values = list(row)
    for at, name in _JSON_AT:
        value = values[at]
        if value is not None:
            values[at] = json.dumps([list(c) for c in value] if name == "criteria" else value)
    return tuple(values)


def stage(session: Session, items: Sequence[NewSubscription], *, postgres: bool) -> None:
    """Rows of ``items`` into a temporary ``staging`` table with the subscription
    columns' own types (plus ``ord``, the item's position)."""
    dialect = session.get_bind().dialect
    columns = ", ".join(
        f"{QUOTE(name)} {_SUBSCRIPTION.c[name].type.compile(dialect=dialect)}"
        for name in NEW_COLUMNS
    )
    session.execute(sa.text(f"CREATE TEMPORARY TABLE staging (ord BIGINT, {columns})"))
    rows = [(i, *_ROW(item)) for i, item in enumerate(items)]
    if any(item.criteria is not None or item.labels is not None for item in items):
        rows = [_json_columns(row) for row in rows]
    raw = session.connection().connection.driver_connection
    assert raw is not None
    if postgres:
        with raw.cursor() as cursor, cursor.copy("COPY staging FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
    else:
        # DuckDB reads an Arrow table in one vectorized insert (executemany is per row).
        names = ("ord", *NEW_COLUMNS)
        arrays = dict(zip(names, zip(*rows, strict=True), strict=True))
        raw.register("staging_rows", pa.table(arrays))
        try:
            raw.execute("INSERT INTO staging SELECT * FROM staging_rows")
        finally:
            raw.unregister("staging_rows")


#: What makes a subscription unique (the unique constraint), in SQL over ``st`` (staging)
#: and ``s`` (subscription).
_KEY_COLUMNS: Final = ("tenant", "subscriber", "dialect", "pattern")
SAME_KEY: Final = " AND ".join(f"s.{c} = st.{c}" for c in _KEY_COLUMNS)


def insert_new(items: Sequence[NewSubscription], *, postgres: bool) -> str:
    """The ``INSERT ... SELECT`` of the staged ``items`` whose key is not stored yet (the
    first of each key repeated in the batch), in the batch's order, so the ids drawn follow
    it and a repeated key draws none. Writers are serialized, so nothing inserts a key
    between the probe and the insert; an ``ON CONFLICT`` clause would check every row a
    second time (on DuckDB far more slowly than a plain insert checks it)."""
    source, where = "staging st", []
    # PostgreSQL numbers the batch's rows only when a key repeats in it; DuckDB always
    # (its import was measured with this shape, the anti-join hashing the batch side).
    keys = {(i.tenant, i.subscriber, i.dialect, i.pattern) for i in items} if postgres else ()
    if not postgres or len(keys) < len(items):
        source = (
            f"(SELECT *, row_number() OVER (PARTITION BY {', '.join(_KEY_COLUMNS)} "
            "ORDER BY ord) AS nth FROM staging) st"
        )
        where.append("nth = 1")
    if postgres:
        # A lateral probe of the unique index per staged row: as a plain NOT EXISTS the
        # planner may hash the whole table for every batch (its size estimate lags a
        # growing table), O(table) a batch instead of O(batch log table).
        found = f"SELECT 1 AS found FROM subscription s WHERE {SAME_KEY} LIMIT 1"
        source += f" LEFT JOIN LATERAL ({found}) e ON true"
        where.append("e.found IS NULL")
    else:
        # DuckDB hashes the batch and scans the table once, in column chunks.
        where.append(f"NOT EXISTS (SELECT 1 FROM subscription s WHERE {SAME_KEY})")
    columns = ", ".join(map(QUOTE, NEW_COLUMNS))
    selected = ", ".join(f"st.{QUOTE(name)}" for name in NEW_COLUMNS)
    return (
        f"INSERT INTO subscription ({columns}) SELECT {selected} FROM {source} "
        f"WHERE {' AND '.join(where)} ORDER BY st.ord"
    )
