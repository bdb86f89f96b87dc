"""A group's single creates and removals: read ahead in one query, written in one
statement each.

Every statement has a fixed cost that dwarfs what one row adds to it: on DuckDB parsing,
planning and a probe of an ART index over the whole table; on PostgreSQL a round trip,
waited out by every writer queued behind the serialized one (``store.db``). A group of
single writes (``store.group_commit``) ran one or more per write: the duplicate check,
the insert, the delete. Here the jobs of a group announce ahead what they will touch (a
create its key, a removal its id: ``GroupCommit``'s hints), and the first of them to look
reads all of it in one query, which also draws from the sequence the ids of the keys
found absent. Each job then answers from what was read, as it would have from the table:
a create finds its key (or the row an earlier job of the group inserted), a removal its
row (and whether it is the caller's tenant's). The rows the group inserts and deletes
wait here and go in one ``DELETE`` and one ``INSERT``, deletes first (a key removed and
created again in one group), before the transaction's change rows (``store.pending``,
which on PostgreSQL sends them with its own statement in one round trip: ``take``).

What was read stays true only while nothing else writes the table: any other statement of
the transaction first writes what waits and forgets what was read (a listener on the
engine, which finds the state on the connection while there is any), so it sees the
table as the jobs before it left it, and the jobs after it look in the table again. A
statement marked ``KEEP`` (the tenant counter's read, which the waiting rows do not
change) runs without that; statements sent through the driver (``store.pg_write``) skip
the listener and call ``write`` themselves. A rollback drops everything here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import Any, Final, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from store import pg_write
from store.duckdb_write import insert_rows
from store.group_commit import HINTS
from store.models import Subscription
from store.records import NewSubscription

#: Where a session keeps its group's deferred state (``Session.info``), and where the
#: connection points at it while rows wait (``Connection.info``).
_KEY: Final = "topicstore.deferred"
#: The execution option of a statement that runs with rows waiting (it reads nothing they
#: change).
KEEP: Final = "topicstore_keep_deferred"
_TABLE: Final = cast(sa.Table, Subscription.__table__)
_COLUMNS: Final = tuple(c.name for c in _TABLE.columns)
#: A key as the unique constraint has it.
Key = tuple[str, str, str, str]

#: What a group's jobs will touch, in one query: rows of the creates' keys (the pattern
#: index finds each pattern's rows, materialized so the subscriber filter does not merge
#: into a table scan; the exact key is matched here), and the removals' rows by id.
_BY_KEYS: Final = (
    "WITH same AS MATERIALIZED (SELECT * FROM subscription WHERE pattern IN :patterns) "
    "SELECT * FROM same WHERE subscriber IN :subscribers"
)
_BY_IDS: Final = "SELECT * FROM subscription WHERE id IN :ids"


def _read(text: str) -> sa.TextualSelect:
    """``text`` read as the table's columns (JSON ones decoded)."""
    names = [name for name in ("patterns", "subscribers", "ids") if f":{name}" in text]
    query = sa.text(text).bindparams(*(sa.bindparam(name, expanding=True) for name in names))
    return query.columns(*_TABLE.columns)


_READ_KEYS: Final = _read(_BY_KEYS)
_READ_IDS: Final = _read(_BY_IDS)
_READ_BOTH: Final = _read(f"{_BY_KEYS} UNION ALL {_BY_IDS}")
#: Ids for the absent keys, and the transaction's timestamp (DuckDB's ``now()``: what the
#: column's default would have stored).
_DRAW: Final = sa.text(
    "SELECT nextval('subscription_id_seq') AS id, now() AS now FROM range(:count)"
)
_DELETE: Final = _TABLE.delete().where(_TABLE.c.id.in_(sa.bindparam("ids", expanding=True)))


def key_of(new: NewSubscription | Any) -> Key:
    """The unique key of a new subscription or a row."""
    return (new.tenant, new.subscriber, new.dialect, new.pattern)


