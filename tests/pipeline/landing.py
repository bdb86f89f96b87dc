"""Helpers of the stream tests: a real store the test changes while a stream runs,
message files landed as producers must land them, and the committed rows read back."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from migrations.runner import upgrade
from store import Database, NewSubscription, SubscriptionRepository, validate
from tests.pipeline.conftest import Generated, naive_deliveries

TS = datetime(2024, 5, 1, 10, tzinfo=UTC)
Delivery = tuple[str, int, str, str]
Message = tuple[str, str, str]
#: The routed table's columns a delivery or unmatched row fills (``kind`` first).
ROW_COLUMNS = ("kind", "message_id", "subscription_id", "subscriber", "tenant", "topic", "ts")


class Store:
    """A migrated store (a DuckDB file, or a PostgreSQL database) the test adds
    subscriptions to."""

    def __init__(self, url: str) -> None:
        self.url = url
        db = Database(self.url)
        upgrade(db.url)
        db.dispose()
        self.subscriptions: list[tuple[int, str, str, str]] = []

    def add(self, rows: Sequence[tuple[str, str, str]]) -> int:
        """Add (tenant, subscriber, pattern) rows; the change-log seq after them."""
        db = Database(self.url)
        try:
            with db.write() as session:
                added = SubscriptionRepository(session).add_many(
                    [validate(NewSubscription(s, p, tenant=t)) for t, s, p in rows]
                )
            ids = [sub_id for sub_id, _ in added.items or []]
            self.subscriptions += [(i, *row) for i, row in zip(ids, rows, strict=True)]
            with db.read() as session:
                return SubscriptionRepository(session).last_seq()
        finally:
            db.dispose()

    def expected(self, messages: list[Message]) -> list[Delivery]:
        return sorted(naive_deliveries(Generated(self.subscriptions, messages)))


def land(landing: Path, name: str, messages: list[Message]) -> None:
    """One file of messages, written aside and renamed into place (as producers must)."""
    partial = landing / f".{name}.partial"
    if name.endswith(".parquet"):
        ids, tenants, topics = zip(*messages, strict=True)
        pq.write_table(
            pa.table(
                {
                    "message_id": list(ids),
                    "tenant": list(tenants),
                    "topic": list(topics),
                    "ts": pa.array([TS] * len(ids), pa.timestamp("us", tz="UTC")),
                }
            ),
            partial,
        )
    else:
        lines = (
            json.dumps({"message_id": m, "tenant": t, "topic": topic, "ts": TS.isoformat()})
            for m, t, topic in messages
        )
        partial.write_text("\n".join(lines) + "\n", encoding="utf-8")
    partial.rename(landing / name)


def deliveries(out: Path) -> list[Delivery]:
    """Every committed delivery, duplicates kept (delta-rs reading the table)."""
    rows = DeltaTable(str(out)).to_pyarrow_table(
        columns=["message_id", "subscription_id", "subscriber", "tenant"],
        filters=[("kind", "=", "deliveries")],
    )
    return sorted(zip(*(rows.column(i).to_pylist() for i in range(4)), strict=True))


def routed_rows(out: Path) -> Counter[tuple[object, ...]]:
    """The committed deliveries and unmatched messages as a multiset of whole rows."""
    rows = DeltaTable(str(out)).to_pyarrow_table(
        columns=list(ROW_COLUMNS), filters=[("kind", "in", ["deliveries", "unmatched"])]
    )
    return Counter(zip(*(rows.column(c).to_pylist() for c in ROW_COLUMNS), strict=True))
