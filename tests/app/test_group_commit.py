"""Admin writes that share a transaction each keep their own outcome: one refused for the
quota, one for an invalid pattern, the rest stored (real PostgreSQL and DuckDB)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.admin_reads import subscription_out
from app.auth import OPERATOR, Caller
from app.operations import AdminOperations
from app.refusals import NotFoundError, QuotaExceededError
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

    # The invalid one is refused before it queues; the four run as one group.
    def create(item: SubscriptionIn) -> Callable[[], bool]:
        return lambda: operations.create(item, OPERATOR)[1]

    outcomes = _as_one_group(database, [create(item) for item in items])
    assert outcomes[:4].count(True) == quota
    assert sum(isinstance(o, QuotaExceededError) for o in outcomes[:4]) == 1
    assert isinstance(outcomes[4], InvalidPatternError)
    with database.read() as session:
        repo = SubscriptionRepository(session)
        assert sum(repo.count("default").values()) == repo.usage("default") == quota


def test_a_group_of_single_writes_ends_as_they_would_one_at_a_time(database: Database) -> None:
    """Single creates and removals queued behind a held transaction run as one group; each
    caller gets what the same writes run one at a time in queue order give: a repeated
    create answers the stored row, a second removal of a row and another tenant's removal
    find nothing, and a create admitted by the quota only once the group's removal ran is
    created."""
    operations = AdminOperations(
        database, Settings(_env_file=None, database_url=database.url, tenant_quota=3)
    )
    gone, kept = (
        operations.create(SubscriptionIn(subscriber="s", pattern=p), OPERATOR)[0]
        for p in ("gone", "kept")
    )
    acme = Caller("acme", "acme:test")
    calls: list[Callable[[], object]] = [
        lambda: operations.create(SubscriptionIn(subscriber="s", pattern="kept"), OPERATOR),
        lambda: operations.remove(gone.id, OPERATOR),
        lambda: operations.create(SubscriptionIn(subscriber="s", pattern="new"), OPERATOR),
        lambda: operations.create(SubscriptionIn(subscriber="s", pattern="new"), OPERATOR),
        lambda: operations.remove(gone.id, OPERATOR),
        lambda: operations.remove(kept.id, acme),  # another tenant's row: not found
        lambda: operations.create(SubscriptionIn(subscriber="s", pattern="last"), OPERATOR),
    ]
    outcomes = _as_one_group(database, calls)
    assert outcomes[0] == (kept, False)
    assert outcomes[1] is None
    new = outcomes[2]
    assert isinstance(new, tuple) and new[1] and new[0].pattern == "new"
    assert outcomes[3] == (new[0], False)
    assert isinstance(outcomes[4], NotFoundError)
    assert isinstance(outcomes[5], NotFoundError)
    last = outcomes[6]  # within the quota once "gone" is gone:
    assert isinstance(last, tuple) and last[1] and last[0].pattern == "last"
    with database.read() as session:
        repo = SubscriptionRepository(session)
        assert repo.usage("default") == 3
        assert sorted(s.pattern for s in repo.page(limit=10)) == ["kept", "last", "new"]


def test_a_group_read_ahead_gives_way_to_writes_of_other_kinds(database: Database) -> None:
    """Plain creates and removals of a group are looked up together ahead and written
    together at commit (``store.deferred``, DuckDB); a write of another kind among them (a
    create in a group of subscribers, a removal of a whole subscriber: statements of their
    own) first sees the rows of the jobs before it, and the jobs after it see what it did.
    Each caller's answer, the rows, the quota's count and the change log's order are those
    of the writes run one at a time in queue order."""
    operations = AdminOperations(
        database, Settings(_env_file=None, database_url=database.url, tenant_quota=10)
    )
    old = operations.create(SubscriptionIn(subscriber="s", pattern="old"), OPERATOR)[0]

    def create(pattern: str, group: str | None = None) -> Callable[[], object]:
        item = SubscriptionIn(subscriber="s", pattern=pattern, group=group)
        return lambda: operations.create(item, OPERATOR)

    headers = SubscriptionIn(
        subscriber="h",
        kind="headers",
        criteria={"x": "1", "y": None},
        mode="all",
        labels={"k": [1]},
    )
    calls = [
        lambda: operations.create(headers, OPERATOR),
        create("a"),
        lambda: operations.remove(old.id, OPERATOR),
        create("b", "g"),
        lambda: len(operations.remove_subscriber("s", OPERATOR, None).deleted),
        create("a"),
        lambda: operations.remove(old.id, OPERATOR),
        create("c"),
    ]
    made, *outcomes = _as_one_group(database, calls)
    a, b, again, c = outcomes[0], outcomes[2], outcomes[4], outcomes[6]
    assert isinstance(a, tuple) and isinstance(b, tuple)
    assert isinstance(again, tuple) and isinstance(c, tuple)
    assert a[1] and b[1] and again[1] and c[1] and again[0].id != a[0].id
    assert outcomes[1] is None and outcomes[3] == 2
    assert isinstance(outcomes[5], NotFoundError)
    with database.read() as session:
        repo = SubscriptionRepository(session)
        stored = {s.pattern: s for s in repo.page(limit=10)}
        assert isinstance(made, tuple) and made[1]
        assert sorted(stored) == sorted(["a", "c", made[0].pattern])
        assert repo.usage("default") == 3
        for out in (made[0], again[0], c[0]):
            row = stored[out.pattern]
            assert (row.id, row.created_at) == (out.id, out.created_at)
            assert subscription_out(row) == out
        changes = repo.changes_since(0)
    assert changes[1].criteria == (("x", "1"), ("y", None))
    assert [(c.op, c.pattern) for c in changes] == [
        ("add", "old"),
        ("add", made[0].pattern),
        ("add", "a"),
        ("remove", "old"),
        ("add", "b"),
        ("remove", "a"),
        ("remove", "b"),
        ("add", "a"),
        ("add", "c"),
    ]


def test_a_groups_statements_do_not_grow_with_its_size(database: Database) -> None:
    """A group of single creates and removals runs the same statements whatever its size:
    its keys and ids are read ahead in one query and its rows written together
    (``store.deferred``). On PostgreSQL they are the writer lock, that read, the removals'
    delete and the rows written before the commit; a create alone is the lock, the read
    and the rows."""
    operations = AdminOperations(database, Settings(_env_file=None, database_url=database.url))
    counted = []
    for size in (3, 12):
        statements = _group_statements(database, operations, size)
        counted.append(len(statements))
        if database.is_postgres:
            group = statements[1:]  # after the holder's lock
            assert [text.split()[0] for text in group] == ["SELECT", "WITH", "DELETE", "WITH"]
            assert "pg_advisory_xact_lock" in group[0]
            assert "nextval" in group[1] and "INSERT INTO subscription" in group[3]
    assert counted[0] == counted[1], counted
    if database.is_postgres:  # alone, a create is read ahead too: its tenant's count with it
        with _recorded(database) as statements:
            made = operations.create(SubscriptionIn(subscriber="s", pattern="alone"), OPERATOR)
        assert made[1] and made[0].pattern == "alone"
        assert len(statements) == 3, statements  # the lock, the read, the rows
        assert "nextval" in statements[1] and "INSERT INTO subscription" in statements[2]


@contextlib.contextmanager
def _recorded(database: Database) -> Iterator[list[str]]:
    """The text of each statement the store's engine runs meanwhile."""
    statements: list[str] = []

    def seen(*args: object) -> None:
        statements.append(str(args[2]))

    sa.event.listen(database.engine, "before_cursor_execute", seen)
    try:
        yield statements
    finally:
        sa.event.remove(database.engine, "before_cursor_execute", seen)


