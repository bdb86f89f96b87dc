"""Match API: the hot path. Handlers are ``async`` (matching is CPU-only and never blocks)
and serialize with orjson straight to bytes; the declared models document the shape."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query, Response

from app.dependencies import MatchCaller, ServicesDep
from app.errors import documented
from app.refusals import BatchTooLargeError
from app.schemas import BatchIn, BatchOut, Dialect, HeadersMatchIn, MatchIn, MatchOut
from matcher import MatcherError

router = APIRouter(prefix="/v1", tags=["match"], responses=documented(400, 401, 403, 422, 503))


def _json(content: Any) -> Response:
    return Response(orjson.dumps(content), media_type="application/json")


@router.post("/match", response_model=MatchOut, responses=documented(413))
async def match(body: MatchIn, caller: MatchCaller, services: ServicesDep) -> Response:
    """Every subscription of the caller's tenant whose pattern matches ``topic``."""
    table = services.table()
    ids = table.match(caller.tenant_for(body.tenant), body.dialect, body.topic)
    return _json({"subscriptions": sorted(ids), "subscribers": table.subscribers(ids)})


@router.get("/match", response_model=MatchOut)
async def match_query(
    caller: MatchCaller,
    services: ServicesDep,
    topic: Annotated[str, Query(description="The topic (routing key); may be empty.")],
    dialect: Dialect = "amqp",
    tenant: Annotated[str | None, Query(max_length=255)] = None,
) -> Response:
    """``POST /v1/match`` for quick use from a browser or curl."""
    table = services.table()
    ids = table.match(caller.tenant_for(tenant), dialect, topic)
    return _json({"subscriptions": sorted(ids), "subscribers": table.subscribers(ids)})


@router.post("/match/batch", response_model=BatchOut, responses=documented(413))
async def match_batch(body: BatchIn, caller: MatchCaller, services: ServicesDep) -> Response:
    """Match many topics at once; an invalid topic gets an error entry, the others their
    matches (nothing is dropped)."""
    max_batch = services.settings.max_batch
    if len(body.topics) > max_batch:
        raise BatchTooLargeError(f"a batch holds at most {max_batch} topics")
    table = services.table()
    tenant = caller.tenant_for(body.tenant)
    dialect = body.dialect
    match = table.match
    subscribers = table.subscribers
    results: list[dict[str, Any]] = []
    append = results.append
    for topic in body.topics:
        try:
            ids = match(tenant, dialect, topic)
        except MatcherError as e:
            append({"error": {"code": e.code, "message": e.message}})
            continue
        if ids:
            append({"subscriptions": sorted(ids), "subscribers": subscribers(ids)})
        else:
            append({"subscriptions": [], "subscribers": []})
    return _json({"results": results})


@router.post("/match/headers", response_model=MatchOut, responses=documented(413))
async def match_headers(
    body: HeadersMatchIn, caller: MatchCaller, services: ServicesDep
) -> Response:
    """Content-based routing: subscriptions of kind ``headers`` satisfied by ``headers``."""
    table = services.table()
    ids = table.match_headers(caller.tenant_for(body.tenant), body.headers)
    return _json({"subscriptions": sorted(ids), "subscribers": table.subscribers(ids)})
