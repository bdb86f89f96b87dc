"""A small routed table written by hand (the Delta layout `topicstore route` writes, through
delta-rs' own writer), with expectations computed by hand: shared by the analytics tests of
pipeline/ and of the API. Two commits: version 0 holds May 1st, version 1 adds May 2nd."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import write_deltalake

from pipeline import delta


def _at(day: int, hour: int, minute: int) -> datetime:
    return datetime(2024, 5, day, hour, minute, tzinfo=UTC)


#: (message_id, subscription_id, subscriber, tenant, topic, ts)
DELIVERIES = [
    ("m1", 1, "alice", "t1", "a.b", _at(1, 10, 15)),
    ("m1", 2, "bob", "t1", "a.b", _at(1, 10, 15)),
    ("m2", 1, "alice", "t1", "a.b", _at(1, 10, 45)),
    ("m3", 3, "carol", "t2", "c", _at(1, 11, 5)),
    ("m4", 1, "alice", "t1", "d.e", _at(2, 9, 0)),
    ("m4", 2, "bob", "t1", "d.e", _at(2, 9, 0)),
    ("m4", 4, "dave", "t1", "d.e", _at(2, 9, 0)),
]
#: (message_id, tenant, topic, ts)
UNMATCHED = [
    ("m5", "t1", "x", _at(1, 10, 30)),
    ("m6", "t2", "a.b", _at(1, 11, 30)),
    ("m7", "t1", "x", _at(2, 9, 10)),
]
SUBSCRIPTIONS = [
    (1, "t1", "alice", "a.#"),
    (2, "t1", "bob", "*.*"),
    (3, "t2", "carol", "c"),
    (4, "t1", "dave", "d.e"),
    (5, "t2", "eve", "z.#"),
    (6, "t1", "frank", "y"),
]


#: The commit that added each day's rows.
VERSIONS = {1: 0, 2: 1}


def _rows(kind: str, columns: list[str], rows: list[tuple[object, ...]], day: int) -> pa.Table:
    chosen = [r for r in rows if r[-1].day == day]  # type: ignore[attr-defined]
    data: dict[str, Any] = {c: [r[i] for r in chosen] for i, c in enumerate(columns)}
    n = len(chosen)
    full = {name: data.get(name, [None] * n) for name in delta.DATA_SCHEMA.names}
    full["kind"] = [kind] * n
    full["date"] = [ts.date() for ts in data["ts"]]
    return pa.table(full, schema=delta.SCHEMA)


def write_routed(root: Path) -> Path:
    """Write the routed table at ``root`` (two commits) and ``root/subscriptions.parquet``."""
    for day in sorted(VERSIONS):
        write_deltalake(
            root,
            pa.concat_tables(
                [
                    _rows(
                        "deliveries",
                        ["message_id", "subscription_id", "subscriber", "tenant", "topic", "ts"],
                        list(DELIVERIES),
                        day,
                    ),
                    _rows(
                        "unmatched", ["message_id", "tenant", "topic", "ts"], list(UNMATCHED), day
                    ),
                ]
            ),
            partition_by=list(delta.PARTITIONS),
            mode="append",
        )
    ids, tenants, subscribers, patterns = zip(*SUBSCRIPTIONS, strict=True)
    pq.write_table(
        pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "tenant": tenants,
                "subscriber": subscribers,
                "pattern": patterns,
                "dialect": ["amqp"] * len(ids),
            }
        ),
        root / "subscriptions.parquet",
    )
    return root
