"""Audit API: the log of admin changes, a thin shell over ``AdminOperations.audit_page``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.dependencies import AdminCaller, ServicesDep
from app.errors import documented
from store.records import MAX_NAME_BYTES
from topicstore.models import AuditAction, AuditOrder, AuditPage
from topicstore.times import YEARS, Time

router = APIRouter(prefix="/v1", tags=["audit"], responses=documented(400, 401, 422, 429, 503))


@router.get("/audit", response_model=AuditPage, responses=documented(403))
def list_audit(
    caller: AdminCaller,
    services: ServicesDep,
    tenant: Annotated[
        str | None,
        Query(
            max_length=MAX_NAME_BYTES, description="Operator: one tenant (default: all of them)."
        ),
    ] = None,
    action: AuditAction | None = None,
    since: Annotated[
        Time | None,
        Query(
            alias="from",
            description="Rows at or after this time: an RFC 3339 date-time with an offset "
            f"(``Z`` for UTC), written in a year from {YEARS.start} to {YEARS.stop - 1} "
            "(else 422 ``time_out_of_range``).",
            examples=["2026-11-24T00:00:00Z"],
        ),
    ] = None,
    until: Annotated[
        Time | None,
        Query(
            alias="to",
            description="Rows before this time (same form and years as ``from``).",
            examples=["2026-11-25T00:00:00Z"],
        ),
    ] = None,
    after: Annotated[int | None, Query(ge=0, lt=2**63, description="Last id seen.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Annotated[
        AuditOrder, Query(description="`asc`: oldest first (default); `desc`: newest first.")
    ] = "asc",
) -> AuditPage:
    """Admin changes in id order, oldest or newest first (keyset pagination: pass
    ``next_after`` back as ``after`` with the same ``order``). The operator sees every
    tenant's; a tenant token only its own tenant's (another tenant → 403 ``wrong_tenant``).
    A time is a date-time with an offset, never a bare number."""
    return services.admin.audit_page(
        caller,
        tenant=tenant,
        action=action,
        since=since,
        until=until,
        after=after,
        limit=limit,
        order=order,
    )
