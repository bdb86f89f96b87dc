"""The single-write path's PostgreSQL statements, written as SQL text and sent through the
driver.

Writers are serialized (``store.db``), so every round trip and every millisecond of Python
inside a write transaction is waited out by the writes queued behind it. Three statements
carry a group's writes here: the read ahead of its creates' keys and removals' ids
(``read_ahead``, for ``store.deferred``), a lone create's lookup-and-insert
(``add_if_absent``), and the rows a transaction writes before it commits (``flush``: the
group's removals and new subscriptions, change rows, tenant counters, audit rows and the
doorbell, as data-modifying CTEs, which PostgreSQL runs once each, referenced or not, sent
in one round trip with the removals' own statement). As text, none is compiled by
SQLAlchemy per call (a multi-row ``VALUES`` is compiled afresh every time, about as costly
as the statement itself); the rows travel as one array per column, so a group of any size
sends the same text, which psycopg prepares after five uses: the server plans it once per
connection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, cast

import psycopg
import sqlalchemy as sa
from psycopg.types.json import Jsonb
from sqlalchemy.dialects import postgresql

from store.keys import CHANGES_CHANNEL
from store.models import AuditLog, ChangeLog, Subscription, TenantUsage
from store.staging import NEW_COLUMNS, QUOTE

_DIALECT: Final = postgresql.dialect()  # type: ignore[no-untyped-call]


def _casts(table: sa.FromClause, names: Sequence[str]) -> list[str]:
    """A placeholder per column of ``names``, cast to the column's type (a parameter in a
    ``SELECT`` list has none of its own: a NULL would be text, not JSON)."""
    return [f"%s::{_cast_type(table.c[name].type)}" for name in names]


def _cast_type(column_type: sa.types.TypeEngine[Any]) -> str:
    """The type a parameter is cast to: the column's, except that a bounded string is cast
    to ``text`` (a cast to ``varchar(n)`` cuts a longer value silently; the column's own
    type refuses it on insert, as an ORM insert would)."""
    bounded = isinstance(column_type, sa.String) and column_type.length is not None
    if bounded and not isinstance(column_type, sa.Enum):
        return "text"
    return str(column_type.compile(dialect=_DIALECT))


def _json(table: sa.FromClause, names: Sequence[str]) -> frozenset[int]:
    """Positions in ``names`` of ``table``'s JSON columns."""
    return frozenset(i for i, name in enumerate(names) if isinstance(table.c[name].type, sa.JSON))


def _row(values: Mapping[str, Any], names: Sequence[str], json: frozenset[int]) -> list[Any]:
    """``values`` in ``names`` order, JSON ones wrapped for the driver."""
    row = [values[name] for name in names]
    for i in json:
        if row[i] is not None:
            row[i] = Jsonb(row[i])
    return row


_SUBSCRIPTION: Final = Subscription.__table__
_ALL: Final = ", ".join(QUOTE(c.name) for c in _SUBSCRIPTION.columns)
_KEY: Final = ("tenant", "subscriber", "dialect", "pattern")
_NEW_JSON: Final = _json(_SUBSCRIPTION, NEW_COLUMNS)
#: The lookup of a key and an insert that runs only when it found nothing (a present key
#: draws no id from the sequence); the row, and whether it was created. Parameters: the
#: key, then ``NEW_COLUMNS``.
_ADD_IF_ABSENT: Final = (
    f"WITH found AS (SELECT {_ALL} FROM subscription WHERE "
    + " AND ".join(f"{QUOTE(name)} = %s" for name in _KEY)
    + f"), added AS (INSERT INTO subscription ({', '.join(map(QUOTE, NEW_COLUMNS))}) "
    f"SELECT {', '.join(_casts(_SUBSCRIPTION, NEW_COLUMNS))} "
    f"WHERE NOT EXISTS (SELECT FROM found) RETURNING {_ALL}) "
    f"SELECT {_ALL}, true AS created FROM added UNION ALL SELECT {_ALL}, false FROM found"
)


