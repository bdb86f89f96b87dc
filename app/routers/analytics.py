"""Analytics over the routing job's delivery tables (DuckDB, read in memory: the service's
own database file is never opened). Operator only: the tables hold every tenant's data."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Query, Response
from fastapi import Path as PathParam
from pydantic import BaseModel

from app.auth import AdminCaller
from app.errors import ApiError, documented
from app.services import ServicesDep
from pipeline.analytics import BUCKETS, QUERIES, run_query
from pipeline.errors import PipelineError

router = APIRouter(prefix="/v1", tags=["analytics"])


class AnalyticsOut(BaseModel):
    query: str
    columns: list[str]
    rows: list[dict[str, Any]]


@router.get(
    "/analytics/{query}",
    response_model=AnalyticsOut,
    responses=documented(400, 401, 403, 404, 422),
)
def analytics(
    query: Annotated[str, PathParam(description=f"One of: {', '.join(QUERIES)}.")],
    caller: AdminCaller,
    services: ServicesDep,
    limit: Annotated[int | None, Query(ge=1, le=10_000, description="Rows of a ranking.")] = None,
    bucket: Annotated[Literal["minute", "hour", "day"], Query()] = "hour",
) -> Response:
    """Deliveries per subscriber or tenant, fan-out, hot topics, the unmatched rate over
    time, subscriptions that never matched (``TOPICSTORE_ANALYTICS_DIR``: a route output)."""
    if caller.tenant is not None:
        raise ApiError(403, "operator_only", "analytics span every tenant: use the admin token")
    root = services.settings.analytics_dir
    if root is None:
        raise ApiError(404, "analytics_not_configured", "set TOPICSTORE_ANALYTICS_DIR")
    if query not in QUERIES:
        raise ApiError(
            400, "unknown_query", f"unknown query {query!r}; known: {', '.join(QUERIES)}"
        )
    assert bucket in BUCKETS
    subscriptions = services.settings.analytics_subscriptions
    try:
        result = run_query(query, root, subscriptions=subscriptions, limit=limit, bucket=bucket)
    except PipelineError as e:
        status = 404 if e.code in ("no_deliveries", "needs_subscriptions") else 400
        raise ApiError(status, e.code, e.message) from e
    body = {"query": query, "columns": list(result.columns), "rows": result.records()}
    return Response(orjson.dumps(body), media_type="application/json")
