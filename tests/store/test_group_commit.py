"""Group commit on real PostgreSQL and a real DuckDB file: writes queued behind a running
transaction share the next one, each keeps its own outcome, a refusal leaves its neighbours
stored, and a failed write phase reruns the group's jobs one by one."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from sqlalchemy.orm import Session

from store import Database, NewSubscription, SubscriptionRepository, validate
from store.group_commit import Job


class RefusedError(Exception):
    """A job's refusal from its read phase."""


def _create(name: str) -> Job[int]:
    def job(session: Session) -> Callable[[], int]:
        repo = SubscriptionRepository(session)
        return lambda: repo.add(validate(NewSubscription(name, f"g.{name}")))[0].id

    return job


def _refuse(session: Session) -> Callable[[], int]:
    raise RefusedError("no")


def _fail_after_writing(session: Session) -> Callable[[], int]:
    repo = SubscriptionRepository(session)

    def write() -> int:
        repo.add(validate(NewSubscription("broken", "g.broken")))
        raise ValueError("the write phase failed")

    return write


def _grouped(db: Database, jobs: list[Job[int]]) -> list[int | BaseException]:
    """Run ``jobs`` from threads of their own while a first write holds the writer, so
    that all of them queue and then run as one group; each one's outcome, in order."""
    held, release = threading.Event(), threading.Event()

    def hold(session: Session) -> Callable[[], int]:
        held.set()
        assert release.wait(30)
        return lambda: 0

    outcomes: list[int | BaseException] = [RuntimeError("not run")] * len(jobs)

    def run(index: int, job: Job[int]) -> None:
        try:
            outcomes[index] = db.writes.run(job)
        except Exception as e:  # the outcome under test
            outcomes[index] = e

    holder = threading.Thread(target=db.writes.run, args=(hold,))
    holder.start()
    assert held.wait(30)
    threads = [threading.Thread(target=run, args=item) for item in enumerate(jobs)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while db.writes.waiting() < len(jobs):
        assert time.monotonic() < deadline
        time.sleep(0.001)
    release.set()
    for thread in [holder, *threads]:
        thread.join(30)
    return outcomes


def _stored(db: Database) -> list[str]:
    with db.read() as session:
        return sorted(row.subscriber for row in SubscriptionRepository(session).page())


def test_queued_writes_share_one_transaction_and_keep_their_outcomes(database: Database) -> None:
    before = (database.writes.groups, database.writes.jobs)
    outcomes = _grouped(database, [_create("a"), _refuse, _create("b"), _create("c")])
    assert isinstance(outcomes[1], RefusedError)
    ids = [outcomes[0], outcomes[2], outcomes[3]]
    assert all(isinstance(i, int) for i in ids) and len(set(ids)) == 3
    # the holder's transaction, then one for all four
    assert (database.writes.groups, database.writes.jobs) == (before[0] + 2, before[1] + 5)
    assert _stored(database) == ["a", "b", "c"]
    with database.read() as session:
        repo = SubscriptionRepository(session)
        changes = repo.changes_since(0)
        assert repo.usage("default") == 3
    assert [(c.op, c.subscriber) for c in changes] == [("add", "a"), ("add", "b"), ("add", "c")]


def test_a_failed_write_phase_reruns_the_group_alone(database: Database) -> None:
    outcomes = _grouped(database, [_create("a"), _fail_after_writing, _create("b")])
    assert isinstance(outcomes[1], ValueError)
    assert isinstance(outcomes[0], int) and isinstance(outcomes[2], int)
    assert _stored(database) == ["a", "b"]  # the failed job's own row rolled back
    with database.read() as session:
        repo = SubscriptionRepository(session)
        assert [c.subscriber for c in repo.changes_since(0)] == ["a", "b"]
        assert repo.usage("default") == 2


def test_after_commit_hooks_get_the_transactions_changes(database: Database) -> None:
    """A transaction whose changes all went through the pending rows hands them, with
    their seqs, to the after-commit hooks (the loader applies them without reading the
    log back); one that logged changes in SQL (a bulk add) hands None."""
    seen: list[object] = []
    database.on_commit(seen.append)
    outcomes = _grouped(database, [_create("a"), _create("b")])
    with database.write() as session:
        repo = SubscriptionRepository(session)
        repo.remove(int(str(outcomes[0])))
    with database.write() as session:
        SubscriptionRepository(session).add_many([validate(NewSubscription("c", "g.c"))])
    with database.read() as session:
        logged = SubscriptionRepository(session).changes_since(0)
    # the holder's empty transaction and the bulk add hand None; the group and the remove
    # their changes
    assert [None if s is None else len(s) for s in seen] == [None, 2, 1, None]  # type: ignore[arg-type]
    handed = [change for batch in seen if isinstance(batch, list) for change in batch]
    assert handed == logged[:3]
    assert [c.subscriber for c in logged] == ["a", "b", "a", "c"]


def test_writers_on_an_event_loop_share_groups_with_threads(database: Database) -> None:
    """``run_async``: callers on an event loop queue with callers in threads, share their
    group, keep their own outcomes (a refusal raised in its own caller), and find their
    group committed and its hooks run when they resume."""
    applied: list[int] = []
    database.on_commit(lambda changes: applied.append(len(changes or ())))
    held, release = threading.Event(), threading.Event()

    def hold(session: Session) -> Callable[[], int]:
        held.set()
        assert release.wait(30)
        return lambda: 0

    holder = threading.Thread(target=database.writes.run, args=(hold,))
    holder.start()
    assert held.wait(30)
    threaded: list[int] = []
    thread = threading.Thread(target=lambda: threaded.append(database.writes.run(_create("t"))))

    async def writers() -> list[int | BaseException]:
        tasks = [
            asyncio.ensure_future(database.writes.run_async(job))
            for job in (_create("a"), _refuse, _create("b"))
        ]
        while database.writes.waiting() < 3:
            await asyncio.sleep(0.001)
        thread.start()
        while database.writes.waiting() < 4:
            await asyncio.sleep(0.001)
        before = database.writes.groups
        release.set()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        assert applied[-1] == 3  # the group's hooks ran before its callers resumed
        assert database.writes.groups == before + 2  # the holder's, then one for the four
        return outcomes

    outcomes = asyncio.run(writers())
    for waiting in (holder, thread):
        waiting.join(30)
    assert isinstance(outcomes[0], int) and isinstance(outcomes[2], int)
    assert isinstance(outcomes[1], RefusedError)
    assert len({outcomes[0], outcomes[2], *threaded}) == 3
    assert _stored(database) == ["a", "b", "t"]
    # Alone too: an event-loop caller with nothing ahead leads through the group's threads.
    assert isinstance(asyncio.run(database.writes.run_async(_create("c"))), int)
    assert _stored(database) == ["a", "b", "c", "t"]
