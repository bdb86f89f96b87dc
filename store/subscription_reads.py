"""Admin reads of subscriptions (one, a page, counts, groups) on a session it is given;
``SubscriptionRepository`` adds the writes on top."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa

from matcher.groups import Policy, check_policy
from store.models import Subscription
from store.records import StoredSubscription, criteria_tuple
from store.routing_reads import RoutingReads
from store.selection import Selection
from store.stats import MATCHES, STATS, with_stats

_SUBSCRIPTION: Final = Subscription.__table__
_STATS_FIELDS: Final = ("matches", "last_matched_at")  # in a row read ``with_stats``
_STORED_FIELDS: Final = tuple(StoredSubscription.__dataclass_fields__.keys() - _STATS_FIELDS)
MAX_PAGE: Final = 1_000


def stored(row: Any) -> StoredSubscription:
    """A ``StoredSubscription`` from a row holding its fields (by attribute: an ORM object
    or a Core row), with its statistics when the row has them (``with_stats``)."""
    values = {name: getattr(row, name) for name in _STORED_FIELDS}
    values["criteria"] = criteria_tuple(row.criteria)
    values.update((name, getattr(row, name)) for name in _STATS_FIELDS if hasattr(row, name))
    return StoredSubscription(**values)


class SubscriptionReads(RoutingReads):
    """Admin reads of subscriptions on ``session``; the loader's are ``RoutingReads``'."""

    def _core(self, statement: sa.Executable) -> sa.CursorResult[Any]:
        """``statement`` on the transaction's connection, as Core: the write path's
        statements need none of the ORM's bookkeeping around them."""
        return self.session.connection().execute(statement)

    # -- reads --------------------------------------------------------------------------

    def get(self, sub_id: int, tenant: str | None = None) -> StoredSubscription | None:
        where = [_SUBSCRIPTION.c.id == sub_id]
        if tenant is not None:
            where.append(_SUBSCRIPTION.c.tenant == tenant)
        row = self._core(with_stats(sa.select(_SUBSCRIPTION)).where(*where)).first()
        return None if row is None else stored(row)

    def page(
        self,
        *,
        tenant: str | None = None,
        subscriber: str | None = None,
        pattern_prefix: str | None = None,
        dialect: str | None = None,
        after_id: int | None = None,
        limit: int = 100,
        ids: Sequence[int] | None = None,
        group: str | None = None,
        label: tuple[str, str] | None = None,
        by_matches: bool = False,
        after_matches: int = 0,
        unmatched_since: datetime | None = None,
    ) -> list[StoredSubscription]:
        """A page of subscriptions with their statistics in id order after ``after_id``
        (keyset pagination: O(page) at any depth); ``ids``: only those (at most a page);
        ``group``: that group's members; ``label``: (key, value) the labels hold, compared
        as text; ``unmatched_since``: not matched since then (never, or last before it).
        ``by_matches``: most matched first, ties by id, after (``after_matches``,
        ``after_id``): a top-``limit`` sort of every row the filters select (counts
        change with every flush, so no index keeps them)."""
        selection = Selection(tenant, subscriber, pattern_prefix, dialect, group, label)
        query = with_stats(sa.select(_SUBSCRIPTION)).limit(min(limit, MAX_PAGE))
        query = query.where(*selection.where())
        if unmatched_since is not None:
            last = STATS.c.last_matched_at
            query = query.where(sa.or_(last.is_(None), last < unmatched_since))
        if by_matches:
            matches = MATCHES
            query = query.order_by(matches.desc(), Subscription.id)
            if after_id is not None:
                query = query.where(
                    sa.or_(
                        matches < after_matches,
                        sa.and_(matches == after_matches, Subscription.id > after_id),
                    )
                )
        else:
            query = query.order_by(Subscription.id)
            if after_id is not None:
                query = query.where(Subscription.id > after_id)
        if ids is not None:
            if not ids:
                return []
            query = query.where(Subscription.id.in_(list(ids)[:MAX_PAGE]))
        return [stored(row) for row in self._core(query)]

    def count(self, tenant: str | None = None) -> dict[str, int]:
        """Subscription counts per dialect (``headers`` for content-based ones)."""
        query = sa.select(Subscription.dialect, sa.func.count()).group_by(Subscription.dialect)
        if tenant is not None:
            query = query.where(Subscription.tenant == tenant)
        return {dialect: int(n) for dialect, n in self.session.execute(query)}

    def group_policies(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Policy]:
        """The stored policy of each (tenant, group) in ``keys`` that has members (every
        member carries it: ``store.groups``). One query per tenant, on the (tenant, group)
        index."""
        by_tenant: dict[str, set[str]] = {}
        for tenant, group in keys:
            by_tenant.setdefault(tenant, set()).add(group)
        found: dict[tuple[str, str], Policy] = {}
        for tenant, groups in by_tenant.items():
            rows = self.session.execute(
                sa.select(Subscription.group, Subscription.group_policy)
                .where(Subscription.tenant == tenant, Subscription.group.in_(sorted(groups)))
                .distinct()
            )
            for name, policy in rows:
                found[(tenant, str(name))] = check_policy(policy)
        return found

    def groups_of(self, ids: Collection[int]) -> dict[int, str | None]:
        """The group of each stored subscription in ``ids``."""
        if not ids:
            return {}
        rows = self.session.execute(
            sa.select(Subscription.id, Subscription.group).where(Subscription.id.in_(sorted(ids)))
        )
        return {int(sub_id): group for sub_id, group in rows}
