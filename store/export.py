"""Export subscriptions to Parquet: the file ``topicstore route --subscriptions`` reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

from store.db import Database
from store.models import Subscription

SCHEMA: Final = pa.schema(
    [
        ("id", pa.int64()),
        ("tenant", pa.string()),
        ("subscriber", pa.string()),
        ("pattern", pa.string()),
        ("dialect", pa.string()),
        ("kind", pa.string()),
        ("criteria", pa.string()),  # JSON list of [field, value or null]
        ("mode", pa.string()),
        ("labels", pa.string()),  # JSON object
        ("created_at", pa.timestamp("us", tz="UTC")),
    ]
)


def export_parquet(
    db: Database, path: Path, *, tenant: str | None = None, batch_size: int = 50_000
) -> int:
    """Write every subscription (of ``tenant``, when given) to ``path``, streaming in
    batches from one consistent read; returns the row count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    query = sa.select(Subscription).order_by(Subscription.id)
    if tenant is not None:
        query = query.where(Subscription.tenant == tenant)
    count = 0
    with db.read() as session, pq.ParquetWriter(path, SCHEMA) as writer:
        rows = session.scalars(query.execution_options(yield_per=batch_size))
        for batch in rows.partitions():
            columns: dict[str, list[object]] = {name: [] for name in SCHEMA.names}
            for row in batch:
                columns["id"].append(row.id)
                columns["tenant"].append(row.tenant)
                columns["subscriber"].append(row.subscriber)
                columns["pattern"].append(row.pattern)
                columns["dialect"].append(row.dialect)
                columns["kind"].append(row.kind)
                columns["criteria"].append(
                    None if row.criteria is None else json.dumps(row.criteria)
                )
                columns["mode"].append(row.mode)
                columns["labels"].append(None if row.labels is None else json.dumps(row.labels))
                columns["created_at"].append(row.created_at)
            writer.write_table(pa.table(columns, schema=SCHEMA))
            count += len(batch)
    if count == 0:
        pq.write_table(SCHEMA.empty_table(), path)
    return count
