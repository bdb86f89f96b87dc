"""Subscriptions as Arrow: the one row -> Arrow conversion, used by the Parquet export
(``store.export``) and by the routing job when it reads the store (``pipeline.io``).

The Arrow schema is derived from the SQLAlchemy model, so a new column reaches both without
an edit here: integers -> int64, text -> string, JSON -> its JSON text, timestamps -> UTC
microseconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, Final

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.orm import Session

from store.db import Database
from store.models import Subscription
from store.repository import SubscriptionRepository

_COLUMNS: Final = tuple(Subscription.__table__.columns)


def _arrow_type(name: str, kind: sa.types.TypeEngine[Any]) -> pa.DataType:
    if isinstance(kind, sa.Integer):
        return pa.int64()
    if isinstance(kind, sa.DateTime):
        return pa.timestamp("us", tz="UTC" if kind.timezone else None)
    if isinstance(kind, sa.String | sa.JSON):  # Text is a String; JSON travels as its text
        return pa.string()
    raise TypeError(f"no Arrow type for column {name} ({kind!r})")


#: The export layout: every column of ``subscription``, in table order.
SCHEMA: Final = pa.schema([(c.name, _arrow_type(c.name, c.type)) for c in _COLUMNS])
_JSON_COLUMNS: Final = frozenset(c.name for c in _COLUMNS if isinstance(c.type, sa.JSON))


def _cell(name: str, value: Any) -> Any:
    if value is None or name not in _JSON_COLUMNS:
        return value
    return json.dumps(value)


def _batches(session: Session, tenant: str | None, batch_size: int) -> Iterator[pa.RecordBatch]:
    """Every subscription (of ``tenant``) not expired by now, in id order, as record batches
    of ``SCHEMA`` (``expires_at`` among the columns; Core rows, no ORM objects). An expired
    row waiting for the sweep is left out: it no longer matches, so the routing job must not
    route to it."""
    table = Subscription.__table__
    now = datetime.now(UTC)
    live = sa.or_(table.c.expires_at.is_(None), table.c.expires_at > now)
    query = sa.select(*_COLUMNS).where(live).order_by(table.c.id)
    if tenant is not None:
        query = query.where(table.c.tenant == tenant)
    names = SCHEMA.names
    result = (
        session.connection()
        .execution_options(stream_results=True, yield_per=batch_size)
        .execute(query)
    )
    for rows in result.partitions():
        columns = list(zip(*rows, strict=True))
        arrays = [
            [_cell(name, value) for value in values] if name in _JSON_COLUMNS else values
            for name, values in zip(names, columns, strict=True)
        ]
        yield pa.RecordBatch.from_arrays(
            [pa.array(a, type=t) for a, t in zip(arrays, SCHEMA.types, strict=True)],
            schema=SCHEMA,
        )


def subscription_batches(
    db: Database, *, tenant: str | None = None, batch_size: int = 50_000
) -> Iterator[pa.RecordBatch]:
    """Every subscription (of ``tenant``, when given) not expired by now, in id order, as
    record batches of ``SCHEMA``, streamed from one consistent read (``_batches``)."""
    with db.read() as session:
        yield from _batches(session, tenant, batch_size)


def subscriptions_snapshot(db: Database, *, batch_size: int = 50_000) -> tuple[pa.Table, int]:
    """Every subscription not expired by now and the change-log sequence number they
    reflect, read in one transaction (REPEATABLE READ on PostgreSQL; DuckDB's transactions
    are snapshots): the rows are the store with exactly the changes up to that number
    applied."""
    with db.sessions() as session:
        if db.is_postgres:
            session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
        # The first read fixes the snapshot: the rows below are read from the same one.
        seq = SubscriptionRepository(session).last_seq()
        batches = list(_batches(session, None, batch_size))
    return pa.Table.from_batches(batches, schema=SCHEMA), seq
