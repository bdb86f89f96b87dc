"""Engine setup for the two backends, the write transaction, and migrations.

Writers are serialized so that change_log sequence numbers commit in order, and a loader
reading ``seq > last`` can never skip a change that commits later with a smaller number:
on PostgreSQL with a transaction-scoped advisory lock (held until commit, across replicas),
on DuckDB with a lock in the one process that owns the file. Writes that arrive together
share one such transaction (``store.group_commit``), so the lock and the flush are paid once
per group, not once per write.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from store import deferred, pending, pg_write
from store.errors import DatabaseLockedError, NoSchemaError, UnsupportedDatabaseError
from store.group_commit import GroupCommit
from store.keys import COMMITTED, COMMITTING
from store.records import Change

#: Advisory lock key that serializes writers of change_log ("tpcs" in ASCII).
WRITER_LOCK_KEY: Final = 0x74706373
#: What an after-commit hook is given: the transaction's changes when known, else None
#: (read them from the log).
CommitHook = Callable[[Sequence[Change] | None], object]


#: The writer lock, sent with the transaction's ``BEGIN`` (``pg_write.pipelined``).
_WRITER_LOCK: Final = ((f"SELECT pg_advisory_xact_lock({WRITER_LOCK_KEY})", ()),)


class Committed:
    """A write transaction of ``Database.transaction``: its session, then (once
    committed) its place in commit order and its changes for the hooks."""

    __slots__ = ("changes", "db", "session", "ticket")

    def __init__(self, db: Database, session: Session) -> None:
        self.db = db
        self.session = session
        self.ticket = -1
        self.changes: Sequence[Change] | None = None

    def apply(self) -> None:
        """Run the after-commit hooks with this transaction's changes, after those of
        every transaction committed before it."""
        if self.ticket < 0:
            raise RuntimeError("apply() of a transaction that did not commit")
        self.db._apply(self.ticket, self.changes)

    def flush(self) -> None:
        """Write what the transaction's writes left for its commit (``store.pending``):
        here, so that a failing statement fails the group's transaction, whose jobs then
        run again alone, not its commit, which would fail every job of the group."""
        pending.flush(self.session)


class Backend(StrEnum):
    POSTGRES = "postgresql"
    DUCKDB = "duckdb"


def backend_of(url: str) -> Backend:
    name = make_url(url).get_backend_name()
    try:
        return Backend(name)
    except ValueError:
        raise UnsupportedDatabaseError(
            "unsupported_database",
            f"database URL must be postgresql+psycopg://... or duckdb:///path, not {name!r}",
        ) from None


def duckdb_file(url: str) -> Path | None:
    """The file of a DuckDB URL (None for PostgreSQL or an in-memory DuckDB)."""
    parsed = make_url(url)
    if backend_of(url) is not Backend.DUCKDB or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database).expanduser()


def _no_schema(url: str) -> NoSchemaError:
    path = duckdb_file(url)
    where = str(path.resolve()) if path is not None else make_url(url).render_as_string()
    # Not "run migrate": a store never migrated is often the wrong one (a command run
    # outside the directory of the service's), and migrating it makes a second, empty
    # store. The command line says which setting chose it and how to reach the service.
    return NoSchemaError("no_schema", f"no topicstore tables in {where}")


def _configure_duckdb(dbapi_connection: Any, _record: object) -> None:
    """Settings of the database instance, which lives as long as its connections: set on
    each new one.

    DuckDB's allocator keeps the pages a query freed until a thread of its own purges
    them; without that thread a server that read 1M rows at startup held ~90 MB of them for
    good. And DuckDB checkpoints whenever its WAL passes ``checkpoint_threshold``, writing
    the table's indexes whole each time: at its default (16 MB) a stream of writes into a
    large table pays O(table) every few thousand rows (a 1M-row import about a quarter of
    its time). ``CHECKPOINT_THRESHOLD`` checkpoints a quarter as often; a crash replays at
    most that much WAL when the file is next opened."""
    dbapi_connection.execute("SET allocator_background_threads = true")
    dbapi_connection.execute(f"SET checkpoint_threshold = '{CHECKPOINT_THRESHOLD}'")


#: DuckDB's WAL size that triggers a checkpoint (see ``_configure_duckdb``).
CHECKPOINT_THRESHOLD: Final = "64MB"


def _configure_bulk(dbapi_connection: Any, _record: object) -> None:
    """An embedded DuckDB written in bulk by the process that holds it (``sub import``).

    One worker thread: the import's statements gain nothing from a second on two cores,
    where the importing process reads the next batch on the other, and two workers
    contended for DuckDB's locks (an import of 1,000,000 rows took some 60% more CPU with
    two). A checkpoint every ``BULK_CHECKPOINT_THRESHOLD`` of WAL: until it is checkpointed
    an appended row group stays in memory, so the threshold bounds what the import holds
    besides the indexes (1,000,000 rows: peak resident set 445 MB at 32 MB against 511 MB
    at ``CHECKPOINT_THRESHOLD``, the same CPU; at 16 MB the checkpoints, which write the
    indexes whole, cost a fifth more CPU)."""
    dbapi_connection.execute("SET threads = 1")
    dbapi_connection.execute(f"SET checkpoint_threshold = '{BULK_CHECKPOINT_THRESHOLD}'")


#: DuckDB's WAL size that triggers a checkpoint while an import writes (``_configure_bulk``).
BULK_CHECKPOINT_THRESHOLD: Final = "32MB"


#: A pooled PostgreSQL connection idle longer than this is pinged before it is used again.
#: Pinging every checkout (``pool_pre_ping``) cost each write group a round trip; a
#: connection back in the pool moments ago is as alive as a ping would show, and one idle
#: across a server restart is caught by the ping.
PING_AFTER_IDLE_S: Final = 1.0


def _checked_in(_dbapi_connection: Any, record: Any) -> None:
    record.info["idle_since"] = time.monotonic()


def _ping_if_idle(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
    """Ping a connection idle for ``PING_AFTER_IDLE_S``; a dead one is replaced (raising
    ``DisconnectionError`` here makes the pool discard it and check out a fresh one)."""
    idle_since = record.info.get("idle_since")
    if idle_since is not None and time.monotonic() - idle_since < PING_AFTER_IDLE_S:
        return
    try:
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        dbapi_connection.rollback()
    except (psycopg.Error, OSError) as e:  # the connection is not usable
        raise sa.exc.DisconnectionError(str(e)) from e


class Database:
    """One database: its engine, sessions, the serialized write transaction, and hooks run
    after each committed write (how DuckDB changes reach the in-process loader at once)."""

    def __init__(
        self, url: str, *, pool_size: int = 5, create: bool = True, bulk: bool = False
    ) -> None:
        """``create=False``: a DuckDB file that does not exist yet is ``NoSchemaError``
        rather than a new empty file (for commands that only read). ``bulk``: one process
        writes in bulk (an import; an embedded DuckDB is then set by ``_configure_bulk``)."""
        self.url = url
        self.backend = backend_of(url)
        if self.backend is Backend.DUCKDB:
            path = duckdb_file(url)
            if path is not None and not path.exists():
                if not create:
                    raise _no_schema(url)
                path.parent.mkdir(parents=True, exist_ok=True)
            from store.duckdb_dialect import register  # here: PostgreSQL never loads DuckDB

            register()
            self.engine = sa.create_engine(url)
            sa.event.listen(self.engine, "connect", _configure_duckdb)
            deferred.listen(self.engine)
            if bulk:
                sa.event.listen(self.engine, "connect", _configure_bulk)
            self._claim_duckdb_file()
        else:
            self.engine = sa.create_engine(url, pool_size=pool_size, max_overflow=pool_size)
            sa.event.listen(self.engine, "checkin", _checked_in)
            sa.event.listen(self.engine, "checkout", _ping_if_idle)
            deferred.listen(self.engine)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        #: Sessions whose statements each run alone (``read_alone``).
        self._alone = (
            sessionmaker(self.engine.execution_options(isolation_level="AUTOCOMMIT"))
            if self.backend is Backend.POSTGRES
            else self.sessions
        )
        self._local_writer = threading.Lock()
        self._after_commit: list[CommitHook] = []
        #: Committed transactions numbered in commit order, and how many have had their
        #: hooks run (``transaction``).
        self._tickets = 0
        self._applied = 0
        self._turn = threading.Condition()
        #: The newest change seq committed here with its changes at hand: this process's
        #: hooks apply it, so a doorbell up to it needs no read of the log (the loader).
        self.committed_seq = 0
        #: The newest change seq this process is committing or has committed with its
        #: changes at hand: set before the ``COMMIT`` is sent, since PostgreSQL delivers the
        #: doorbell at the commit, often before this thread has run again. Back to
        #: ``committed_seq`` when the commit fails.
        self.committing_seq = 0
        #: The admin writes' way in: concurrent writes share a transaction (see there).
        self.writes = GroupCommit(self.transaction)

    def _claim_duckdb_file(self) -> None:
        """Open the file now: DuckDB lets one process at a time write a file, and a second
        process should learn that here, clearly, not at its first query."""
        try:
            with self.engine.connect():
                pass
        except sa.exc.DBAPIError as e:
            if "lock" in str(e).lower():
                self.engine.dispose()
                raise DatabaseLockedError(
                    "database_locked",
                    f"another process holds the DuckDB file {self.url!r}; stop it or go "
                    "through its API",
                ) from e
            raise

    def require_schema(self, tables: Iterable[str] = ()) -> None:
        """``NoSchemaError`` unless the migrations have created the tables: the
        subscriptions and ``tables`` (those the caller uses: a store migrated by an older
        release lacks newer ones, ``schema_outdated``)."""
        inspector = sa.inspect(self.engine)
        if not inspector.has_table("subscription"):
            raise _no_schema(self.url)
        missing = sorted(table for table in tables if not inspector.has_table(table))
        if missing:
            raise NoSchemaError(
                "schema_outdated",
                f"the store has no {', '.join(missing)} table yet: run `topicstore migrate`",
            )

    def release_memory(self) -> None:
        """Hand back what the client side of the store keeps after a large read (the
        startup build): DuckDB holds on to its buffers until its memory limit forces them
        out (about 90 MB after reading a million rows); lowering the limit for a moment
        frees them, and resetting it keeps later queries as they were. PostgreSQL's cache
        is the server's: nothing to do. The limit is set back to its value as read, not
        ``RESET``: after a ``RESET`` DuckDB 1.5 still held index memory to the lowered
        limit (every write that loaded more of an ART index then failed, out of memory at
        61 MiB)."""
        if self.backend is not Backend.DUCKDB:
            return
        with self.engine.connect() as conn:
            limit = conn.exec_driver_sql("SELECT current_setting('memory_limit')").scalar()
            conn.exec_driver_sql("SET memory_limit = '64MB'")
            conn.exec_driver_sql(f"SET memory_limit = '{limit}'")

    @property
    def is_postgres(self) -> bool:
        return self.backend is Backend.POSTGRES

    def on_commit(self, hook: CommitHook) -> None:
        """Call ``hook`` after every write transaction this object commits, with its
        changes when they are known (``COMMITTED``)."""
        self._after_commit.append(hook)

    @contextlib.contextmanager
    def write(self) -> Iterator[Session]:
        """A write transaction: committed on success, rolled back on error; writers are
        serialized (see the module docstring); after-commit hooks run once it commits."""
        with self.transaction() as committed:
            yield committed.session
        committed.apply()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Committed]:
        """``write`` without its hooks: once the block has committed, ``apply()`` of what
        it yields runs them (it must, exactly once: later transactions' hooks wait for
        it). Group commit applies a group's changes after the next writer has the lock,
        so applying them to the routing table overlaps the next group's statements
        instead of lengthening the serialized part."""
        with self._local_writer:
            try:
                with self.sessions.begin() as session:
                    if self.is_postgres:
                        pg_write.pipelined(session.connection(), _WRITER_LOCK)
                    session.info[COMMITTING] = self._committing
                    committed = Committed(self, session)
                    yield committed
            except BaseException:
                self.committing_seq = self.committed_seq
                raise
            # Under the writer lock: tickets are in commit order.
            committed.ticket = self._tickets
            self._tickets += 1
            committed.changes = session.info.pop(COMMITTED, None)
            if committed.changes:
                self.committed_seq = max(self.committed_seq, committed.changes[-1].seq)

    def _committing(self, seq: int) -> None:
        self.committing_seq = max(self.committing_seq, seq)

    def _apply(self, ticket: int, changes: Sequence[Change] | None) -> None:
        """Run the after-commit hooks of transaction ``ticket`` once those of every
        earlier one have run (the loader applies changes in seq order)."""
        with self._turn:
            while self._applied != ticket:
                self._turn.wait()
        try:
            for hook in self._after_commit:
                hook(changes)
        finally:
            with self._turn:
                self._applied += 1
                self._turn.notify_all()

    @contextlib.contextmanager
    def aside(self) -> Iterator[Session]:
        """A transaction beside the admin write path, for what is no subscription change
        (the match statistics' flush, ``store.stats``): no change log, no after-commit
        hooks, and on PostgreSQL no writer lock, so replicas' flushes never queue behind
        admin writes nor hold them up. On DuckDB (one process) it takes the in-process
        writer lock for its few milliseconds: DuckDB's optimistic transactions would
        otherwise fail a removal that deletes a statistics row a flush is writing."""
        lock = contextlib.nullcontext() if self.is_postgres else self._local_writer
        with lock, self.sessions.begin() as session:
            yield session

    @contextlib.contextmanager
    def read(self) -> Iterator[Session]:
        with self.sessions() as session:
            yield session

    @contextlib.contextmanager
    def read_alone(self) -> Iterator[Session]:
        """``read`` in which each statement sees its own snapshot (autocommit on
        PostgreSQL): for readers that need no two statements to agree, such as a follower
        reading the log at each doorbell, it saves the ``BEGIN`` and ``ROLLBACK`` round
        trips (two of its three)."""
        with self._alone() as session:
            yield session

    def dispose(self) -> None:
        self.writes.close()
        self.engine.dispose()