_ALIASED: Final = ", ".join(f"s.{QUOTE(c.name)}" for c in _SUBSCRIPTION.columns)
_NULLS: Final = ", ".join("NULL" for _ in _SUBSCRIPTION.columns)
_SAME_KEY: Final = " AND ".join(f"{{0}}.{QUOTE(name)} = k.{QUOTE(name)}" for name in _KEY)
#: The stored rows of some keys and of some ids, then an id drawn from the sequence for
#: each key found absent (a row of NULLs but ``drawn``); every row carries the
#: transaction's timestamp (what ``created_at``'s default stores) and the stored counts of
#: some tenants (``tenant_usage``, as one JSON object). Parameters: the keys as one array
#: per column of ``_KEY``, the ids, the tenants.
_READ_AHEAD: Final = (
    "WITH k AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) AS k("
    + ", ".join(map(QUOTE, _KEY))
    + f")), found AS MATERIALIZED (SELECT {_ALIASED} FROM k JOIN subscription s ON "
    + _SAME_KEY.format("s")
    + f" UNION ALL SELECT {_ALIASED} FROM subscription s WHERE s.id = ANY(%s::bigint[])), "
    "absent AS (SELECT count(*) AS n FROM k WHERE NOT EXISTS (SELECT FROM found f WHERE "
    + _SAME_KEY.format("f")
    + ")), usage AS (SELECT jsonb_object_agg(tenant, subscriptions) AS counts "
    "FROM tenant_usage WHERE tenant = ANY(%s::text[])) "
    f"SELECT {_ALL}, NULL::bigint AS drawn, now() AS now, usage.counts FROM found, usage "
    f"UNION ALL SELECT {_NULLS}, nextval('subscription_id_seq'), now(), usage.counts "
    "FROM absent, usage, generate_series(1, absent.n)"
)


def read_ahead(
    connection: sa.Connection,
    keys: Sequence[tuple[str, str, str, str]],
    ids: Sequence[int],
    tenants: Sequence[str],
) -> tuple[list[sa.Row[Any]], list[int], Any, dict[str, int]]:
    """The stored rows of ``keys`` (tenant, subscriber, dialect, pattern) and of ``ids``
    (a row of both may come twice), ids drawn for the keys absent (ascending), the
    transaction's timestamp, and the stored count of each of ``tenants`` (those with
    none: 0), in one statement. With no key, nothing is drawn and no count is read."""
    params: list[Any] = [[key[i] for key in keys] for i in range(4)]
    params += [list(ids), list(tenants)]
    rows: list[sa.Row[Any]] = []
    drawn: list[int] = []
    now = None
    counts: dict[str, int] = dict.fromkeys(tenants, 0)
    for row in connection.exec_driver_sql(_READ_AHEAD, tuple(params)):
        now = row.now
        if row.counts:
            counts.update(row.counts)
        if row.drawn is None:
            rows.append(row)
        else:
            drawn.append(row.drawn)
    drawn.sort()
    return rows, drawn, now, counts


def add_if_absent(connection: sa.Connection, values: Mapping[str, Any]) -> sa.Row[Any]:
    """The row of ``values``' key (a new subscription's ``NEW_COLUMNS``): the stored one,
    or one inserted now; ``created`` says which."""
    params = [values[name] for name in _KEY] + _row(values, NEW_COLUMNS, _NEW_JSON)
    return connection.exec_driver_sql(_ADD_IF_ABSENT, tuple(params)).one()


class _Insert:
    """An ``INSERT`` of any number of rows into ``table``'s columns ``names``: one array
    parameter per column, unnested in the rows' order. One text for every row count, short
    and with few parameters, so psycopg converts it once (it caches only texts under 4 KB
    with at most 50 parameters; a ``VALUES`` list of a group's rows had hundreds) and
    PostgreSQL plans it once per connection."""

    def __init__(self, table: sa.FromClause, names: Sequence[str], returning: str) -> None:
        self.names = tuple(names)
        self.json = _json(table, self.names)
        columns = ", ".join(map(QUOTE, self.names))
        arrays = ", ".join(f"%s::{_cast_type(table.c[name].type)}[]" for name in self.names)
        aliases = ", ".join(f"c{i}" for i in range(len(self.names)))
        self.text = (
            f"INSERT INTO {cast(sa.Table, table).name} ({columns}) SELECT {aliases} "
            f"FROM unnest({arrays}) WITH ORDINALITY AS u({aliases}, ord) ORDER BY ord" + returning
        )

    def sql(self, rows: Sequence[Mapping[str, Any]], params: list[Any]) -> str:
        """The statement for ``rows``; their values appended to ``params``, a list per
        column."""
        columns: list[list[Any]] = [[] for _ in self.names]
        for row in rows:
            for column, value in zip(columns, _row(row, self.names, self.json), strict=True):
                column.append(value)
        params += columns
        return self.text


_USAGE: Final = _Insert(
    TenantUsage.__table__,
    ("tenant", "subscriptions"),
    " ON CONFLICT (tenant) DO UPDATE "
    "SET subscriptions = tenant_usage.subscriptions + excluded.subscriptions",
)
_inserts: dict[tuple[str, ...], _Insert] = {}


def _insert(table: sa.FromClause, names: Sequence[str], returning: str) -> _Insert:
    key = (str(table), *names, returning)
    found = _inserts.get(key)
    if found is None:
        found = _inserts[key] = _Insert(table, names, returning)
    return found


