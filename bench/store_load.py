"""Store throughput and startup: bulk insert into PostgreSQL, then build the routing table
from it the way the service does at startup (one consistent snapshot, streamed)."""

from __future__ import annotations

import resource
import time
from collections.abc import Sequence

from bench.report import Column, Table
from harness.scratch_db import DEFAULT_ADMIN_URL, postgres_reachable, scratch_postgres
from harness.workloads import market_subscriptions
from loader import Loader
from matcher.registry import DEFAULT_ENGINES
from store import NewSubscription, SubscriptionRepository, validate

BATCH = 100_000


def run_store_load(counts: Sequence[int], seed: int, admin_url: str = DEFAULT_ADMIN_URL) -> Table:
    table = Table(
        name="store_load",
        title="PostgreSQL: bulk insert, then startup build of the routing table",
        columns=[
            Column("subscriptions", "{}"),
            Column("insert rows/s", chart=True),
            Column(f"build {DEFAULT_ENGINES[0]} (s)", "{:,.2f}", chart=True),
            Column("build all default engines (s)", "{:,.2f}"),
            Column("peak RSS (MiB)"),
        ],
        notes=[
            "insert: SubscriptionRepository.add_many in batches of 100,000 (COPY into a staging "
            "table, then INSERT ... ON CONFLICT DO NOTHING, change_log rows in the same "
            "transaction).",
            f"build: Loader.build() on a fresh database; '{DEFAULT_ENGINES[0]}' is the engine "
            f"that answers matches by default; all = {', '.join(DEFAULT_ENGINES)}.",
        ],
    )
    if not postgres_reachable(admin_url):
        table.notes.append(f"skipped: PostgreSQL not reachable at {admin_url}")
        return table
    for count in counts:
        items = [
            validate(NewSubscription(subscriber, pattern))
            for subscriber, pattern in market_subscriptions(count, seed)
        ]
        with scratch_postgres(admin_url) as db:
            started = time.perf_counter()
            for start in range(0, count, BATCH):
                with db.write() as session:
                    SubscriptionRepository(session).add_many(items[start : start + BATCH])
            insert_rate = count / (time.perf_counter() - started)
            del items
            primary = _timed_build(Loader(db, DEFAULT_ENGINES[:1]))
            both = _timed_build(Loader(db, DEFAULT_ENGINES))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        table.rows.append([f"{count:,}", insert_rate, primary, both, rss])
    return table


def _timed_build(loader: Loader) -> float:
    started = time.perf_counter()
    built = loader.build()
    seconds = time.perf_counter() - started
    assert len(built) > 0
    return seconds
