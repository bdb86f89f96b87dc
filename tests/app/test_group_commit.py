"""Admin writes that share a transaction each keep their own outcome: one refused for the
quota, one for an invalid pattern, the rest stored (real PostgreSQL and DuckDB)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sqlalchemy.orm import Session

from app.auth import OPERATOR
from app.operations import AdminOperations
from app.refusals import QuotaExceededError
from app.settings import Settings
from matcher import InvalidPatternError
from store import Database, SubscriptionRepository
from topicstore.models import SubscriptionIn


def test_a_group_keeps_each_callers_outcome(database: Database) -> None:
    quota = 3
    operations = AdminOperations(
        database, Settings(_env_file=None, database_url=database.url, tenant_quota=quota)
    )
    items = [SubscriptionIn(subscriber=f"s{i}", pattern=f"ok.{i}") for i in range(4)]
    items.append(SubscriptionIn(subscriber="bad", pattern="a/#/b", dialect="mqtt"))
    held, release = threading.Event(), threading.Event()

    def hold(session: Session) -> Callable[[], None]:
        held.set()
        assert release.wait(30)
        return lambda: None

    outcomes: list[object] = [None] * len(items)

    def create(index: int) -> None:
        try:
            outcomes[index] = operations.create(items[index], OPERATOR)[1]
        except Exception as e:  # the outcome under test
            outcomes[index] = e

    holder = threading.Thread(target=database.writes.run, args=(hold,))
    holder.start()
    assert held.wait(30)
    threads = [threading.Thread(target=create, args=(i,)) for i in range(len(items))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while database.writes.waiting() < 4:  # the invalid one is refused before it queues
        assert time.monotonic() < deadline
        time.sleep(0.001)
    groups = database.writes.groups
    release.set()
    for thread in [holder, *threads]:
        thread.join(30)
    assert database.writes.groups == groups + 2  # the holder's, then one for the four
    assert outcomes[:4].count(True) == quota
    assert sum(isinstance(o, QuotaExceededError) for o in outcomes[:4]) == 1
    assert isinstance(outcomes[4], InvalidPatternError)
    with database.read() as session:
        repo = SubscriptionRepository(session)
        assert sum(repo.count("default").values()) == repo.usage("default") == quota
