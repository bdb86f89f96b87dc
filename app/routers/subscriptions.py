"""Admin API: subscriptions of the caller's tenant. Every route is a thin HTTP shell over
``app.operations.AdminOperations`` (the one implementation the command line uses too)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi import Path as PathParam
from starlette.convertors import Convertor, register_url_convertor

from app.dependencies import AdminCaller, ServicesDep
from app.errors import documented
from app.schemas import BulkIn, BulkOut, Counts, Deleted, Page, SubscriptionIn, SubscriptionOut

router = APIRouter(prefix="/v1", tags=["subscriptions"], responses=documented(400, 401, 422, 503))

SubId = Annotated[int, PathParam(ge=0, lt=2**32, description="Subscription id.")]


class _NameConvertor(Convertor[str]):
    """A whole path segment or more: a subscriber name may hold '/' (sent as %2F, which
    arrives decoded) and any other character; a name stored before control characters
    were refused may hold a newline (``:path`` stops there)."""

    regex = r"[\s\S]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("name", _NameConvertor())


@router.post(
    "/subscriptions",
    status_code=201,
    response_model=SubscriptionOut,
    responses={
        200: {"model": SubscriptionOut, "description": "Already existed: that row."},
        **documented(403, 413),
    },
)
def create_subscription(
    item: SubscriptionIn, caller: AdminCaller, services: ServicesDep, response: Response
) -> SubscriptionOut:
    """Create a subscription. The same (tenant, subscriber, dialect, pattern) again returns
    the existing one with 200 instead of 201."""
    row, created = services.admin.create(item, caller)
    if not created:
        response.status_code = 200
    return row


@router.post(
    "/subscriptions/bulk",
    response_model=BulkOut,
    responses={
        207: {"model": BulkOut, "description": "Some items failed: see each result."},
        **documented(403, 413),
    },
)
def create_subscriptions(
    body: BulkIn, caller: AdminCaller, services: ServicesDep, response: Response
) -> BulkOut:
    """Create many subscriptions in one transaction; every item gets its own result. Valid
    items are stored even when others fail (status 207 then)."""
    result = services.admin.create_many(body.items, caller)
    if result.failed:
        response.status_code = 207
    return result


@router.get("/subscriptions/{sub_id}", response_model=SubscriptionOut, responses=documented(404))
def get_subscription(sub_id: SubId, caller: AdminCaller, services: ServicesDep) -> SubscriptionOut:
    return services.admin.get(sub_id, caller)


@router.get("/subscriptions", response_model=Page, responses=documented(403))
def list_subscriptions(
    caller: AdminCaller,
    services: ServicesDep,
    subscriber: Annotated[str | None, Query(max_length=255)] = None,
    pattern_prefix: Annotated[str | None, Query(max_length=255)] = None,
    dialect: Annotated[str | None, Query(max_length=16)] = None,
    tenant: Annotated[str | None, Query(max_length=255)] = None,
    after: Annotated[int | None, Query(ge=0, lt=2**32, description="Last id seen.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Page:
    """A page of subscriptions in id order (keyset pagination: pass ``next_after`` back)."""
    return services.admin.page(
        caller,
        tenant=tenant,
        subscriber=subscriber,
        pattern_prefix=pattern_prefix,
        dialect=dialect,
        after=after,
        limit=limit,
    )


@router.get("/subscriptions-count", response_model=Counts, responses=documented(403))
def count_subscriptions(
    caller: AdminCaller,
    services: ServicesDep,
    tenant: Annotated[str | None, Query(max_length=255)] = None,
) -> Counts:
    return services.admin.count(caller, tenant)


@router.delete("/subscriptions/{sub_id}", status_code=204, responses=documented(404))
def delete_subscription(sub_id: SubId, caller: AdminCaller, services: ServicesDep) -> Response:
    services.admin.remove(sub_id, caller)
    return Response(status_code=204)


@router.delete(
    "/subscribers/{subscriber:name}/subscriptions",
    response_model=Deleted,
    responses=documented(403),
)
def delete_subscriber(
    subscriber: Annotated[str, PathParam(max_length=255)],
    caller: AdminCaller,
    services: ServicesDep,
    tenant: Annotated[str | None, Query(max_length=255)] = None,
) -> Deleted:
    """Delete every subscription of one subscriber."""
    return services.admin.remove_subscriber(subscriber, caller, tenant)


@router.get(
    "/subscriptions-export",
    response_class=Response,
    responses={200: {"content": {"application/vnd.apache.parquet": {}}}, **documented(403)},
)
def export_subscriptions(
    caller: AdminCaller,
    services: ServicesDep,
    tenant: Annotated[str | None, Query(max_length=255)] = None,
) -> Response:
    """The tenant's subscriptions as Parquet (what ``topicstore route`` reads)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "subscriptions.parquet"
        rows = services.admin.export(path, caller, tenant)
        body = path.read_bytes()
    return Response(
        body, media_type="application/vnd.apache.parquet", headers={"x-row-count": str(rows)}
    )
