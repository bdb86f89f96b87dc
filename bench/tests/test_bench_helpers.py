"""The benchmark helpers do what the tables rely on: the concurrency plans hold the stated
mix and only unsubscribe ids they added, the CPU budget interrupts a call that would never
return, a budgeted pass stops early, percentiles interpolate between samples, a big PostgreSQL
store is made and used by one process at a time. No timings asserted."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from bench.big_store import LOCK_CLASS, big_store
from bench.concurrency import MATCH, MIXES, SUBSCRIBE, UNSUBSCRIBE, is_write, thread_ops
from bench.passes import budgeted_pass
from bench.percentiles import percentile
from bench.timing import BudgetExceededError, cpu_budget, cpu_budget_available
from harness.scratch_db import DEFAULT_ADMIN_URL, libpq_dsn, postgres_reachable
from harness.services import require
from harness.workloads import concurrency_key

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("mix", "writes_per_10"), MIXES.items())
def test_thread_ops_hold_the_mix(mix: str, writes_per_10: int) -> None:
    plan, left = thread_ops(3, 1_000, writes_per_10)
    kinds = [kind for kind, _, _ in plan]
    assert len(plan) == 1_000
    assert kinds.count(MATCH) == 1_000 - 100 * writes_per_10, mix
    # every write is a subscribe or an unsubscribe of an id this thread added before
    held: set[int] = set()
    for k, (kind, sub_id, key) in enumerate(plan):
        assert key == concurrency_key(k)
        if kind == SUBSCRIBE:
            assert sub_id not in held
            held.add(sub_id)
        elif kind == UNSUBSCRIBE:
            held.remove(sub_id)
    assert len(held) == left
    assert kinds.count(SUBSCRIBE) - kinds.count(UNSUBSCRIBE) == left


def test_thread_ops_use_distinct_ids_per_thread() -> None:
    ids = [
        {sub_id for kind, sub_id, _ in thread_ops(thread, 100, 5)[0] if kind == SUBSCRIBE}
        for thread in (0, 1)
    ]
    assert ids[0] and ids[1]
    assert not ids[0] & ids[1]


def test_writes_spread_evenly() -> None:
    assert [is_write(k, 5) for k in range(4)] == [False, True, False, True]
    assert [k for k in range(30) if is_write(k, 1)] == [9, 19, 29]


def test_percentile_interpolates_between_the_nearest_samples() -> None:
    samples = list(range(100, 0, -1))  # 1..100, unsorted
    # position (n - 1) x p / 100 in the sorted samples: 49.5 and 98.01
    assert percentile(samples, 50) == pytest.approx(50.5)
    assert percentile(samples, 99) == pytest.approx(99.01)
    assert percentile([3, 1, 2], 50) == 2
    assert percentile([3, 1, 2], 1) == pytest.approx(1.02)
    assert percentile([7], 99) == 7
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError, match="1 to 99"):
        percentile([1, 2], 100)


@pytest.mark.skipif(not cpu_budget_available(), reason="needs SIGPROF and the main thread")
def test_cpu_budget_interrupts_a_call_that_never_returns() -> None:
    with pytest.raises(BudgetExceededError), cpu_budget(0.05):
        while True:
            pass
    with cpu_budget(10.0):  # a call within budget is left alone, and the timer is disarmed
        total = sum(range(1_000))
    assert total == 499_500


class _Slow:
    """A subject whose match takes at least a millisecond."""

    def subscribe(self, sub_id: int, pattern: str) -> None: ...

    def unsubscribe(self, sub_id: int) -> bool:
        return False

    def match(self, topic: str) -> Iterable[int]:
        time.sleep(0.001)
        return ()

    def __len__(self) -> int:
        return 0


def test_budgeted_pass_stops_early_when_the_pass_would_overrun() -> None:
    messages = ["t"] * 10_000  # at >= 1 ms each, at least 10 s in all
    seconds, done = budgeted_pass(_Slow(), messages, budget_s=0.5, probe_s=0.01)
    assert 0 < done < len(messages)
    assert seconds > 0


def test_budgeted_pass_completes_within_budget() -> None:
    messages = ["t"] * 20
    _, done = budgeted_pass(_Slow(), messages, budget_s=3_600.0, probe_s=0.0)
    assert done == len(messages)


def test_a_held_big_store_is_made_and_used_by_one_process_at_a_time(tmp_path: Path) -> None:
    """Two benchmarks on the same PostgreSQL size (two test workers) take turns: while one
    holds the store, another process asking for it waits, and then finds it whole."""
    require(postgres_reachable(DEFAULT_ADMIN_URL), "PostgreSQL at " + DEFAULT_ADMIN_URL)
    count = 37  # a size of its own: no other test holds this database
    script = (
        "from bench.big_store import big_postgres; import psycopg; "
        "from harness.scratch_db import libpq_dsn; "
        f"url = big_postgres({count}); "
        "print(psycopg.connect(libpq_dsn(url)).execute("
        "'SELECT count(*), (SELECT subscriptions FROM tenant_usage) FROM subscription'"
        ").fetchone())"
    )
    with big_store("postgresql", count, 0, tmp_path) as url:
        other = subprocess.Popen(
            [sys.executable, "-c", script],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
            conn.execute(
                "INSERT INTO subscription (tenant, subscriber, pattern, dialect, kind) "
                "VALUES ('default', 'extra', 'x.y', 'amqp', 'topic')"
            )
            deadline = time.monotonic() + 60
            while not _waiting_for(make_url(url).database):
                assert other.poll() is None, other.communicate()
                assert time.monotonic() < deadline, "the other process never waited"
                time.sleep(0.05)
            rows = conn.execute("SELECT count(*) FROM subscription").fetchone()
            assert rows == (count + 1,)  # nothing rebuilt under this one
    out, err = other.communicate(timeout=120)
    assert other.returncode == 0, err
    # It found one row too many, and made the store again: each row once, counted once.
    assert out.strip() == f"({count}, {count})"


def _waiting_for(name: str | None) -> bool:
    """Some session waits for big database ``name``'s advisory lock (``bench.big_store``;
    ``pg_locks`` shows a two-key lock's keys as unsigned)."""
    with psycopg.connect(libpq_dsn(DEFAULT_ADMIN_URL), autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND objsubid = 2 AND classid::bigint = %s "
            "AND objid::bigint = (hashtext(%s)::bigint & 4294967295)",
            (LOCK_CLASS, name),
        ).fetchone()
    return row is not None and row[0] > 0
