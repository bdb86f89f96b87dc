"""The subscriptions' match statistics in the store (``subscription_stats``): a serving
process's counts added in batches, the columns a listing shows beside each subscription,
and the most matched subscriptions for ``/metrics``.

A flush adds deltas (``matches = matches + delta``, the later last time kept), so every
replica and worker adds its own and the row is their sum; it never reads a row to write
it back. It writes only ``subscription_stats``: not the subscription rows, not the change
log, and takes no writer lock (``Database.aside``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

import orjson
import sqlalchemy as sa
from sqlalchemy.orm import Session

from store.models import Subscription, SubscriptionStats

STATS: Final = cast(sa.Table, SubscriptionStats.__table__)
#: Rows per flush statement and transaction: a statement's arrays stay small, and a
#: replica's flush holds the locks of at most this many rows at a time.
FLUSH_ROWS: Final = 10_000
#: Deliveries of a subscription with no row (never matched): 0.
MATCHES: Final = sa.func.coalesce(STATS.c.matches, 0)

# The deltas come as three arrays (one bind each, whatever their length); an id may come
# twice (a process's map and arrays), so they are summed first. Ids whose subscription is
# gone are dropped by the join. On PostgreSQL the subscription rows are key-share locked
# in id order, skipping rows a removal holds: a flush racing a removal neither waits for
# it nor writes a row the removal's delete of statistics (at its commit, after it took
# the rows: ``store.pending.forget``) would miss, and two replicas' flushes lock
# statistics rows in the same order (no deadlock).
_ADD: Final = """
INSERT INTO subscription_stats (subscription_id, matches, last_matched_at)
SELECT s.id, d.n, to_timestamp(d.t)
FROM (
    SELECT u.id, sum(u.n) AS n, max(u.t) AS t
    FROM (
        SELECT unnest({ids}) AS id,
               unnest({counts}) AS n,
               unnest({lasts}) AS t
    ) u
    GROUP BY u.id
) d
JOIN subscription s ON s.id = d.id
{lock}
ON CONFLICT (subscription_id) DO UPDATE SET
    matches = subscription_stats.matches + excluded.matches,
    last_matched_at = greatest(subscription_stats.last_matched_at, excluded.last_matched_at)
"""
#: The three arrays a flush binds, each as ``unnest``'s argument in ``_ADD``.
_ARRAYS: Final = ("ids", "counts", "lasts")
_ADD_POSTGRES: Final = sa.text(
    _ADD.format(
        lock="ORDER BY s.id FOR KEY SHARE OF s SKIP LOCKED",
        **{name: f"CAST(:{name} AS BIGINT[])" for name in _ARRAYS},
    )
)
# On DuckDB each array goes as its JSON text: its client would inspect every element of a
# list, each inspection two failed imports of pandas in a serving process (see
# ``store.duckdb_write``), with the GIL held, for up to FLUSH_ROWS ids a flush.
_ADD_DUCKDB: Final = sa.text(
    _ADD.format(
        lock="", **{name: f"from_json(CAST(:{name} AS JSON), '[\"BIGINT\"]')" for name in _ARRAYS}
    )
)


def add_counts(
    session: Session,
    ids: Sequence[int],
    counts: Sequence[int],
    lasts: Sequence[int],
    *,
    postgres: bool,
) -> None:
    """Add ``counts[k]`` deliveries to subscription ``ids[k]``, the last at ``lasts[k]``
    (seconds since the Unix epoch), in one statement: at most ``FLUSH_ROWS`` of them.
    O(rows) index probes; ids no longer stored are skipped."""
    arrays = {"ids": list(ids), "counts": list(counts), "lasts": list(lasts)}
    if postgres:
        session.execute(_ADD_POSTGRES, arrays)
        return
    session.execute(_ADD_DUCKDB, {k: orjson.dumps(v).decode() for k, v in arrays.items()})


def forget(session: Session, ids: sa.Select[Any]) -> None:
    """Delete the statistics of the subscriptions ``ids`` selects (DuckDB's removals, in
    process under the writer lock; PostgreSQL's delete theirs at commit:
    ``store.pending.forget``)."""
    session.execute(STATS.delete().where(STATS.c.subscription_id.in_(ids.scalar_subquery())))


def with_stats(query: sa.Select[Any]) -> sa.Select[Any]:
    """``query`` over ``subscription`` with each row's ``matches`` (0 when never matched)
    and ``last_matched_at`` (None then): one outer join on the statistics' primary key."""
    return query.add_columns(
        MATCHES.label("matches"), STATS.c.last_matched_at.label("last_matched_at")
    ).outerjoin(STATS, STATS.c.subscription_id == Subscription.id)


@dataclass(frozen=True, slots=True)
class Hot:
    """One of the most matched subscriptions."""

    id: int
    tenant: str
    subscriber: str
    matches: int


def most_matched(session: Session, n: int) -> list[Hot]:
    """The ``n`` subscriptions with the most deliveries, most first (ties: lowest id). A
    top-n sort over the statistics rows (the subscriptions ever matched): read at most once
    per flush interval by ``/metrics``."""
    query = (
        sa.select(Subscription.id, Subscription.tenant, Subscription.subscriber, STATS.c.matches)
        .join(STATS, STATS.c.subscription_id == Subscription.id)
        .order_by(STATS.c.matches.desc(), Subscription.id)
        .limit(n)
    )
    return [Hot(int(i), t, s, int(m)) for i, t, s, m in session.execute(query)]
