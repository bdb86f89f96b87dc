"""A small routing-job output written by hand (the layout `topicstore route` writes), with
expectations computed by hand: shared by the analytics tests of pipeline/ and of the API."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


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


def _write(root: Path, name: str, columns: list[str], rows: list[tuple[object, ...]]) -> None:
    data: dict[str, Any] = {c: [r[i] for r in rows] for i, c in enumerate(columns)}
    data["date"] = [ts.date().isoformat() for ts in data["ts"]]
    data["ts"] = pa.array(data["ts"], pa.timestamp("us", tz="UTC"))
    pq.write_to_dataset(pa.table(data), root / name, partition_cols=["date"])
    (root / name / "_SUCCESS").touch()  # as Spark leaves it


def write_routed(root: Path) -> Path:
    """Write deliveries/, unmatched/ and subscriptions.parquet under ``root``."""
    _write(
        root,
        "deliveries",
        ["message_id", "subscription_id", "subscriber", "tenant", "topic", "ts"],
        list(DELIVERIES),
    )
    _write(root, "unmatched", ["message_id", "tenant", "topic", "ts"], list(UNMATCHED))
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