def flush(
    connection: sa.Connection,
    changes: Sequence[Mapping[str, Any]],
    moved: Mapping[str, int],
    audit: Sequence[Mapping[str, Any]],
    ring: bool,
    forget: Sequence[int] = (),
    deletes: Sequence[int] = (),
    inserts: Sequence[Mapping[str, Any]] = (),
) -> list[tuple[int, int, str]]:
    """Delete the subscriptions ``deletes`` and insert ``inserts`` (every column's value),
    insert ``changes`` (in order: their seqs follow it), move each tenant's counter by
    ``moved``, insert the ``audit`` rows, delete the statistics rows of the removed
    subscriptions ``forget`` and, if ``ring``, ring the doorbell with the newest seq; the
    (seq, subscription_id, op) of each change. One round trip: the deletes are a statement
    of their own (so a key deleted and inserted again is no conflict), sent with one that
    does the rest.

    The statistics go in the statement after the removals', so that its snapshot
    holds every statistics row a flush wrote before a removal took its subscription's
    lock (a flush skips the rows a removal holds: ``store.stats``). The ids travel as one
    array literal (a list parameter of 100,000 took longer to adapt than the delete) and
    are joined, not matched with ``= ANY``, which the planner estimates element by
    element (twice the CPU)."""
    params: list[Any] = []
    ctes: list[str] = []
    if inserts:
        added = _insert(_SUBSCRIPTION, list(inserts[0]), "")
        ctes.append(f"added AS ({added.sql(inserts, params)})")
    if forget:
        ctes.append(
            "forgot AS (DELETE FROM subscription_stats st USING unnest(%s::text::bigint[]) "
            "AS f(id) WHERE st.subscription_id = f.id)"
        )
        params.append("{" + ",".join(map(str, forget)) + "}")
    if changes:
        logged = _insert(
            ChangeLog.__table__, list(changes[0]), " RETURNING seq, subscription_id, op"
        )
        ctes.append(f"logged AS ({logged.sql(changes, params)})")
    counts = [{"tenant": t, "subscriptions": d} for t, d in sorted(moved.items()) if d]
    if counts:
        ctes.append(f"counted AS ({_USAGE.sql(counts, params)})")
    if audit:
        audited = _insert(AuditLog.__table__, list(audit[0]), "")
        ctes.append(f"audited AS ({audited.sql(audit, params)})")
    newest = "(SELECT max(seq) FROM change_log)"
    if changes:
        # The change_log of this statement's snapshot lacks its own rows: ask both.
        newest = f"greatest({newest}, (SELECT max(seq) FROM logged))"
    bell = f"pg_notify(%s, {newest}::text)" if ring else "NULL"
    if ring:
        params.append(CHANGES_CHANNEL)
    ctes.append(f"bell AS (SELECT {bell} AS rang)")
    if changes:
        query = "SELECT seq, subscription_id, op FROM bell LEFT JOIN logged ON true"
    else:
        query = "SELECT rang FROM bell"
    statements = [(_DELETE, (list(deletes),))] if deletes else []
    statements.append(("WITH " + ", ".join(ctes) + " " + query, tuple(params)))
    result = pipelined(connection, statements)
    if not changes:
        return []
    return [(seq, sub_id, op) for seq, sub_id, op in result if seq is not None]


_DELETE: Final = "DELETE FROM subscription WHERE id = ANY(%s::bigint[])"


def pipelined(
    connection: sa.Connection, statements: Sequence[tuple[str, tuple[Any, ...]]]
) -> list[tuple[Any, ...]]:
    """Run ``statements`` in order in one round trip (psycopg's pipeline mode, which also
    sends a transaction's ``BEGIN`` with them instead of on its own); the rows of the
    last. A failure is raised as SQLAlchemy's error, as ``exec_driver_sql`` would (a group
    of writes rolls back on those and runs its jobs again alone), and a connection found
    broken is invalidated, so the pool does not hand it out again.

    When something listens to each statement the engine runs (tracing: ``app.tracing``),
    the statements go one by one through SQLAlchemy instead, so each is seen."""
    if connection.dispatch.before_cursor_execute or connection.dispatch.after_cursor_execute:
        for text, params in statements:
            result = connection.exec_driver_sql(text, params)
        return [tuple(row) for row in result] if result.returns_rows else []
    raw = cast(psycopg.Connection[Any], connection.connection.driver_connection)
    try:
        with raw.pipeline():
            cursors = [raw.execute(text, params) for text, params in statements]
        return cursors[-1].fetchall() if cursors[-1].description else []
    except psycopg.Error as e:
        text, params = statements[-1]
        broken = connection.dialect.is_disconnect(e, raw, None)  # type: ignore[arg-type]
        if broken:
            connection.invalidate(e)
        raise sa.exc.DBAPIError.instance(
            text,
            params,
            e,
            psycopg.Error,
            connection_invalidated=broken,
            dialect=connection.dialect,
        ) from e