@dataclass
class Deferred:
    """What a transaction read ahead and what it has yet to write."""

    #: Rows known by key and by id (None: known absent), as the group's jobs left them.
    by_key: dict[Key, Any] = field(default_factory=dict)
    by_id: dict[int, Any] = field(default_factory=dict)
    #: Ids drawn for the group's creates, not used yet, and the transaction's timestamp.
    ids: list[int] = field(default_factory=list)
    now: datetime | None = None
    #: The stored count of each tenant of the group's creates (``tenant_usage``), read
    #: with them on PostgreSQL: the quota's check needs no statement of its own.
    usage: dict[str, int] = field(default_factory=dict)
    #: Rows to insert (every column's value, in the order they were created), and ids
    #: of stored rows to delete.
    inserts: dict[int, dict[str, Any]] = field(default_factory=dict)
    deletes: list[int] = field(default_factory=list)
    #: The connection's ``info`` while this holds rows read or waiting
    #: (``_before_execute`` finds it there).
    where: dict[Any, Any] | None = None


def _state(session: Session) -> Deferred:
    """The transaction's state; on first use in a group, what its jobs announced is read
    (``GroupCommit``'s hints: a ``NewSubscription`` for a create, an ``int`` id for a
    removal)."""
    found = session.info.get(_KEY)
    if found is not None:
        return cast(Deferred, found)
    state = session.info[_KEY] = Deferred()
    hints = session.info.pop(HINTS, ())
    news = [hint for hint in hints if isinstance(hint, NewSubscription)]
    ids = sorted({hint for hint in hints if isinstance(hint, int)})
    connection = session.connection()
    postgres = connection.dialect.name == "postgresql"
    if _pays(len(news), len(ids), postgres=postgres):
        if postgres:
            _read_ahead_postgres(connection, state, news, ids)
        else:
            _read_ahead(connection, state, news, ids)
        _hold(session, state)
    return state


def _pays(creates: int, removals: int, *, postgres: bool) -> bool:
    """Whether reading ahead takes fewer statements than the jobs would one by one. On
    PostgreSQL a create is one statement (``pg_write.add_if_absent``) after the read of
    its tenant's count, a removal one; read ahead, they are one read (the counts too), and
    their writes travel with the commit's own statement: a lone create saves a round trip,
    a lone removal none. On DuckDB a create is a look-up and an insert, a removal a
    delete; read ahead, they are one read, then for creates a draw of ids and an insert,
    for removals a delete."""
    if postgres:
        return creates > 0 or removals > 1
    return 2 * creates + removals > 1 + 2 * (creates > 0) + (removals > 0)


def _read_ahead(
    connection: sa.Connection, state: Deferred, news: Sequence[NewSubscription], ids: list[int]
) -> None:
    """Read the rows of ``news``' keys and of ``ids`` into ``state`` in one query; then
    draw an id for each absent key."""
    keys = {key_of(new) for new in news}
    params: dict[str, Any] = {"ids": ids}
    if keys:
        params["patterns"] = sorted({key[3] for key in keys})
        params["subscribers"] = sorted({key[1] for key in keys})
    query = _READ_BOTH if keys and ids else _READ_KEYS if keys else _READ_IDS
    state.by_key.update(dict.fromkeys(keys))
    state.by_id.update(dict.fromkeys(ids))
    for row in connection.execute(query, params):
        state.by_id[row.id] = row
        if key_of(row) in keys:
            state.by_key[key_of(row)] = row
    absent = sum(1 for key in keys if state.by_key[key] is None)
    if absent:
        drawn = connection.execute(_DRAW, {"count": absent}).all()
        state.ids = [int(row.id) for row in drawn]
        state.now = drawn[0].now


def _read_ahead_postgres(
    connection: sa.Connection, state: Deferred, news: Sequence[NewSubscription], ids: list[int]
) -> None:
    """``_read_ahead`` in one statement (``pg_write.read_ahead``)."""
    keys = {key_of(new) for new in news}
    state.by_key.update(dict.fromkeys(keys))
    state.by_id.update(dict.fromkeys(ids))
    tenants = sorted({key[0] for key in keys})
    rows, drawn, now, state.usage = pg_write.read_ahead(connection, sorted(keys), ids, tenants)
    for row in rows:
        state.by_id[row.id] = row
        if key_of(row) in keys:
            state.by_key[key_of(row)] = row
    state.ids, state.now = drawn, now


