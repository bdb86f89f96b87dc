"""Admin API: subscriptions of the caller's tenant. Every route is a thin HTTP shell over
``app.operations.AdminOperations`` (the one implementation the command line uses too)."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Annotated, Final

from fastapi import APIRouter, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor

from app.admin_reads import selection_of
from app.auth import Caller
from app.dependencies import AdminCaller, ServicesDep
from app.errors import documented
from app.services import Services
from app.table_reads import redundant_patterns, subscription_page
from matcher.budget import Budget
from matcher.groups import MAX_GROUP_BYTES
from store.records import MAX_NAME_BYTES
from topicstore.models import (
    BulkIn,
    BulkOut,
    Counts,
    Deleted,
    Dialect,
    ExpiryIn,
    Page,
    RedundantOut,
    StoredDialect,
    SubscriptionIn,
    SubscriptionOrder,
    SubscriptionOut,
)
from topicstore.times import YEARS, Time

router = APIRouter(
    prefix="/v1", tags=["subscriptions"], responses=documented(400, 401, 422, 429, 503)
)

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

#: The concrete path beside ``/subscriptions/{sub_id}``. OpenAPI matches a concrete path
#: before a templated one: ``GET /v1/subscriptions/bulk`` asks for a method that path does
#: not have (405, ``Allow: POST``), not for subscription ``bulk`` (422, not a number).
_BULK: Final = "bulk"


class _SubIdConvertor(Convertor[str]):
    """A path segment other than the concrete sibling's; the route's ``SubId`` then reads
    it as an id (422 when it is not one)."""

    regex = f"(?!{re.escape(_BULK)}$)[^/]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("id", _SubIdConvertor())


#: The filters a listing and a removal share (``store.selection.Selection``).
TenantFilter = Annotated[str | None, Query(max_length=MAX_NAME_BYTES)]
SubscriberFilter = Annotated[str | None, Query(max_length=MAX_NAME_BYTES)]
PatternPrefixFilter = Annotated[str | None, Query(max_length=255)]
DialectFilter = Annotated[StoredDialect | None, Query()]
GroupFilter = Annotated[
    str | None,
    Query(
        max_length=MAX_GROUP_BYTES, description="Only members of this shared-subscription group."
    ),
]
LabelFilter = Annotated[
    str | None,
    Query(
        max_length=512,
        pattern=r"^[^=]+=",
        description="Only subscriptions whose labels hold KEY=VALUE (the value compared "
        'as text: `tier=1` finds the number 1 and the string "1").',
        examples=["team=pay"],
    ),
]


@router.post(
    "/subscriptions",
    status_code=201,
    response_model=SubscriptionOut,
    responses={
        200: {"model": SubscriptionOut, "description": "Already existed: that row."},
        **documented(403, 409, 413),
    },
)
async def create_subscription(
    item: SubscriptionIn, caller: AdminCaller, services: ServicesDep, response: Response
) -> SubscriptionOut:
    """Create a subscription. The same (tenant, subscriber, dialect, pattern) again returns
    the existing one with 200 instead of 201. With a ``group`` (or an MQTT
    ``$share/{group}/{filter}``) it is a shared subscription: a match delivers to one
    member per group, chosen by the group's ``group_policy``."""
    row, response.status_code = await create_answer(services, caller, item)
    return row


async def create_answer(
    services: Services, caller: Caller, item: SubscriptionIn
) -> tuple[SubscriptionOut, int]:
    """The row and the status of ``POST /v1/subscriptions``: 201 created, 200 already
    there (the route's endpoint and ``app.fastpath`` both answer with it). The write waits
    for its group on the event loop, not in a thread (``GroupCommit.run_async``)."""
    row, created = await services.admin.create_async(item, caller)
    return row, 201 if created else 200


@router.post(
    f"/subscriptions/{_BULK}",
    response_model=BulkOut,
    responses={
        207: {"model": BulkOut, "description": "Some items failed: see each result."},
        **documented(403, 413),
    },
)
def create_subscriptions(body: BulkIn, caller: AdminCaller, services: ServicesDep) -> Response:
    """Create many subscriptions in one transaction; every item gets its own result. Valid
    items are stored even when others fail (status 207 then)."""
    result = services.admin.create_many(body.items, caller)
    # Written as JSON directly: validating ten thousand results against the response
    # model cost more than storing them (``BulkResult.json`` gives the model's bytes).
    return Response(
        result.json(), status_code=207 if result.failed else 200, media_type="application/json"
    )


@router.get("/subscriptions/{sub_id:id}", response_model=SubscriptionOut, responses=documented(404))
def get_subscription(sub_id: SubId, caller: AdminCaller, services: ServicesDep) -> SubscriptionOut:
    return services.admin.get(sub_id, caller)


