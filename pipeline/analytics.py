"""Analytics over the routed table (``pipeline.delta``, written by ``route`` and its stream):
DuckDB SQL over one committed version of it.

The table's version is read through delta-rs as an Arrow dataset of exactly the files that
version's log names, and DuckDB scans that dataset (filters on ``kind`` and ``date`` prune
files): a query sees whole commits only, never a write in progress, and ``as_of`` reads an
earlier version. (DuckDB's own ``delta`` extension is pinned to one DuckDB release and is
fetched from DuckDB's site; delta-rs comes from PyPI with the project.)

DuckDB runs in memory on its own connection and only reads the table (and, for
``never-matched``, a subscriptions export): it never opens the service's database file, so
it runs beside a live service. Every query is a plain function returning a ``QueryResult``,
for the command line and the HTTP API alike; ``run_query`` selects one by name.

A message's fan-out is its number of deliveries; unmatched messages count with fan-out 0.
Times are UTC.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeAlias

if TYPE_CHECKING:  # DuckDB loads when a query runs, not when the CLI builds its help
    import duckdb

from pipeline.errors import (
    InvalidBucketError,
    MissingColumnError,
    MissingSubscriptionsError,
    UnknownQueryError,
)

#: Buckets ``timeline`` accepts (``date_trunc`` parts).
BUCKETS: Final = ("minute", "hour", "day")
DEFAULT_LIMIT: Final = 20

#: Every message once, with its fan-out (0 when unmatched).
_PER_MESSAGE: Final = """
    per_message AS (
        SELECT message_id, any_value(topic) AS topic, min(ts) AS ts, count(*) AS fanout
        FROM deliveries GROUP BY message_id
        UNION ALL
        SELECT message_id, topic, ts, 0 FROM unmatched
    )"""


@dataclass(frozen=True, slots=True)
class QueryResult:
    """A query's answer: column names and rows, in the query's order."""

    name: str
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]

    def records(self) -> list[dict[str, Any]]:
        """Rows as JSON-ready dictionaries (times as ISO-8601 text, decimals as floats)."""
        return [
            {name: _plain(value) for name, value in zip(self.columns, row, strict=True)}
            for row in self.rows
        ]

    def column(self, name: str) -> list[Any]:
        i = self.columns.index(name)
        return [row[i] for row in self.rows]


def _plain(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    return value


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


#: The views over the routed table, each one kind of its rows (``ts`` as UTC times).
_VIEWS: Final = {
    "deliveries": "message_id, subscription_id, subscriber, tenant, topic",
    "unmatched": "message_id, tenant, topic",
    "rejects": "message_id, subscription_id, topic, pattern, reason, detail, raw, source",
}


def _subscriptions_view(conn: duckdb.DuckDBPyConnection, path: Path) -> None:
    source = f"read_parquet({_quote(path)})"
    present = {row[0] for row in conn.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
    defaults = {"tenant": "'default'", "dialect": "'amqp'"}
    missing = [name for name in ("id", "subscriber", "pattern") if name not in present]
    if missing:
        raise MissingColumnError(f"subscriptions in {path} have no {', '.join(missing)} column")
    columns = ", ".join(
        name if name in present else f"{defaults[name]} AS {name}"
        for name in ("id", "tenant", "subscriber", "pattern", "dialect")
    )
    conn.execute(f"CREATE VIEW subscriptions AS SELECT {columns} FROM {source}")


@contextmanager
def open_tables(
    deliveries: Path, subscriptions: Path | None = None, as_of: int | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory DuckDB connection with views ``deliveries``, ``unmatched``, ``rejects``
    and (given a subscriptions export) ``subscriptions`` over version ``as_of`` (default:
    the newest) of the routed table at ``deliveries``; closed on exit."""
    import duckdb

    from pipeline import delta

    rows = delta.dataset(delta.locate_table(deliveries), as_of)
    conn = duckdb.connect(":memory:")
    try:
        conn.execute("SET TimeZone = 'UTC'")
        conn.register("routed", rows)
        for kind, columns in _VIEWS.items():
            conn.execute(
                f"CREATE VIEW {kind} AS SELECT {columns}, ts::TIMESTAMP AS ts FROM routed "
                f"WHERE kind = '{kind}'"
            )
        if subscriptions is not None:
            _subscriptions_view(conn, subscriptions)
        yield conn
    finally:
        conn.close()


def _run(
    conn: duckdb.DuckDBPyConnection, name: str, sql: str, params: list[object] | None = None
) -> QueryResult:
    cursor = conn.execute(sql, params or [])
    columns = tuple(d[0] for d in cursor.description or ())
    return QueryResult(name, columns, [tuple(row) for row in cursor.fetchall()])


def _limit(limit: int | None) -> str:
    return "" if limit is None else f"LIMIT {int(limit)}"


def deliveries_per_subscriber(
    conn: duckdb.DuckDBPyConnection, limit: int | None = DEFAULT_LIMIT
) -> QueryResult:
    """Subscribers by deliveries received, most first."""
    return _run(
        conn,
        "subscribers",
        f"""SELECT tenant, subscriber, count(*) AS deliveries,
                   count(DISTINCT message_id) AS messages,
                   count(DISTINCT subscription_id) AS subscriptions
            FROM deliveries GROUP BY tenant, subscriber
            ORDER BY deliveries DESC, tenant, subscriber {_limit(limit)}""",
    )


