"""Store throughput and startup: bulk insert into PostgreSQL, then build the routing table
from it the way the service does at startup (one consistent snapshot, streamed)."""

from __future__ import annotations

import random
import resource
import time
from collections.abc import Sequence

from bench.report import Column, Table
from bench.scratch_db import DEFAULT_ADMIN_URL, postgres_reachable, scratch_postgres
from loader import DEFAULT_ENGINES, Loader
from store import NewSubscription, SubscriptionRepository, validate

BATCH = 100_000


def subscriptions(count: int, seed: int) -> list[NewSubscription]:
    """Five-word patterns over realistic words: a region, a venue, a symbol, a side, an
    event, each position a wildcard now and then; 1,000 subscribers."""
    rng = random.Random(seed)
    words = [
        [f"r{i}" for i in range(20)],
        [f"v{i}" for i in range(50)],
        [f"s{i}" for i in range(5_000)],
        ["buy", "sell", "hold"],
        [f"e{i}" for i in range(30)],
    ]
    out = []
    for i in range(count):
        parts = [rng.choice(choices) for choices in words]
        if i % 10 == 0:
            parts[rng.randrange(5)] = "*"
        elif i % 25 == 0:
            parts[rng.randrange(3, 5) :] = ["#"]
        out.append(NewSubscription(f"q{i % 1_000}", ".".join(parts)))
    return out


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
        items = [validate(new) for new in subscriptions(count, seed)]
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
