"""Admin API: subscriptions of the caller's tenant. Writes commit to the store first; the
loader applies them to the matchers right after the commit, before the response leaves."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi import Path as PathParam
from starlette.convertors import Convertor, register_url_convertor

from app.auth import AdminCaller
from app.errors import ApiError, documented
from app.schemas import (
    BulkIn,
    BulkItem,
    BulkOut,
    Counts,
    Deleted,
    ErrorBody,
    Page,
    SubscriptionIn,
    SubscriptionOut,
)
from app.services import Services, ServicesDep
from matcher import Limits, MatcherError
from store import NewSubscription, StoreError, SubscriptionRepository, validate
from store.export import export_parquet

router = APIRouter(prefix="/v1", tags=["subscriptions"], responses=documented(400, 401, 422))

SubId = Annotated[int, PathParam(ge=0, lt=2**32, description="Subscription id.")]


class _NameConvertor(Convertor[str]):
    """A whole path segment or more: a subscriber name may hold '/' (sent as %2F, which
    arrives decoded) and any other character, newlines included (``:path`` stops there)."""

    regex = r"[\s\S]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("name", _NameConvertor())


def _new(item: SubscriptionIn, tenant: str, services: Services) -> NewSubscription:
    settings = services.settings
    limits = Limits(
        max_topic_bytes=settings.max_topic_bytes, max_pattern_bytes=settings.max_topic_bytes
    )
    return validate(
        NewSubscription(
            subscriber=item.subscriber,
            pattern=item.pattern,
            tenant=tenant,
            dialect=item.dialect,
            kind=item.kind,
            criteria=None if item.criteria is None else tuple(item.criteria.items()),
            mode=item.mode,
            labels=item.labels,
        ),
        limits,
    )


def _check_quota(repo: SubscriptionRepository, tenant: str, adding: int, quota: int) -> None:
    held = sum(repo.count(tenant).values())
    if held + adding > quota:
        raise ApiError(
            403,
            "quota_exceeded",
            f"tenant {tenant!r} holds {held} subscriptions; its quota is {quota}",
        )


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
    new = _new(item, caller.tenant_for(item.tenant), services)
    with services.db.write() as session:
        repo = SubscriptionRepository(session)
        _check_quota(repo, new.tenant, 1, services.settings.tenant_quota)
        row, created = repo.add(new)
    if not created:
        response.status_code = 200
    return SubscriptionOut.of(row)


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
    max_batch = services.settings.max_batch
    if len(body.items) > max_batch:
        raise ApiError(413, "batch_too_large", f"a batch holds at most {max_batch} items")
    results: list[BulkItem] = []
    valid: list[tuple[int, NewSubscription]] = []
    for index, item in enumerate(body.items):
        try:
            valid.append((index, _new(item, caller.tenant_for(item.tenant), services)))
        except (MatcherError, StoreError, ApiError) as e:
            results.append(
                BulkItem(
                    index=index, status="error", error=ErrorBody(code=e.code, message=e.message)
                )
            )
    if valid:
        with services.db.write() as session:
            repo = SubscriptionRepository(session)
            for tenant in {new.tenant for _, new in valid}:
                adding = sum(1 for _, new in valid if new.tenant == tenant)
                _check_quota(repo, tenant, adding, services.settings.tenant_quota)
            stored = repo.add_many([new for _, new in valid])
        for (index, _), (sub_id, created) in zip(valid, stored, strict=True):
            results.append(
                BulkItem(index=index, status="created" if created else "exists", id=sub_id)
            )
    results.sort(key=lambda r: r.index)
    failed = sum(r.status == "error" for r in results)
    if failed:
        response.status_code = 207
    return BulkOut(
        created=sum(r.status == "created" for r in results),
        exists=sum(r.status == "exists" for r in results),
        failed=failed,
        results=results,
    )


@router.get("/subscriptions/{sub_id}", response_model=SubscriptionOut, responses=documented(404))
def get_subscription(sub_id: SubId, caller: AdminCaller, services: ServicesDep) -> SubscriptionOut:
    with services.db.read() as session:
        row = SubscriptionRepository(session).get(sub_id, tenant=caller.tenant)
    if row is None:
        raise ApiError(404, "not_found", f"no subscription {sub_id}")
    return SubscriptionOut.of(row)


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
    with services.db.read() as session:
        rows = SubscriptionRepository(session).list(
            tenant=caller.tenant_for(tenant),
            subscriber=subscriber,
            pattern_prefix=pattern_prefix,
            dialect=dialect,
            after_id=after,
            limit=limit,
        )
    next_after = rows[-1].id if len(rows) == limit else None
    return Page(items=[SubscriptionOut.of(row) for row in rows], next_after=next_after)


@router.get("/subscriptions-count", response_model=Counts, responses=documented(403))
def count_subscriptions(
    caller: AdminCaller,
    services: ServicesDep,
    tenant: Annotated[str | None, Query(max_length=255)] = None,
) -> Counts:
    tenant = caller.tenant_for(tenant)
    with services.db.read() as session:
        by_dialect = SubscriptionRepository(session).count(tenant)
    return Counts(tenant=tenant, total=sum(by_dialect.values()), by_dialect=by_dialect)


@router.delete("/subscriptions/{sub_id}", status_code=204, responses=documented(404))
def delete_subscription(sub_id: SubId, caller: AdminCaller, services: ServicesDep) -> Response:
    with services.db.write() as session:
        removed = SubscriptionRepository(session).remove(sub_id, tenant=caller.tenant)
    if not removed:
        raise ApiError(404, "not_found", f"no subscription {sub_id}")
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
    with services.db.write() as session:
        ids = SubscriptionRepository(session).remove_subscriber(
            caller.tenant_for(tenant), subscriber
        )
    return Deleted(deleted=ids)


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
        rows = export_parquet(services.db, path, tenant=caller.tenant_for(tenant))
        body = path.read_bytes()
    return Response(
        body, media_type="application/vnd.apache.parquet", headers={"x-row-count": str(rows)}
    )
