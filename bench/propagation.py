"""Replica convergence: a subscribe committed through one service replica, and the moment
another replica (its own process state, the same PostgreSQL) matches it."""

from __future__ import annotations

import time

from app import heap
from bench.percentiles import percentile
from bench.report import Column, Table
from harness.scratch_db import DEFAULT_ADMIN_URL, postgres_reachable, scratch_postgres
from loader import Loader
from store import Database, NewSubscription, SubscriptionRepository, validate


def run_propagation(changes: int, admin_url: str = DEFAULT_ADMIN_URL) -> Table:
    table = Table(
        name="propagation",
        title="Replica propagation over LISTEN/NOTIFY (commit on A -> matched on B)",
        columns=[
            Column("path", "{}"),
            Column("changes"),
            Column("p50 (ms)", "{:,.2f}", chart=True),
            Column("p99 (ms)", "{:,.2f}", chart=True),
            Column("max (ms)", "{:,.2f}"),
        ],
        notes=[
            "Each change is a subscribe committed through replica A's store; the clock stops "
            "when replica B's routing table has applied it (B polls its own table every 0.2 ms, "
            "far below the figures). B's poll interval (the safety net) is 1 s, so the "
            "figures are the doorbell path.",
        ],
    )
    if not postgres_reachable(admin_url):
        table.notes.append(f"skipped: PostgreSQL not reachable at {admin_url}")
        return table
    with scratch_postgres(admin_url) as db_a:
        # A is only a writer here (no loader of its own, so nothing runs after its commit
        # before the clock starts); B is a full replica with its own connections.
        db_b = Database(db_a.url)
        replica_b = Loader(db_b, poll_interval=1.0, settle=heap.settle)  # as a server has it
        replica_b.start()
        try:
            delays = [_one(db_a, replica_b, n) for n in range(changes)]
        finally:
            replica_b.stop()
            db_b.dispose()
    table.rows.append(
        [
            "subscribe A -> B",
            changes,
            percentile(delays, 50),
            percentile(delays, 99),
            max(delays),
        ]
    )
    return table


def _one(db: Database, replica: Loader, n: int) -> float:
    new = validate(NewSubscription("p", f"prop.{n}"))
    with db.write() as session:
        row, _ = SubscriptionRepository(session).add(new)
    committed = time.perf_counter()
    deadline = committed + 10
    while row.id not in replica.table.snapshot().entries:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"change {n} did not reach the other replica in 10 s")
        time.sleep(0.0002)
    return (time.perf_counter() - committed) * 1000
