"""The audit log's repository: appends rows inside the caller's write transaction (so an
audit row commits exactly when its change does), pages through them, and purges old ones.
Like ``SubscriptionRepository`` it builds statements on a given session and never commits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import sqlalchemy as sa
from sqlalchemy.orm import Session

from store import pending
from store.models import AuditLog

#: Most rows one page returns.
MAX_AUDIT_PAGE: Final = 1_000


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One audit row as written and read (``id`` is 0 until stored)."""

    created_at: datetime
    tenant: str
    action: str
    ids: tuple[int, ...]
    caller_tenant: str | None
    caller_name: str
    request_id: str
    address: str
    id: int = 0


_FIELDS: Final = tuple(name for name in AuditEntry.__dataclass_fields__ if name != "id")


def _entry(row: AuditLog) -> AuditEntry:
    values = {name: getattr(row, name) for name in _FIELDS}
    values["ids"] = tuple(int(i) for i in row.ids)
    return AuditEntry(id=row.id, **values)


class AuditRepository:
    """Reads and writes audit rows on ``session``."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, entries: Sequence[AuditEntry]) -> None:
        """Append ``entries`` (in order: ids follow it), written at commit with the
        transaction's other rows (``store.pending``)."""
        pending.pending(self.session).audit.extend(
            {**{name: getattr(entry, name) for name in _FIELDS}, "ids": list(entry.ids)}
            for entry in entries
        )

    def purge(self, before: datetime) -> None:
        """Delete the rows older than ``before`` (a range delete on the ``created_at``
        index: it touches only the expired rows, however large the log is)."""
        self.session.execute(sa.delete(AuditLog).where(AuditLog.created_at < before))

    def page(
        self,
        *,
        tenant: str | None = None,
        action: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        after_id: int | None = None,
        limit: int = 100,
        newest_first: bool = False,
    ) -> list[AuditEntry]:
        """Rows in id order (descending if ``newest_first``) past ``after_id`` (keyset
        pagination either way: the primary key orders and bounds the page), ``since``
        inclusive and ``until`` exclusive; ``tenant`` None: every tenant."""
        order = AuditLog.id.desc() if newest_first else AuditLog.id
        query = sa.select(AuditLog).order_by(order).limit(min(limit, MAX_AUDIT_PAGE))
        if tenant is not None:
            query = query.where(AuditLog.tenant == tenant)
        if action is not None:
            query = query.where(AuditLog.action == action)
        if since is not None:
            query = query.where(AuditLog.created_at >= since)
        if until is not None:
            query = query.where(AuditLog.created_at < until)
        if after_id is not None:
            query = query.where(AuditLog.id < after_id if newest_first else AuditLog.id > after_id)
        return [_entry(row) for row in self.session.scalars(query)]