def deliveries_per_tenant(
    conn: duckdb.DuckDBPyConnection, limit: int | None = DEFAULT_LIMIT
) -> QueryResult:
    """Tenants by deliveries, most first."""
    return _run(
        conn,
        "tenants",
        f"""SELECT tenant, count(*) AS deliveries, count(DISTINCT message_id) AS messages,
                   count(DISTINCT subscriber) AS subscribers
            FROM deliveries GROUP BY tenant
            ORDER BY deliveries DESC, tenant {_limit(limit)}""",
    )


def fanout_histogram(conn: duckdb.DuckDBPyConnection, limit: int | None = None) -> QueryResult:
    """How many messages had each fan-out (0 = unmatched), and from how many topics."""
    return _run(
        conn,
        "fanout",
        f"""WITH {_PER_MESSAGE}
            SELECT fanout, count(*) AS messages, count(DISTINCT topic) AS topics
            FROM per_message GROUP BY fanout ORDER BY fanout {_limit(limit)}""",
    )


def fanout_per_topic(
    conn: duckdb.DuckDBPyConnection, limit: int | None = DEFAULT_LIMIT
) -> QueryResult:
    """Per topic, the distribution of its messages' fan-out; widest first."""
    return _run(
        conn,
        "topic-fanout",
        f"""WITH {_PER_MESSAGE}
            SELECT topic, count(*) AS messages, sum(fanout) AS deliveries,
                   min(fanout) AS min_fanout, round(avg(fanout), 3) AS avg_fanout,
                   median(fanout) AS median_fanout, max(fanout) AS max_fanout
            FROM per_message GROUP BY topic
            ORDER BY max_fanout DESC, deliveries DESC, topic {_limit(limit)}""",
    )


def hot_topics(conn: duckdb.DuckDBPyConnection, limit: int | None = DEFAULT_LIMIT) -> QueryResult:
    """Topics by messages published (matched or not), most first, with their share."""
    return _run(
        conn,
        "hot-topics",
        f"""WITH {_PER_MESSAGE}
            SELECT topic, count(*) AS messages, sum(fanout) AS deliveries,
                   round(count(*) / sum(count(*)) OVER (), 4) AS share
            FROM per_message GROUP BY topic
            ORDER BY messages DESC, deliveries DESC, topic {_limit(limit)}""",
    )


def timeline(
    conn: duckdb.DuckDBPyConnection, bucket: str = "hour", limit: int | None = None
) -> QueryResult:
    """Messages, deliveries and the unmatched rate per ``bucket`` of time, oldest first."""
    if bucket not in BUCKETS:
        raise InvalidBucketError(f"bucket must be one of {', '.join(BUCKETS)}, not {bucket!r}")
    return _run(
        conn,
        "timeline",
        f"""WITH {_PER_MESSAGE}
            SELECT date_trunc(?, ts) AS bucket, count(*) AS messages,
                   sum(fanout) AS deliveries, count(*) FILTER (WHERE fanout = 0) AS unmatched,
                   round(count(*) FILTER (WHERE fanout = 0) / count(*), 4) AS unmatched_rate
            FROM per_message GROUP BY bucket ORDER BY bucket {_limit(limit)}""",
        [bucket],
    )


def never_matched(
    conn: duckdb.DuckDBPyConnection, limit: int | None = DEFAULT_LIMIT
) -> QueryResult:
    """Subscriptions of the export that received no delivery, by id."""
    import duckdb

    try:
        conn.execute("SELECT 1 FROM subscriptions LIMIT 0")
    except duckdb.CatalogException as e:
        raise MissingSubscriptionsError(
            "never-matched needs a subscriptions export (--subscriptions)"
        ) from e
    return _run(
        conn,
        "never-matched",
        f"""SELECT s.id, s.tenant, s.subscriber, s.pattern, s.dialect
            FROM subscriptions s
            WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.subscription_id = s.id)
            ORDER BY s.id {_limit(limit)}""",
    )


Query: TypeAlias = Callable[["duckdb.DuckDBPyConnection", int | None, str], QueryResult]

#: Every query by the name the command line and the API use. A limit of None means the
#: query's own default: the top ``DEFAULT_LIMIT`` rows of a ranking, every row otherwise.
QUERIES: Final[dict[str, Query]] = {
    "subscribers": lambda conn, limit, _: deliveries_per_subscriber(conn, limit or DEFAULT_LIMIT),
    "tenants": lambda conn, limit, _: deliveries_per_tenant(conn, limit or DEFAULT_LIMIT),
    "fanout": lambda conn, limit, _: fanout_histogram(conn, limit),
    "topic-fanout": lambda conn, limit, _: fanout_per_topic(conn, limit or DEFAULT_LIMIT),
    "hot-topics": lambda conn, limit, _: hot_topics(conn, limit or DEFAULT_LIMIT),
    "timeline": lambda conn, limit, bucket: timeline(conn, bucket, limit),
    "never-matched": lambda conn, limit, _: never_matched(conn, limit or DEFAULT_LIMIT),
}


def run_query(
    name: str,
    deliveries: Path,
    *,
    subscriptions: Path | None = None,
    limit: int | None = None,
    bucket: str = "hour",
    as_of: int | None = None,
) -> QueryResult:
    """Query ``name`` over the routed table at ``deliveries``, as of version ``as_of``
    (default: the newest; see ``QUERIES`` for ``limit``; ``bucket`` is for ``timeline``)."""
    query = QUERIES.get(name)
    if query is None:
        raise UnknownQueryError(f"unknown query {name!r}; known: {', '.join(QUERIES)}")
    with open_tables(deliveries, subscriptions, as_of) as conn:
        return query(conn, limit, bucket)
