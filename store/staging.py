"""A batch of new subscriptions staged as ``staging``, the first step of a bulk add
(``SubscriptionRepository.add_rows``): the batch as an Arrow table (built from columns for
plain rows, from records otherwise), then a temporary table filled by COPY on PostgreSQL,
the Arrow table itself on DuckDB (whose ``executemany`` goes row by row); then the
statement that inserts the staged rows not stored yet."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any, Final

import pyarrow as pa
import pyarrow.csv as pa_csv
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


#: What makes a subscription unique (the unique constraint), in its index's order on
#: PostgreSQL (``0008_write_indexes``).
_KEY_COLUMNS: Final = ("subscriber", "pattern", "tenant", "dialect")
#: A staged batch as Arrow: ``ord`` (the item's position in its batch) and the new
#: columns, all text (JSON ones as their JSON text).
STAGED: Final = pa.schema([("ord", pa.int64()), *((name, pa.string()) for name in NEW_COLUMNS)])
#: How Arrow writes a staged batch for PostgreSQL's CSV ``COPY``: every value quoted, so
#: an empty string stays one and only a null is an empty field (``NULL``).
_CSV: Final = pa_csv.WriteOptions(include_header=False, quoting_style="all_valid")


_TIME_COLUMNS: Final = frozenset(
    c.name for c in _SUBSCRIPTION.columns if isinstance(c.type, sa.DateTime)
)


def _time_text(value: datetime | None) -> str | None:
    """A time column's value as ISO 8601 text (its offset kept), which both stores cast."""
    return None if value is None else value.isoformat()


def _json_text(name: str, value: Any) -> str | None:
    """A JSON column's value as JSON text (criteria pairs as lists)."""
    if value is None:
        return None
    return json.dumps([list(c) for c in value] if name == "criteria" else value)


def staged_rows(items: Sequence[NewSubscription], ords: Sequence[int] | None = None) -> pa.Table:
    """``items`` as a staged batch (``STAGED``); ``ords``: their positions (default: in
    order from 0). O(items) Python work: the full path's items, and the store's own
    callers; a plain import's rows are built as columns (``plain_rows``)."""
    columns = list(zip(*map(_ROW, items), strict=True)) if items else [()] * len(NEW_COLUMNS)
    arrays: list[Any] = [range(len(items)) if ords is None else ords]
    for name, values in zip(NEW_COLUMNS, columns, strict=True):
        if name in _JSON_COLUMNS:
            values = tuple(_json_text(name, value) for value in values)
        elif name in _TIME_COLUMNS:
            values = tuple(map(_time_text, values))
        arrays.append(values)
    return pa.Table.from_arrays(
        [pa.array(a, t) for a, t in zip(arrays, STAGED.types, strict=True)], schema=STAGED
    )


def plain_rows(
    ords: pa.Array, tenant: pa.Array, subscriber: pa.Array, pattern: pa.Array
) -> pa.Table:
    """Plain AMQP topic subscriptions as a staged batch, from columns (no object per row):
    the dialect and kind are constants, the other columns null."""
    count = len(ords)
    given = {"ord": ords, "tenant": tenant, "subscriber": subscriber, "pattern": pattern}
    constant = {"dialect": "amqp", "kind": "topic"}
    arrays = [
        given[name]
        if name in given
        else pa.repeat(pa.scalar(constant.get(name), pa.string()), count)
        for name in STAGED.names
    ]
    return pa.Table.from_arrays(arrays, schema=STAGED)


def stage(session: Session, rows: pa.Table, *, postgres: bool) -> None:
    """``rows`` (a staged batch) as ``staging``, until ``unstage``. PostgreSQL: a temporary
    table with the subscription columns' own types (plus ``ord``), filled by one CSV
    ``COPY`` written by Arrow. DuckDB: the Arrow table itself, registered under that name
    and scanned in place (a temporary table cost a create, a copy of every row and a drop
    per batch; the insert casts the JSON and time columns' text as it stores them). No
    Python object per row on either."""
    raw = session.connection().connection.driver_connection
    assert raw is not None
    if not postgres:
        raw.register("staging", rows)
        return
    dialect = session.get_bind().dialect
    columns = ", ".join(
        f"{QUOTE(name)} {_SUBSCRIPTION.c[name].type.compile(dialect=dialect)}"
        for name in NEW_COLUMNS
    )
    session.execute(sa.text(f"CREATE TEMPORARY TABLE staging (ord BIGINT, {columns})"))
    # In key order: the probes of the unique index (``insert_new``) then walk it in order,
    # about half as costly as in the batch's order.
    rows = rows.sort_by([(name, "ascending") for name in _KEY_COLUMNS])
    sink = pa.BufferOutputStream()
    pa_csv.write_csv(rows, sink, _CSV)
    with raw.cursor() as cursor, cursor.copy("COPY staging FROM STDIN (FORMAT csv)") as copy:
        copy.write(sink.getvalue().to_pybytes())


def unstage(session: Session, *, postgres: bool) -> None:
    """Drop what ``stage`` made (also after a failed statement: a registered Arrow table
    outlives the transaction on DuckDB's connection)."""
    if postgres:
        session.execute(sa.text("DROP TABLE staging"))
        return
    raw = session.connection().connection.driver_connection
    assert raw is not None
    raw.unregister("staging")


#: What makes a subscription unique (the unique constraint), in SQL over ``st`` (staging)
#: and ``s`` (subscription).
SAME_KEY: Final = " AND ".join(f"s.{c} = st.{c}" for c in _KEY_COLUMNS)


def insert_new(rows: pa.Table, *, postgres: bool) -> str:
    """The ``INSERT ... SELECT`` of the staged ``items`` whose key is not stored yet (the
    first of each key repeated in the batch), in the batch's order, so the ids drawn follow
    it and a repeated key draws none. Writers are serialized, so nothing inserts a key
    between the probe and the insert; an ``ON CONFLICT`` clause would check every row a
    second time (on DuckDB far more slowly than a plain insert checks it)."""
    source, where = "staging st", []
    # PostgreSQL numbers the batch's rows only when a key repeats in it; DuckDB always
    # (its import was measured with this shape, the anti-join hashing the batch side).
    if not postgres or _repeats(rows):
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


def _repeats(rows: pa.Table) -> bool:
    """Whether a key repeats in the staged ``rows`` (Arrow's hash grouping: no Python
    object per row)."""
    keys = rows.select(list(_KEY_COLUMNS))
    distinct: int = keys.group_by(list(_KEY_COLUMNS)).aggregate([]).num_rows
    return bool(distinct < rows.num_rows)