@router.patch(
    "/subscriptions/{sub_id:id}", response_model=SubscriptionOut, responses=documented(404, 409)
)
def update_expiry(
    sub_id: SubId, body: ExpiryIn, caller: AdminCaller, services: ServicesDep
) -> SubscriptionOut:
    """Set, extend or clear a subscription's expiry: ``{"ttl": 3600}``, ``{"expires_at":
    "..."}`` or ``{"expires_at": null}`` (never expires). Audited as ``update``; every
    replica applies it from the change log. 404 when there is no such subscription; 409
    ``subscription_expired`` when it has already expired (it stopped matching and awaits
    the sweep: create it again)."""
    return services.admin.set_expiry(sub_id, body, caller)


@router.get("/subscriptions", response_model=Page, responses=documented(403))
async def list_subscriptions(
    request: Request,
    caller: AdminCaller,
    services: ServicesDep,
    subscriber: SubscriberFilter = None,
    pattern_prefix: PatternPrefixFilter = None,
    dialect: DialectFilter = None,
    tenant: TenantFilter = None,
    after: Annotated[int | None, Query(ge=0, lt=2**32, description="Last id seen.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    group: GroupFilter = None,
    label: LabelFilter = None,
    overlaps: Annotated[
        str | None,
        Query(
            max_length=4096,
            description="Only subscriptions whose pattern shares at least one topic with "
            "this pattern (valid in ``dialect``, a topic dialect, default amqp; not with "
            "``covered_by``: 422 ``conflicting_filters``).",
            examples=["stock.#"],
        ),
    ] = None,
    covered_by: Annotated[
        str | None,
        Query(
            max_length=4096,
            description="Only subscriptions whose every topic this pattern also matches "
            "(valid in ``dialect``, a topic dialect, default amqp; not with ``overlaps``: "
            "422 ``conflicting_filters``).",
            examples=["stock.*.msft"],
        ),
    ] = None,
    sort: Annotated[
        SubscriptionOrder,
        Query(
            description="``id``, or ``matches``: most delivered first, ties by id (not with "
            "``overlaps`` or ``covered_by``)."
        ),
    ] = "id",
    after_matches: Annotated[
        int | None,
        Query(
            ge=0,
            lt=2**63,
            description="With sort=matches: the previous page's ``next_after_matches``, "
            "given together with ``after`` (one without the other, or this without "
            "sort=matches: 422 ``incomplete_cursor``).",
        ),
    ] = None,
    unmatched_since: Annotated[
        Time | None,
        Query(
            description="Only subscriptions not matched since this time: never matched, or "
            "last matched before it. An RFC 3339 date-time with an offset (``Z`` for UTC), "
            f"written in a year from {YEARS.start} to {YEARS.stop - 1} (else 422 "
            "``time_out_of_range``).",
            examples=["2026-11-01T00:00:00Z"],
        ),
    ] = None,
) -> Page:
    """A page of subscriptions in id order (keyset pagination: pass ``next_after`` back),
    or with ``sort=matches`` most matched first (pass ``next_after`` and
    ``next_after_matches`` back; the counts are the store's, flushed by every replica each
    ``TOPICSTORE_STATS_FLUSH_INTERVAL``: a count that grows between two pages may move a
    subscription across the cursor).

    With ``overlaps`` or ``covered_by`` the ids come from the routing table's pruned search,
    decided exactly within ``TOPICSTORE_OVERLAP_BUDGET`` steps per page, in one of the fair
    places; the other filters then apply within each page, which may so hold fewer than
    ``limit`` items, or none when the budget ran out first: continue while ``next_after``
    is not null. 422 ``overlap_budget_exceeded`` when a single subscription needs more than
    the whole budget (the message names it)."""

    def page(budget: Budget | None) -> Page:
        return subscription_page(
            services.table,
            services.admin,
            caller,
            overlaps=overlaps,
            covered_by=covered_by,
            label=label,
            tenant=tenant,
            subscriber=subscriber,
            pattern_prefix=pattern_prefix,
            dialect=dialect,
            group=group,
            after=after,
            limit=limit,
            budget=budget,
            sort=sort,
            after_matches=after_matches,
            unmatched_since=unmatched_since,
        )

    if overlaps is None and covered_by is None:
        return await run_in_threadpool(page, None)
    return await services.work.run(
        request.receive, "overlap_budget", caller.tenant_for(tenant), page
    )


@router.get("/subscriptions-count", response_model=Counts, responses=documented(403))
def count_subscriptions(
    caller: AdminCaller,
    services: ServicesDep,
    tenant: Annotated[str | None, Query(max_length=MAX_NAME_BYTES)] = None,
) -> Counts:
    return services.admin.count(caller, tenant)


@router.delete("/subscriptions/{sub_id:id}", status_code=204, responses=documented(404))
async def delete_subscription(
    sub_id: SubId, caller: AdminCaller, services: ServicesDep
) -> Response:
    return await delete_answer(services, caller, sub_id)


async def delete_answer(services: Services, caller: Caller, sub_id: int) -> Response:
    """``DELETE /v1/subscriptions/{id}``'s answer (the route's endpoint and
    ``app.fastpath`` both answer with it), waiting on the event loop as a create does."""
    await services.admin.remove_async(sub_id, caller)
    return Response(status_code=204)


@router.delete("/subscriptions", response_model=Deleted, responses=documented(403))
def delete_subscriptions(
    caller: AdminCaller,
    services: ServicesDep,
    subscriber: SubscriberFilter = None,
    pattern_prefix: PatternPrefixFilter = None,
    dialect: DialectFilter = None,
    tenant: TenantFilter = None,
    group: GroupFilter = None,
    label: LabelFilter = None,
) -> Deleted:
    """Delete what ``GET /v1/subscriptions`` lists with the same filters, in one write: at
    most ``TOPICSTORE_MAX_DELETE`` (100,000), the lowest ids first; ``more`` is true while
    the selection holds others (send the request again). Without a filter, 422
    ``selection_required`` (``tenant=`` alone selects the whole tenant). A parameter that
    is not one of these filters, or one given twice, is refused as on every route (400
    ``unknown_parameter``, ``repeated_parameter``): ignored, it would widen the
    selection."""
    selection = selection_of(
        tenant=tenant,
        subscriber=subscriber,
        pattern_prefix=pattern_prefix,
        dialect=dialect,
        group=group,
        label=label,
    )
    return services.admin.remove_selection(caller, selection)


@router.delete(
    "/subscribers/{subscriber:name}/subscriptions",
    response_model=Deleted,
    responses=documented(403),
)
def delete_subscriber(
    subscriber: Annotated[str, PathParam(max_length=MAX_NAME_BYTES)],
    caller: AdminCaller,
    services: ServicesDep,
    tenant: Annotated[str | None, Query(max_length=MAX_NAME_BYTES)] = None,
) -> Deleted:
    """Delete every subscription of one subscriber."""
    return services.admin.remove_subscriber(subscriber, caller, tenant)


@router.get(
    "/subscribers/{subscriber:name}/redundant",
    response_model=RedundantOut,
    responses=documented(403),
)
async def redundant_subscriptions(
    request: Request,
    subscriber: Annotated[str, PathParam(max_length=MAX_NAME_BYTES)],
    caller: AdminCaller,
    services: ServicesDep,
    dialect: Dialect = "amqp",
    tenant: Annotated[str | None, Query(max_length=MAX_NAME_BYTES)] = None,
) -> RedundantOut:
    """The subscriber's patterns in ``dialect`` that another of its patterns covers (every
    topic of one is a topic of the other), each with a covering one; of equivalent patterns
    the lowest id is kept, so duplicates count once. At most 10,000 patterns
    (``too_many_patterns`` beyond), compared within ``TOPICSTORE_REDUNDANCY_BUDGET`` steps
    (422 ``redundancy_budget_exceeded`` beyond) in the fair place for work holding the GIL."""
    table = services.table()
    target = caller.tenant_for(tenant)
    return await services.work.run(
        request.receive,
        "redundancy_budget",
        target,
        lambda budget: redundant_patterns(table, target, subscriber, dialect, budget),
    )


@router.get(
    "/subscriptions-export",
    response_class=Response,
    responses={200: {"content": {"application/vnd.apache.parquet": {}}}, **documented(403)},
)
async def export_subscriptions(
    request: Request,
    caller: AdminCaller,
    services: ServicesDep,
    tenant: Annotated[str | None, Query(max_length=MAX_NAME_BYTES)] = None,
) -> Response:
    """The tenant's subscriptions as Parquet (what ``topicstore route`` reads). Written to
    a temporary file in batches, then streamed from it (the file is removed once sent): at
    1M subscriptions the whole file never sits in the server's memory. Writing stops
    between two batches, and streaming at once, when the client leaves."""
    folder = tempfile.mkdtemp(prefix="topicstore-export-")
    try:
        path = Path(folder) / "subscriptions.parquet"
        async with services.work.watched(request.receive, "export") as budget:
            rows = await run_in_threadpool(services.admin.export, path, caller, tenant, budget)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return FileResponse(
        path,
        media_type="application/vnd.apache.parquet",
        headers={"x-row-count": str(rows)},
        background=BackgroundTask(shutil.rmtree, folder, ignore_errors=True),
    )