def find(session: Session, new: NewSubscription) -> tuple[bool, Any]:
    """Whether ``new``'s key is known here, and its row (None: absent)."""
    state = _state(session)
    key = key_of(new)
    if key not in state.by_key:
        return False, None
    return True, state.by_key[key]


def usage(session: Session, tenant: str) -> int | None:
    """``tenant``'s stored count as read ahead, if it was."""
    return _state(session).usage.get(tenant)


def row_of(session: Session, sub_id: int) -> tuple[bool, Any]:
    """Whether row ``sub_id`` is known here, and the row (None: absent)."""
    state = _state(session)
    if sub_id not in state.by_id:
        return False, None
    return True, state.by_id[sub_id]


def insert(session: Session, values: dict[str, Any]) -> Any | None:
    """The row of a new subscription of ``values`` (its columns; a key found absent), to be
    inserted at commit; None when no id was drawn for it (insert it now)."""
    state = _state(session)
    if not state.ids:
        return None
    row = dict.fromkeys(_COLUMNS)
    row.update(values, id=state.ids.pop(0), created_at=state.now)
    stored = SimpleNamespace(**row)
    state.inserts[stored.id] = row
    state.by_id[stored.id] = state.by_key[key_of(stored)] = stored
    _hold(session, state)
    return stored


def delete(session: Session, row: Any) -> None:
    """Delete ``row`` (known here) at commit."""
    state = _state(session)
    state.by_id[row.id] = None
    state.by_key[key_of(row)] = None
    if state.inserts.pop(row.id, None) is None:  # a row of this group is never written
        state.deletes.append(row.id)
    _hold(session, state)


def _hold(session: Session, state: Deferred) -> None:
    """Point the transaction's connection at ``state`` (see the module docstring)."""
    if state.where is None:
        state.where = session.connection().info
        state.where[_KEY] = state


def waits(session: Session) -> bool:
    """Whether ``session``'s transaction has rows waiting (or rows read ahead)."""
    state = session.info.get(_KEY)
    return state is not None and state.where is not None


def flush(session: Session) -> None:
    """Write what ``session``'s transaction has waiting, if anything."""
    if waits(session):
        write(session.connection())


@dataclass(frozen=True, slots=True)
class Waiting:
    """What a transaction's group has yet to write: ids of stored rows to delete, and rows
    to insert (every column's value, in the order they were created)."""

    deletes: list[int]
    inserts: list[dict[str, Any]]


def take(connection: sa.Connection) -> Waiting:
    """What waits on ``connection``, for the caller to write (deletes first); what was
    read is forgotten."""
    state = connection.info.pop(_KEY, None)
    if state is None:
        return Waiting([], [])
    state.where = None
    state.by_key.clear()
    state.by_id.clear()
    waiting = Waiting(state.deletes, list(state.inserts.values()))
    state.deletes, state.inserts = [], {}
    return waiting


def write(connection: sa.Connection) -> None:
    """Write what waits on ``connection``: the deletes, then the inserts, in one statement
    each; what was read is forgotten."""
    waiting = take(connection)
    if waiting.deletes:
        connection.execute(_DELETE, {"ids": waiting.deletes})
    if not waiting.inserts:
        return
    if connection.dialect.name == "postgresql":
        connection.execute(sa.insert(_TABLE), waiting.inserts)
    else:
        insert_rows(connection, _TABLE, waiting.inserts)


def drop(session: Session) -> None:
    """Forget the transaction's state (it rolled back, or committed)."""
    state = session.info.pop(_KEY, None)
    session.info.pop(HINTS, None)
    if state is not None and state.where is not None:
        state.where.pop(_KEY, None)


def _before_execute(
    connection: sa.Connection,
    _statement: object,
    _multiparams: object,
    _params: object,
    execution_options: dict[str, Any],
) -> None:
    """Before any statement of a transaction with rows waiting (see the module docstring):
    write them, and forget what was read."""
    if _KEY in connection.info and not execution_options.get(KEEP):
        write(connection)


def listen(engine: sa.Engine) -> None:
    """Have ``engine``'s statements write what waits first (see the module docstring)."""
    sa.event.listen(engine, "before_execute", _before_execute)
