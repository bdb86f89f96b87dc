"""Export subscriptions to Parquet: the file ``topicstore route --subscriptions`` reads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from store.arrow import SCHEMA, subscription_batches
from store.db import Database


def export_parquet(
    db: Database,
    path: Path,
    *,
    tenant: str | None = None,
    batch_size: int = 10_000,
    check: Callable[[], None] | None = None,
) -> int:
    """Write every subscription (of ``tenant``, when given) to ``path`` (``store.arrow``'s
    layout), streaming in batches from one consistent read; returns the row count. A batch
    is a Python tuple per row before it becomes Arrow: 10,000 rows keep a server's export
    of 1M subscriptions within 1.5x its steady memory (50,000 went to 1.45-1.55x).
    ``check`` is called before each batch; what it raises stops the export."""
    # Here, not at the top: Parquet's modules (and Arrow's file systems with them) are
    # 10 MB of the resident set of every process that imports the store, which only an
    # export needs (an import streams within a memory budget: ``app.heap``).
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with pq.ParquetWriter(path, SCHEMA) as writer:
        for batch in subscription_batches(db, tenant=tenant, batch_size=batch_size):
            if check is not None:
                check()
            writer.write_batch(batch)
            count += batch.num_rows
    return count