def _group_statements(database: Database, operations: AdminOperations, size: int) -> list[str]:
    """The statements of one group of ``size`` creates and as many removals of stored
    rows, interleaved (and of the transaction held before it); checks the rows after."""
    operations.remove_subscriber("s", OPERATOR, None)  # the last size's rows
    stored = [
        operations.create(SubscriptionIn(subscriber="s", pattern=f"old.{i}"), OPERATOR)[0]
        for i in range(size)
    ]
    calls: list[Callable[[], object]] = []
    for i, row in enumerate(stored):
        item = SubscriptionIn(subscriber="s", pattern=f"new.{i}")
        calls.append(lambda item=item: operations.create(item, OPERATOR))  # type: ignore[misc]
        calls.append(lambda sub_id=row.id: operations.remove(sub_id, OPERATOR))  # type: ignore[misc]
    with _recorded(database) as statements:
        outcomes = _as_one_group(database, calls)
    assert not [o for o in outcomes if isinstance(o, Exception)], outcomes
    with database.read() as session:
        patterns = [s.pattern for s in SubscriptionRepository(session).page(limit=100)]
    assert sorted(patterns) == sorted(f"new.{i}" for i in range(size))
    return statements


def _as_one_group(database: Database, calls: list[Callable[[], object]]) -> list[object]:
    """Each of ``calls`` (one write each) from a thread of its own, queued in order behind
    a held transaction, so that those that queue run as one group (one refused before it
    queues just ends); each one's result or refusal."""
    held, release = threading.Event(), threading.Event()

    def hold(session: Session) -> Callable[[], None]:
        held.set()
        assert release.wait(30)
        return lambda: None

    outcomes: list[object] = [None] * len(calls)

    def call(index: int) -> None:
        try:
            outcomes[index] = calls[index]()
        except Exception as e:  # the outcome under test
            outcomes[index] = e

    holder = threading.Thread(target=database.writes.run, args=(hold,))
    holder.start()
    assert held.wait(30)
    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(calls))]
    deadline = time.monotonic() + 30
    queued = 0
    for thread in threads:
        thread.start()
        while database.writes.waiting() == queued and thread.is_alive():
            assert time.monotonic() < deadline
            time.sleep(0.001)
        queued = database.writes.waiting()
    groups = database.writes.groups
    release.set()
    for thread in [holder, *threads]:
        thread.join(30)
    assert database.writes.groups == groups + 2  # the holder's, then one for the rest
    return outcomes
