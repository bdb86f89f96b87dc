"""The admin reads, implemented once for the HTTP routes and the command line's direct
mode (as ``AdminOperations`` is for the writes, which it adds on top): a subscription, a
page of them, the counts, an export, a page of the audit log, each scoped to the caller's
tenant."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from app.auth import Caller
from app.refusals import InvalidRequestError, NotFoundError
from matcher.budget import Budget
from store import AuditEntry, AuditRepository, Database, StoredSubscription, SubscriptionRepository
from store.export import export_parquet
from store.selection import Selection
from topicstore.models import (
    AuditOrder,
    AuditOut,
    AuditPage,
    Counts,
    Page,
    SubscriptionOrder,
    SubscriptionOut,
)
from topicstore.times import YEARS


def subscription_out(row: StoredSubscription) -> SubscriptionOut:
    """The row as the API shows it (field by field, so a new column is one field of the
    model)."""
    values = {name: getattr(row, name) for name in SubscriptionOut.model_fields}
    if row.criteria is not None:
        values["criteria"] = dict(row.criteria)
    return SubscriptionOut(**values)


def label_pair(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` as (key, value); each caller has checked the ``=`` and the key."""
    key, _, value = text.partition("=")
    return key, value


def selection_of(
    *,
    tenant: str | None = None,
    subscriber: str | None = None,
    pattern_prefix: str | None = None,
    dialect: str | None = None,
    group: str | None = None,
    label: str | None = None,
) -> Selection:
    """The filters a listing and a removal share, as the API and the command line name
    them (``label`` as ``KEY=VALUE``)."""
    pair = None if label is None else label_pair(label)
    return Selection(tenant, subscriber, pattern_prefix, dialect, group, pair)


def audit_out(entry: AuditEntry) -> AuditOut:
    return AuditOut(**{name: getattr(entry, name) for name in AuditOut.model_fields})


def _instant(value: datetime | None, name: str) -> datetime | None:
    """``value`` in UTC (the command line's time without an offset is taken as UTC), or
    the refusal naming the bound it breaks (``topicstore.times``: the year as written)."""
    if value is None:
        return None
    if value.year not in YEARS:
        raise InvalidRequestError(
            f"{name} must be written in a year from {YEARS.start} to {YEARS.stop - 1}",
            code="time_out_of_range",
        )
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


class AdminReads:
    """Reads of subscriptions and the audit log on ``db``, on behalf of a ``Caller``."""

    db: Database

    def get(self, sub_id: int, caller: Caller) -> SubscriptionOut:
        with self.db.read() as session:
            row = SubscriptionRepository(session).get(sub_id, tenant=caller.tenant)
        if row is None:
            raise NotFoundError(f"no subscription {sub_id}")
        return subscription_out(row)

    def page(
        self,
        caller: Caller,
        *,
        tenant: str | None = None,
        subscriber: str | None = None,
        pattern_prefix: str | None = None,
        dialect: str | None = None,
        after: int | None = None,
        limit: int = 100,
        ids: Sequence[int] | None = None,
        group: str | None = None,
        label: tuple[str, str] | None = None,
        sort: SubscriptionOrder = "id",
        after_matches: int | None = None,
        unmatched_since: datetime | None = None,
    ) -> Page:
        """A page of subscriptions in id order, or (``sort="matches"``) most matched first
        (keyset pagination: pass ``next_after``, and ``next_after_matches`` with that sort,
        back as ``after`` and ``after_matches``); ``ids``: only those (what a
        routing-table search found); ``unmatched_since``: only those not matched since
        then."""
        by_matches = sort == "matches"
        if by_matches and (after is None) != (after_matches is None):
            raise InvalidRequestError(
                "with sort=matches give after and after_matches together (the previous "
                "page's next_after and next_after_matches)",
                code="incomplete_cursor",
            )
        if not by_matches and after_matches is not None:
            raise InvalidRequestError(
                "after_matches goes with sort=matches", code="incomplete_cursor"
            )
        with self.db.read() as session:
            rows = SubscriptionRepository(session).page(
                tenant=caller.tenant_for(tenant),
                subscriber=subscriber,
                pattern_prefix=pattern_prefix,
                dialect=dialect,
                after_id=after,
                limit=limit,
                ids=ids,
                group=group,
                label=label,
                by_matches=by_matches,
                after_matches=after_matches or 0,
                unmatched_since=_instant(unmatched_since, "unmatched_since"),
            )
        full = len(rows) == limit
        return Page(
            items=[subscription_out(row) for row in rows],
            next_after=rows[-1].id if full else None,
            next_after_matches=rows[-1].matches if full and by_matches else None,
        )

    def count(self, caller: Caller, tenant: str | None = None) -> Counts:
        tenant = caller.tenant_for(tenant)
        with self.db.read() as session:
            by_dialect = SubscriptionRepository(session).count(tenant)
        return Counts(tenant=tenant, total=sum(by_dialect.values()), by_dialect=by_dialect)

    def export(
        self, path: Path, caller: Caller, tenant: str | None = None, budget: Budget | None = None
    ) -> int:
        """Write the tenant's subscriptions to Parquet at ``path``; returns the row count.
        Stops between two batches once ``budget`` is stopped."""
        return export_parquet(
            self.db,
            path,
            tenant=caller.tenant_for(tenant),
            check=None if budget is None else budget.check,
        )

    def audit_page(
        self,
        caller: Caller,
        *,
        tenant: str | None = None,
        action: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        after: int | None = None,
        limit: int = 100,
        order: AuditOrder = "asc",
    ) -> AuditPage:
        """A page of the audit log in id order, oldest first or (``desc``) newest first
        (keyset pagination, like ``page``). The operator sees every tenant's rows (or
        ``tenant``'s); a tenant only its own."""
        scope = tenant if caller.tenant is None else caller.tenant_for(tenant)
        with self.db.read() as session:
            rows = AuditRepository(session).page(
                tenant=scope,
                action=action,
                since=_instant(since, "from"),
                until=_instant(until, "to"),
                after_id=after,
                limit=limit,
                newest_first=order == "desc",
            )
        next_after = rows[-1].id if len(rows) == limit else None
        return AuditPage(items=[audit_out(row) for row in rows], next_after=next_after)
