"""Which subscriptions a listing or a removal selects: one set of filters, one meaning, so
``GET /v1/subscriptions`` lists exactly what ``DELETE /v1/subscriptions`` with the same
filters removes."""

from __future__ import annotations

from dataclasses import dataclass, fields

import sqlalchemy as sa

from store.models import Subscription


@dataclass(frozen=True, slots=True)
class Selection:
    """Filters on subscriptions, each None for none: ``pattern_prefix`` the pattern's first
    characters (empty: none); ``label`` a (key, value) the labels hold, the value compared
    as text (``tier=1`` finds the number 1 and the string "1")."""

    tenant: str | None = None
    subscriber: str | None = None
    pattern_prefix: str | None = None
    dialect: str | None = None
    group: str | None = None
    label: tuple[str, str] | None = None

    def given(self) -> list[str]:
        """The names of the filters that select something (a tenant's whole table too)."""
        return [f.name for f in fields(self) if getattr(self, f.name) not in (None, "")]

    def where(self) -> list[sa.ColumnElement[bool]]:
        """The filters as conditions on the subscription table (none: every row)."""
        where: list[sa.ColumnElement[bool]] = []
        if self.tenant is not None:
            where.append(Subscription.tenant == self.tenant)
        if self.subscriber is not None:
            where.append(Subscription.subscriber == self.subscriber)
        if self.dialect is not None:
            where.append(Subscription.dialect == self.dialect)
        if self.pattern_prefix:
            prefix = self.pattern_prefix
            where.append(sa.func.substr(Subscription.pattern, 1, len(prefix)) == prefix)
        if self.group is not None:
            where.append(Subscription.group == self.group)
        if self.label is not None:
            key, value = self.label
            where.append(Subscription.labels[key].as_string() == value)
        return where
